//! Reading a store that is not append-only JSONL into its sessions: a replay log, a JSON document, a
//! plain-text transcript, a Markdown log or a SQLite database read through a private copy. Nothing
//! here writes beside the store.
//!
//! Every kind is held to the same bounds (`Bounds`): a session of more than `MAX_MESSAGES` messages or
//! `MAX_SESSION_BYTES` of them is not read (`Messages::Refused`, naming the bound), and each session is
//! handed on as soon as it is read, so a store of many sessions is never held whole. A store's rows and
//! lines are streamed; only one session's messages are held at a time.

use crate::rules::compiled::JsonPath;
use crate::rules::views::{ViewFormat, ViewSpec};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// The most of a log read that may hold more than one session's messages (a replay log that says a
/// message many times, a Markdown log of many sessions); a larger one is an error naming it. A test may
/// lower it with `ALMANAC_TEST_MAX_DOCUMENT_BYTES`.
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;
/// The most messages one session's view holds.
pub const MAX_MESSAGES: usize = 200_000;
/// The most bytes of messages one session's view holds, and so the most of a file that holds one
/// session as it is (a JSON document, a text transcript) that is read. A test may lower it with
/// `ALMANAC_TEST_MAX_SESSION_BYTES`.
pub const MAX_SESSION_BYTES: u64 = 64 << 20;
/// The most one session's messages may take in memory once parsed (as `parsed_cost` estimates it):
/// JSON of many tiny values parses to many times its length.
pub const MAX_PARSED_BYTES: u64 = 512 << 20;

/// One session as the store holds it.
pub struct SessionRead {
    pub id: String,
    /// The session object the `session` and `project` paths read.
    pub session: Value,
    pub messages: Messages,
    pub updated: Option<String>,
}

/// A session's messages as this read found them.
pub enum Messages {
    /// In order.
    Read(Vec<Value>),
    /// As the last read left them: `updated` did not change, so they were not read again.
    Unchanged,
    /// Not read: the session passes one of almanac's bounds (the words name it).
    Refused(String),
}

/// Why a store could not be read. `Busy`: the store changed while it was copied, or SQLite reported it
/// busy or locked: tried again on the next sweep, the last read's views kept. `Local`: almanac's own
/// disk failed it (full, a file size limit, a directory it cannot make): tried again on the next sweep,
/// as nothing is wrong with the store. `Bad`: the store itself, remembered until it changes.
#[derive(Debug)]
pub enum ReadError {
    Busy(String),
    Local(String),
    Bad(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Busy(e) | ReadError::Local(e) => {
                write!(f, "{e} (read again on the next sweep)")
            }
            ReadError::Bad(e) => f.write_str(e),
        }
    }
}

impl ReadError {
    /// Whether the store is read again on the next sweep whatever happens to it (nothing is wrong with
    /// it that its next change would have to mend).
    pub fn transient(&self) -> bool {
        !matches!(self, ReadError::Bad(_))
    }
}

fn test_bound(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn max_document() -> u64 {
    test_bound("ALMANAC_TEST_MAX_DOCUMENT_BYTES", MAX_DOCUMENT_BYTES)
}

/// `MAX_SESSION_BYTES`, or a test's lower bound.
pub fn max_session_bytes() -> u64 {
    test_bound("ALMANAC_TEST_MAX_SESSION_BYTES", MAX_SESSION_BYTES)
}

/// One session's messages counted against the bounds as they are read.
pub struct Bounds {
    messages: usize,
    bytes: u64,
    max_bytes: u64,
    /// What the messages take parsed (`parsed_cost`), where they are parsed from JSON text.
    parsed: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            messages: 0,
            bytes: 0,
            max_bytes: max_session_bytes(),
            parsed: 0,
        }
    }
}

impl Bounds {
    /// Counts one message of about `bytes`; the words for the bound it passes, if it does.
    pub fn add(&mut self, bytes: u64) -> Result<(), String> {
        self.messages += 1;
        self.bytes += bytes;
        self.check()
    }

    /// Sets what is held (a replay log replaces and drops messages as it goes).
    pub fn set(&mut self, messages: usize, bytes: u64) -> Result<(), String> {
        self.messages = messages;
        self.bytes = bytes;
        self.check()
    }

