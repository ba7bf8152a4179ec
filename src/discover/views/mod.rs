//! Views: almanac's own JSONL copy of each session of a store that is not append-only JSONL (a replay
//! log, a JSON document, a SQLite database). Line 1 is the engine's header (`almanac_view`: the session
//! id, its project directory as the store's `project` sources found it, its parent; `session`: the
//! session object as the store holds it); each further line is one message as the store holds it,
//! with its id first (`almanac_id`). The rest of the engine reads a view as it reads any transcript.
//!
//! Views live under `$ALMANAC_HOME/state/views/<app>/<store key>/`, one file a session and an
//! `index.json` that remembers the store's size, mtime and identity (and its WAL's): a store that kept
//! them costs no read and no query; a view is rewritten only when its bytes change.

mod copy;
pub mod ids;
mod markdown;
mod project;
pub use project::{read_sidecar, sidecar_path};
pub mod read;
mod schema;
mod slug;
mod sqlite;
mod text;
mod write;

use crate::context::Context;
use crate::rules::views::ViewSpec;
use read::Messages;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use write::{Made, Written};

pub use crate::rules::views::{VIEW_HEADER, VIEW_ID};

/// Changes when what a view holds changes shape: every view is then made again.
const VIEW_VERSION: u32 = 1;
const INDEX: &str = "index.json";
const INDEX_CAP: u64 = 64 << 20;

/// Where a store's views are.
pub fn store_dir(cx: &Context, app: &str, store: &Path) -> PathBuf {
    let key = crate::rules::views::HashAlgo::Sha256.hex(&store.to_string_lossy());
    cx.almanac_home
        .join("state/views")
        .join(app)
        .join(&key[..16])
}

