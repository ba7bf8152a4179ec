//! Raw rule structs -> compiled rules. Each problem becomes a diagnostic naming the field; compilation
//! keeps going so that one run reports everything.

use super::compiled::*;
use super::raw::*;
use super::Diagnostic;
use crate::util::duration::{parse_duration, parse_size};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use regex::{Regex, RegexBuilder};
use std::collections::BTreeMap;

const DEFAULT_HEAD: HeadLimits = HeadLimits {
    max_records: 50,
    max_bytes: 16 << 20,
};

pub(super) struct Ctx<'a> {
    pub(super) file: String,
    pub(super) diags: &'a mut Vec<Diagnostic>,
}

impl Ctx<'_> {
    pub(super) fn err(&mut self, field: impl Into<String>, message: impl Into<String>, help: &str) {
        self.diags.push(Diagnostic {
            file: self.file.clone(),
            field: field.into(),
            message: message.into(),
            help: Some(help.to_string()),
        });
    }

    pub(super) fn path(&mut self, field: &str, text: &str) -> Option<JsonPath> {
        JsonPath::parse(text)
            .map_err(|e| {
                self.err(
                    field,
                    e,
                    "JSONPath starts with $, e.g. $.sessionId or $.payload.source.subagent",
                )
            })
            .ok()
    }

    pub(super) fn regex(&mut self, field: &str, text: &str) -> Option<Regex> {
        RegexBuilder::new(text)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| {
                let first = e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                self.err(
                    field,
                    format!("invalid regex \"{text}\": {first}"),
                    "regexes use Rust regex syntax (no look-around or back-references)",
                )
            })
            .ok()
    }

    fn globs(&mut self, field: &str, patterns: &[String]) -> Option<GlobSet> {
        let mut b = GlobSetBuilder::new();
        let mut ok = true;
        for (i, p) in patterns.iter().enumerate() {
            match GlobBuilder::new(p).literal_separator(true).build() {
                Ok(g) => {
                    b.add(g);
                }
                Err(e) => {
                    ok = false;
                    let kind = e.kind().to_string();
                    self.err(
                        format!("{field}[{i}]"),
                        format!("invalid glob \"{p}\": {kind}"),
                        "globs are relative to the store root; * stays within one directory, ** crosses directories",
                    );
                }
            }
        }
        if !ok {
            return None;
        }
        b.build().ok()
    }
}

pub fn rule_set(
    mut raw: RawRuleSet,
    origin: Origin,
    diags: &mut Vec<Diagnostic>,
) -> Option<RuleSet> {
    let before = diags.len();
    let mut cx = Ctx {
        file: origin.to_string(),
        diags,
    };
    super::compile_views::view_fields(&mut cx, &mut raw);

    let stores = stores(&mut cx, &raw.stores);

    let mut head = DEFAULT_HEAD;
    if let Some(n) = raw.head.max_records {
        head.max_records = n;
    }
    match &raw.head.max_bytes {
        None => {}
        Some(SizeValue::Bytes(n)) => head.max_bytes = *n,
        Some(SizeValue::Text(t)) => match parse_size(t) {
            Ok(n) => head.max_bytes = n,
            Err(e) => cx.err("head.max_bytes", e, "write a size like 16MiB"),
        },
    }

    let mut fields = Vec::new();
    for (name, sources) in &raw.fields {
        let mut compiled = Vec::new();
        for (i, s) in sources.iter().enumerate() {
            if let Some(src) = source(&mut cx, &format!("fields.{name}[{i}]"), s) {
                compiled.push(src);
            }
        }
        fields.push(Field {
            name: name.clone(),
            sources: compiled,
        });
    }
    // session_id and cwd first, so reports list them first; the rest keep their order.
    fields.sort_by_key(|f| match f.name.as_str() {
        "session_id" => 0,
        "cwd" => 1,
        _ => 2,
    });

    let subagent_paths = if raw.subagent.paths.is_empty() {
        None
    } else {
        cx.globs("subagent.paths", &raw.subagent.paths)
    };
    let subagent_records = record_tests(&mut cx, "subagent.records", &raw.subagent.records);
    let exclude_when = record_tests(&mut cx, "exclude_when", &raw.exclude_when);
    let timestamp_texts = raw
        .timestamps
        .clone()
        .unwrap_or_else(|| vec!["$.timestamp".to_string()]);
    let timestamps: Vec<JsonPath> = timestamp_texts
        .iter()
        .enumerate()
        .filter_map(|(i, t)| cx.path(&format!("timestamps[{i}]"), t))
        .collect();

    let record_id = raw.record_id.as_ref().and_then(|t| cx.path("record_id", t));
    let turns = raw
        .turns
        .as_ref()
        .map(|t| super::compile_turns::turns_rule(&mut cx, t, &timestamps));
    if cx.diags.len() > before {
        return None;
    }
    let mut set = RuleSet {
        name: raw.name.clone().unwrap_or_else(|| raw.id.clone()),
        id: raw.id,
        origin,
        extends: None,
        enabled_by_default: raw.enabled_by_default.unwrap_or(true),
        stores,
        head,
        fields,
        subagent_paths,
        subagent_path_patterns: raw.subagent.paths,
        subagent_records,
        exclude_when,
        timestamps,
        record_id,
        turns,
        head_reads: super::needs::Need::All,
    };
    set.head_reads = set.head_needs();
    Some(set)
}

