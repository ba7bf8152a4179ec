//! Where a view's session ran: the store's `project` sources, tried in order.

use super::read::{text_at, ReadError};
use crate::rules::views::{HashAlgo, Naming, ProjectSource, ValueFrom};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The most of a sidecar file read.
const SIDECAR_CAP: u64 = 1 << 20;

/// What one session gives the sources to read.
pub struct Input<'a> {
    pub store: &'a Path,
    /// The store file's path under its root.
    pub rel: &'a str,
    pub id: &'a str,
    pub session: &'a Value,
    pub messages: &'a [Value],
    pub known: &'a [PathBuf],
    /// `[stores.slug_repos]`: slugs the user vouches for, each with its repo.
    pub vouched: &'a [(String, PathBuf)],
    /// For each source (by index) that is a `lookup`: the session ids each lookup store lists.
    pub lookups: &'a [Option<Listed>],
}

impl<'a> Input<'a> {
    /// A session's own facts alone, with no known repos or lookups: what its id and parent read.
    pub fn bare(
        (store, rel): (&'a Path, &'a str),
        session: &'a Value,
        messages: &'a [Value],
    ) -> Input<'a> {
        Input {
            store,
            rel,
            id: "",
            session,
            messages,
            known: &[],
            vouched: &[],
            lookups: &[],
        }
    }
}

/// The project directory and which source gave it; or None with what the sources found (a hash no
/// known repo has, say).
pub fn derive(sources: &[ProjectSource], i: &Input) -> Result<(String, String), String> {
    let mut tried = Vec::new();
    for (j, s) in sources.iter().enumerate() {
        match one(s, j, i) {
            Ok(Some(dir)) => return Ok((dir, s.describe())),
            Ok(None) => {}
            Err(why) => tried.push(why),
        }
    }
    Err(if tried.is_empty() {
        "no project source gave a directory".into()
    } else {
        tried.join("; ")
    })
}

fn one(s: &ProjectSource, j: usize, i: &Input) -> Result<Option<String>, String> {
    match s {
        ProjectSource::StoreDir(n) => {
            let mut dir = i.store.parent();
            for _ in 0..*n {
                dir = dir.and_then(Path::parent);
            }
            Ok(dir.map(|d| d.to_string_lossy().into_owned()))
        }
        ProjectSource::Text(re) => {
            let mut last = None;
            for m in i.messages {
                each_string(m, &mut |s| {
                    if let Some(c) = re.captures_iter(s).last() {
                        last = c.get(1).map(|g| unescape(g.as_str().trim()));
                    }
                });
            }
            Ok(last)
        }
        ProjectSource::Value {
            from,
            field,
            naming,
        } => {
            let Some(value) = value(from, field.as_ref(), j, i)? else {
                return Ok(None);
            };
            match naming {
                Naming::Path { uri: false } => Ok(Some(value)),
                Naming::Path { uri: true } => Ok(Some(from_uri(&value))),
                Naming::Hash(algo) => match_hash(*algo, &value, i.known).map(Some),
                Naming::Slug(chars) => {
                    let slug = super::slug::Slug {
                        chars,
                        slug: &value,
                        known: i.known,
                        vouched: i.vouched,
                    };
                    let texts = |f: &mut dyn FnMut(&str)| {
                        each_string(i.session, f);
                        i.messages.iter().for_each(|m| each_string(m, f));
                    };
                    slug.place(&texts).map(Some)
                }
            }
        }
    }
}

/// The first value of `sources` (each a `Value` source; others give nothing), as it is: a session's id
/// or parent. A source that fails (a sidecar that is not JSON) is passed over for the next.
pub fn first_value(sources: &[ProjectSource], i: &Input) -> Option<String> {
    sources.iter().enumerate().find_map(|(j, s)| match s {
        ProjectSource::Value { from, field, .. } => value(from, field.as_ref(), j, i).ok()?,
        _ => None,
    })
}

/// A file beside a store or transcript: its text, trimmed, or the value `field` selects in its JSON; at
/// most 1 MiB of it is read, not through a link; None when it is not there.
pub fn read_sidecar(
    path: &Path,
    field: Option<&crate::rules::JsonPath>,
) -> Result<Option<String>, String> {
    let bytes = match crate::util::untrusted::read_optional(path, SIDECAR_CAP) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    Ok(match field {
        Some(p) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(doc) => text_at(p, &doc),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        },
        None => Some(String::from_utf8_lossy(&bytes).trim().to_string()),
    })
}