/// The views root of every app (for the commands that name a view path).
pub fn views_root(cx: &Context) -> PathBuf {
    cx.almanac_home.join("state/views")
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    store: String,
    stamp: String,
    sessions: Vec<Indexed>,
    /// What each lookup store listed, at its stamp (so an unchanged one is not read again).
    #[serde(default)]
    lookups: project::LookupCache,
    /// The stamp at which the store could not be read, and why: not read again until it changes.
    #[serde(default)]
    failed: Option<(String, String)>,
    /// Sessions not read at this stamp, each past a bound of one session: (id, why).
    #[serde(default)]
    refused: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Indexed {
    id: String,
    file: String,
    updated: Option<String>,
    project: Option<String>,
}

/// What reading one store gave: its views, and why it or some of its sessions could not be read now
/// (then the last read's views are given, when there are any).
pub struct StoreViews {
    pub files: Vec<PathBuf>,
    /// Why the store or a session of it could not be read, each with whether it is read again on the
    /// next sweep whatever happens (a store caught being written, almanac's own disk).
    pub errors: Vec<(bool, String)>,
}

/// A file's size, mtime and identity, and its `-wal`'s (empty parts for a file that is not there).
pub fn file_stamp(p: &Path) -> String {
    let part = |p: &Path| -> Option<String> {
        let m = std::fs::symlink_metadata(p).ok()?;
        let id = crate::platform::file_id(p, &m);
        let mtime = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Some(format!("{}:{mtime}:{}:{}", m.len(), id.0, id.1))
    };
    format!(
        "{} wal={}",
        part(p).unwrap_or_default(),
        part(&beside(p, "-wal")).unwrap_or_default()
    )
}

/// The file SQLite keeps beside a database: its path with `suffix` (`-wal`, `-journal`) appended.
pub(super) fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The files read with a store file, beside it: a database's WAL (its frames are replayed over the
/// database) and rollback journal, a Markdown log's input log. A store inside a project is read only
/// when these are not linked or committed either.
pub fn companions(spec: &ViewSpec, store: &Path) -> Vec<PathBuf> {
    use crate::rules::views::ViewFormat;
    let mut out = Vec::new();
    match &spec.format {
        ViewFormat::Sqlite { .. } => {
            out.extend(["-wal", "-journal"].map(|suffix| beside(store, suffix)));
        }
        ViewFormat::Markdown(md) => {
            if let Some(i) = &md.input {
                out.push(project::sidecar_path(&i.file, store, ""));
            }
        }
        _ => {}
    }
    out.retain(|p| std::fs::symlink_metadata(p).is_ok());
    out
}

/// The stamp a store's views were made at: the file's and its WAL's size, mtime and identity, the rule
/// (a changed query makes them again), the files the project is read from (sidecars, lookup stores and
/// the files beside them) and, where a project is matched against them, the known repos.
fn stamp_of(
    spec: &ViewSpec,
    store: &Path,
    known: &[PathBuf],
    vouched: &[(String, PathBuf)],
) -> std::io::Result<String> {
    use crate::rules::views::{Naming, ProjectSource, ValueFrom};
    if std::fs::symlink_metadata(store).is_err() {
        return Err(std::io::Error::other("gone"));
    }
    let main = file_stamp(store);
    let rule = crate::rules::views::HashAlgo::Sha256.hex(&format!("{spec:?}"));
    let uses_known = spec.project.iter().any(|p| {
        matches!(
            p,
            ProjectSource::Value {
                naming: Naming::Hash(_) | Naming::Slug(_),
                ..
            }
        )
    });
    let known = if uses_known {
        let mut text: Vec<String> = known.iter().map(|p| p.to_string_lossy().into()).collect();
        text.extend(vouched.iter().map(|(s, p)| format!("{s}={}", p.display())));
        crate::rules::views::HashAlgo::Sha256.hex(&text.join("\n"))[..16].to_string()
    } else {
        String::new()
    };
    // Sidecar files the project, id or parent is read from (those named without the session id),
    // lookup stores and the files beside them, and a Markdown log's input log.
    let mut files: Vec<PathBuf> = Vec::new();
    if let crate::rules::views::ViewFormat::Markdown(md) = &spec.format {
        if let Some(i) = &md.input {
            files.push(project::sidecar_path(&i.file, store, ""));
        }
    }
    let dir = match &spec.format {
        crate::rules::views::ViewFormat::JsonDir { messages } => read::dir_stamp(messages, store),
        _ => String::new(),
    };
    files.extend(spec.not_beside.iter().map(|n| store.with_file_name(n)));
    for p in spec.project.iter().chain(&spec.id).chain(&spec.parent) {
        match p {
            ProjectSource::Value {
                from: ValueFrom::Sidecar(t),
                ..
            } if !project::per_session(t) => files.push(project::sidecar_path(t, store, "")),
            ProjectSource::Value {
                from: ValueFrom::Lookup(l, side),
                ..
            } => {
                for db in project::expand(&l.stores, store) {
                    if let Some(side) = side.as_deref().filter(|s| !project::per_session(s)) {
                        files.push(project::sidecar_path(side, &db, ""));
                    }
                    files.push(db);
                }
            }
            _ => {}
        }
    }
    let others: Vec<String> = files.iter().map(|f| file_stamp(f)).collect();
    let others = crate::rules::views::HashAlgo::Sha256.hex(&others.join("\n"));
    Ok(format!(
        "v{VIEW_VERSION} {main} rule={} known={known} others={} dir={dir}",
        &rule[..16],
        &others[..16]
    ))
}

/// `[stores.slug_repos]`, each repo's path expanded.
fn vouched_slugs(cx: &Context) -> Vec<(String, PathBuf)> {
    cx.store_settings()
        .slug_repos
        .iter()
        .map(|(slug, repo)| (slug.clone(), cx.config_path_value(repo)))
        .collect()
}

/// A file name for a session id: the id itself when it is plain, else a hash of it.
fn file_name(id: &str) -> String {
    // `s-` names are the hashed ones: a plain id never takes one.
    let plain = !id.is_empty()
        && id.len() <= 100
        && !id.starts_with('.')
        && !id.starts_with("s-")
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain && id != "index" {
        format!("{id}.jsonl")
    } else {
        let h = crate::rules::views::HashAlgo::Sha256.hex(id);
        format!("s-{}.jsonl", &h[..24])
    }
}

fn load_index(dir: &Path) -> Index {
    std::fs::read(dir.join(INDEX))
        .ok()
        .filter(|b| b.len() as u64 <= INDEX_CAP)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The views of one store file (`rel`: its path relative to its root), made again when the store
/// changed since the last read.
/// `by_path`: the rule set's `subagent.paths` glob the store file's path matches, if one does (every
/// session it holds is then a subagent's).
pub fn views_of(
    cx: &Context,
    (app, spec, by_path): (&str, &ViewSpec, Option<&str>),
    store: &Path,
    rel: &str,
    known: &[PathBuf],
) -> StoreViews {
    let dir = store_dir(cx, app, store);
    let index = load_index(&dir);
    let vouched = vouched_slugs(cx);
    let stamp = match stamp_of(spec, store, known, &vouched) {
        Ok(s) => format!("{s} subagent={}", by_path.unwrap_or("")),
        Err(e) => {
            return StoreViews {
                files: Vec::new(),
                errors: vec![(false, format!("{}: {e}", store.display()))],
            }
        }
    };
    if index.stamp == stamp && index.store == store.to_string_lossy() {
        return index.views(&dir, None);
    }
    if index.failed.as_ref().is_some_and(|(at, _)| *at == stamp) {
        return index.views(&dir, None);
    }
    // By id: a store of many sessions asks once for each.
    let last_read: std::collections::HashMap<&str, &Indexed> =
        index.sessions.iter().map(|s| (s.id.as_str(), s)).collect();
    let unchanged = |id: &str, updated: Option<&str>| {
        updated.is_some()
            && last_read
                .get(id)
                .is_some_and(|s| s.updated.as_deref() == updated && dir.join(&s.file).is_file())
    };
    STORES_READ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch = cx.almanac_home.join("state/tmp");
    let mut lookups_next = project::LookupCache::default();
    let (lookups, retry) = project::lookups(
        &spec.project,
        store,
        &scratch,
        &index.lookups,
        &mut lookups_next,
    );
    let (parent_lookups, parent_retry) = project::lookups(
        &spec.parent,
        store,
        &scratch,
        &index.lookups,
        &mut lookups_next,
    );
    let retry = retry || parent_retry;
    let made = Made {
        app,
        spec,
        store,
        rel,
        known,
        vouched: &vouched,
        lookups: &lookups,
        parent_lookups: &parent_lookups,
        by_path,
    };
    let mut written = Written {
        next: Index {
            store: store.to_string_lossy().into_owned(),
            // A lookup store was being written: read the store again on the next sweep.
            stamp: match retry {
                true => format!("{stamp} retry"),
                false => stamp.clone(),
            },
            lookups: lookups_next,
            ..Index::default()
        },
        error: None,
        ids: std::collections::HashSet::new(),
    };
    if let Err(e) = crate::util::atomic::ensure_private_dir(&dir) {
        let why = format!("{}: almanac's own disk: {e}", dir.display());
        return index.views(&dir, Some((true, why)));
    }
    // Each session is written as it is read: the store is never held whole.
    let read = read::read_store(spec, &scratch, store, rel, &unchanged, &mut |s| {
        if matches!(s.messages, Messages::Read(_)) {
            SESSIONS_QUERIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        made.write_one(&dir, s, &mut written);
    });
    if let Err(e) = read {
        return index.after_failed_read(&dir, (store, stamp), &written.next, e);
    }
    let Written { next, error, .. } = written;
    if let Some(e) = error {
        // A view could not be written (almanac's own disk): the last read's stay, read again next time.
        return index.views(&dir, Some((true, e)));
    }
    let now: std::collections::HashSet<&str> =
        next.sessions.iter().map(|s| s.file.as_str()).collect();
    for old in &index.sessions {
        if !now.contains(old.file.as_str()) {
            let _ = std::fs::remove_file(dir.join(&old.file));
        }
    }
    let error = crate::util::atomic::write_json_atomic(&dir.join(INDEX), &next)
        .err()
        .map(|e| {
            (
                true,
                format!("{}: almanac's own disk: {e}", dir.join(INDEX).display()),
            )
        });
    next.views(&dir, error)
}

impl Index {
    /// The views after a read that failed: the last read's stay (nothing is lost; a view this read
    /// rewrote holds the newer messages). A store at fault is remembered and not read again until it
    /// changes; one caught being written, or one almanac's own disk failed, is read again next sweep.
    fn after_failed_read(
        self,
        dir: &Path,
        (store, stamp): (&Path, String),
        wrote: &Index,
        e: read::ReadError,
    ) -> StoreViews {
        if e.transient() {
            return self.views(dir, Some((true, e.to_string())));
        }
        // Views this read wrote for sessions the last one did not have are in no index: removed.
        let kept: std::collections::HashSet<&str> =
            self.sessions.iter().map(|s| s.file.as_str()).collect();
        for new in &wrote.sessions {
            if !kept.contains(new.file.as_str()) {
                let _ = std::fs::remove_file(dir.join(&new.file));
            }
        }
        let failed = Index {
            store: store.to_string_lossy().into_owned(),
            failed: Some((stamp, e.to_string())),
            ..self
        };
        let _ = crate::util::atomic::write_json_atomic(&dir.join(INDEX), &failed);
        failed.views(dir, None)
    }

    /// The views this index lists that are there, and why the store or its sessions could not be read:
    /// `now` (this read's), else the failure it remembers; then each session refused for a bound.
    fn views(&self, dir: &Path, now: Option<(bool, String)>) -> StoreViews {
        let files = self
            .sessions
            .iter()
            .map(|s| dir.join(&s.file))
            .filter(|p| p.is_file())
            .collect();
        let remembered = self.failed.as_ref().map(|(_, why)| (false, why.clone()));
        let mut errors: Vec<(bool, String)> = now.or(remembered).into_iter().collect();
        errors.extend(
            self.refused
                .iter()
                .map(|(id, why)| (false, format!("{}: session {id}: {why}", self.store))),
        );
        StoreViews { files, errors }
    }
}

/// Forgets why `store` could not be read, for every app that read it: its remembered failure and the
/// sessions it refused for a bound. The store is found by what each index names, as the same file
/// (the path typed may reach it another way than the walk did). What was forgotten, in words (empty
/// when nothing was remembered).
pub fn forget(cx: &Context, store: &Path) -> Result<Vec<String>, String> {
    let id_of = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| crate::platform::file_id(p, &m))
    };
    let wanted = id_of(store);
    let mut forgot = Vec::new();
    let Ok(apps) = std::fs::read_dir(views_root(cx)) else {
        return Ok(forgot);
    };
    for app in apps.flatten() {
        let name = app.file_name().to_string_lossy().into_owned();
        for dir in std::fs::read_dir(app.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = dir.path();
            let mut index = load_index(&dir);
            let named = Path::new(&index.store);
            let same = named == store || (wanted.is_some() && id_of(named) == wanted);
            if !same || (index.failed.is_none() && index.refused.is_empty()) {
                continue;
            }
            if let Some((_, why)) = index.failed.take() {
                forgot.push(format!("{name}: {why}"));
            }
            for (id, why) in index.refused.drain(..) {
                forgot.push(format!("{name}: session {id}: {why}"));
            }
            index.stamp.clear();
            crate::util::atomic::write_json_atomic(&dir.join(INDEX), &index)
                .map_err(|e| format!("{}: {e}", dir.join(INDEX).display()))?;
        }
    }
    Ok(forgot)
}

/// A store that could not be read, or was not: `reason` (`read-failed`, or a store inside a project
/// that git tracks or that is reached through a link); `busy` when it is read again on the next sweep
/// with nothing lost (it changed while copied, SQLite found it locked or half-written, almanac's own
/// disk failed the copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub app: String,
    pub store: PathBuf,
    pub reason: crate::reason::Reason,
    pub busy: bool,
    pub message: String,
}

