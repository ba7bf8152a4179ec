//! Stores that are not append-only JSONL (`format` of a store): what the rule file says about them,
//! compiled. `discover::views` reads them into almanac's own JSONL copy of each session (a *view*),
//! which the rest of the engine reads as it reads any transcript.

use super::compiled::JsonPath;

/// The key of the engine's header record, line 1 of every view (`discover::views`).
pub const VIEW_HEADER: &str = "almanac_view";
/// The key of a message's id in a view's message records (always its first member).
pub const VIEW_ID: &str = "almanac_id";
/// The member a `json-dir` store's messages carry their file's name in: their id.
pub const DIR_FILE: &str = "almanac_file";
use regex::Regex;

/// Where this process's views are (`$ALMANAC_HOME/state/views`), set when its context is made: a rule
/// set with stores of both kinds tells its views from its JSONL transcripts by it.
static VIEWS_ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Remembers where the views are (the first call wins: one ALMANAC_HOME a process).
pub fn use_views_root(root: std::path::PathBuf) {
    let _ = VIEWS_ROOT.set(root);
}

/// Whether `path` is below the views root of this process.
pub fn under_views_root(path: &std::path::Path) -> bool {
    VIEWS_ROOT.get().is_some_and(|r| path.starts_with(r))
}

/// How a store's files are read.
#[derive(Debug)]
pub enum StoreKind {
    /// Append-only JSONL, read where it is.
    Jsonl,
    /// Read into a view per session (`discover::views`).
    View(Box<ViewSpec>),
}

impl StoreKind {
    pub fn view(&self) -> Option<&ViewSpec> {
        match self {
            StoreKind::Jsonl => None,
            StoreKind::View(v) => Some(v),
        }
    }
}

#[derive(Debug)]
pub enum ViewFormat {
    /// A JSONL log where a record holding a message id replaces the earlier one of that id (in
    /// first-appearance order), `{"$set": {...}}` patches the session (`messages` in it replaces the
    /// list) and `{"$rewindTo": id}` drops that message and every later one. Records without a message
    /// id are merged into the session.
    Replay,
    /// One JSON document a file, rewritten whole: `messages` selects the messages in order; the rest of
    /// the document is the session.
    Json { messages: JsonPath },
    /// A SQLite database: `sessions` lists them (one row each, columns by name), `messages` lists one
    /// session's messages in order (its one parameter is the session id). `json_columns` are parsed.
    Sqlite {
        sessions: String,
        messages: String,
        json_columns: Vec<String>,
    },
    /// An append-only Markdown chat log of many sessions (`discover::views::markdown`).
    Markdown(Box<MarkdownSpec>),
    /// A plain-text transcript of one session: a line `block` matches starts a message (group 1 its
    /// role); the lines after it, up to the next, are its text (`discover::views::text`).
    Text { block: Regex },
    /// One session a directory of files: the store file (a JSON document) is the session, and the
    /// files `messages` names (a template from the store file's directory, its last component a glob)
    /// are its messages, one JSON document each, in name order. A message is known by its file's name.
    JsonDir { messages: String },
}

/// A Markdown chat log: a line `session` matches starts a session (group 1 its start, a time that sorts
/// as text); `prompt` lines (group 1 the text) are the user's, `status` lines the tool's own output,
/// the rest the answers. `input`: a log beside it of what the user typed, entries starting at an `entry`
/// line (group 1 their time, comparable with the session's) and made of `line`s (group 1 the text).
#[derive(Debug)]
pub struct MarkdownSpec {
    pub session: Regex,
    pub prompt: Regex,
    pub status: Option<Regex>,
    pub input: Option<MarkdownInput>,
}

#[derive(Debug)]
pub struct MarkdownInput {
    /// A path template as a sidecar's (`{dir}` is the log's directory).
    pub file: String,
    pub entry: Regex,
    pub line: Regex,
}

impl ViewFormat {
    pub fn name(&self) -> &'static str {
        match self {
            ViewFormat::Replay => "jsonl-replay",
            ViewFormat::Json { .. } => "json",
            ViewFormat::Sqlite { .. } => "sqlite",
            ViewFormat::Markdown(_) => "markdown",
            ViewFormat::Text { .. } => "text",
            ViewFormat::JsonDir { .. } => "json-dir",
        }
    }
}

