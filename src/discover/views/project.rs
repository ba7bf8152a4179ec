//! Where a view's session ran: the store's `project` sources, tried in order.

use super::read::text_at;
use crate::rules::views::{HashAlgo, ProjectSource};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The most of a sidecar file read.
const SIDECAR_CAP: u64 = 1 << 20;

/// What one session gives the sources to read.
pub struct Input<'a> {
    pub store: &'a Path,
    pub id: &'a str,
    pub session: &'a Value,
    pub messages: &'a [Value],
    pub known: &'a [PathBuf],
}

/// The project directory and which source gave it; or None with what the sources found (a hash no
/// known repo has, say).
pub fn derive(sources: &[ProjectSource], i: &Input) -> Result<(String, String), String> {
    let mut tried = Vec::new();
    for s in sources {
        match one(s, i) {
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

fn one(s: &ProjectSource, i: &Input) -> Result<Option<String>, String> {
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
            sidecar,
            field,
            uri,
            hash,
        } => {
            let value = match sidecar {
                Some(t) => {
                    let path = sidecar_path(t, i.store, i.id);
                    let bytes = match crate::util::untrusted::read_optional(&path, SIDECAR_CAP) {
                        Ok(Some(b)) => b,
                        Ok(None) => return Ok(None),
                        Err(e) => return Err(e.to_string()),
                    };
                    match field {
                        Some(p) => match serde_json::from_slice::<Value>(&bytes) {
                            Ok(doc) => text_at(p, &doc),
                            Err(e) => return Err(format!("{}: {e}", path.display())),
                        },
                        None => Some(String::from_utf8_lossy(&bytes).trim().to_string()),
                    }
                }
                None => field.as_ref().and_then(|p| text_at(p, i.session)),
            };
            let Some(value) = value.filter(|v| !v.is_empty()) else {
                return Ok(None);
            };
            let value = if *uri { from_uri(&value) } else { value };
            match hash {
                None => Ok(Some(value)),
                Some(algo) => match_hash(*algo, &value, i.known).map(Some),
            }
        }
    }
}

/// The template with `{dir}` (the store file's directory), `{stem}` (its name up to the last `.`) and
/// `{id}` (the session id) filled in.
pub fn sidecar_path(template: &str, store: &Path, id: &str) -> PathBuf {
    let dir = store.parent().unwrap_or(Path::new("/"));
    let stem = store
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let safe_id: String = id
        .chars()
        .filter(|c| !matches!(c, '/' | '\\') && *c != '\0')
        .collect();
    let rest = template["{dir}".len()..]
        .replace("{stem}", &stem)
        .replace("{id}", &safe_id);
    crate::util::paths::normalize(&dir.join(rest.trim_start_matches(['/', '\\'])))
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
        };
        let (dir, _) = derive(&[ProjectSource::Text(re)], &i).unwrap();
        assert_eq!(dir, r"C:\Users\u\p");
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
