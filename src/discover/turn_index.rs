//! The turn index, `$ALMANAC_HOME/state/turn-index.jsonl`: per transcript, where its user turns were
//! last counted (byte offset and line of the last complete line read), the counts and the state a
//! later read needs to go on from there (`turns::Checkpoint`). Keyed like the discovery cache by
//! (device, inode) and path, and written with the rule files' fingerprint:
//!
//! - size, mtime, inode and path unchanged: the counts are taken as they are, no byte is read;
//! - the file grew (same inode and path) and the 4 KiB before the checkpoint hash as they did: only
//!   what follows the checkpoint is read;
//! - anything else (replaced, rewritten, rules changed, entry missing or unreadable): counted again from
//!   the start.
//!
//! It is only a cache: deleting it or finding it corrupt changes no count, only how much is read. Lines
//! it cannot parse are skipped. Transcripts are append-only, so the tail check is what stands between a
//! rewrite and a stale count; a rewrite that keeps the size, mtime and inode is not noticed (as by the
//! discovery cache).

use super::FoundFile;
use crate::rules::RuleSet;
use crate::turns::{self, Checkpoint};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// 2: checkpoints remember the first and the latest prompt (an index of 1 is read again once).
const FORMAT: u32 = 2;
/// How many bytes before a checkpoint are compared before a read goes on from it.
const TAIL_BYTES: u64 = 4096;

pub fn path(almanac_home: &Path) -> PathBuf {
    almanac_home.join("state").join("turn-index.jsonl")
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    almanac_turn_index: u32,
    fingerprint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    dev: u64,
    ino: u64,
    path_hash: u64,
    app: String,
    size: u64,
    mtime_ns: i128,
    /// `sha256` of the up to 4 KiB before `checkpoint.offset` (hex in the file); none when the file was
    /// cut short under the reader, so the next read starts over.
    #[serde(with = "tail_hex")]
    tail: Option<[u8; 32]>,
    checkpoint: Checkpoint,
}

/// A transcript's first and latest prompt, or where the index file holds them.
#[derive(Debug, Default)]
pub enum Prompts {
    #[default]
    None,
    /// In the index file (`TurnIndex::prompts`): the first prompt's JSON string at byte `at`, `first`
    /// bytes long (0: none), and `gap` bytes after it the latest's, `last` bytes long. 16 bytes, as a
    /// listing holds one per session.
    Indexed {
        at: u64,
        first: u16,
        gap: u16,
        last: u16,
    },
    /// In the entry on the index file's line at `at`, `len` bytes long, which is parsed to find them.
    Line { at: u64, len: u32 },
    /// Counted now.
    Held(Box<(Option<turns::Prompt>, Option<turns::Prompt>)>),
}

const _: () = assert!(std::mem::size_of::<Prompts>() == 16);

/// One transcript's user turns, and what the index must learn from the count.
#[derive(Debug)]
pub struct Count {
    pub user_turns: u64,
    /// The transcript's first and latest prompt (cut to `turns::CHECKPOINT_PROMPT_BYTES`).
    pub prompts: Prompts,
    pub how: Counted,
    pub bytes_read: u64,
    /// The entry to remember when the file was read (None: the index holds it already).
    pub new: Option<IndexEntry>,
}

#[derive(Default)]
pub struct TurnIndex {
    /// The index file the entries were loaded from, kept open: a save replaces the file by a rename,
    /// and this handle still reads the one loaded.
    file: Option<std::fs::File>,
    apps: Vec<Box<str>>,
    /// Sorted by (device, inode), one per key (the file's last line for it).
    entries: Vec<Slim>,
    /// Entries counted now, by (device, inode): they replace the loaded ones of the same key.
    /// (A list sorted by device and inode: a map of them made beside the list was 36 MB at 100k.)
    fresh: Vec<IndexEntry>,
}

/// How one transcript's count was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Unchanged since the index counted it: nothing read.
    Unchanged,
    /// Grown: read from the checkpoint on.
    Resumed,
    /// Read from the start.
    Whole,
}