    /// Counts what parsing more of the session's JSON takes in memory (`parsed_cost`).
    pub fn parsed(&mut self, cost: u64) -> Result<(), String> {
        self.parsed += cost;
        self.check()
    }

    /// Sets what the session's parsed JSON takes in memory now.
    pub fn set_parsed(&mut self, cost: u64) -> Result<(), String> {
        self.parsed = cost;
        self.check()
    }

    fn check(&self) -> Result<(), String> {
        if self.parsed > MAX_PARSED_BYTES {
            return Err(format!(
                "the session's messages would take more than {} in memory parsed, almanac's bound for \
                 one session: not read",
                crate::util::duration::format_size(MAX_PARSED_BYTES)
            ));
        }
        if self.messages > MAX_MESSAGES {
            return Err(too_many(MAX_MESSAGES));
        }
        if self.bytes > self.max_bytes {
            return Err(too_large(self.max_bytes));
        }
        Ok(())
    }
}

/// About what parsing `json` into values takes in memory, before it is parsed: its text, and for
/// each object (a map's node) and each array, element and member (a value) outside strings, what
/// serde_json allocates for it. JSON of many tiny values parses to many times its length.
pub fn parsed_cost(json: &[u8]) -> u64 {
    const OBJECT: u64 = 700;
    const VALUE: u64 = 40;
    let (mut cost, mut in_string, mut escaped) = (json.len() as u64, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        cost += match b {
            b'"' => {
                in_string = true;
                0
            }
            b'{' => OBJECT,
            b'[' | b',' | b':' => VALUE,
            _ => 0,
        };
    }
    cost
}

/// The words for a session of more than `max` messages.
pub fn too_many(max: usize) -> String {
    format!("the session holds more than {max} messages, almanac's bound for one session: not read")
}

/// The words for a session of more than `max` bytes of messages.
pub fn too_large(max: u64) -> String {
    format!(
        "the session holds more than {} of messages, almanac's bound for one session: not read",
        crate::util::duration::format_size(max)
    )
}

