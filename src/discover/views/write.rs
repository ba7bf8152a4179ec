//! Writing a store's views: each session's header (its id, project, parent) and messages, each with
//! its id first, written only when its bytes change, and counted against the bounds of one session as
//! the view is made.

use super::read::{self, Messages, SessionRead};
use super::{file_name, project, Index, Indexed, ViewSpec, VIEW_HEADER, VIEW_ID, VIEW_VERSION};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a view's header says, and the store facts it is made from.
pub(super) struct Made<'a> {
    pub(super) app: &'a str,
    pub(super) spec: &'a ViewSpec,
    pub(super) store: &'a Path,
    pub(super) rel: &'a str,
    pub(super) known: &'a [PathBuf],
    pub(super) vouched: &'a [(String, PathBuf)],
    pub(super) lookups: &'a [Option<project::Listed>],
    /// The same, for the `session.parent` sources.
    pub(super) parent_lookups: &'a [Option<project::Listed>],
    /// The `subagent.paths` glob the store file matches: its sessions are subagents'.
    pub(super) by_path: Option<&'a str>,
}

/// What writing a store's views gave so far: the index they are written into, and what could not be
/// written (almanac's own disk: tried again next time).
pub(super) struct Written {
    pub(super) next: Index,
    pub(super) error: Option<String>,
    /// The session ids written or refused so far.
    pub(super) ids: std::collections::HashSet<String>,
}

impl Made<'_> {
    fn header(&self, s: &SessionRead, messages: &[Value]) -> (Value, Option<String>) {
        let input = project::Input {
            store: self.store,
            rel: self.rel,
            id: &s.id,
            session: &s.session,
            messages,
            known: self.known,
            vouched: self.vouched,
            lookups: self.lookups,
        };
        let parent = project::first_value(
            &self.spec.parent,
            &project::Input {
                lookups: self.parent_lookups,
                ..input
            },
        );
        let (project, from, unplaced) = match project::derive(&self.spec.project, &input) {
            Ok((dir, from)) => (Some(dir), Some(from), None),
            Err(why) => (None, None, Some(why)),
        };
        let header = serde_json::json!({
            VIEW_HEADER: {
                "version": VIEW_VERSION,
                "app": self.app,
                "format": self.spec.format.name(),
                "store": self.store.to_string_lossy(),
                "session_id": s.id,
                "project": project,
                "project_from": from,
                "unplaced": unplaced,
                "parent": parent,
                "subagent": parent.is_some() || self.by_path.is_some(),
                "subagent_path": self.by_path,
            },
            "session": s.session,
        });
        (header, project)
    }

    /// Writes one session's view into `dir` (a session the read did not query again keeps its
    /// messages) and indexes it; a session past a bound is indexed as refused, with no view.
    pub(super) fn write_one(&self, dir: &Path, mut s: SessionRead, out: &mut Written) {
        // A store that lists one id twice: the first is the session.
        if !out.ids.insert(s.id.clone()) {
            return;
        }
        let file = file_name(&s.id);
        let path = dir.join(&file);
        let messages = match std::mem::replace(&mut s.messages, Messages::Unchanged) {
            Messages::Read(m) => m,
            Messages::Unchanged => match old_messages(&path) {
                Some(m) => m,
                None => return,
            },
            Messages::Refused(why) => {
                out.next.refused.push((s.id, why));
                return;
            }
        };
        let (header, project) = self.header(&s, &messages);
        let bytes = match self.bytes(&header, &messages) {
            Ok(b) => b,
            Err(why) => {
                out.next.refused.push((s.id, why));
                return;
            }
        };
        drop(messages);
        if let Err(e) = write_if_changed(&path, &bytes) {
            out.error = Some(format!(
                "{}: writing the view failed on almanac's own disk: {e}",
                path.display()
            ));
            return;
        }
        out.next.sessions.push(Indexed {
            id: s.id,
            file,
            updated: s.updated,
            project,
        });
    }

    /// The view's bytes: the header, then each message with its id first; the bound of one session
    /// that its messages pass, if they do.
    fn bytes(&self, header: &Value, messages: &[Value]) -> Result<Vec<u8>, String> {
        let mut out = serde_json::to_vec(header).unwrap_or_default();
        out.push(b'\n');
        let mut bounds = read::Bounds::default();
        let mut seen: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
        for m in messages {
            let base = self
                .spec
                .message_id
                .as_ref()
                .and_then(|p| read::text_at(p, m))
                .unwrap_or_else(|| {
                    let h = crate::rules::views::HashAlgo::Sha256.hex(&m.to_string());
                    format!("c-{}", &h[..16])
                });
            if self
                .spec
                .drop_message_ids
                .as_ref()
                .is_some_and(|re| re.is_match(&base))
            {
                continue;
            }
            let n = seen.entry(base.clone()).or_insert(0);
            *n += 1;
            let id = if *n == 1 { base } else { format!("{base}~{n}") };
            let before = out.len();
            message_line(&mut out, &id, m);
            bounds.add((out.len() - before) as u64)?;
        }
        Ok(out)
    }
}

/// `{"almanac_id":"<id>", ...the message's members}` (a message that is not an object is `value`).
pub(super) fn message_line(out: &mut Vec<u8>, id: &str, m: &Value) {
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(VIEW_ID.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(serde_json::to_string(id).unwrap_or_default().as_bytes());
    let rest = match m {
        Value::Object(o) => {
            let mut o = o.clone();
            o.remove(VIEW_ID);
            serde_json::to_vec(&Value::Object(o)).unwrap_or_default()
        }
        other => serde_json::to_vec(&serde_json::json!({ "value": other })).unwrap_or_default(),
    };
    if rest.len() > 2 {
        out.push(b',');
        out.extend_from_slice(&rest[1..]);
    } else {
        out.push(b'}');
    }
    out.push(b'\n');
}

/// Writes `bytes` to `path` unless it already holds them (a view kept byte for byte keeps its size,
/// mtime and identity, so the caches after it see nothing new).
fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Ok(m) = std::fs::metadata(path) {
        if m.len() == bytes.len() as u64 && std::fs::read(path).is_ok_and(|old| old == bytes) {
            return Ok(());
        }
    }
    crate::util::atomic::write_atomic(path, bytes)
}

/// The messages of a view as written (for a session a sqlite read did not query again).
fn old_messages(path: &Path) -> Option<Vec<Value>> {
    let bytes = std::fs::read(path).ok()?;
    let mut out = Vec::new();
    for line in bytes.split(|b| *b == b'\n').skip(1) {
        if line.is_empty() {
            continue;
        }
        let mut v: Value = serde_json::from_slice(line).ok()?;
        if let Value::Object(o) = &mut v {
            o.remove(VIEW_ID);
        }
        out.push(v);
    }
    Some(out)
}