/// The stores of a rule set; one with a problem is left out after its diagnostic.
fn stores(cx: &mut Ctx<'_>, raw: &[RawStore]) -> Vec<Store> {
    let mut stores = Vec::new();
    for (i, s) in raw.iter().enumerate() {
        let include = cx.globs(&format!("stores[{i}].include"), &s.include);
        let exclude = cx.globs(&format!("stores[{i}].exclude"), &s.exclude);
        let kind = super::compile_views::store_kind(cx, i, s);
        for (j, r) in s.roots.iter().enumerate() {
            if r.env.is_none() && r.default.is_empty() && !r.known_repos {
                cx.err(
                    format!("stores[{i}].roots[{j}]"),
                    "a root needs `env` or `default`",
                    "e.g. {env: CODEX_HOME, default: [\"~/.codex\"], join: sessions}",
                );
            }
        }
        if let (Some(include), Some(exclude), Some(kind)) = (include, exclude, kind) {
            stores.push(Store {
                name: s.name.clone(),
                roots: s
                    .roots
                    .iter()
                    .map(|r| RootSpec {
                        env: r.env.clone(),
                        split: r.split.clone(),
                        default: r.default.clone(),
                        join: r.join.clone(),
                        known_repos: r.known_repos,
                    })
                    .collect(),
                include,
                include_patterns: s.include.clone(),
                exclude,
                exclude_patterns: s.exclude.clone(),
                follow_symlinks: s.follow_symlinks.unwrap_or(true),
                kind,
                max_depth: include_depth(&s.include),
            });
        }
    }
    stores
}

/// The deepest a file the patterns select lies below its root (`*` never crosses a `/`); None when a
/// pattern has `**`.
fn include_depth(patterns: &[String]) -> Option<usize> {
    patterns
        .iter()
        .map(|p| (!p.contains("**")).then(|| p.trim_matches('/').split('/').count()))
        .try_fold(0, |deepest, d| d.map(|d| deepest.max(d)))
}

fn source(cx: &mut Ctx<'_>, field: &str, s: &RawSource) -> Option<Source> {
    let when = s
        .when
        .as_ref()
        .and_then(|w| predicate(cx, &format!("{field}.when"), w));
    if let Some(k) = file_source(cx, field, s) {
        return k;
    }
    let (kind, what) = match (&s.value, &s.filename) {
        (Some(v), None) => {
            let path = cx.path(&format!("{field}.value"), v);
            let regex = s
                .regex
                .as_ref()
                .and_then(|r| cx.regex(&format!("{field}.regex"), r));
            if s.regex.is_some() && regex.is_none() {
                return None;
            }
            let what = match &s.regex {
                Some(r) => format!("{v} ~ /{r}/"),
                None => v.clone(),
            };
            (SourceKind::Record { path: path?, regex }, what)
        }
        (None, Some(f)) => {
            if s.when.is_some() || s.regex.is_some() || s.first_only {
                cx.err(
                    field,
                    "a filename source takes no `when`, `regex` or `first_only`",
                    "put the whole pattern in `filename`",
                );
                return None;
            }
            (
                SourceKind::Filename(cx.regex(&format!("{field}.filename"), f)?),
                format!("file name ~ /{f}/"),
            )
        }
        _ => {
            cx.err(
                field,
                "a source has exactly one of `value` or `filename`",
                "see docs/rules.md",
            );
            return None;
        }
    };
    if s.when.is_some() && when.is_none() {
        return None;
    }
    let mut describe = what;
    if let Some(w) = &when {
        describe = format!("{describe} where {w}");
    }
    if s.first_only {
        describe.push_str(" (first such record only)");
    }
    Some(Source {
        header: s.header,
        when,
        first_only: s.first_only,
        kind,
        describe,
    })
}