impl TurnIndex {
    /// The index written with the same rule `fingerprint`, its entries of `apps` (the rule sets'
    /// ids); anything else is an empty index.
    pub fn load(file: &Path, fingerprint: &str, apps: &[&str]) -> TurnIndex {
        let mut index = TurnIndex {
            apps: apps.iter().map(|a| Box::from(*a)).collect(),
            ..TurnIndex::default()
        };
        let Ok(f) = std::fs::File::open(file) else {
            return index;
        };
        use io::BufRead;
        let mut r = io::BufReader::with_capacity(1 << 20, &f);
        let mut line = Vec::new();
        let header = r
            .read_until(b'\n', &mut line)
            .ok()
            .and_then(|_| serde_json::from_slice::<Header>(&line).ok());
        if !header.is_some_and(|h| h.almanac_turn_index == FORMAT && h.fingerprint == fingerprint) {
            return index;
        }
        // A block of whole lines at a time, each block's lines parsed on every core (at 100k sessions
        // the index is 50 MB); a line that is not an entry is left out.
        const BLOCK: u64 = 1 << 20;
        let mut block_at = line.len() as u64;
        loop {
            let mut block = Vec::with_capacity(BLOCK as usize + 4096);
            if (&mut r).take(BLOCK).read_to_end(&mut block).is_err()
                || r.read_until(b'\n', &mut block).is_err()
                || block.is_empty()
            {
                break;
            }
            let mut lines: Vec<(u64, &[u8])> = Vec::new();
            let mut at = 0;
            for l in block.split(|b| *b == b'\n') {
                lines.push((block_at + at as u64, l));
                at += l.len() + 1;
            }
            block_at += block.len() as u64;
            let parts: Vec<&[(u64, &[u8])]> =
                lines.chunks(lines.len().div_ceil(4).max(1)).collect();
            let apps = &index.apps;
            let parsed = crate::util::par::map(&parts, |part| {
                part.iter()
                    .filter_map(|(at, l)| slim(l, *at, apps))
                    .collect::<Vec<_>>()
            });
            index.entries.extend(parsed.into_iter().flatten());
        }
        drop(r);
        // The last line of a key wins, as it did when each line replaced the one before in a map.
        index
            .entries
            .sort_unstable_by_key(|e| (key(e), std::cmp::Reverse(e.at)));
        index.entries.dedup_by_key(|e| key(e));
        index.entries.shrink_to_fit();
        index.file = Some(f);
        index
    }

    /// The entry on the index file's line at `at`, as it was loaded (None if it cannot be read again).
    fn read_entry(&self, at: u64, len: u32) -> Option<IndexEntry> {
        serde_json::from_slice(&self.read_line(at, len)?).ok()
    }

    fn read_line(&self, at: u64, len: u32) -> Option<Vec<u8>> {
        let mut buf = vec![0; len as usize];
        crate::platform::read_exact_at(self.file.as_ref()?, &mut buf, at).ok()?;
        Some(buf)
    }

    /// Lets go of the entries, keeping what `prompts` reads: the listing's rows know where their
    /// prompts are, and the entries are not needed once counted and saved.
    pub fn keep_only_prompts(&mut self) {
        self.entries = Vec::new();
        self.fresh = Vec::new();
    }

    /// The prompts `p` stands for, read from the index file when they are there (only their JSON
    /// strings, where the load found them).
    pub fn prompts(&self, p: &Prompts) -> (Option<turns::Prompt>, Option<turns::Prompt>) {
        match *p {
            Prompts::None => (None, None),
            Prompts::Held(ref h) => (h.0.clone(), h.1.clone()),
            Prompts::Line { at, len } => self
                .read_entry(at, len)
                .map(|e| (e.checkpoint.first_prompt, e.checkpoint.last_prompt))
                .unwrap_or_default(),
            Prompts::Indexed {
                at,
                first,
                gap,
                last,
            } => {
                let (first, gap, last) = (first as usize, gap as usize, last as usize);
                let bytes = self
                    .read_line(at, (first + gap + last) as u32)
                    .unwrap_or_default();
                let text = |from: usize, len: usize| {
                    let token = bytes.get(from..from + len).filter(|_| len > 0)?;
                    serde_json::from_slice::<turns::Prompt>(token).ok()
                };
                (text(0, first), text(first + gap, last))
            }
        }
    }

