//! The discovery cache, `$ALMANAC_HOME/state/discovery-cache.tsv`: what each transcript's head said
//! (app, session id, cwd, subagent and exclusion verdicts), keyed by path and trusted only while the
//! file's size, mtime, inode and device are unchanged and the rule files are the same. It is only a
//! cache: a missing, corrupt or stale file changes no result, only how much is read. The repo is always
//! mapped afresh (a repo may have been `almanac init`ed since).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const HEADER: &str = "# almanac discovery cache v1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i128,
    pub dev: u64,
    pub ino: u64,
}

/// What the cache remembers of one unchanged file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub session_id: Option<Box<str>>,
    /// Shared with every other session of the same cwd.
    pub cwd: Option<std::sync::Arc<str>>,
    pub subagent: bool,
    pub excluded: Option<Box<str>>,
}

/// In memory, entries are keyed by (device, inode) and carry a hash of their path: no path strings, and
/// apps and cwds (shared by many sessions) stored once and named by index, an exclusion (rare) kept
/// apart: 48 bytes a file beside its session id. The mtime is kept in an `i64` of nanoseconds (years
/// 1678 to 2262); a file outside that range is simply not cached.
struct Slot {
    path_hash: u64,
    size: u64,
    mtime_ns: i64,
    session_id: Option<Box<str>>,
    /// Index into `Cache::cwds`, or `NO_CWD`.
    cwd: u32,
    /// Index into `Cache::apps`.
    app: u8,
    subagent: bool,
    /// Moved out by `take`.
    taken: bool,
}

const NO_CWD: u32 = u32::MAX;

/// One file's verdicts as the sweep holds them, borrowed for writing.
pub struct Entry<'a> {
    pub path: &'a Path,
    pub app: &'a str,
    pub stamp: Stamp,
    pub session_id: Option<&'a str>,
    pub cwd: Option<&'a str>,
    pub subagent: bool,
    pub excluded: Option<&'a str>,
}

impl<'a> Entry<'a> {
    /// What the head of `file` said, to be remembered.
    pub fn of(file: &'a super::FoundFile, ex: &'a super::Examined) -> Entry<'a> {
        Entry {
            path: &file.path,
            app: &file.app,
            stamp: file.stamp(),
            session_id: ex.session_id.as_deref(),
            cwd: ex.cwd.as_deref(),
            subagent: ex.subagent,
            excluded: ex.excluded(),
        }
    }
}

#[derive(Default)]
pub struct Cache {
    fingerprint: String,
    /// Sorted (device, inode) keys, looked up by binary search (half the memory of a hash map; apart
    /// from the slots, so the search stays in a small array), and the slot of each.
    keys: Vec<(u64, u64)>,
    slots: Vec<Slot>,
    apps: Vec<std::sync::Arc<str>>,
    cwds: Vec<std::sync::Arc<str>>,
    /// The exclusion verdict of the few files that have one, by key.
    excluded: HashMap<(u64, u64), Box<str>>,
}

/// Over the path's bytes (`Path`'s own `Hash` walks its components: several times slower, and a sweep
/// hashes every path twice).
pub(super) fn path_hash(p: &Path) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(p.as_os_str().as_encoded_bytes());
    h.finish()
}

pub fn path(almanac_home: &Path) -> PathBuf {
    almanac_home.join("state").join("discovery-cache.tsv")
}

fn clean(s: &str) -> Option<&str> {
    (!s.contains(['\t', '\n', '\r'])).then_some(s)
}

