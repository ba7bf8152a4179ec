//! What discovery learnt about one transcript: its head's fields and verdicts, and the repo it maps to.
//! Shared by the sweep and the commands that explain or reset one transcript.

use super::head::HeadScan;
use super::repo::RepoMapper;
use super::{cache, read_head, FoundFile};
use crate::rules::RuleSet;

pub struct Examined {
    /// The full head scan when the head was read now (None when it came from the discovery cache).
    pub scan: Option<Box<HeadScan>>,
    /// Why the head could not be read, or the exclude_when test that held (`error`, `excluded`): rare,
    /// so boxed once for both (100k of these are held at once; 72 bytes each).
    note: Option<Box<Note>>,
    pub session_id: Option<Box<str>>,
    /// Shared with the other sessions of the same cwd when it came from the discovery cache.
    pub cwd: Option<std::sync::Arc<str>>,
    /// Shared by every session of the repo.
    pub repo: Option<std::sync::Arc<std::path::Path>>,
    pub subagent: bool,
}

const _: () = assert!(std::mem::size_of::<Examined>() == 72);

/// What only a few heads have to say.
enum Note {
    Error(Box<str>),
    Excluded(Box<str>),
}

impl Examined {
    /// Nothing learnt yet: a walked file waiting for its head.
    pub fn unread() -> Examined {
        Examined {
            scan: None,
            note: None,
            session_id: None,
            cwd: None,
            repo: None,
            subagent: false,
        }
    }

    /// Why the head could not be read, if it could not.
    pub fn error(&self) -> Option<&str> {
        match self.note.as_deref() {
            Some(Note::Error(e)) => Some(e),
            _ => None,
        }
    }

    /// The exclude_when test that held, if any.
    pub fn excluded(&self) -> Option<&str> {
        match self.note.as_deref() {
            Some(Note::Excluded(e)) => Some(e),
            _ => None,
        }
    }

    fn excluded_note(why: Option<Box<str>>) -> Option<Box<Note>> {
        why.map(|w| Box::new(Note::Excluded(w)))
    }

    pub fn from_head(scan: Result<HeadScan, String>) -> Examined {
        match scan {
            Ok(h) => Examined {
                session_id: h.get("session_id").map(Box::from),
                cwd: h.get("cwd").map(std::sync::Arc::from),
                subagent: h.subagent.is_some(),
                note: Self::excluded_note(h.excluded.as_ref().map(|v| v.reason.as_str().into())),
                scan: Some(Box::new(h)),
                repo: None,
            },
            Err(e) => Examined {
                scan: None,
                note: Some(Box::new(Note::Error(e.into()))),
                session_id: None,
                cwd: None,
                repo: None,
                subagent: false,
            },
        }
    }

    pub fn from_cache(c: cache::Cached) -> Examined {
        Examined {
            scan: None,
            note: Self::excluded_note(c.excluded),
            session_id: c.session_id,
            cwd: c.cwd,
            repo: None,
            subagent: c.subagent,
        }
    }
}

/// Reads one transcript's head and maps its repo.
pub fn examine(rule: &RuleSet, file: &FoundFile, mapper: &mut RepoMapper) -> Examined {
    let mut ex = Examined::from_head(read_head(rule, file).map_err(|e| e.to_string()));
    ex.repo = ex.cwd.as_deref().and_then(|c| mapper.map(c));
    ex
}