/// A store read into views: its format, where each session's fields are and where its project is.
#[derive(Debug)]
pub struct ViewSpec {
    pub format: ViewFormat,
    /// The session id: the first of these sources that yields a string or number (`session.id`, then
    /// `id_from_path`, a `path` source). Each is a `Value` source named as a path.
    pub id: Vec<ProjectSource>,
    /// The parent session's id (a subagent's), the first source that yields one.
    pub parent: Vec<ProjectSource>,
    /// When the session last changed (a sqlite session whose value is unchanged is not read again).
    pub updated: Option<JsonPath>,
    /// A message's stable id; without one, a hash of its content.
    pub message_id: Option<JsonPath>,
    /// Messages whose id matches are left out of the view.
    pub drop_message_ids: Option<Regex>,
    /// A store file with a file of one of these names beside it is not read: another store of the set
    /// reads that session (Cline's task directory: its API history, else its UI messages).
    pub not_beside: Vec<String>,
    /// Where the session's project directory is, tried in order.
    pub project: Vec<ProjectSource>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgo {
    Sha256,
    Md5,
}

impl HashAlgo {
    pub fn name(self) -> &'static str {
        match self {
            HashAlgo::Sha256 => "sha256",
            HashAlgo::Md5 => "md5",
        }
    }

    /// The lower-case hex digest of `text`.
    pub fn hex(self, text: &str) -> String {
        use sha2::Digest;
        match self {
            HashAlgo::Sha256 => format!("{:x}", sha2::Sha256::digest(text.as_bytes())),
            HashAlgo::Md5 => format!("{:x}", md5::Md5::digest(text.as_bytes())),
        }
    }
}

/// Another store that says which sessions belong to it (a Cursor workspace's database lists the
/// composers opened in that workspace): `stores`, a path template like a sidecar's with `*` for one
/// directory level; `ids`, a read-only query listing the session ids a store holds (first column).
#[derive(Debug)]
pub struct Lookup {
    pub stores: String,
    pub ids: String,
}

/// Where the value of a `Value` project source is read.
#[derive(Debug)]
pub enum ValueFrom {
    /// The session object (`field`).
    Session,
    /// The messages, in order: the first that has `field` (`messages: true`).
    Messages,
    /// A file beside the store (`sidecar`: its JSON's `field`, or its text).
    Sidecar(String),
    /// Group 1 of a regex over the store file's path under its root (`path`).
    Path(Regex),
    /// The file beside the one of the `lookup` stores that lists the session (`sidecar`, its `{dir}`
    /// that store's directory); without a sidecar, the second column of the row that lists it.
    Lookup(Lookup, Option<String>),
}

/// How a project value names the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// A path, or a `file://` URI (`uri`).
    Path { uri: bool },
    /// A hash of the path, matched against the repos almanac knows.
    Hash(HashAlgo),
    /// The path with every character this regex matches made `-` (lossy): matched against the repos
    /// almanac knows, placed only when exactly one has it.
    Slug(String),
}

/// Where one session's project directory comes from.
#[derive(Debug)]
pub enum ProjectSource {
    /// A value read `from` the session, a file or the store's path, named as `naming` says.
    Value {
        from: ValueFrom,
        field: Option<JsonPath>,
        naming: Naming,
    },
    /// Group 1 of a regex over the text of the session's messages; the last match wins.
    Text(Regex),
    /// The directory holding the store file, this many levels up (0: the directory itself).
    StoreDir(u32),
}

impl ProjectSource {
    pub fn describe(&self) -> String {
        match self {
            ProjectSource::Value {
                from,
                field,
                naming,
            } => {
                let mut s = match (from, field) {
                    (ValueFrom::Sidecar(f), Some(p)) => format!("{} in the file {f}", p.text),
                    (ValueFrom::Sidecar(f), None) => format!("the text of the file {f}"),
                    (ValueFrom::Session, Some(p)) => p.text.clone(),
                    (ValueFrom::Session, None) | (ValueFrom::Messages, None) => "nothing".into(),
                    (ValueFrom::Messages, Some(p)) => {
                        format!("{} in the first message that has it", p.text)
                    }
                    (ValueFrom::Path(re), _) => format!("/{re}/ over the store's path"),
                    (ValueFrom::Lookup(l, Some(f)), p) => format!(
                        "{} the file {f} beside the one of {} that lists the session",
                        p.as_ref()
                            .map_or("the text of".to_string(), |p| format!("{} in", p.text)),
                        l.stores
                    ),
                    (ValueFrom::Lookup(l, None), _) => format!(
                        "the second column of the row of {} that lists the session",
                        l.stores
                    ),
                };
                match naming {
                    Naming::Path { uri: false } => {}
                    Naming::Path { uri: true } => s.push_str(" (a file:// URI)"),
                    Naming::Hash(h) => s.push_str(&format!(
                        " (the {} of the path, matched against known repos)",
                        h.name()
                    )),
                    Naming::Slug(re) => s.push_str(&format!(
                        " (the path with /{re}/ made `-`, matched against known repos)"
                    )),
                }
                s
            }
            ProjectSource::Text(re) => format!("the last match of /{}/ in the messages", re),
            ProjectSource::StoreDir(0) => "the directory holding the store".into(),
            ProjectSource::StoreDir(n) => {
                format!("the directory holding the store, {n} level(s) up")
            }
        }
    }
}