/// The first string (or number, as text) a path selects.
pub fn text_at(path: &JsonPath, v: &Value) -> Option<String> {
    path.select(v).into_iter().find_map(|x| match x {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// The session's id: the first of the `session.id` sources that yields one (a path over the session, a
/// sidecar beside the store file, a regex over its path relative to its root, the messages).
pub fn session_id(
    spec: &ViewSpec,
    session: &Value,
    (store, rel): (&Path, &str),
    messages: &[Value],
) -> Option<String> {
    let input = super::project::Input::bare((store, rel), session, messages);
    super::project::first_value(&spec.id, &input)
}

/// Where each session read is handed, as soon as it is read.
pub type Sink<'a> = dyn FnMut(SessionRead) + 'a;

/// The sessions of one store file, each handed to `sink` as it is read.
/// `scratch`: where a database's private copy is made (almanac's state, on disk: `/tmp` may be memory).
pub fn read_store(
    spec: &ViewSpec,
    scratch: &Path,
    path: &Path,
    rel: &str,
    unchanged: &dyn Fn(&str, Option<&str>) -> bool,
    sink: &mut Sink,
) -> Result<(), ReadError> {
    // A sibling counts when it is a file (or a link to one, which its own store refuses by name); a
    // dangling link or a directory leaves this file the session's.
    if spec
        .not_beside
        .iter()
        .any(|n| std::fs::metadata(path.with_file_name(n)).is_ok_and(|m| m.is_file()))
    {
        return Ok(());
    }
    match &spec.format {
        ViewFormat::Replay => {
            let (session, messages) = replay(spec, path)?;
            one(spec, (path, rel), (session, messages), sink);
            Ok(())
        }
        ViewFormat::Json { messages } => {
            let bytes = read_session_file(path)?;
            let read = document(messages, &bytes).map_err(|e| {
                ReadError::Bad(match e {
                    DocError::Costly(why) => format!("{}: {why}", path.display()),
                    DocError::Malformed(e) => {
                        format!("{} is not a JSON document: {e}", path.display())
                    }
                })
            })?;
            drop(bytes);
            one(spec, (path, rel), read, sink);
            Ok(())
        }
        ViewFormat::Markdown(md) => super::markdown::read(md, path, max_document(), sink),
        ViewFormat::Text { block } => {
            let bytes = read_session_file(path)?;
            let messages = match super::text::messages(block, &bytes, MAX_MESSAGES) {
                Ok(m) => Messages::Read(m),
                Err(why) => Messages::Refused(why),
            };
            one(
                spec,
                (path, rel),
                (Value::Object(Map::new()), messages),
                sink,
            );
            Ok(())
        }
        ViewFormat::JsonDir { messages } => {
            let bytes = read_session_file(path)?;
            let session = match serde_json::from_slice::<Value>(&bytes) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => Value::Object(Map::new()),
                Err(e) => {
                    return Err(ReadError::Busy(format!(
                        "{} is not a JSON document (yet): {e}",
                        path.display()
                    )))
                }
            };
            drop(bytes);
            let messages = dir_messages(messages, path)?;
            one(spec, (path, rel), (session, messages), sink);
            Ok(())
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
            sink,
        ),
    }
}

fn one(
    spec: &ViewSpec,
    at: (&Path, &str),
    (session, messages): (Value, Messages),
    sink: &mut Sink,
) {
    let read = match &messages {
        Messages::Read(m) => m.as_slice(),
        _ => &[],
    };
    let Some(id) = session_id(spec, &session, at, read) else {
        return; // not a session (a file the include globs also match)
    };
    let updated = spec.updated.as_ref().and_then(|p| text_at(p, &session));
    sink(SessionRead {
        id,
        session,
        messages,
        updated,
    });
}

use crate::rules::views::DIR_FILE;

/// The directory a `json-dir` template names beside the store file, and the glob its files match.
fn dir_and_glob(
    template: &str,
    store: &Path,
) -> Option<(std::path::PathBuf, globset::GlobMatcher)> {
    let last = template.rsplit(['/', '\\']).next()?;
    let dir = super::project::sidecar_path(&template[..template.len() - last.len()], store, "");
    let glob = globset::Glob::new(last).ok()?.compile_matcher();
    Some((dir, glob))
}

/// The names of the files of a `json-dir` session, in order: regular files (no links) the glob
/// matches, at most one more than a session's bound.
fn dir_files(template: &str, store: &Path) -> std::io::Result<(std::path::PathBuf, Vec<String>)> {
    let Some((dir, glob)) = dir_and_glob(template, store) else {
        return Ok((store.to_path_buf(), Vec::new()));
    };
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::other(format!(
            "{} is a symbolic link; almanac does not follow it",
            dir.display()
        )));
    }
    let mut names = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((dir, names)),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if glob.is_match(&name) && e.file_type().is_ok_and(|t| t.is_file()) {
            names.push(name);
            if names.len() > MAX_MESSAGES {
                break;
            }
        }
    }
    names.sort();
    Ok((dir, names))
}

/// The stamp of a `json-dir` session's files: each one's name, size and mtime (a new event file, or
/// one rewritten, makes the views again though the session file did not change).
pub fn dir_stamp(template: &str, store: &Path) -> String {
    let Ok((dir, names)) = dir_files(template, store) else {
        return "unreadable".into();
    };
    let mut text = String::new();
    for n in names {
        let m = std::fs::symlink_metadata(dir.join(&n)).ok();
        let mtime = m
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        text.push_str(&format!("{n}:{}:{mtime}\n", m.map_or(0, |m| m.len())));
    }
    crate::rules::views::HashAlgo::Sha256.hex(&text)
}