/// The value a `Value` source reads (`from`, then `field` in it), not yet named as a directory; None
/// when it gives none or an empty one.
fn value(
    from: &ValueFrom,
    field: Option<&crate::rules::JsonPath>,
    j: usize,
    i: &Input,
) -> Result<Option<String>, String> {
    let in_file = |path: PathBuf| read_sidecar(&path, field);
    let value = match from {
        ValueFrom::Session => field.and_then(|p| text_at(p, i.session)),
        ValueFrom::Messages => field.and_then(|p| i.messages.iter().find_map(|m| text_at(p, m))),
        ValueFrom::Sidecar(t) => match fill(t, i.store, i.id, i.session) {
            Some(path) if climbs_a_link(&path, i.store) => {
                return Err(format!(
                    "{}: reached through a symbolic link: not read",
                    path.display()
                ))
            }
            Some(path) => in_file(path)?,
            None => None,
        },
        ValueFrom::Path(re) => re
            .captures(i.rel)
            .and_then(|c| Some(c.get(1)?.as_str().to_string())),
        ValueFrom::Lookup(l, t) => {
            let found = i.lookups.get(j).and_then(|m| m.as_ref()?.get(i.id));
            match (found, t) {
                (Some((db, _)), Some(t)) => in_file(sidecar_path(t, db, i.id))?,
                (Some((_, value)), None) => value.clone(),
                (None, _) => {
                    return Err(format!(
                        "none of {} lists the session",
                        sidecar_path(&l.stores, i.store, "").display()
                    ))
                }
            }
        }
    };
    Ok(value.filter(|v| !v.is_empty()))
}

/// Whether a directory between the store's and `path` (those a template named, below the directory
/// both are in) is a symbolic link: a file a store's data names is read only where the store is.
fn climbs_a_link(path: &Path, store: &Path) -> bool {
    let Some(home) = store.parent() else {
        return false;
    };
    let common: PathBuf = path
        .components()
        .zip(home.components())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    path.ancestors()
        .skip(1)
        .take_while(|a| *a != common && a.starts_with(&common))
        .any(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()))
}