/// The most bytes `decompress` makes of one value: a session's messages are at most this much as the
/// view writes them, so a larger value could never be read whole anyway.
pub const MAX_DECOMPRESSED: u64 = 64 << 20;

/// `data` decompressed by `method` (`zstd`, `gzip` or `zlib`), at most [`MAX_DECOMPRESSED`] bytes: the
/// decoders are pure Rust (ruzstd, miniz_oxide), so the three platforms build without a C toolchain.
pub fn decompress(data: &[u8], method: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let reader: Box<dyn Read + '_> = match method {
        "zstd" => Box::new(
            ruzstd::decoding::StreamingDecoder::new(data)
                .map_err(|e| format!("not zstd data: {e}"))?,
        ),
        "gzip" => Box::new(flate2::read::MultiGzDecoder::new(data)),
        "zlib" => Box::new(flate2::read::ZlibDecoder::new(data)),
        other => return Err(format!("unknown method `{other}`: give zstd, gzip or zlib")),
    };
    let mut out = Vec::new();
    reader
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("not {method} data: {e}"))?;
    if out.len() as u64 > MAX_DECOMPRESSED {
        return Err(format!(
            "the value decompresses to more than {} MiB, almanac's bound",
            MAX_DECOMPRESSED >> 20
        ));
    }
    Ok(out)
}

/// The SQL functions almanac adds to SQLite's for rule files' queries (on the private copy and in the
/// validator), the decoders a rule names beside SQLite's own JSON, hex (`unhex`) and key/value ones:
/// - `protobuf_bytes_hex(data, field)`, the length-delimited values of one field of a protobuf message
///   as a JSON array of lower-case hex strings (NULL for a NULL `data`);
/// - `decompress(data, method)`, `data` decompressed ([`decompress`]): text when it is UTF-8 (JSON a
///   query can read at once), else a blob; NULL for a NULL `data`. Data that is not what the method
///   says, or that decompresses past the bound, fails the query with the reason (the store then needs
///   attention, named), never a silent NULL.
pub fn register_functions(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    use rusqlite::types::{Value as SqlValue, ValueRef};
    conn.create_scalar_function(
        "decompress",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let method: String = ctx.get(1)?;
            let data = match ctx.get_raw(0) {
                ValueRef::Null => return Ok(SqlValue::Null),
                ValueRef::Blob(b) | ValueRef::Text(b) => b,
                _ => {
                    return Err(rusqlite::Error::UserFunctionError(
                        "decompress: the data is a number, not a blob".into(),
                    ))
                }
            };
            let out = decompress(data, &method).map_err(|e| {
                rusqlite::Error::UserFunctionError(format!("decompress: {e}").into())
            })?;
            Ok(match String::from_utf8(out) {
                Ok(text) => SqlValue::Text(text),
                Err(e) => SqlValue::Blob(e.into_bytes()),
            })
        },
    )?;
    conn.create_scalar_function(
        "protobuf_bytes_hex",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let field: i64 = ctx.get(1)?;
            let data = match ctx.get_raw(0) {
                ValueRef::Null => return Ok(None),
                ValueRef::Blob(b) | ValueRef::Text(b) => b,
                _ => {
                    return Err(rusqlite::Error::UserFunctionError(
                        "protobuf_bytes_hex: the data is a number, not a blob".into(),
                    ))
                }
            };
            let field = u64::try_from(field).map_err(|_| {
                rusqlite::Error::UserFunctionError("protobuf_bytes_hex: a negative field".into())
            })?;
            let values = crate::util::protobuf::field_bytes(data, field).map_err(|e| {
                rusqlite::Error::UserFunctionError(format!("protobuf_bytes_hex: {e}").into())
            })?;
            let hex: Vec<String> = values.iter().map(|v| crate::util::ids::hex(v)).collect();
            Ok(Some(serde_json::to_string(&hex).unwrap_or_default()))
        },
    )
}

