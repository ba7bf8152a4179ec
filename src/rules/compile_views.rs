//! The `format`, `sqlite`, `document`, `session` and `project` keys of a store, compiled; and the fields
//! every view's header gives a rule set with views (marked as a header's: a JSONL transcript of a set
//! with stores of both kinds never reads them).

use super::compile::Ctx;
use super::raw::*;
use super::views::*;

fn is_view(s: &RawStore) -> bool {
    s.format.as_deref().is_some_and(|f| f != "jsonl")
}

/// A set with views reads `session_id`, `cwd` and `parent_session` from the view's
/// header, marks a session whose header says so a subagent, and knows each message by its view id: added
/// in front of what the file itself says. A set of `jsonl` stores must name `session_id` and `cwd`.
pub(super) fn view_fields(cx: &mut Ctx<'_>, raw: &mut RawRuleSet) {
    let views = raw.stores.iter().filter(|s| is_view(s)).count();
    if views == 0 {
        for need in ["session_id", "cwd"] {
            if !raw.fields.contains_key(need) {
                cx.err(
                    format!("fields.{need}"),
                    format!("a rule set of jsonl stores needs the field `{need}`"),
                    "e.g. session_id: [{value: \"$.sessionId\"}]",
                );
            }
        }
        return;
    }
    if views < raw.stores.len() {
        // Stores of both kinds (Goose's JSONL files before its database): the JSONL transcripts are read
        // by the set's own fields, the views by their headers (each only where it is: rules.is_view).
        for need in ["session_id", "cwd"] {
            if !raw.fields.contains_key(need) {
                cx.err(
                    format!("fields.{need}"),
                    format!("a rule set with `jsonl` stores needs the field `{need}` (its views get theirs from their headers)"),
                    "e.g. session_id: [{value: \"$.sessionId\"}]",
                );
            }
        }
        if raw.record_id.is_some() {
            cx.err(
                "record_id",
                "a rule set with stores of both kinds names no `record_id`: a view's messages are known by theirs",
                "leave `record_id` out, or put the jsonl stores in a rule set of their own",
            );
        }
    }
    let header = |key: &str| RawSource {
        when: Some(RawPredicate::Exists(format!("$.{VIEW_HEADER}"))),
        first_only: true,
        value: Some(format!("$.{VIEW_HEADER}.{key}")),
        regex: None,
        filename: None,
        path: None,
        sidecar: None,
        header: true,
    };
    for (field, key) in [
        ("session_id", "session_id"),
        ("cwd", "project"),
        ("parent_session", "parent"),
    ] {
        raw.fields
            .entry(field.into())
            .or_default()
            .insert(0, header(key));
    }
    raw.subagent.records.insert(
        0,
        RawRecordTest {
            when: Some(RawPredicate::Exists(format!("$.{VIEW_HEADER}"))),
            first_only: true,
            test: RawPredicate::Equals(RawPathValue {
                path: format!("$.{VIEW_HEADER}.subagent"),
                value: serde_json::Value::Bool(true),
            }),
            header: true,
        },
    );
    raw.record_id.get_or_insert_with(|| format!("$.{VIEW_ID}"));
}