/// Store files read (copied, parsed) and SQLite sessions queried for their messages in this process:
/// what a sweep of unchanged stores must keep at zero.
static STORES_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SESSIONS_QUERIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// (store files read, sessions whose messages were read) since the last call.
pub fn take_reads() -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    (
        STORES_READ.swap(0, Relaxed),
        SESSIONS_QUERIED.swap(0, Relaxed),
    )
}

static ERRORS: std::sync::Mutex<Vec<StoreError>> = std::sync::Mutex::new(Vec::new());

/// Remembers why a store could not be read, for the sweep's report.
pub fn note_error(e: StoreError) {
    if let Ok(mut v) = ERRORS.lock() {
        if !v.contains(&e) {
            v.push(e);
        }
    }
}

/// Why stores could not be read in this process, so far (taken: a second call gives only newer ones).
pub fn take_errors() -> Vec<StoreError> {
    ERRORS
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default()
}

/// A view as a found transcript (its path relative to the views root is its `rel`).
pub fn found(app: &std::sync::Arc<str>, path: PathBuf) -> Option<super::FoundFile> {
    let meta = std::fs::metadata(&path).ok()?;
    let text_len = path.to_string_lossy().len();
    let name_len = path.file_name()?.to_string_lossy().len();
    Some(super::FoundFile {
        app: app.clone(),
        rel_offset: text_len - name_len,
        size: meta.len(),
        mtime: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
        file_id: crate::platform::file_id(&path, &meta),
        path,
    })
}