/// Why a sqlite query in a rule file cannot run: it is not one read-only statement, or SQLite cannot
/// parse it. A table or column the empty database lacks is not an error (the schema is the app's).
pub fn check_sql(sql: &str, params: usize) -> Result<(), String> {
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    if first != "SELECT" && first != "WITH" {
        return Err(format!(
            "would write or is not a query: it starts with {}, and only a read-only SELECT (or WITH ... SELECT) may be given",
            if first.is_empty() { "nothing" } else { &first }
        ));
    }
    if let Some(w) = write_keyword(sql) {
        return Err(format!("the statement would write ({w})"));
    }
    let conn = rusqlite::Connection::open_in_memory().map_err(|e| e.to_string())?;
    conn.pragma_update(None, "query_only", true)
        .map_err(|e| e.to_string())?;
    register_functions(&conn).map_err(|e| e.to_string())?;
    let explain = format!("EXPLAIN {sql}");
    let prepared = conn.prepare(&explain).map(|s| s.parameter_count());
    match prepared {
        Ok(count) => {
            if count != params {
                return Err(format!(
                    "takes {count} parameter(s); it must take {params}{}",
                    if params == 1 {
                        " (the session id, `?1`)"
                    } else {
                        ""
                    }
                ));
            }
            let writes = conn.prepare(sql).is_ok_and(|s| !s.readonly());
            if writes {
                return Err("the statement would write".into());
            }
            Ok(())
        }
        Err(e) => {
            let msg = e.to_string();
            if msg.starts_with("no such table") || msg.starts_with("no such column") {
                Ok(())
            } else if msg.contains("ultiple statements") {
                Err("holds more than one statement".into())
            } else {
                Err(format!("cannot be parsed by SQLite: {msg}"))
            }
        }
    }
}