    /// The user turns of `file`, from the index where it can be trusted, else counted (going on from
    /// its checkpoint when the file only grew).
    pub fn count(&self, rule: &RuleSet, file: &FoundFile) -> io::Result<Option<Count>> {
        let Some(turn_rules) = &rule.turns else {
            return Ok(None);
        };
        let stamp = file.stamp();
        let path_hash = super::cache::path_hash(&file.path);
        let prior = self
            .entries
            .binary_search_by_key(&(stamp.dev, stamp.ino), key)
            .ok()
            .map(|i| self.entries[i])
            .filter(|e| e.path_hash == path_hash && *self.apps[e.app as usize] == *file.app);
        let unchanged = |e: &Slim| e.size == stamp.size && e.mtime_ns as i128 == stamp.mtime_ns;
        if let Some(e) = prior.filter(unchanged) {
            return Ok(Some(Count {
                user_turns: e.user_turns as u64,
                prompts: e.prompts(),
                how: Counted::Unchanged,
                bytes_read: 0,
                new: None,
            }));
        }
        let prior = prior.and_then(|e| self.read_entry(e.at, e.len));
        let mut f = super::open_transcript(&file.path)?;
        let mut bytes_read = 0;
        let mut resume = None;
        if let Some(e) = prior.filter(|e| e.checkpoint.offset <= stamp.size) {
            let (tail, n) = tail_hash(&mut f, e.checkpoint.offset)?;
            bytes_read += n;
            if tail.is_some() && tail == e.tail {
                resume = Some(e.checkpoint);
            }
        }
        let how = match resume {
            Some(_) => Counted::Resumed,
            None => Counted::Whole,
        };
        let (from, first_line) = resume.as_ref().map_or((0, 1), |c| (c.offset, c.line + 1));
        f.seek(SeekFrom::Start(from))?;
        let opts = turns::Options {
            resume,
            keep: turns::Keep::Counts,
            ..turns::Options::default()
        };
        // Only up to the size the walk saw: the count and the stamp describe the same bytes.
        let part = (&mut f).take(stamp.size - from);
        let t = turns::extract(rule, turn_rules, part, first_line, 0, &opts)?;
        bytes_read += t.bytes_read;
        let (tail, n) = tail_hash(&mut f, t.checkpoint.offset)?;
        bytes_read += n;
        let c = &t.checkpoint;
        let prompts = Prompts::Held(Box::new((c.first_prompt.clone(), c.last_prompt.clone())));
        let entry = IndexEntry {
            dev: stamp.dev,
            ino: stamp.ino,
            path_hash,
            app: file.app.to_string(),
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
            tail,
            checkpoint: t.checkpoint,
        };
        Ok(Some(Count {
            user_turns: entry.checkpoint.user_turns,
            prompts,
            how,
            bytes_read,
            new: Some(entry),
        }))
    }