/// The store's kind, or None after a diagnostic.
pub(super) fn store_kind(cx: &mut Ctx<'_>, i: usize, s: &RawStore) -> Option<StoreKind> {
    let at = |k: &str| format!("stores[{i}].{k}");
    let format = s.format.as_deref().unwrap_or("jsonl");
    let stray = |cx: &mut Ctx<'_>, key: &str, set: bool| {
        if set {
            cx.err(
                at(key),
                format!("`{key}` is for a `{}` store, not `{format}`", owner(key)),
                "see docs/stores.md",
            );
        }
    };
    stray(cx, "sqlite", s.sqlite.is_some() && format != "sqlite");
    stray(cx, "document", s.document.is_some() && format != "json");
    stray(cx, "markdown", s.markdown.is_some() && format != "markdown");
    stray(cx, "text", s.text.is_some() && format != "text");
    stray(
        cx,
        "directory",
        s.directory.is_some() && format != "json-dir",
    );
    if format == "jsonl" {
        let view_keys = !s.project.is_empty()
            || !s.session.id.is_empty()
            || s.session.id_from_path.is_some()
            || s.session.parent.is_some()
            || s.session.updated.is_some()
            || s.session.message_id.is_some()
            || s.session.drop_message_ids.is_some()
            || !s.session.not_beside.is_empty();
        if view_keys {
            cx.err(
                at("session"),
                "`session` and `project` are for stores read into views, not `jsonl`",
                "a jsonl store's fields are in the rule set's `fields`",
            );
            return None;
        }
        return Some(StoreKind::Jsonl);
    }
    let view_format = view_format(cx, i, s, format)?;
    let before = cx.diags.len();
    let mut id: Vec<_> = s
        .session
        .id
        .iter()
        .enumerate()
        .filter_map(|(j, p)| {
            session_source(cx, &at(&format!("session.id[{j}]")), p, SessionKey::Id)
        })
        .collect();
    if let Some(re) = &s.session.id_from_path {
        if let Some(re) = grouped(
            cx,
            &at("session.id_from_path"),
            re,
            "e.g. '^([^/]+)/api_conversation_history\\.json$'",
        ) {
            id.push(ProjectSource::Value {
                from: ValueFrom::Path(re),
                field: None,
                naming: Naming::Path { uri: false },
            });
        }
    }
    let names_itself = matches!(view_format, ViewFormat::Markdown(_));
    if s.session.id.is_empty() && s.session.id_from_path.is_none() && !names_itself {
        cx.err(
            at("session"),
            "a store read into views needs `session.id` or `session.id_from_path`",
            "e.g. session: {id: [\"$.sessionId\"]}",
        );
    }
    let opt = |cx: &mut Ctx<'_>, key: &str, p: &Option<String>| {
        p.as_ref()
            .and_then(|t| cx.path(&at(&format!("session.{key}")), t))
    };
    let parent: Vec<_> = s
        .session
        .parent
        .as_ref()
        .map(|p| p.list())
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(j, p)| {
            let key = match &s.session.parent {
                Some(RawSources::Many(_)) => format!("session.parent[{j}]"),
                _ => "session.parent".to_string(),
            };
            session_source(cx, &at(&key), p, SessionKey::Parent)
        })
        .collect();
    let updated = opt(cx, "updated", &s.session.updated);
    let mut message_id = opt(cx, "message_id", &s.session.message_id);
    if matches!(view_format, ViewFormat::JsonDir { .. }) && s.session.message_id.is_none() {
        // A json-dir message is known by its file's name.
        message_id = super::JsonPath::parse(&format!("$.{}", DIR_FILE)).ok();
    }
    let drop_message_ids = s
        .session
        .drop_message_ids
        .as_ref()
        .and_then(|r| cx.regex(&at("session.drop_message_ids"), r));
    for (j, name) in s.session.not_beside.iter().enumerate() {
        let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']);
        if !plain {
            cx.err(
                at(&format!("session.not_beside[{j}]")),
                format!("`{name}` is not a file name"),
                "a name of a file in the same directory, e.g. api_conversation_history.json",
            );
        }
    }
    let project: Vec<ProjectSource> = s
        .project
        .iter()
        .enumerate()
        .filter_map(|(j, p)| project_source(cx, &at(&format!("project[{j}]")), p))
        .collect();
    if cx.diags.len() > before {
        return None;
    }
    Some(StoreKind::View(Box::new(ViewSpec {
        format: view_format,
        id,
        parent,
        updated,
        message_id,
        drop_message_ids,
        not_beside: s.session.not_beside.clone(),
        project,
    })))
}