/// A keyword outside quotes that only a statement that writes (or changes the connection) uses. The
/// reader also runs every query with `query_only` on: this is so the rule validator can say so first.
fn write_keyword(sql: &str) -> Option<String> {
    const WRITES: &[&str] = &[
        "INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "ATTACH", "DETACH",
        "PRAGMA", "VACUUM", "REINDEX", "UPSERT",
    ];
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in sql.chars().chain(std::iter::once(' ')) {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c.to_ascii_uppercase());
            continue;
        }
        if WRITES.contains(&word.as_str()) {
            return Some(word);
        }
        word.clear();
        if matches!(c, '\'' | '"' | '`' | '[') {
            quote = Some(if c == '[' { ']' } else { c });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_that_writes_or_does_not_parse_is_refused() {
        assert!(check_sql("SELECT id FROM session", 0).is_ok());
        assert!(check_sql("SELECT data FROM message WHERE session_id = ?1", 1).is_ok());
        assert!(check_sql("with x as (select 1) select * from x", 0).is_ok());
        let e = check_sql("DELETE FROM session", 0).unwrap_err();
        assert!(e.contains("DELETE"), "{e}");
        assert!(check_sql("SELECT 1; DROP TABLE session", 0).is_err());
        let e = check_sql("SELECT id FROM session WHERE", 0).unwrap_err();
        assert!(e.contains("cannot be parsed"), "{e}");
        let e = check_sql("SELECT 1", 1).unwrap_err();
        assert!(e.contains("parameter"), "{e}");
        let e = check_sql("WITH x AS (SELECT 1) DELETE FROM t", 0).unwrap_err();
        assert!(e.contains("write (DELETE)"), "{e}");
        // A keyword inside a string or a quoted name is data.
        assert!(check_sql("SELECT 'delete me' AS \"update\" FROM part", 0).is_ok());
    }

    #[test]
    fn decompress_reads_what_the_real_tools_wrote_and_stops_at_its_bound() {
        assert!(check_sql("SELECT decompress(x'00', 'zstd')", 0).is_ok());
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        register_functions(&conn).unwrap();
        let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, Option<String>>(0));
        let json = r#"{"messages":[{"User":{"content":"hi"}}]}"#;
        // Written by zstd 1.5 and gzip 1.12 (`printf … | zstd -c`, `gzip -n -c`) and Python's zlib.
        let zstd = "28b52ffd04584101007b226d65737361676573223a5b7b2255736572223a7b22636f6e74656e74223a226869227d7d5d7df61d7812";
        let gzip = "1f8b0800000000000003ab56ca4d2d2e4e4c4f2d56b28aae560a2d4e2d52b2aa564acecf2b49cd2b51b252cac854aaad8dad0500ac8a4ef128000000";
        for (hex, method) in [(zstd, "zstd"), (gzip, "gzip")] {
            let sql = format!("SELECT decompress(x'{hex}', '{method}')");
            assert_eq!(one(&sql).unwrap().as_deref(), Some(json), "{method}");
            // SQLite's JSON functions read the text at once.
            let sql = format!(
                "SELECT json_extract(decompress(x'{hex}', '{method}'), '$.messages[0].User.content')"
            );
            assert_eq!(one(&sql).unwrap().as_deref(), Some("hi"), "{method}");
        }
        assert_eq!(
            one("SELECT decompress(x'789cab564a54b232ac0500082a0209', 'zlib')")
                .unwrap()
                .as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(one("SELECT decompress(NULL, 'zstd')").unwrap(), None);
        for (sql, want) in [
            (
                format!("SELECT decompress(x'{gzip}', 'zstd')"),
                "decompress: not zstd data",
            ),
            (
                format!("SELECT decompress(x'{zstd}', 'gzip')"),
                "decompress: not gzip data",
            ),
            (
                format!("SELECT decompress(x'{zstd}', 'brotli')"),
                "unknown method `brotli`: give zstd, gzip or zlib",
            ),
            (
                "SELECT decompress(12, 'zstd')".to_string(),
                "a number, not a blob",
            ),
        ] {
            let e = one(&sql).unwrap_err().to_string();
            assert!(e.contains(want), "{sql}: {e}");
        }
        // 64 MiB and one byte of zeros, 2 KB as `zstd -19` wrote them: refused, not read whole.
        let bomb =
            include_bytes!("../../tests/fixtures/synthetic/decompress/zeros-64MiB-plus-1.zst");
        let e = decompress(bomb, "zstd").unwrap_err();
        assert!(e.contains("more than 64 MiB"), "{e}");
        let e = conn
            .query_row("SELECT decompress(?1, 'zstd')", [&bomb[..]], |r| {
                r.get::<_, Option<String>>(0)
            })
            .unwrap_err();
        assert!(e.to_string().contains("almanac's bound"), "{e}");
    }

    #[test]
    fn the_protobuf_function_lists_one_fields_values_as_hex() {
        assert!(check_sql("SELECT protobuf_bytes_hex(x'0a026162', 1)", 0).is_ok());
        let e = check_sql("SELECT protobuf_bytes(x'0a026162', 1)", 0).unwrap_err();
        assert!(e.contains("no such function"), "{e}");
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        register_functions(&conn).unwrap();
        let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, Option<String>>(0));
        // Field 1 twice ("ab", then 0x01ff), field 2 once.
        let msg = "x'0a0261621202787a0a0201ff'";
        assert_eq!(
            one(&format!("SELECT protobuf_bytes_hex({msg}, 1)")).unwrap(),
            Some(r#"["6162","01ff"]"#.into())
        );
        assert_eq!(one("SELECT protobuf_bytes_hex(NULL, 1)").unwrap(), None);
        let e = one("SELECT protobuf_bytes_hex(x'0a05', 1)").unwrap_err();
        assert!(e.to_string().contains("runs past the end"), "{e}");
        // In SQL: each id joined to its row, in order.
        let rows: Vec<String> = conn
            .prepare(&format!(
                "SELECT j.value FROM json_each(protobuf_bytes_hex({msg}, 1)) AS j ORDER BY j.key"
            ))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, ["6162", "01ff"]);
    }

    #[test]
    fn hashes_are_hex_digests_of_the_path() {
        assert_eq!(
            HashAlgo::Md5.hex("/home/u/p"),
            format!("{:x}", {
                use sha2::Digest;
                md5::Md5::digest(b"/home/u/p")
            })
        );
        assert_eq!(HashAlgo::Sha256.hex("").len(), 64);
    }
}