    /// Remembers the entries read now (`fresh`), of the files counted (`seen`, by device and inode);
    /// with `forget_unseen` (every store of these apps was listed) the files of those apps not seen are
    /// forgotten too. Whether anything changed (the index must be written). An entry read now always
    /// changes the index: a file whose entry is current is not read.
    pub fn update(
        &mut self,
        fresh: Vec<IndexEntry>,
        seen: impl Iterator<Item = (u64, u64)>,
        forget_unseen: Option<&[String]>,
    ) -> bool {
        let mut changed = !fresh.is_empty();
        for k in seen {
            if let Ok(i) = self.entries.binary_search_by_key(&k, key) {
                self.entries[i].seen = true;
            }
        }
        match self.fresh.is_empty() {
            true => self.fresh = fresh, // (taken as it is: extending an empty list copies it)
            false => self.fresh.extend(fresh),
        }
        self.fresh.sort_unstable_by_key(|e| (e.dev, e.ino));
        let fresh = &self.fresh;
        let replaced = |k: &(u64, u64)| fresh.binary_search_by_key(k, |e| (e.dev, e.ino)).is_ok();
        let listed = |app: &str| forget_unseen.is_some_and(|apps| apps.iter().any(|a| a == app));
        for e in self.entries.iter_mut().filter(|e| e.kept) {
            let forgotten = !e.seen && listed(&self.apps[e.app as usize]);
            e.kept = !forgotten && !replaced(&key(e));
            changed |= forgotten;
        }
        changed
    }

    /// Writes the index, replacing the file: the loaded entries kept are copied from the loaded file
    /// line for line, in its order, then the entries counted now. Failure is not an error: the next
    /// reader reads more.
    pub fn save(&self, file: &Path, fingerprint: &str) {
        let _ = crate::util::atomic::write_atomic_with(file, |w| {
            let header = Header {
                almanac_turn_index: FORMAT,
                fingerprint: fingerprint.to_string(),
            };
            serde_json::to_writer(&mut *w, &header)?;
            w.write_all(b"\n")?;
            if let Some(f) = &self.file {
                let mut kept: Vec<(u64, u32)> = self
                    .entries
                    .iter()
                    .filter(|e| e.kept)
                    .map(|e| (e.at, e.len))
                    .collect();
                kept.sort_unstable();
                copy_lines(f, &kept, w)?;
            }
            for e in &self.fresh {
                serde_json::to_writer(&mut *w, e)?;
                w.write_all(b"\n")?;
            }
            Ok(())
        });
    }
}

/// Copies the lines of `f` at `lines` (byte offset and length, in file order) to `w`, each with its
/// newline, reading the file in order.
fn copy_lines(f: &std::fs::File, lines: &[(u64, u32)], w: &mut dyn io::Write) -> io::Result<()> {
    let mut r = io::BufReader::with_capacity(1 << 20, f);
    r.seek(SeekFrom::Start(0))?;
    let mut pos = 0u64;
    let mut buf = Vec::new();
    for &(at, len) in lines {
        if at > pos {
            r.seek_relative((at - pos) as i64)?;
        }
        buf.resize(len as usize, 0);
        r.read_exact(&mut buf)?;
        w.write_all(&buf)?;
        w.write_all(b"\n")?;
        pos = at + len as u64;
    }
    Ok(())
}

/// `sha256` of the up to `TAIL_BYTES` before `offset` (None when the file is shorter), and the
/// bytes read.
fn tail_hash(f: &mut std::fs::File, offset: u64) -> io::Result<(Option<[u8; 32]>, u64)> {
    let start = offset.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((offset - start) as usize);
    f.take(offset - start).read_to_end(&mut buf)?;
    let n = buf.len() as u64;
    let whole = n == offset - start;
    Ok((whole.then(|| Sha256::digest(&buf).into()), n))
}

/// A tail hash as the index file writes it: 64 hex digits, or "" for none. Anything else does not
/// parse, and its line is left out (counted again).
mod tail_hex {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<[u8; 32]>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.map(|b| crate::util::ids::hex(&b)).unwrap_or_default())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 32]>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        if text.is_empty() {
            return Ok(None);
        }
        let b = text.as_bytes();
        if b.len() != 64 {
            return Err(D::Error::custom("a tail hash has 64 hex digits"));
        }
        let digit = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(b.chunks(2)) {
            let (Some(h), Some(l)) = (digit(pair[0]), digit(pair[1])) else {
                return Err(D::Error::custom("a tail hash has 64 hex digits"));
            };
            *o = h << 4 | l;
        }
        Ok(Some(out))
    }
}

mod slim;
use slim::{key, slim, Slim};

#[cfg(test)]
#[path = "turn_index_tests.rs"]
mod tests;