/// A `json-dir` session's messages: each file one JSON document, in name order, its name in
/// [`DIR_FILE`]; counted against one session's bounds as they are read. A file that is not JSON is
/// one being written: the store is read again on the next sweep.
fn dir_messages(template: &str, store: &Path) -> Result<Messages, ReadError> {
    let (dir, names) = dir_files(template, store)
        .map_err(|e| ReadError::Bad(format!("{}: {e}", store.display())))?;
    if names.len() > MAX_MESSAGES {
        return Ok(Messages::Refused(too_many(MAX_MESSAGES)));
    }
    let mut bounds = Bounds::default();
    let mut list = Vec::with_capacity(names.len());
    for name in names {
        let path = dir.join(&name);
        let bytes = match crate::util::untrusted::read_capped(&path, max_session_bytes()) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ReadError::Bad(format!("{}: {e}", path.display()))),
        };
        if let Err(why) = bounds
            .add(bytes.len() as u64)
            .and_then(|()| bounds.parsed(parsed_cost(&bytes)))
        {
            return Ok(Messages::Refused(why));
        }
        // An event file being written is read again next sweep; one that stays broken (an app that
        // died mid-write) needs the user: busy for good, it would silence every later event.
        let mut v: Value = serde_json::from_slice(&bytes).map_err(|e| {
            match super::sqlite::changed_lately(&path) {
                true => ReadError::Busy(format!(
                    "{} is not a JSON document (yet): {e}",
                    path.display()
                )),
                false => ReadError::Bad(format!(
                    "{} is not a JSON document ({e}) and has not changed for a minute: this conversation is not captured while it stays so; move the broken event file aside (or repair it) and the next sweep reads the conversation",
                    path.display()
                )),
            }
        })?;
        match &mut v {
            Value::Object(m) => {
                m.insert(DIR_FILE.into(), Value::String(name));
            }
            other => {
                *other = serde_json::json!({ DIR_FILE: name, "value": other.take() });
            }
        }
        list.push(v);
    }
    Ok(Messages::Read(list))
}

/// A file that holds one session as it is (a JSON document, a text transcript): at most the bound of
/// one session's messages is read.
fn read_session_file(path: &Path) -> Result<Vec<u8>, ReadError> {
    let max = max_session_bytes();
    crate::util::untrusted::read_capped(path, max).map_err(|e| {
        ReadError::Bad(match e.to_string().contains("is larger than") {
            true => format!(
                "{} is larger than {}, almanac's bound for one session: not read",
                path.display(),
                crate::util::duration::format_size(max)
            ),
            false => format!("{}: {e}", path.display()),
        })
    })
}

/// Why a JSON document is not read: it is not JSON, or it would take more than one session's bound
/// in memory parsed.
#[derive(Debug)]
enum DocError {
    Malformed(String),
    Costly(String),
}

impl From<String> for DocError {
    fn from(e: String) -> Self {
        DocError::Malformed(e)
    }
}

