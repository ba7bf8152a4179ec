//! Reading a store that is not append-only JSONL into its sessions: a replay log, a JSON document, or a
//! SQLite database read through a private copy. Nothing here writes beside the store.

use crate::rules::compiled::JsonPath;
use crate::rules::views::{ViewFormat, ViewSpec};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// The most of a JSON document or replay log read (a larger one is an error naming it); a test may
/// lower it with `ALMANAC_TEST_MAX_DOCUMENT_BYTES`.
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

/// One session as the store holds it.
pub struct SessionRead {
    pub id: String,
    /// The session object the `session` and `project` paths read.
    pub session: Value,
    /// Its messages in order, or None when `updated` says it is as the last read left it.
    pub messages: Option<Vec<Value>>,
    pub updated: Option<String>,
}

/// Why a store could not be read. `Busy`: the store changed while it was copied, or SQLite reported it
/// busy or locked: tried again on the next sweep, the last read's views kept.
#[derive(Debug)]
pub enum ReadError {
    Busy(String),
    Bad(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Busy(e) => write!(f, "{e} (read again on the next sweep)"),
            ReadError::Bad(e) => f.write_str(e),
        }
    }
}

fn max_document() -> u64 {
    std::env::var("ALMANAC_TEST_MAX_DOCUMENT_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_DOCUMENT_BYTES)
}

/// The first string (or number, as text) a path selects.
pub fn text_at(path: &JsonPath, v: &Value) -> Option<String> {
    path.select(v).into_iter().find_map(|x| match x {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// The session's id: the first of the `session.id` paths that yields one, else `id_from_path` over
/// the store file's path relative to its root.
pub fn session_id(spec: &ViewSpec, session: &Value, rel: &str) -> Option<String> {
    spec.id
        .iter()
        .find_map(|p| text_at(p, session))
        .or_else(|| {
            let re = spec.id_from_path.as_ref()?;
            Some(re.captures(rel)?.get(1)?.as_str().to_string())
        })
}

/// The sessions of one store file.
/// `scratch`: where a database's private copy is made (almanac's state, on disk: `/tmp` may be memory).
pub fn read_store(
    spec: &ViewSpec,
    scratch: &Path,
    path: &Path,
    rel: &str,
    unchanged: &dyn Fn(&str, Option<&str>) -> bool,
) -> Result<Vec<SessionRead>, ReadError> {
    // A sibling counts when it is a file (or a link to one, which its own store refuses by name); a
    // dangling link or a directory leaves this file the session's.
    if spec
        .not_beside
        .iter()
        .any(|n| std::fs::metadata(path.with_file_name(n)).is_ok_and(|m| m.is_file()))
    {
        return Ok(Vec::new());
    }
    match &spec.format {
        ViewFormat::Replay => {
            let (session, messages) = replay(spec, &read_document(path)?);
            if messages.len() > super::sqlite::MAX_MESSAGES {
                return Err(ReadError::Bad(format!(
                    "{}: holds more than {} messages: not read",
                    path.display(),
                    super::sqlite::MAX_MESSAGES
                )));
            }
            one(spec, rel, (session, messages))
        }
        ViewFormat::Json { messages } => {
            let bytes = read_document(path)?;
            let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
                ReadError::Bad(format!("{} is not a JSON document: {e}", path.display()))
            })?;
            one(spec, rel, document(messages, doc))
        }
        ViewFormat::Markdown(md) => super::markdown::read(md, path, &read_document(path)?),
        ViewFormat::Text { block } => {
            let bytes = read_document(path)?;
            let messages = super::text::messages(block, &bytes, super::sqlite::MAX_MESSAGES)
                .map_err(|e| ReadError::Bad(format!("{}: {e}", path.display())))?;
            one(spec, rel, (Value::Object(Map::new()), messages))
        }
        ViewFormat::Sqlite {
            sessions,
            messages,
            json_columns,
        } => super::sqlite::read(
            spec,
            scratch,
            (path, rel),
            (sessions, messages, json_columns),
            unchanged,
        ),
    }
}

fn one(
    spec: &ViewSpec,
    rel: &str,
    (session, messages): (Value, Vec<Value>),
) -> Result<Vec<SessionRead>, ReadError> {
    let Some(id) = session_id(spec, &session, rel) else {
        return Ok(Vec::new()); // not a session (a file the include globs also match)
    };
    let updated = spec.updated.as_ref().and_then(|p| text_at(p, &session));
    Ok(vec![SessionRead {
        id,
        session,
        messages: Some(messages),
        updated,
    }])
}

fn read_document(path: &Path) -> Result<Vec<u8>, ReadError> {
    crate::util::untrusted::read_capped(path, max_document())
        .map_err(|e| ReadError::Bad(format!("{}: {e}", path.display())))
}

/// A JSON document: the messages `messages` selects; the rest is the session (the member holding the
/// messages is left out of it when the path names one).
fn document(messages: &JsonPath, doc: Value) -> (Value, Vec<Value>) {
    let list: Vec<Value> = messages.select(&doc).into_iter().cloned().collect();
    let mut session = doc;
    if let (Some(key), Value::Object(m)) = (top_member(&messages.text), &mut session) {
        m.remove(&key);
    }
    if !session.is_object() {
        session = Value::Object(Map::new());
    }
    (session, list)
}

/// `messages` in `$.messages[*]` (a path into one top-level member), else None.
fn top_member(path: &str) -> Option<String> {
    let rest = path.strip_prefix("$.")?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_string())
}

/// A replay log: the last write of each message id wins, in first-appearance order; `$set` patches
/// the session (its `messages` replaces the list); `$rewindTo` drops that message and every later one.
/// A line that is not JSON (one being written) ends the log there. Without `session.message_id` the
/// log is plain JSONL that may be rewritten whole (Cursor's agent transcripts): every record a message.
fn replay(spec: &ViewSpec, bytes: &[u8]) -> (Value, Vec<Value>) {
    let mut session = Map::new();
    let mut list: Vec<(String, Value)> = Vec::new();
    // Where each id first is in `list` (a log of many messages is read in one pass).
    let mut at: HashMap<String, usize> = HashMap::new();
    let index = |list: &[(String, Value)]| -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for (i, (id, _)) in list.iter().enumerate() {
            m.entry(id.clone()).or_insert(i);
        }
        m
    };
    let id_of = |v: &Value| spec.message_id.as_ref().and_then(|p| text_at(p, v));
    for line in bytes.split(|b| *b == b'\n') {
        if list.len() > super::sqlite::MAX_MESSAGES {
            break; // refused by the caller
        }
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let Ok(Value::Object(rec)) = serde_json::from_slice::<Value>(line) else {
            if spec.message_id.is_none() {
                // A plain log rewritten whole: a bad line is passed over, not the end.
                continue;
            }
            break;
        };
        if let Some(Value::Object(set)) = rec.get("$set") {
            for (k, v) in set {
                if k == "messages" {
                    list = v
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|m| (id_of(m).unwrap_or_default(), m.clone()))
                                .collect()
                        })
                        .unwrap_or_default();
                    at = index(&list);
                } else {
                    session.insert(k.clone(), v.clone());
                }
            }
            continue;
        }
        if let Some(to) = rec.get("$rewindTo") {
            let to = match to {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if let Some(&i) = at.get(&to) {
                list.truncate(i);
                at.retain(|_, p| *p < i);
            }
            continue;
        }
        let value = Value::Object(rec);
        if spec.message_id.is_none() {
            // No message ids: a plain JSONL log, every record a message (known by its content).
            list.push((String::new(), value));
            continue;
        }
        match id_of(&value) {
            Some(id) => match at.get(&id) {
                Some(&i) => list[i].1 = value,
                None => {
                    at.insert(id.clone(), list.len());
                    list.push((id, value));
                }
            },
            None => {
                if let Value::Object(rec) = value {
                    session.extend(rec);
                }
            }
        }
    }
    (
        Value::Object(session),
        list.into_iter().map(|(_, v)| v).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ViewSpec {
        ViewSpec {
            format: ViewFormat::Replay,
            id: vec![JsonPath::parse("$.sessionId").unwrap()],
            id_from_path: None,
            parent: None,
            updated: None,
            message_id: Some(JsonPath::parse("$.id").unwrap()),
            drop_message_ids: None,
            not_beside: Vec::new(),
            project: Vec::new(),
        }
    }

    fn ids(list: &[Value]) -> Vec<&str> {
        list.iter().map(|m| m["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn a_replay_log_upserts_patches_and_rewinds() {
        let log = r#"{"sessionId":"s1","projectHash":"ab"}
{"id":"m1","type":"user","content":"one"}
{"id":"m2","type":"gemini","content":"partial"}
{"id":"m2","type":"gemini","content":"finished"}
{"$set":{"lastUpdated":"t2"}}
{"id":"m3","type":"user","content":"three"}
{"id":"m4","type":"gemini","content":"four"}
{"$rewindTo":"m3"}
{"id":"m5","type":"user","content":"five"}
{"id":"m6","type":"gem"#;
        let (session, list) = replay(&spec(), log.as_bytes());
        assert_eq!(ids(&list), ["m1", "m2", "m5"]);
        assert_eq!(list[1]["content"], "finished");
        assert_eq!(session["lastUpdated"], "t2");
        assert_eq!(session["sessionId"], "s1");
        let set = "{\"sessionId\":\"s1\"}\n{\"id\":\"m1\"}\n{\"$set\":{\"messages\":[{\"id\":\"x\"},{\"id\":\"y\"}]}}\n{\"id\":\"x\",\"v\":2}\n";
        let (_, list) = replay(&spec(), set.as_bytes());
        assert_eq!(ids(&list), ["x", "y"]);
        assert_eq!(list[0]["v"], 2);
    }

    #[test]
    fn a_log_without_message_ids_is_a_list_of_messages() {
        let mut spec = spec();
        spec.message_id = None;
        let log = "{\"role\":\"user\",\"message\":{}}\nnot json\n[1]\n{\"role\":\"assistant\"}\n{\"role\":\"user\",\"message\":{}}\n";
        let (session, list) = replay(&spec, log.as_bytes());
        assert_eq!(list.len(), 3);
        assert_eq!(list[2]["role"], "user");
        assert_eq!(session, serde_json::json!({}));
    }

    #[test]
    fn a_document_leaves_its_message_list_out_of_the_session() {
        let doc: Value =
            serde_json::json!({"sessionId": "c1", "history": [{"a": 1}, {"a": 2}], "title": "t"});
        let (session, list) = document(&JsonPath::parse("$.history[*]").unwrap(), doc);
        assert_eq!(list.len(), 2);
        assert!(session.get("history").is_none());
        assert_eq!(session["title"], "t");
        let arr: Value = serde_json::json!([{"role": "user"}]);
        let (session, list) = document(&JsonPath::parse("$[*]").unwrap(), arr);
        assert_eq!(
            (list.len(), session.as_object().map(|m| m.len())),
            (1, Some(0))
        );
    }
}