/// A source read from the transcript's path or a file beside it (`path`, `sidecar`), not its records:
/// None when the source is neither; Some(None) after a diagnostic.
fn file_source(cx: &mut Ctx<'_>, field: &str, s: &RawSource) -> Option<Option<Source>> {
    if s.path.is_none() && s.sidecar.is_none() {
        return None;
    }
    if s.when.is_some()
        || s.first_only
        || s.filename.is_some()
        || (s.path.is_some() && (s.sidecar.is_some() || s.value.is_some() || s.regex.is_some()))
    {
        cx.err(
            field,
            "a `path` source is the regex alone, and a `sidecar` source takes only `value` and `regex`: no `when`, `first_only` or `filename`",
            "e.g. {path: '^[0-9a-f]{32}/([^/]+)/'} or {sidecar: \"{dir}/meta.json\", value: \"$.session_id\"}",
        );
        return Some(None);
    }
    let (kind, describe) = if let Some(re) = &s.path {
        let Some(r) = cx.regex(&format!("{field}.path"), re) else {
            return Some(None);
        };
        if r.captures_len() < 2 {
            cx.err(
                format!("{field}.path"),
                "the regex needs a group (group 1 is the value)",
                "e.g. '^[0-9a-f]{32}/([^/]+)/wire\\.jsonl$'",
            );
            return Some(None);
        }
        (SourceKind::Path(r), format!("path ~ /{re}/"))
    } else {
        let template = s.sidecar.clone().unwrap_or_default();
        if !template.starts_with("{dir}") {
            cx.err(
                format!("{field}.sidecar"),
                "the path starts at the transcript's directory, `{dir}`",
                "e.g. \"{dir}/meta.json\"",
            );
            return Some(None);
        }
        let path = match &s.value {
            Some(v) => match cx.path(&format!("{field}.value"), v) {
                Some(p) => Some(p),
                None => return Some(None),
            },
            None => None,
        };
        let regex = match &s.regex {
            Some(r) => match cx.regex(&format!("{field}.regex"), r) {
                Some(r) => Some(r),
                None => return Some(None),
            },
            None => None,
        };
        let describe = match &s.value {
            Some(v) => format!("{v} in the file {template}"),
            None => format!("the text of the file {template}"),
        };
        (
            SourceKind::Sidecar {
                template,
                path,
                regex,
            },
            describe,
        )
    };
    Some(Some(Source {
        header: false,
        when: None,
        first_only: false,
        kind,
        describe,
    }))
}

fn record_tests(cx: &mut Ctx<'_>, field: &str, tests: &[RawRecordTest]) -> Vec<RecordTest> {
    let mut out = Vec::new();
    for (i, t) in tests.iter().enumerate() {
        let f = format!("{field}[{i}]");
        let when = t
            .when
            .as_ref()
            .map(|w| predicate(cx, &format!("{f}.when"), w));
        let test = predicate(cx, &format!("{f}.test"), &t.test);
        let when = match when {
            None => None,
            Some(Some(w)) => Some(w),
            Some(None) => continue,
        };
        let Some(test) = test else { continue };
        let mut describe = format!("{test}");
        if let Some(w) = &when {
            describe = format!("{describe} on records where {w}");
        }
        if t.first_only {
            describe.push_str(" (first such record only)");
        }
        out.push(RecordTest {
            header: t.header,
            when,
            first_only: t.first_only,
            test,
            describe,
        });
    }
    out
}

pub(super) fn predicate(cx: &mut Ctx<'_>, field: &str, p: &RawPredicate) -> Option<Predicate> {
    Some(match p {
        RawPredicate::Exists(path) => Predicate::Exists(cx.path(&format!("{field}.exists"), path)?),
        RawPredicate::Missing(path) => {
            Predicate::Missing(cx.path(&format!("{field}.missing"), path)?)
        }
        RawPredicate::Equals(pv) => Predicate::Equals(
            cx.path(&format!("{field}.equals.path"), &pv.path)?,
            pv.value.clone(),
        ),
        RawPredicate::In(pv) => Predicate::In(
            cx.path(&format!("{field}.in.path"), &pv.path)?,
            pv.values.clone(),
        ),
        RawPredicate::Matches(pr) => {
            let path = cx.path(&format!("{field}.matches.path"), &pr.path);
            let re = cx.regex(&format!("{field}.matches.regex"), &pr.regex);
            Predicate::Matches(path?, re?)
        }
        RawPredicate::All(ps) => Predicate::All(predicates(cx, &format!("{field}.all"), ps)?),
        RawPredicate::Any(ps) => Predicate::Any(predicates(cx, &format!("{field}.any"), ps)?),
        RawPredicate::Not(p) => {
            Predicate::Not(Box::new(predicate(cx, &format!("{field}.not"), p)?))
        }
    })
}