/// A JSON document: the messages `messages` selects; the rest is the session (the member holding the
/// messages is left out of it when the path names one). More than `MAX_MESSAGES` are not made values:
/// for the common paths (`$[*]`, `$.member[*]` over an array) they are counted in the document's text
/// first, so a document of many tiny messages costs its own size, not many times it.
fn document(messages: &JsonPath, bytes: &[u8]) -> Result<(Value, Messages), DocError> {
    use serde_json::value::RawValue;
    let over = || Messages::Refused(too_many(MAX_MESSAGES));
    let cost = parsed_cost(bytes);
    let each = |list: Vec<&RawValue>| -> Result<Messages, String> {
        if list.len() > MAX_MESSAGES {
            return Ok(over());
        }
        if let Err(why) = Bounds::default().parsed(cost) {
            return Ok(Messages::Refused(why));
        }
        let values = list
            .into_iter()
            .map(|m| serde_json::from_str::<Value>(m.get()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        Ok(Messages::Read(values))
    };
    if messages.text == "$[*]" {
        if let Ok(list) = serde_json::from_slice::<Vec<&RawValue>>(bytes) {
            return Ok((Value::Object(Map::new()), each(list)?));
        }
    }
    if let Some(key) = top_member(&messages.text).filter(|k| messages.text == format!("$.{k}[*]")) {
        if let Ok(top) = object_members(bytes) {
            let mut session = Map::new();
            let mut list = None;
            for (k, v) in top {
                if k == key && v.get().trim_start().starts_with('[') {
                    list = Some(
                        serde_json::from_str::<Vec<&RawValue>>(v.get())
                            .map_err(|e| e.to_string())?,
                    );
                } else if k != key {
                    session.insert(k, serde_json::from_str(v.get()).map_err(|e| e.to_string())?);
                }
            }
            if let Some(list) = list {
                return Ok((Value::Object(session), each(list)?));
            }
        }
    }
    // What a document takes parsed is known before it is parsed: one too costly is not.
    Bounds::default().parsed(cost).map_err(DocError::Costly)?;
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| DocError::Malformed(e.to_string()))?;
    let selected = messages.select(&doc);
    let list = match selected.len() > MAX_MESSAGES {
        true => over(),
        false => Messages::Read(selected.into_iter().cloned().collect()),
    };
    let mut session = doc;
    if let (Some(key), Value::Object(m)) = (top_member(&messages.text), &mut session) {
        m.remove(&key);
    }
    if !session.is_object() {
        session = Value::Object(Map::new());
    }
    Ok((session, list))
}

/// A JSON object's members, as raw text each, by name as a parsed value orders them (the last of a
/// repeated name wins, as there).
fn object_members(
    bytes: &[u8],
) -> Result<Vec<(String, &serde_json::value::RawValue)>, serde_json::Error> {
    let map: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(bytes)?;
    Ok(map.into_iter().collect())
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
/// Read line by line; what is held is counted against the bounds (each message as the length of the
/// line that gave it).
fn replay(spec: &ViewSpec, path: &Path) -> Result<(Value, Messages), ReadError> {
    let bad = |e: std::io::Error| ReadError::Bad(format!("{}: {e}", path.display()));
    let file = crate::util::untrusted::open_regular(path).map_err(bad)?;
    let max = max_document();
    if file.metadata().map_err(bad)?.len() > max {
        return Err(ReadError::Bad(format!(
            "{} is larger than {}; almanac reads at most that much of it",
            path.display(),
            crate::util::duration::format_size(max)
        )));
    }
    let max_line = usize::try_from(max_session_bytes()).unwrap_or(usize::MAX);
    let mut lines =
        crate::util::lines::LineReader::with_max_line(std::io::Read::take(file, max), max_line);
    let mut log = Replayed::new(spec);
    while let Some(line) = lines.next_line().map_err(bad)? {
        let refused =
            |log: Replayed, why: String| (Value::Object(log.session), Messages::Refused(why));
        if line.oversized {
            return Ok(refused(log, too_large(max_line as u64)));
        }
        let text = line.bytes.trim_ascii();
        // What a line takes parsed is known before it is parsed: one too costly is not.
        let size = (text.len() as u64, parsed_cost(text));
        if let Err(why) = Bounds::default().parsed(size.1) {
            return Ok(refused(log, why));
        }
        if !log.record(text, size) {
            break;
        }
        if let Err(why) = log.check() {
            return Ok(refused(log, why));
        }
    }
    let messages = log.list.into_iter().map(|(_, v, _)| v).collect();
    Ok((Value::Object(log.session), Messages::Read(messages)))
}

/// A replay log as read so far.
struct Replayed<'a> {
    spec: &'a ViewSpec,
    session: Map<String, Value>,
    /// (message id, message, (bytes of the line that gave it, what it takes parsed)).
    list: Vec<(String, Value, (u64, u64))>,
    /// Where each id first is in `list` (a log of many messages is read in one pass).
    at: HashMap<String, usize>,
    /// The held messages' bytes and what they take parsed.
    held: (u64, u64),
    /// The same of what the session object was given.
    session_size: (u64, u64),
    bounds: Bounds,
}

impl<'a> Replayed<'a> {
    fn new(spec: &'a ViewSpec) -> Self {
        Replayed {
            spec,
            session: Map::new(),
            list: Vec::new(),
            at: HashMap::new(),
            held: (0, 0),
            session_size: (0, 0),
            bounds: Bounds::default(),
        }
    }

    fn id_of(&self, v: &Value) -> Option<String> {
        self.spec.message_id.as_ref().and_then(|p| text_at(p, v))
    }

    fn reindex(&mut self) {
        self.at.clear();
        for (i, (id, _, _)) in self.list.iter().enumerate() {
            self.at.entry(id.clone()).or_insert(i);
        }
        self.held = self.list.iter().fold((0, 0), |sum, (_, _, n)| add(sum, *n));
    }

    /// Takes one line (`size`: its length, and what it takes parsed); false when it ends the log (a
    /// half-written record).
    fn record(&mut self, line: &[u8], size: (u64, u64)) -> bool {
        if line.is_empty() {
            return true;
        }
        let Ok(Value::Object(rec)) = serde_json::from_slice::<Value>(line) else {
            // A plain log rewritten whole: a bad line is passed over, not the end.
            return self.spec.message_id.is_none();
        };
        if let Some(Value::Object(set)) = rec.get("$set") {
            for (k, v) in set {
                if k == "messages" {
                    let list = v.as_array().map(Vec::as_slice).unwrap_or_default();
                    // The record's size stands for the whole list it sets.
                    let n = list.len().max(1) as u64;
                    let each = (size.0 / n, size.1 / n);
                    self.list = list
                        .iter()
                        .map(|m| (self.id_of(m).unwrap_or_default(), m.clone(), each))
                        .collect();
                    self.reindex();
                } else {
                    self.session.insert(k.clone(), v.clone());
                    self.session_size = add(self.session_size, size);
                }
            }
            return true;
        }
        if let Some(to) = rec.get("$rewindTo") {
            let to = match to {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // What is dropped leaves the index one by one: a log of many rewinds costs its length.
            if let Some(&i) = self.at.get(&to) {
                for (id, _, n) in self.list.drain(i..) {
                    self.held = sub(self.held, n);
                    if self.at.get(&id).is_some_and(|&at| at >= i) {
                        self.at.remove(&id);
                    }
                }
            }
            return true;
        }
        let value = Value::Object(rec);
        if self.spec.message_id.is_none() {
            // No message ids: a plain JSONL log, every record a message (known by its content).
            self.list.push((String::new(), value, size));
            self.held = add(self.held, size);
            return true;
        }
        match self.id_of(&value) {
            Some(id) => match self.at.get(&id).copied() {
                Some(i) => {
                    self.held = add(sub(self.held, self.list[i].2), size);
                    self.list[i] = (id, value, size);
                }
                None => {
                    self.at.insert(id.clone(), self.list.len());
                    self.list.push((id, value, size));
                    self.held = add(self.held, size);
                }
            },
            None => {
                if let Value::Object(rec) = value {
                    self.session.extend(rec);
                    self.session_size = add(self.session_size, size);
                }
            }
        }
        true
    }

    /// What the log holds now, against the bounds of one session (the session object counts too: it
    /// is written into the view's header).
    fn check(&mut self) -> Result<(), String> {
        let (bytes, parsed) = add(self.held, self.session_size);
        self.bounds.set(self.list.len(), bytes)?;
        self.bounds.set_parsed(parsed)
    }
}

fn add(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0 + b.0, a.1 + b.1)
}

fn sub(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ViewSpec {
        ViewSpec {
            format: ViewFormat::Replay,
            id: vec![crate::rules::views::ProjectSource::Value {
                from: crate::rules::views::ValueFrom::Session,
                field: Some(JsonPath::parse("$.sessionId").unwrap()),
                naming: crate::rules::views::Naming::Path { uri: false },
            }],
            parent: Vec::new(),
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

    /// The log `text` replayed, from a file as the reader reads it.
    fn replay_text(spec: &ViewSpec, text: &str) -> (Value, Vec<Value>) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.jsonl");
        std::fs::write(&p, text).unwrap();
        match replay(spec, &p).unwrap() {
            (session, Messages::Read(list)) => (session, list),
            _ => panic!("not read"),
        }
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
        let (session, list) = replay_text(&spec(), log);
        assert_eq!(ids(&list), ["m1", "m2", "m5"]);
        assert_eq!(list[1]["content"], "finished");
        assert_eq!(session["lastUpdated"], "t2");
        assert_eq!(session["sessionId"], "s1");
        let set = "{\"sessionId\":\"s1\"}\n{\"id\":\"m1\"}\n{\"$set\":{\"messages\":[{\"id\":\"x\"},{\"id\":\"y\"}]}}\n{\"id\":\"x\",\"v\":2}\n";
        let (_, list) = replay_text(&spec(), set);
        assert_eq!(ids(&list), ["x", "y"]);
        assert_eq!(list[0]["v"], 2);
    }

    #[test]
    fn a_log_without_message_ids_is_a_list_of_messages() {
        let mut spec = spec();
        spec.message_id = None;
        let log = "{\"role\":\"user\",\"message\":{}}\nnot json\n[1]\n{\"role\":\"assistant\"}\n{\"role\":\"user\",\"message\":{}}\n";
        let (session, list) = replay_text(&spec, log);
        assert_eq!(list.len(), 3);
        assert_eq!(list[2]["role"], "user");
        assert_eq!(session, serde_json::json!({}));
    }

    #[test]
    fn a_replay_log_past_a_bound_is_refused_naming_it() {
        let mut log = String::from("{\"sessionId\":\"s1\"}\n");
        for i in 0..=MAX_MESSAGES {
            log.push_str(&format!("{{\"id\":\"m{i}\"}}\n"));
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.jsonl");
        std::fs::write(&p, &log).unwrap();
        let (session, m) = replay(&spec(), &p).unwrap();
        assert_eq!(session["sessionId"], "s1");
        let Messages::Refused(why) = m else {
            panic!("read")
        };
        assert!(why.contains("more than 200000 messages"), "{why}");
        // A line that would parse to many times its size (7M empty lists in 14 MB) is not parsed.
        let blowup = format!(
            "{{\"sessionId\":\"s2\"}}\n{{\"id\":\"m\",\"x\":[{}]}}\n",
            vec!["[]"; 7_000_000].join(",")
        );
        std::fs::write(&p, &blowup).unwrap();
        let (_, m) = replay(&spec(), &p).unwrap();
        assert!(matches!(m, Messages::Refused(w) if w.contains("in memory parsed")));
        // Rewritten in place, the same messages are one each: well within the bound.
        let same: String = (0..10)
            .map(|_| "{\"id\":\"m1\",\"text\":\"again\"}\n")
            .collect();
        let (_, list) = replay_text(&spec(), &same);
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn bounds_count_messages_and_bytes() {
        let mut b = Bounds {
            messages: 0,
            bytes: 0,
            max_bytes: 100,
            parsed: 0,
        };
        assert!(b.add(60).is_ok());
        let e = b.add(60).unwrap_err();
        assert!(e.contains("more than 100 bytes of messages"), "{e}");
        assert!(b.set(MAX_MESSAGES, 1).is_ok());
        assert!(b.set(MAX_MESSAGES + 1, 1).unwrap_err().contains("messages"));
        let mut b = Bounds::default();
        assert!(b.parsed(MAX_PARSED_BYTES).is_ok());
        assert!(b.parsed(1).unwrap_err().contains("in memory parsed"));
    }

    #[test]
    fn what_json_takes_parsed_is_counted_outside_strings() {
        let plain = parsed_cost(br#"{"a": "x, y: [z]"}"#);
        assert_eq!(
            plain,
            18 + 700 + 40,
            "one object and one member; the string's commas are text"
        );
        let many = "[".to_string() + &vec!["[]"; 1000].join(",") + "]";
        assert!(parsed_cost(many.as_bytes()) > 1000 * 40 * 2);
        assert_eq!(parsed_cost(br#""a\"[""#), 6);
    }

    #[test]
    fn a_document_leaves_its_message_list_out_of_the_session() {
        let doc = br#"{"sessionId": "c1", "history": [{"a": 1}, {"a": 2}], "title": "t"}"#;
        let (session, list) = document(&JsonPath::parse("$.history[*]").unwrap(), doc).unwrap();
        let Messages::Read(list) = list else {
            panic!("refused")
        };
        assert_eq!(list.len(), 2);
        assert!(session.get("history").is_none());
        assert_eq!(session["title"], "t");
        let arr = br#"[{"role": "user"}]"#;
        let (session, list) = document(&JsonPath::parse("$[*]").unwrap(), arr).unwrap();
        let Messages::Read(list) = list else {
            panic!("refused")
        };
        assert_eq!(
            (list.len(), session.as_object().map(|m| m.len())),
            (1, Some(0))
        );
        // Another path, or a member that is not a list, takes the general way: the same result.
        let obj = br#"{"history": {"x": {"a": 1}}, "title": "t"}"#;
        let (session, list) = document(&JsonPath::parse("$.history[*]").unwrap(), obj).unwrap();
        let Messages::Read(list) = list else {
            panic!("refused")
        };
        assert_eq!((list.len(), session["title"].as_str()), (1, Some("t")));
        let many = format!(
            "{{\"history\": [{}]}}",
            vec!["{}"; MAX_MESSAGES + 1].join(",")
        );
        let (_, list) =
            document(&JsonPath::parse("$.history[*]").unwrap(), many.as_bytes()).unwrap();
        assert!(matches!(list, Messages::Refused(w) if w.contains("200000 messages")));
    }
}