/// The view format a store's `format` names, with its own keys compiled (None after a diagnostic).
fn view_format(cx: &mut Ctx<'_>, i: usize, s: &RawStore, format: &str) -> Option<ViewFormat> {
    let at = |k: &str| format!("stores[{i}].{k}");
    Some(match format {
        "jsonl-replay" => ViewFormat::Replay,
        "json" => {
            let Some(doc) = &s.document else {
                cx.err(
                    at("document"),
                    "a `json` store needs `document.messages`",
                    "e.g. document: {messages: \"$.messages[*]\"}",
                );
                return None;
            };
            ViewFormat::Json {
                messages: cx.path(&at("document.messages"), &doc.messages)?,
            }
        }
        "sqlite" => {
            let Some(q) = &s.sqlite else {
                cx.err(
                    at("sqlite"),
                    "a `sqlite` store needs `sqlite.sessions` and `sqlite.messages`",
                    "see docs/stores.md",
                );
                return None;
            };
            let mut ok = true;
            for (key, sql, params) in [("sessions", &q.sessions, 0), ("messages", &q.messages, 1)] {
                if let Err(e) = check_sql(sql, params) {
                    cx.err(
                        at(&format!("sqlite.{key}")),
                        format!("the query {e}"),
                        "a query is one read-only SELECT; `messages` takes the session id as ?1",
                    );
                    ok = false;
                }
            }
            if !ok {
                return None;
            }
            ViewFormat::Sqlite {
                sessions: q.sessions.clone(),
                messages: q.messages.clone(),
                json_columns: q.json_columns.clone(),
            }
        }
        "markdown" => {
            let Some(m) = &s.markdown else {
                cx.err(
                    at("markdown"),
                    "a `markdown` store needs `markdown.session` and `markdown.prompt`",
                    "see docs/stores.md",
                );
                return None;
            };
            ViewFormat::Markdown(Box::new(markdown_spec(cx, &at("markdown"), m)?))
        }
        "text" => {
            let Some(t) = &s.text else {
                cx.err(
                    at("text"),
                    "a `text` store needs `text.block`",
                    "e.g. text: {block: '^(user|assistant):\\s*$'}",
                );
                return None;
            };
            let block = cx.regex(&at("text.block"), &t.block)?;
            if block.captures_len() < 2 {
                cx.err(
                    at("text.block"),
                    "the regex needs a group (group 1 is the message's role)",
                    "e.g. '^(user|assistant):\\s*$'",
                );
                return None;
            }
            ViewFormat::Text { block }
        }
        "json-dir" => {
            let Some(d) = &s.directory else {
                cx.err(
                    at("directory"),
                    "a `json-dir` store needs `directory.messages`",
                    "e.g. directory: {messages: \"{dir}/events/*.json\"}",
                );
                return None;
            };
            let t = &d.messages;
            let last = t.rsplit(['/', '\\']).next().unwrap_or("");
            let dirs = &t[..t.len() - last.len()];
            if !t.starts_with("{dir}")
                || dirs.contains('*')
                || dirs.contains("{id}")
                || last.is_empty()
            {
                cx.err(
                    at("directory.messages"),
                    format!("`{t}` is not a directory beside the store file and a glob of file names"),
                    "a template starting {dir} whose last component alone may hold `*`, e.g. \"{dir}/events/event-*.json\"",
                );
                return None;
            }
            if globset::Glob::new(last).is_err() {
                cx.err(
                    at("directory.messages"),
                    format!("`{last}` is not a glob"),
                    "e.g. event-*.json",
                );
                return None;
            }
            ViewFormat::JsonDir {
                messages: t.clone(),
            }
        }
        other => {
            cx.err(
                at("format"),
                format!("unknown store format `{other}`"),
                "one of jsonl, jsonl-replay, json, json-dir, sqlite, markdown, text",
            );
            return None;
        }
    })
}

fn owner(key: &str) -> &'static str {
    match key {
        "directory" => "json-dir",
        "sqlite" => "sqlite",
        "markdown" => "markdown",
        "text" => "text",
        _ => "json",
    }
}

fn markdown_spec(cx: &mut Ctx<'_>, at: &str, m: &RawMarkdown) -> Option<MarkdownSpec> {
    let before = cx.diags.len();
    let grouped = |cx: &mut Ctx<'_>, key: &str, text: &str| {
        let re = cx.regex(&format!("{at}.{key}"), text)?;
        if re.captures_len() < 2 {
            cx.err(
                format!("{at}.{key}"),
                "the regex needs a group (group 1 is the value)",
                "e.g. '^# aider chat started at (.+)$'",
            );
            return None;
        }
        Some(re)
    };
    let session = grouped(cx, "session", &m.session);
    let prompt = grouped(cx, "prompt", &m.prompt);
    let status = m
        .status
        .as_ref()
        .and_then(|r| cx.regex(&format!("{at}.status"), r));
    let input = match &m.input {
        None => None,
        Some(i) => {
            if !i.file.starts_with("{dir}") {
                cx.err(
                    format!("{at}.input.file"),
                    "the input log's path starts at the chat log's directory, `{dir}`",
                    "e.g. \"{dir}/.aider.input.history\"",
                );
            }
            let entry = grouped(cx, "input.entry", &i.entry);
            let line = grouped(cx, "input.line", &i.line);
            Some(MarkdownInput {
                file: i.file.clone(),
                entry: entry?,
                line: line?,
            })
        }
    };
    if cx.diags.len() > before {
        return None;
    }
    Some(MarkdownSpec {
        session: session?,
        prompt: prompt?,
        status,
        input,
    })
}