fn predicates(cx: &mut Ctx<'_>, field: &str, ps: &[RawPredicate]) -> Option<Vec<Predicate>> {
    let compiled: Vec<Option<Predicate>> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| predicate(cx, &format!("{field}[{i}]"), p))
        .collect();
    compiled.into_iter().collect()
}

pub fn policy(raw: RawPolicy, origin: Origin, diags: &mut Vec<Diagnostic>) -> Option<Policy> {
    let before = diags.len();
    let mut cx = Ctx {
        file: origin.to_string(),
        diags,
    };
    let mut checks = Vec::new();
    for (i, c) in raw.checks.iter().enumerate() {
        let field = format!("checks[{i}]");
        let enabled = c.enabled.unwrap_or(true);
        if c.check != "quiet-window" && (c.quiet.is_some() || !c.apps.is_empty()) {
            cx.err(
                &field,
                format!("`quiet` and `apps` belong to quiet-window, not {}", c.check),
                "move them to the quiet-window check",
            );
        }
        let kind = match c.check.as_str() {
            "no-session-id" => CheckKind::NoSessionId,
            "no-cwd" => CheckKind::NoCwd,
            "no-almanac-repo" => CheckKind::NoAlmanacRepo,
            "internal-almanac-session" => CheckKind::InternalAlmanacSession,
            "excluded-by-rule" => CheckKind::ExcludedByRule,
            "capture-already-pending" => CheckKind::CaptureAlreadyPending,
            "retry-budget-exhausted" => CheckKind::RetryBudgetExhausted,
            "before-automation-activation" => CheckKind::BeforeAutomationActivation,
            "unchanged" => CheckKind::Unchanged,
            // `no-new-turns` is the check's name before 0.x: an alias.
            "no-new-content" | "no-new-turns" => CheckKind::NoNewContent,
            "quiet-window" => {
                let quiet = match c.quiet.as_deref().map(parse_duration) {
                    None => DEFAULT_QUIET,
                    Some(Ok(d)) => d,
                    Some(Err(e)) => {
                        cx.err(format!("{field}.quiet"), e, "write a duration like 45m");
                        continue;
                    }
                };
                let mut apps = BTreeMap::new();
                for (app, d) in &c.apps {
                    match parse_duration(d) {
                        Ok(d) => {
                            apps.insert(app.clone(), d);
                        }
                        Err(e) => cx.err(
                            format!("{field}.apps.{app}"),
                            e,
                            "write a duration like 45m",
                        ),
                    }
                }
                CheckKind::QuietWindow { quiet, apps }
            }
            other => {
                cx.err(
                    format!("{field}.check"),
                    format!("unknown check \"{other}\""),
                    "see schemas/policy.schema.json for the checks",
                );
                continue;
            }
        };
        if !enabled && kind.required() {
            cx.err(
                format!("{field}.enabled"),
                format!(
                    "{} cannot be disabled: it keeps captures correct",
                    kind.code()
                ),
                "remove `enabled: false`",
            );
        }
        if checks.iter().any(|k: &Check| k.kind.code() == kind.code()) {
            cx.err(
                format!("{field}.check"),
                format!("check \"{}\" is listed twice", kind.code()),
                "keep one entry per check",
            );
        }
        checks.push(Check { kind, enabled });
    }
    for required in [
        "no-session-id",
        "no-cwd",
        "no-almanac-repo",
        "internal-almanac-session",
        "capture-already-pending",
    ] {
        if !checks.iter().any(|c| c.kind.code() == required) {
            cx.err(
                "checks",
                format!("the policy must list \"{required}\""),
                "it keeps captures correct; add the check",
            );
        }
    }
    if cx.diags.len() > before {
        return None;
    }
    Some(Policy { origin, checks })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_walk_goes_as_deep_as_the_include_patterns_reach() {
        let d =
            |p: &[&str]| super::include_depth(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(d(&[".aider.chat.history.md"]), Some(1));
        assert_eq!(d(&["*/agent-transcripts/*.txt", "*.json"]), Some(3));
        assert_eq!(d(&["**/*.jsonl", "*.json"]), None);
        assert_eq!(d(&[]), Some(0));
    }
}