/// The files a lookup's `stores` template names: `{dir}` filled in, and a component that is `*` (or
/// holds one) matched against the directory's entries (real directories and files only, in name order,
/// at most `LOOKUP_CAP`).
pub fn expand(template: &str, store: &Path) -> Vec<PathBuf> {
    let full = sidecar_path(template, store, "");
    let mut found = vec![PathBuf::new()];
    for c in full.components() {
        let text = c.as_os_str().to_string_lossy();
        if !text.contains('*') {
            for f in &mut found {
                f.push(c.as_os_str());
            }
            continue;
        }
        let Ok(glob) = globset::Glob::new(&text).map(|g| g.compile_matcher()) else {
            return Vec::new();
        };
        let mut next = Vec::new();
        for dir in &found {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<_> = rd
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
                .map(|e| e.file_name())
                .filter(|n| glob.is_match(n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
            if next.len() > LOOKUP_CAP {
                next.truncate(LOOKUP_CAP);
                break;
            }
        }
        found = next;
    }
    found.retain(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()));
    found
}

/// The most lookup stores one template names (a Cursor user has one per workspace opened).
const LOOKUP_CAP: usize = 10_000;

/// What a lookup store listed when it had this stamp, by `<path>#<query hash>`: each session id, with
/// the value of the query's second column where it has one.
pub type LookupCache = BTreeMap<String, (String, Vec<(String, Option<String>)>)>;

/// The sessions the stores of one `lookup` list: the store that lists each, and the value it gives.
pub type Listed = HashMap<String, (PathBuf, Option<String>)>;

/// For each `lookup` source of `sources`, the store (of those its template names) that lists each
/// session id. A store whose stamp is the one `old` has is not read again; `new` gets what was used. One
/// that cannot be read (not a database, a view in it, a query that never ends) lists nothing until it
/// changes; one being written lists nothing now, and the flag says to read again on the next sweep.
pub fn lookups(
    sources: &[ProjectSource],
    store: &Path,
    scratch: &Path,
    old: &LookupCache,
    new: &mut LookupCache,
) -> (Vec<Option<Listed>>, bool) {
    let mut retry = false;
    let mut out = Vec::with_capacity(sources.len());
    for s in sources {
        let ProjectSource::Value {
            from: ValueFrom::Lookup(l, _),
            ..
        } = s
        else {
            out.push(None);
            continue;
        };
        let query = &HashAlgo::Sha256.hex(&l.ids)[..12];
        let mut map = HashMap::new();
        for db in expand(&l.stores, store) {
            let key = format!("{}#{query}", db.display());
            let stamp = super::file_stamp(&db);
            let ids = match old.get(&key) {
                Some((st, ids)) if *st == stamp => ids.clone(),
                _ => match super::sqlite::list_ids(scratch, &db, &l.ids) {
                    Ok(ids) => ids,
                    Err(ReadError::Bad(_)) => Vec::new(),
                    Err(ReadError::Busy(_) | ReadError::Local(_)) => {
                        retry = true;
                        continue;
                    }
                },
            };
            for (id, value) in &ids {
                map.entry(id.clone())
                    .or_insert_with(|| (db.clone(), value.clone()));
            }
            new.insert(key, (stamp, ids));
        }
        out.push(Some(map));
    }
    (out, retry)
}

/// The template with `{dir}` (the store file's directory), `{stem}` (its name up to the last `.`) and
/// `{id}` (the session id) filled in.
pub fn sidecar_path(template: &str, store: &Path, id: &str) -> PathBuf {
    fill(template, store, id, &Value::Null).unwrap_or_else(|| store.to_path_buf())
}

/// Whether a template names something of one session (`{id}`, or a member of the session object),
/// rather than only of the store file.
pub fn per_session(template: &str) -> bool {
    placeholders(template).any(|p| p != "dir" && p != "stem")
}

fn placeholders(template: &str) -> impl Iterator<Item = &str> {
    template
        .split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name))
}