impl Cache {
    /// Loads the cache written with the same rule `fingerprint`; anything else yields an empty cache.
    pub fn load(file: &Path, fingerprint: &str) -> Cache {
        let mut cache = Cache {
            fingerprint: fingerprint.to_string(),
            ..Cache::default()
        };
        // Read line by line: the whole file as one string would stay behind in this thread's arena.
        let Ok(f) = std::fs::File::open(file) else {
            return cache;
        };
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(f)).map_while(Result::ok);
        if lines.next().as_deref() != Some(HEADER) || lines.next().as_deref() != Some(fingerprint) {
            return cache;
        }
        // Each line in walk order (the line number breaks ties below), its exclusion apart by line.
        let mut entries: Vec<((u64, u64), u32, Slot)> = Vec::new();
        let mut excluded: HashMap<u32, Box<str>> = HashMap::new();
        let mut cwds: HashMap<String, u32> = HashMap::new();
        for (n, line) in (0u32..).zip(lines) {
            let line: &str = &line;
            let mut f = line.split('\t');
            let mut next = || f.next();
            let (
                Some(app),
                Some(path),
                Some(size),
                Some(mtime),
                Some(dev),
                Some(ino),
                Some(sid),
                Some(cwd),
                Some(sub),
                Some(exc),
            ) = (
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
            )
            else {
                continue;
            };
            let (Ok(size), Ok(mtime_ns), Ok(dev), Ok(ino)) =
                (size.parse(), mtime.parse::<i64>(), dev.parse(), ino.parse())
            else {
                continue;
            };
            let app = match cache.apps.iter().position(|a| &**a == app) {
                Some(i) => i,
                None => {
                    cache.apps.push(std::sync::Arc::from(app));
                    cache.apps.len() - 1
                }
            };
            let Ok(app) = u8::try_from(app) else {
                continue; // more than 256 apps: the rest are read, not cached
            };
            let cwd = match cwd {
                "" => NO_CWD,
                c => match cwds.get(c) {
                    Some(&i) => i,
                    None => {
                        let i = cache.cwds.len() as u32;
                        cache.cwds.push(std::sync::Arc::from(c));
                        cwds.insert(c.to_string(), i);
                        i
                    }
                },
            };
            if !exc.is_empty() {
                excluded.insert(n, exc.into());
            }
            entries.push((
                (dev, ino),
                n,
                Slot {
                    path_hash: path_hash(Path::new(path)),
                    size,
                    mtime_ns,
                    session_id: (!sid.is_empty()).then(|| sid.into()),
                    cwd,
                    app,
                    subagent: sub == "1",
                    taken: false,
                },
            ));
        }
        drop(cwds);
        // A (device, inode) listed twice keeps its last line. Unstable, so in place.
        entries.sort_unstable_by_key(|(k, n, _)| (*k, std::cmp::Reverse(*n)));
        entries.dedup_by_key(|(k, _, _)| *k);
        // An exclusion counts only from the line that was kept.
        cache.excluded = entries
            .iter()
            .filter_map(|(k, n, _)| Some((*k, excluded.remove(n)?)))
            .collect();
        cache.keys = entries.iter().map(|(k, _, _)| *k).collect();
        cache.slots = entries.into_iter().map(|(_, _, s)| s).collect();
        // Collected where the entries were: what they took beyond the slots is given back.
        cache.slots.shrink_to_fit();
        cache
    }

    /// Where the cache remembers `path` as it is now (app, size, mtime, inode and path unchanged), for
    /// `take`.
    pub fn find(&self, path: &Path, app: &str, stamp: &Stamp) -> Option<usize> {
        let i = self.keys.binary_search(&(stamp.dev, stamp.ino)).ok()?;
        let s = &self.slots[i];
        let fits = &*self.apps[usize::from(s.app)] == app
            && s.size == stamp.size
            && i128::from(s.mtime_ns) == stamp.mtime_ns
            && s.path_hash == path_hash(path);
        fits.then_some(i)
    }

    /// What slot `i` (from `find`) remembers, moved out: the strings are not held twice while a sweep
    /// holds every head. A slot is handed out once: taken again, it gives None.
    pub fn take(&mut self, i: usize) -> Option<Cached> {
        let s = &mut self.slots[i];
        if std::mem::replace(&mut s.taken, true) {
            return None;
        }
        Some(Cached {
            session_id: s.session_id.take(),
            cwd: self.cwds.get(s.cwd as usize).cloned(),
            subagent: s.subagent,
            excluded: self.excluded.remove(&self.keys[i]),
        })
    }

    /// `find` and `take` in one (the tests' way in).
    #[cfg(test)]
    pub fn get(&mut self, path: &Path, app: &str, stamp: &Stamp) -> Option<Cached> {
        self.find(path, app, stamp).and_then(|i| self.take(i))
    }

    /// Writes the entries of this sweep (files no longer seen are dropped), streamed. Failure is not an
    /// error: the next sweep just reads more.
    pub fn save<'a>(file: &Path, fingerprint: &str, entries: impl Iterator<Item = Entry<'a>>) {
        let _ = crate::util::atomic::write_atomic_with(file, |w| {
            writeln!(w, "{HEADER}")?;
            writeln!(w, "{fingerprint}")?;
            for e in entries {
                let fields = (
                    clean(e.app),
                    e.path.to_str().and_then(clean),
                    clean(e.session_id.unwrap_or("")),
                    clean(e.cwd.unwrap_or("")),
                    clean(e.excluded.unwrap_or("")),
                );
                // Paths or values with tabs or newlines are simply not cached.
                let (Some(app), Some(path), Some(sid), Some(cwd), Some(exc)) = fields else {
                    continue;
                };
                writeln!(
                    w,
                    "{app}\t{path}\t{}\t{}\t{}\t{}\t{sid}\t{cwd}\t{}\t{exc}",
                    e.stamp.size,
                    e.stamp.mtime_ns,
                    e.stamp.dev,
                    e.stamp.ino,
                    if e.subagent { "1" } else { "0" }
                )?;
            }
            Ok(())
        });
    }

    /// How many files it remembers.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_invalidation() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.tsv");
        let stamp = Stamp {
            size: 10,
            mtime_ns: 123,
            dev: 1,
            ino: 2,
        };
        let c = Cached {
            session_id: Some("s".into()),
            cwd: Some("/r".into()),
            subagent: false,
            excluded: None,
        };
        let entry = |p: &'static str| Entry {
            path: Path::new(p),
            app: "claude",
            stamp: stamp.clone(),
            session_id: Some("s"),
            cwd: Some("/r"),
            subagent: false,
            excluded: None,
        };
        Cache::save(
            &f,
            "rules x",
            [entry("/t/a.jsonl"), entry("/t/b\tc.jsonl")].into_iter(),
        );
        let mut cache = Cache::load(&f, "rules x");
        let i = cache
            .find(Path::new("/t/a.jsonl"), "claude", &stamp)
            .unwrap();
        assert_eq!(cache.take(i), Some(c.clone()));
        assert_eq!(cache.take(i), None, "taken twice");
        assert!(
            cache
                .get(Path::new("/t/a.jsonl"), "claude", &stamp)
                .is_none(),
            "taken once"
        );
        let mut cache = Cache::load(&f, "rules x");
        assert!(
            cache
                .get(Path::new("/t/other.jsonl"), "claude", &stamp)
                .is_none(),
            "same inode, other path"
        );
        assert!(cache
            .get(Path::new("/t/b\tc.jsonl"), "claude", &stamp)
            .is_none());
        let grown = Stamp {
            size: 11,
            ..stamp.clone()
        };
        assert!(cache
            .get(Path::new("/t/a.jsonl"), "claude", &grown)
            .is_none());
        assert!(Cache::load(&f, "rules y")
            .get(Path::new("/t/a.jsonl"), "claude", &stamp)
            .is_none());
        // One file listed twice (moved between two sweeps' lines): the last line wins.
        Cache::save(
            &f,
            "rules x",
            [entry("/t/old.jsonl"), entry("/t/new.jsonl")].into_iter(),
        );
        let mut cache = Cache::load(&f, "rules x");
        assert_eq!(cache.len(), 1);
        assert!(cache
            .get(Path::new("/t/new.jsonl"), "claude", &stamp)
            .is_some());
        assert!(cache
            .get(Path::new("/t/old.jsonl"), "claude", &stamp)
            .is_none());
        std::fs::write(&f, "garbage\u{0}\n").unwrap();
        assert!(Cache::load(&f, "rules x")
            .get(Path::new("/t/a.jsonl"), "claude", &stamp)
            .is_none());
    }

    /// An exclusion is remembered with its line: a file listed twice keeps the verdict of its last line.
    #[test]
    fn an_exclusion_is_the_kept_lines() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.tsv");
        let stamp = |ino| Stamp {
            size: 10,
            mtime_ns: 123,
            dev: 1,
            ino,
        };
        let entry = |p: &'static str, ino, excluded| Entry {
            path: Path::new(p),
            app: "claude",
            stamp: stamp(ino),
            session_id: Some("s"),
            cwd: None,
            subagent: false,
            excluded,
        };
        let lines = [
            entry("/t/a.jsonl", 2, Some("exclude_when[0] at line 1")),
            entry("/t/a.jsonl", 2, None),
            entry("/t/b.jsonl", 3, None),
            entry("/t/b.jsonl", 3, Some("exclude_when[1] at line 4")),
        ];
        Cache::save(&f, "rules x", lines.into_iter());
        let mut cache = Cache::load(&f, "rules x");
        let a = cache
            .get(Path::new("/t/a.jsonl"), "claude", &stamp(2))
            .unwrap();
        assert_eq!(a.excluded, None);
        let b = cache
            .get(Path::new("/t/b.jsonl"), "claude", &stamp(3))
            .unwrap();
        assert_eq!(b.excluded.as_deref(), Some("exclude_when[1] at line 4"));
        assert_eq!(b.cwd, None);
    }
}