/// Why a view's session could not be placed (its header's `unplaced`), read from its first line.
pub fn unplaced(view: &Path) -> Option<String> {
    use std::io::BufRead;
    let f = crate::util::untrusted::open_regular(view).ok()?;
    let mut line = Vec::new();
    std::io::Read::take(std::io::BufReader::new(f), INDEX_CAP)
        .read_until(b'\n', &mut line)
        .ok()?;
    let v: Value = serde_json::from_slice(&line).ok()?;
    v[VIEW_HEADER]["unplaced"].as_str().map(str::to_string)
}

/// Whether `path` is a view (under `$ALMANAC_HOME/state/views/`).
pub fn is_view(cx: &Context, path: &Path) -> bool {
    path.starts_with(views_root(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_line_starts_with_its_id() {
        let mut out = Vec::new();
        write::message_line(
            &mut out,
            "m\"1",
            &serde_json::json!({"role": "user", "almanac_id": "x"}),
        );
        write::message_line(&mut out, "m2", &serde_json::json!({}));
        write::message_line(&mut out, "m3", &serde_json::json!("text"));
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], r#"{"almanac_id":"m\"1","role":"user"}"#);
        assert_eq!(lines[1], r#"{"almanac_id":"m2"}"#);
        assert_eq!(lines[2], r#"{"almanac_id":"m3","value":"text"}"#);
    }

    #[test]
    fn odd_session_ids_get_hashed_file_names() {
        assert_eq!(file_name("ses_abc-1.2"), "ses_abc-1.2.jsonl");
        assert!(file_name("../x").starts_with("s-"));
        assert!(file_name("index").starts_with("s-"));
        assert_ne!(file_name("a/b"), file_name("a\\b"));
    }
}