/// The template filled in: `{dir}`, `{stem}`, `{id}`, and `{name}` for a top-level member of the
/// session (a string or number: a Cursor composer's workspace id). A value becomes one path component
/// (`/`, `\` and NUL taken out); None when a member is missing or would climb (`.`, `..`).
fn fill(template: &str, store: &Path, id: &str, session: &Value) -> Option<PathBuf> {
    let dir = store.parent().unwrap_or(Path::new("/"));
    let stem = store
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let component = |v: &str| -> String {
        v.chars()
            .filter(|c| !matches!(c, '/' | '\\') && *c != '\0')
            .collect()
    };
    let mut rest = template["{dir}".len()..]
        .replace("{stem}", &stem)
        .replace("{id}", &component(id));
    let names: Vec<String> = placeholders(&rest).map(str::to_string).collect();
    for name in names {
        let value = match session.get(&name)? {
            Value::String(s) => component(s),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        if value.is_empty() || value == "." || value == ".." {
            return None;
        }
        rest = rest.replace(&format!("{{{name}}}"), &value);
    }
    Some(crate::util::paths::normalize(
        &dir.join(rest.trim_start_matches(['/', '\\'])),
    ))
}

/// The known repo whose path hashes to `hash`.
fn match_hash(algo: HashAlgo, hash: &str, known: &[PathBuf]) -> Result<String, String> {
    let want = hash.trim().to_ascii_lowercase();
    known
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .find(|p| algo.hex(p) == want)
        .ok_or_else(|| {
            format!(
                "{} {want} matches none of the {} repos almanac knows (run `almanac init` in the project)",
                algo.name(),
                known.len()
            )
        })
}

/// `file:///home/u/p` → `/home/u/p`; `file:///c%3A/Users/u` and `file:///C:/x` → `C:/x`. Anything else
/// is kept as it is.
pub fn from_uri(value: &str) -> String {
    let Some(rest) = value.strip_prefix("file://") else {
        return value.to_string();
    };
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    let decoded = percent_decode(rest);
    let b = decoded.as_bytes();
    if b.len() >= 3 && b[0] == b'/' && b[1].is_ascii_alphabetic() && b[2] == b':' {
        let mut s = decoded[1..].to_string();
        s.replace_range(0..1, &decoded[1..2].to_ascii_uppercase());
        return s;
    }
    decoded
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(n) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A directory found inside a JSON-encoded string keeps its escapes (`C:\\Users`): undone.
fn unescape(s: &str) -> String {
    if s.contains("\\\\") || s.contains("\\/") {
        s.replace("\\\\", "\\").replace("\\/", "/")
    } else {
        s.to_string()
    }
}

fn each_string(v: &Value, f: &mut dyn FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().for_each(|x| each_string(x, f)),
        Value::Object(m) => m.values().for_each(|x| each_string(x, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_become_paths_with_drive_letters() {
        assert_eq!(from_uri("file:///home/u/my%20proj"), "/home/u/my proj");
        assert_eq!(from_uri("file:///c%3A/Users/u/p"), "C:/Users/u/p");
        assert_eq!(from_uri("file:///D:/w"), "D:/w");
        assert_eq!(from_uri("/plain/path"), "/plain/path");
    }

    #[test]
    fn the_last_match_in_the_messages_wins_even_inside_encoded_json() {
        let re = regex::Regex::new(r"# Current Working Directory \(([^)\n]+)\)").unwrap();
        let messages = vec![
            serde_json::json!({"text": "# Current Working Directory (/old)"}),
            serde_json::json!({"text": "{\"request\":\"x\\n# Current Working Directory (C:\\\\Users\\\\u\\\\p) Files\"}"}),
        ];
        let session = Value::Null;
        let i = Input {
            store: Path::new("/s/x.json"),
            id: "a",
            session: &session,
            messages: &messages,
            known: &[],
            vouched: &[],
            rel: "x.json",
            lookups: &[],
        };
        let (dir, _) = derive(&[ProjectSource::Text(re)], &i).unwrap();
        assert_eq!(dir, r"C:\Users\u\p");
    }

    /// A store whose session id and parent are in a sidecar (Mistral Vibe's meta.json), a directory name
    /// (Kimi CLI's) or the messages, and whose project is in its first message that names one.
    #[test]
    fn session_fields_come_from_sidecars_paths_and_messages() {
        let yaml = r#"
id: t
stores:
  - name: s
    format: json
    roots: [ { default: ["~/.t"] } ]
    include: ["*/*/messages.json"]
    document: { messages: "$.messages[*]" }
    session:
      id: ["$.id", { sidecar: "{dir}/meta.json", field: "$.session_id" }, { path: '^[^/]+/([^/]+)/' }]
      parent: [ "$.parent", { sidecar: "{dir}/meta.json", field: "$.parent_session_id" } ]
    project:
      - { field: "$.workspace", messages: true }
"#;
        let mut diags = Vec::new();
        let set = crate::rules::load_rule_set(yaml, crate::rules::Origin::Builtin("t"), &mut diags)
            .unwrap_or_else(|| panic!("{diags:?}"));
        let spec = set.stores[0].kind.view().unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("proj/s1");
        std::fs::create_dir_all(&dir).unwrap();
        let store = dir.join("messages.json");
        let messages = vec![
            serde_json::json!({"text": "hi"}),
            serde_json::json!({"workspace": "/home/u/app"}),
            serde_json::json!({"workspace": "/home/u/other"}),
        ];
        let at = (store.as_path(), "proj/s1/messages.json");
        let id_of = |session: &Value| super::super::read::session_id(spec, session, at, &messages);
        let parent_of =
            |session: &Value| first_value(&spec.parent, &Input::bare(at, session, &messages));
        let empty = serde_json::json!({});
        // No sidecar yet: the directory's name is the id, and there is no parent.
        assert_eq!(id_of(&empty).as_deref(), Some("s1"));
        assert_eq!(parent_of(&empty), None);
        // The sidecar's id and parent win over the path; the session's own fields over both.
        std::fs::write(
            dir.join("meta.json"),
            r#"{"session_id": "sess-9", "parent_session_id": "sess-1"}"#,
        )
        .unwrap();
        assert_eq!(id_of(&empty).as_deref(), Some("sess-9"));
        assert_eq!(parent_of(&empty).as_deref(), Some("sess-1"));
        let own = serde_json::json!({"id": "own", "parent": "p0"});
        assert_eq!(id_of(&own).as_deref(), Some("own"));
        assert_eq!(parent_of(&own).as_deref(), Some("p0"));
        // The project: the first message that names one.
        let (project, from) = derive(&spec.project, &Input::bare(at, &empty, &messages)).unwrap();
        assert_eq!(project, "/home/u/app");
        assert_eq!(from, "$.workspace in the first message that has it");
        // A sidecar that is not JSON gives nothing, and the next source is read.
        std::fs::write(dir.join("meta.json"), "not json").unwrap();
        assert_eq!(id_of(&empty).as_deref(), Some("s1"));
    }

    #[test]
    fn a_hash_is_placed_only_on_a_known_repo() {
        let known = vec![PathBuf::from("/home/u/a"), PathBuf::from("/home/u/b")];
        let h = HashAlgo::Sha256.hex("/home/u/b");
        assert_eq!(
            match_hash(HashAlgo::Sha256, &h, &known).unwrap(),
            "/home/u/b"
        );
        let e = match_hash(HashAlgo::Md5, &h, &known).unwrap_err();
        assert!(e.contains("matches none of the 2 repos"), "{e}");
    }

    #[test]
    fn a_lookup_template_expands_one_level_per_star() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path().join("User/globalStorage");
        std::fs::create_dir_all(&g).unwrap();
        for w in ["b", "a", "c"] {
            let ws = d.path().join("User/workspaceStorage").join(w);
            std::fs::create_dir_all(&ws).unwrap();
            if w != "c" {
                std::fs::write(ws.join("state.vscdb"), b"x").unwrap();
            }
        }
        let found = expand(
            "{dir}/../workspaceStorage/*/state.vscdb",
            &g.join("state.vscdb"),
        );
        let names: Vec<String> = found
            .iter()
            .map(|p| {
                p.parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into()
            })
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_sidecar_may_be_named_by_a_member_of_the_session_but_never_climb() {
        let store = Path::new("/c/User/globalStorage/state.vscdb");
        let t = "{dir}/../workspaceStorage/{workspace}/workspace.json";
        assert!(per_session(t));
        assert!(!per_session("{dir}/../.project_root"));
        let s = serde_json::json!({"workspace": "60f9"});
        assert_eq!(
            fill(t, store, "x", &s).unwrap(),
            PathBuf::from("/c/User/workspaceStorage/60f9/workspace.json")
        );
        let s = serde_json::json!({"workspace": "../../etc"});
        assert_eq!(
            fill(t, store, "x", &s).unwrap(),
            PathBuf::from("/c/User/workspaceStorage/....etc/workspace.json")
        );
        assert!(fill(t, store, "x", &serde_json::json!({"workspace": ".."})).is_none());
        assert!(fill(t, store, "x", &serde_json::json!({})).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_sidecar_reached_through_a_linked_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let user = d.path().join("User");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(user.join("globalStorage")).unwrap();
        std::fs::create_dir_all(user.join("workspaceStorage/real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, user.join("workspaceStorage/link")).unwrap();
        let store = user.join("globalStorage/state.vscdb");
        let t = "{dir}/../workspaceStorage/{workspace}/workspace.json";
        let at = |ws: &str| fill(t, &store, "x", &serde_json::json!({ "workspace": ws })).unwrap();
        assert!(climbs_a_link(&at("link"), &store));
        assert!(!climbs_a_link(&at("real"), &store));
        assert!(!climbs_a_link(&user.join("globalStorage/x.json"), &store));
    }

    #[test]
    fn sidecars_are_found_from_the_store_files_directory() {
        let p = sidecar_path(
            "{dir}/../.project_root",
            Path::new("/g/tmp/slug/chats/s.jsonl"),
            "x",
        );
        assert_eq!(p, PathBuf::from("/g/tmp/slug/.project_root"));
        let p = sidecar_path(
            "{dir}/{id}.json",
            Path::new("/c/sessions/abc/abc.messages.json"),
            "../abc",
        );
        assert_eq!(p, PathBuf::from("/c/sessions/abc/..abc.json"));
    }
}