fn project_source(cx: &mut Ctx<'_>, at: &str, p: &RawProject) -> Option<ProjectSource> {
    let value = p.field.is_some() || p.sidecar.is_some() || p.path.is_some() || p.lookup.is_some();
    let kinds = [value, p.text.is_some(), p.store_dir.is_some()];
    if kinds.iter().filter(|k| **k).count() != 1 {
        cx.err(
            at,
            "a project source is one of `field` (optionally in a `sidecar` file), `sidecar`, `path`, `lookup` (with a `sidecar`), `text` or `store_dir`",
            "e.g. {field: \"$.directory\"}, {sidecar: \"{dir}/../.project_root\"}, {store_dir: 1}",
        );
        return None;
    }
    let namings = [p.uri, p.hash.is_some(), p.slug.is_some()];
    if namings.iter().filter(|k| **k).count() > 1 {
        cx.err(
            at,
            "`uri`, `hash` and `slug` each say how the value names the directory: give one",
            "e.g. {field: \"$.projectHash\", hash: sha256}",
        );
        return None;
    }
    if namings.iter().any(|k| *k) && !value {
        cx.err(
            at,
            "`uri`, `hash` and `slug` qualify a `field`, `sidecar`, `path` or `lookup` value",
            "e.g. {field: \"$.projectHash\", hash: sha256}",
        );
        return None;
    }
    if let Some(re) = &p.text {
        let re = grouped(
            cx,
            &format!("{at}.text"),
            re,
            "e.g. '# Current Working Directory \\(([^)\\n]+)\\)'",
        )?;
        return Some(ProjectSource::Text(re));
    }
    if let Some(n) = p.store_dir {
        return Some(ProjectSource::StoreDir(n));
    }
    let naming = naming(cx, at, p)?;
    let from = value_from(cx, at, p)?;
    let field = match &p.field {
        Some(f) => Some(cx.path(&format!("{at}.field"), f)?),
        None => None,
    };
    Some(ProjectSource::Value {
        from,
        field,
        naming,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SessionKey {
    Id,
    Parent,
}

/// A `session.id` or `session.parent` source: a JSONPath over the session, or a value read as a
/// project's is, named as it is (no `uri`, `hash` or `slug`, no `text` or `store_dir`). The id is not
/// known yet when its own sources are read: they name no `{id}` and no `lookup` (which finds a
/// session by its id).
fn session_source(
    cx: &mut Ctx<'_>,
    at: &str,
    raw: &RawValueSource,
    key: SessionKey,
) -> Option<ProjectSource> {
    let p = match raw {
        RawValueSource::Path(text) => {
            return Some(ProjectSource::Value {
                from: ValueFrom::Session,
                field: Some(cx.path(at, text)?),
                naming: Naming::Path { uri: false },
            })
        }
        RawValueSource::Full(p) => p,
    };
    let eg = "e.g. \"$.sessionId\", {sidecar: \"{dir}/meta.json\", field: \"$.session_id\"}, {path: '^([^/]+)/'} or {field: \"$.id\", messages: true}";
    if p.text.is_some() || p.store_dir.is_some() || p.uri || p.hash.is_some() || p.slug.is_some() {
        cx.err(
            at,
            "a session's id or parent is a `field`, `sidecar`, `path` or `lookup` value as it is: `text`, `store_dir`, `uri`, `hash` and `slug` are for a project",
            eg,
        );
        return None;
    }
    if key == SessionKey::Id {
        let names_id = p.sidecar.as_deref().is_some_and(|t| t.contains("{id}"));
        if p.lookup.is_some() || names_id {
            cx.err(
                at,
                "the session id is what it is read to find: its source names no `{id}` and no `lookup`",
                eg,
            );
            return None;
        }
    }
    if p.field.is_none() && p.path.is_none() && p.sidecar.is_none() && p.lookup.is_none() {
        cx.err(
            at,
            "the source reads nothing: give `field`, `sidecar` or `path`",
            eg,
        );
        return None;
    }
    Some(ProjectSource::Value {
        from: value_from(cx, at, p)?,
        field: match &p.field {
            Some(f) => Some(cx.path(&format!("{at}.field"), f)?),
            None => None,
        },
        naming: Naming::Path { uri: false },
    })
}

/// Where a `Value` source reads its value (None after a diagnostic).
fn value_from(cx: &mut Ctx<'_>, at: &str, p: &RawProject) -> Option<ValueFrom> {
    let from_dir = |cx: &mut Ctx<'_>, key: &str, t: &str| {
        if t.starts_with("{dir}") {
            return true;
        }
        cx.err(
            format!("{at}.{key}"),
            "the path starts at the store file's directory, `{dir}`",
            "e.g. \"{dir}/../.project_root\" or \"{dir}/{stem}.json\"",
        );
        false
    };
    if p.path.is_some() && p.field.is_some() {
        cx.err(
            at,
            "a `path` value is the regex's group 1: it takes no `field`",
            "e.g. {path: '^([0-9a-f]{32})/', hash: md5}",
        );
        return None;
    }
    if p.messages {
        if p.field.is_none() || p.path.is_some() || p.lookup.is_some() || p.sidecar.is_some() {
            cx.err(
                format!("{at}.messages"),
                "`messages: true` reads `field` in the messages: it takes a `field` and no `sidecar`, `path` or `lookup`",
                "e.g. {field: \"$.workspace_folder\", messages: true}",
            );
            return None;
        }
        return Some(ValueFrom::Messages);
    }
    Some(match (&p.path, &p.lookup, &p.sidecar) {
        (Some(re), None, None) => ValueFrom::Path(grouped(
            cx,
            &format!("{at}.path"),
            re,
            "e.g. '^([0-9a-f]{32})/' (a directory named by a hash of the project path)",
        )?),
        (None, Some(l), side) => {
            let side_ok = side.as_ref().is_none_or(|t| from_dir(cx, "sidecar", t));
            if !(from_dir(cx, "lookup.stores", &l.stores) & side_ok) {
                return None;
            }
            if let Err(e) = check_sql(&l.ids, 0) {
                cx.err(
                    format!("{at}.lookup.ids"),
                    format!("the query {e}"),
                    "a query is one read-only SELECT listing session ids in its first column (and, without a `sidecar`, the value in its second)",
                );
                return None;
            }
            ValueFrom::Lookup(
                Lookup {
                    stores: l.stores.clone(),
                    ids: l.ids.clone(),
                },
                side.clone(),
            )
        }
        (None, None, Some(side)) => {
            if !from_dir(cx, "sidecar", side) {
                return None;
            }
            ValueFrom::Sidecar(side.clone())
        }
        (None, None, None) => ValueFrom::Session,
        _ => {
            cx.err(
                at,
                "a value is read from the session (`field`), a `sidecar` file, the store's `path`, or a `lookup` store's `sidecar`: one of them",
                "e.g. {lookup: {stores: \"{dir}/../*/state.vscdb\", ids: \"SELECT ...\"}, sidecar: \"{dir}/workspace.json\", field: \"$.folder\", uri: true}",
            );
            return None;
        }
    })
}

/// How a value names the directory: `hash`, `slug`, or a path (a `uri` or not).
fn naming(cx: &mut Ctx<'_>, at: &str, p: &RawProject) -> Option<Naming> {
    Some(if let Some(h) = p.hash.as_deref() {
        Naming::Hash(match h {
            "sha256" => HashAlgo::Sha256,
            "md5" => HashAlgo::Md5,
            other => {
                cx.err(
                    format!("{at}.hash"),
                    format!("unknown hash `{other}`"),
                    "sha256 or md5",
                );
                return None;
            }
        })
    } else if let Some(chars) = &p.slug {
        cx.regex(&format!("{at}.slug"), chars)?;
        Naming::Slug(chars.clone())
    } else {
        Naming::Path { uri: p.uri }
    })
}

/// A regex with a group (group 1 the value), or None after a diagnostic naming `key`.
fn grouped(cx: &mut Ctx<'_>, key: &str, text: &str, eg: &str) -> Option<regex::Regex> {
    let re = cx.regex(key, text)?;
    if re.captures_len() < 2 {
        cx.err(key, "the regex needs a group (group 1 is the value)", eg);
        return None;
    }
    Some(re)
}
