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
use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// 2: checkpoints remember the first and the latest prompt (an index of 1 is read again once).
const FORMAT: u32 = 2;
/// How many bytes before a checkpoint are compared before a read goes on from it.
const TAIL_BYTES: u64 = 4096;

fn prompts(c: &Checkpoint) -> (Option<turns::Prompt>, Option<turns::Prompt>) {
    (c.first_prompt.clone(), c.last_prompt.clone())
}

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
    /// `sha256` of the up to 4 KiB before `checkpoint.offset` (hex in the file, 32 bytes in memory: at
    /// 100k transcripts the hex strings were 10 MB); none when the file was cut short under the reader,
    /// so the next read starts over.
    #[serde(with = "tail_hex")]
    tail: Option<[u8; 32]>,
    checkpoint: Checkpoint,
}

/// One transcript's user turns, and what the index must learn from the count.
pub struct Count {
    pub user_turns: u64,
    /// The transcript's first and latest prompt (cut to `turns::CHECKPOINT_PROMPT_BYTES`).
    pub prompts: (Option<turns::Prompt>, Option<turns::Prompt>),
    pub how: Counted,
    pub bytes_read: u64,
    /// (device, inode): the file was seen.
    pub file: (u64, u64),
    /// The entry to remember when the file was read (None: the index holds it already). Boxed: a
    /// listing holds one `Count` per session.
    pub new: Option<Box<IndexEntry>>,
}

#[derive(Default)]
pub struct TurnIndex {
    entries: HashMap<(u64, u64), IndexEntry>,
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
    /// The index written with the same rule `fingerprint`; anything else is an empty index.
    pub fn load(file: &Path, fingerprint: &str) -> TurnIndex {
        let mut index = TurnIndex::default();
        let Ok(f) = std::fs::File::open(file) else {
            return index;
        };
        use io::BufRead;
        let mut r = io::BufReader::with_capacity(1 << 20, f);
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
        const BLOCK: u64 = 4 << 20;
        loop {
            let mut block = Vec::with_capacity(BLOCK as usize + 4096);
            if (&mut r).take(BLOCK).read_to_end(&mut block).is_err()
                || r.read_until(b'\n', &mut block).is_err()
                || block.is_empty()
            {
                break;
            }
            let lines: Vec<&[u8]> = block.split(|b| *b == b'\n').collect();
            let parts: Vec<&[&[u8]]> = lines.chunks(lines.len().div_ceil(4).max(1)).collect();
            let parsed = crate::util::par::map(&parts, |part| {
                part.iter()
                    .filter_map(|l| serde_json::from_slice::<IndexEntry>(l).ok())
                    .collect::<Vec<_>>()
            });
            for e in parsed.into_iter().flatten() {
                index.entries.insert((e.dev, e.ino), e);
            }
        }
        index
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
            .get(&(stamp.dev, stamp.ino))
            .filter(|e| e.path_hash == path_hash && *e.app == *file.app);
        if let Some(e) = prior.filter(|e| e.size == stamp.size && e.mtime_ns == stamp.mtime_ns) {
            return Ok(Some(Count {
                user_turns: e.checkpoint.user_turns,
                prompts: prompts(&e.checkpoint),
                how: Counted::Unchanged,
                bytes_read: 0,
                file: (stamp.dev, stamp.ino),
                new: None,
            }));
        }
        let mut f = super::open_transcript(&file.path)?;
        let mut bytes_read = 0;
        let mut resume = None;
        if let Some(e) = prior.filter(|e| e.checkpoint.offset <= stamp.size) {
            let (tail, n) = tail_hash(&mut f, e.checkpoint.offset)?;
            bytes_read += n;
            if tail.is_some() && tail == e.tail {
                resume = Some(e.checkpoint.clone());
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
            prompts: prompts(&entry.checkpoint),
            how,
            bytes_read,
            file: (stamp.dev, stamp.ino),
            new: Some(Box::new(entry)),
        }))
    }

    /// Remembers the entries counted now; with `forget_unseen` (every store of these apps was listed)
    /// the files of those apps not among them are forgotten too. Whether anything changed (the index
    /// must be written).
    pub fn update(
        &mut self,
        counts: impl Iterator<Item = Count>,
        forget_unseen: Option<&[String]>,
    ) -> bool {
        let mut changed = false;
        let mut seen = std::collections::HashSet::with_capacity(counts.size_hint().1.unwrap_or(0));
        for c in counts {
            seen.insert(c.file);
            if let Some(e) = c.new.filter(|e| self.entries.get(&c.file) != Some(&**e)) {
                self.entries.insert(c.file, *e);
                changed = true;
            }
        }
        if let Some(apps) = forget_unseen {
            let before = self.entries.len();
            self.entries
                .retain(|k, e| seen.contains(k) || !apps.contains(&e.app));
            changed |= self.entries.len() != before;
        }
        changed
    }

    /// Writes the index, replacing the file. Failure is not an error: the next reader reads more.
    pub fn save(&self, file: &Path, fingerprint: &str) {
        let _ = crate::util::atomic::write_atomic_with(file, |w| {
            let header = Header {
                almanac_turn_index: FORMAT,
                fingerprint: fingerprint.to_string(),
            };
            serde_json::to_writer(&mut *w, &header)?;
            w.write_all(b"\n")?;
            for e in self.entries.values() {
                serde_json::to_writer(&mut *w, e)?;
                w.write_all(b"\n")?;
            }
            Ok(())
        });
    }
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

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct T {
        #[serde(with = "super::tail_hex")]
        tail: Option<[u8; 32]>,
    }

    #[test]
    fn a_tail_is_written_as_hex_and_only_64_hex_digits_or_nothing_are_read() {
        let some = T {
            tail: Some(std::array::from_fn(|i| (i * 37) as u8)),
        };
        let text = serde_json::to_string(&some).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"tail":"{}"}}"#,
                crate::util::ids::hex(&some.tail.unwrap())
            )
        );
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), some);
        assert_eq!(
            serde_json::to_string(&T { tail: None }).unwrap(),
            r#"{"tail":""}"#
        );
        assert_eq!(
            serde_json::from_str::<T>(r#"{"tail":""}"#).unwrap(),
            T { tail: None }
        );
        for bad in [
            "abc",
            &"g".repeat(64),
            &"a".repeat(66),
            "+".repeat(64).as_str(),
        ] {
            let line = format!(r#"{{"tail":"{bad}"}}"#);
            assert!(serde_json::from_str::<T>(&line).is_err(), "{bad}");
        }
    }
}
