//! Maps a session's cwd to the repo whose wiki it belongs to: the nearest ancestor holding a `.almanac/`
//! directory, so a nested repo wins over its parent. The global `ALMANAC_HOME` is never a repo wiki.

use crate::util::paths::normalize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct RepoMapper {
    almanac_home: PathBuf,
    almanac_home_canonical: Option<PathBuf>,
    cache: HashMap<PathBuf, Option<Arc<Path>>>,
    /// By the cwd as the transcript wrote it: most sessions share a few cwds, and this lookup needs
    /// neither normalizing nor hashing path components.
    by_text: HashMap<Box<str>, Option<Arc<Path>>>,
}

impl RepoMapper {
    pub fn new(almanac_home: &Path) -> Self {
        RepoMapper {
            almanac_home: normalize(almanac_home),
            almanac_home_canonical: almanac_home.canonicalize().ok(),
            cache: HashMap::new(),
            by_text: HashMap::new(),
        }
    }

    /// The repo root for `cwd`, or None when cwd is relative or no ancestor has `.almanac/`. Shared
    /// by every session of the repo.
    pub fn map(&mut self, cwd: &str) -> Option<Arc<Path>> {
        if let Some(hit) = self.by_text.get(cwd) {
            return hit.clone();
        }
        let path = Path::new(cwd);
        let found = if path.is_absolute() {
            self.find(&normalize(path))
        } else {
            None
        };
        self.by_text.insert(cwd.into(), found.clone());
        found
    }

    fn find(&mut self, dir: &Path) -> Option<Arc<Path>> {
        if let Some(hit) = self.cache.get(dir) {
            return hit.clone();
        }
        let wiki = dir.join(".almanac");
        let found = if wiki.is_dir() && !self.is_global(&wiki) && owned_by_us(&wiki) {
            Some(Arc::from(dir))
        } else {
            match dir.parent() {
                Some(parent) => self.find(parent),
                None => None,
            }
        };
        self.cache.insert(dir.to_path_buf(), found.clone());
        found
    }

    fn is_global(&self, wiki: &Path) -> bool {
        wiki == self.almanac_home
            || self
                .almanac_home_canonical
                .as_ref()
                .is_some_and(|c| wiki.canonicalize().ok().as_ref() == Some(c))
    }
}

/// A transcript names its own cwd, so it could point anywhere: a `.almanac/` that belongs to another user
/// is never written to (it is not a repo of ours).
fn owned_by_us(wiki: &Path) -> bool {
    std::fs::metadata(wiki).is_ok_and(|m| crate::platform::foreign_owner(&m).is_none())
}
