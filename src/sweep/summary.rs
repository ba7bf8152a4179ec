//! What a sweep reports: the runs it started, what it skipped and why, what needs a person, the totals
//! and the cost of the sweep itself. Each phase records into one `Summary`.

use super::gather::Candidate;
use crate::discover::{Examined, FoundFile};
use crate::policy;
use crate::reason::Reason;
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartedItem {
    pub app: String,
    pub session_id: String,
    pub transcript_path: String,
    pub repo_root: String,
    pub run_id: String,
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
    /// Bytes of the range, user turns in what this sweep starts of the new part (all its chunks that fit
    /// the budget), and the tokens its agent reads, estimated (`measure::run_tokens`).
    pub new_bytes: u64,
    pub new_turns: Option<u64>,
    pub estimated_tokens: u64,
    /// (this chunk, chunks) when the new part is captured in several runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk: Option<(u32, u32)>,
}

/// What the started runs will read, summed.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub runs: u64,
    pub new_bytes: u64,
    pub new_turns: u64,
    pub estimated_tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedItem {
    pub app: String,
    pub session_id: Option<String>,
    pub transcript_path: String,
    pub repo_root: Option<String>,
    pub reason: Reason,
    /// Words for a person: what exactly went wrong, or what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl SkippedItem {
    /// A transcript skipped (or needing attention) for `reason`.
    pub fn of(file: &FoundFile, ex: &Examined, reason: Reason, detail: Option<String>) -> Self {
        SkippedItem {
            app: file.app.to_string(),
            session_id: ex.session_id.as_deref().map(str::to_string),
            transcript_path: file.path.display().to_string(),
            repo_root: ex.repo.as_ref().map(|r| r.display().to_string()),
            reason,
            detail,
        }
    }

    /// A problem with a repo's run store rather than with a transcript.
    /// A ledger the worker found overwritten or deleted while an agent ran, and wrote back.
    pub fn overwritten(repo: &Path, why: String) -> Self {
        let detail = format!("{why}; check what the capture agent did (its run log)");
        let path = crate::ledger::ledger_path(repo);
        Self::of_store(repo, &path, Reason::LedgerOverwritten, detail)
    }

    pub fn of_store(repo: &Path, path: &Path, reason: Reason, detail: String) -> Self {
        SkippedItem {
            app: "almanac".into(),
            session_id: None,
            transcript_path: path.display().to_string(),
            repo_root: Some(repo.display().to_string()),
            reason,
            detail: Some(detail),
        }
    }
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub files_visited: u64,
    pub bytes_read: u64,
    pub elapsed_ms: u64,
    pub unreadable: u64,
    pub duplicates: u64,
    pub subagents: u64,
    /// Stores that are not JSONL read (copied, parsed) this sweep, and the sessions of them whose
    /// messages were read: an unchanged store is neither (`discover::views`).
    pub stores_read: u64,
    pub sessions_read: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub scanned: u64,
    pub eligible: u64,
    pub dry_run: bool,
    pub capture_since: Option<String>,
    pub started: Vec<StartedItem>,
    pub skipped: Skipped,
    pub needs_attention: Vec<SkippedItem>,
    /// Transcripts rewritten before their cursor that still held the last captured record: the capture
    /// resumed after it (`recovered-prefix`). They also appear as started or skipped as usual.
    pub recovered: Vec<SkippedItem>,
    pub counts: BTreeMap<&'static str, u64>,
    pub totals: Totals,
    pub stats: Stats,
    /// What to do next, when the sweep found nothing to work with (no transcript, no repo).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
    /// Whether skipped transcripts are listed (`--json`, `doctor`, `capture now`; 12 bytes held for
    /// each, `Skipped`) or only counted (a sweep's words, what the scheduler runs: 100k unchanged
    /// sessions are a line).
    #[serde(skip)]
    pub list_skipped: bool,
    /// Skipped transcripts by reason, listed or not.
    #[serde(skip)]
    pub skipped_by_reason: BTreeMap<&'static str, u64>,
}

impl Summary {
    pub fn new(dry_run: bool, capture_since: Option<String>) -> Summary {
        Summary {
            scanned: 0,
            eligible: 0,
            dry_run,
            capture_since,
            started: Vec::new(),
            skipped: Skipped::default(),
            needs_attention: Vec::new(),
            recovered: Vec::new(),
            counts: BTreeMap::new(),
            totals: Totals::default(),
            stats: Stats::default(),
            hints: Vec::new(),
            list_skipped: true,
            skipped_by_reason: BTreeMap::new(),
        }
    }

    /// Says what to do next when there was nothing to work with: no transcript in `roots` (the store
    /// directories swept, with whether each exists), or none whose session belongs to a repo with
    /// `.almanac/`.
    pub fn add_next_steps(&mut self, roots: &[(std::path::PathBuf, bool)]) {
        if self.scanned == 0 && self.stats.subagents == 0 {
            let list: Vec<String> = roots
                .iter()
                .map(|(p, exists)| match exists {
                    true => p.display().to_string(),
                    false => format!("{} (missing)", p.display()),
                })
                .collect();
            self.hints.push(format!(
                "no transcripts found in {}; `almanac doctor` explains why (an app not installed or \
                 not enabled, its store somewhere else, or no session recorded yet)",
                if list.is_empty() {
                    "any store (no app is enabled)".to_string()
                } else {
                    list.join(", ")
                }
            ));
        } else if self.scanned > 0
            && self.counts.get(Reason::NoAlmanacRepo.code()) == Some(&self.scanned)
        {
            self.hints.push(format!(
                "none of the {} sessions found belongs to a repository with .almanac/: `almanac init` in \
                 a repository creates one, and its sessions are captured from then on",
                self.scanned
            ));
        }
    }

    /// How many transcripts were skipped, listed or not.
    pub fn skipped_total(&self) -> u64 {
        self.skipped_by_reason.values().sum()
    }

    pub fn count(&mut self, reason: Reason) {
        self.count_n(reason, 1);
    }

    /// `n` more transcripts skipped for `reason` (none: the reason is not listed).
    pub fn count_n(&mut self, reason: Reason, n: u64) {
        if n > 0 {
            *self.counts.entry(reason.code()).or_default() += n;
        }
    }

    pub fn skip(&mut self, item: SkippedItem) {
        self.skipped_as(item.reason);
        if self.list_skipped {
            self.skipped.items.push(item);
        }
    }

    /// `skip` for candidate `idx` of the sweep (`file`, `ex`): listed by its place, put into words when
    /// the summary is written (`Skipped`).
    pub fn skip_candidate(
        &mut self,
        idx: usize,
        candidate: &Candidate,
        reason: Reason,
        detail: Option<String>,
    ) {
        let detail = match detail {
            None => SkipDetail::None,
            Some(d) if derivable(reason, candidate, &d) => SkipDetail::Derived,
            Some(d) => SkipDetail::Words(d),
        };
        self.skip_listed(idx, reason, detail);
    }

    /// `skip_candidate` with its detail said already: `Derived` only where `derivable` said so.
    pub fn skip_listed(&mut self, idx: usize, reason: Reason, detail: SkipDetail) {
        self.skipped_as(reason);
        if !self.list_skipped {
            return;
        }
        let s = &mut self.skipped;
        let detail = match detail {
            SkipDetail::None => NO_DETAIL,
            SkipDetail::Derived => derived_code(reason).expect("only where derivable said so"),
            SkipDetail::Words(d) => {
                s.words.push(d.into_boxed_str());
                WORDS + (s.words.len() as u32 - 1)
            }
        };
        s.listed.push(Listed {
            idx: u32::try_from(idx).expect("fewer than 4 billion candidates"),
            detail,
            reason,
        });
    }

    fn skipped_as(&mut self, reason: Reason) {
        self.count(reason);
        *self.skipped_by_reason.entry(reason.code()).or_default() += 1;
    }

    /// The sweep's candidates, for the skipped transcripts listed by their place (`skip_candidate`):
    /// held until the summary is written. Sorts those.
    pub fn attach(&mut self, candidates: Vec<Candidate>) {
        let s = &mut self.skipped;
        s.files = candidates;
        let files = &s.files;
        s.listed.sort_by(|a, b| key(files, a).cmp(&key(files, b)));
    }

    /// The skipped transcripts listed by their place among `candidates` put into words now (for a
    /// caller that keeps its candidates, `capture now`).
    pub fn settle(&mut self, candidates: &[Candidate]) {
        let s = &mut self.skipped;
        let listed = std::mem::take(&mut s.listed);
        let rendered: Vec<SkippedItem> = listed.iter().map(|l| s.render(candidates, l)).collect();
        s.items.extend(rendered);
        s.words.clear();
        self.sort();
    }

    pub fn attention(&mut self, item: SkippedItem) {
        self.count(item.reason);
        self.needs_attention.push(item);
    }

    pub fn recover(&mut self, item: SkippedItem) {
        self.count(item.reason);
        self.recovered.push(item);
    }

    /// Lists in a stable order (app, then transcript path), whatever order the phases worked in.
    pub fn sort(&mut self) {
        self.started
            .sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
        for list in [
            &mut self.skipped.items,
            &mut self.needs_attention,
            &mut self.recovered,
        ] {
            list.sort_by(|a, b| (&a.app, &a.transcript_path).cmp(&(&b.app, &b.transcript_path)));
        }
    }
}

/// The skipped transcripts a summary lists, in order of app and path. Those a sweep skips from its
/// candidates (nearly all: 100k unchanged transcripts at 100k) are held as their place among the
/// candidates, the reason and a code for the detail, 12 bytes each, and put into words one at a time
/// as the summary is written: held as items they were 46 MB of strings in a `--json` sweep at 100k
/// (the 100k benchmark, (h)). The detail of an unchanged transcript, or of one whose cwd maps to no repo, is
/// put into words again from the candidate (`policy::unchanged_words`, `policy::no_repo_words`) only
/// when that gives the same words; any other detail is kept as words.
#[derive(Default)]
pub struct Skipped {
    /// Put into words already (sorted by `Summary::sort`).
    items: Vec<SkippedItem>,
    /// By place among `files` (sorted by `Summary::attach`).
    listed: Vec<Listed>,
    words: Vec<Box<str>>,
    files: Vec<Candidate>,
}

struct Listed {
    idx: u32,
    /// `NO_DETAIL`, `UNCHANGED_SIZE`, `NO_REPO_AT_CWD`, or `WORDS` plus the place of its words.
    detail: u32,
    reason: Reason,
}

/// A listed skip's detail.
pub enum SkipDetail {
    None,
    Words(String),
    /// Put into words again from the candidate when written (`derivable` said it gives the words).
    Derived,
}

/// Whether the summary, put into words from `candidate`, says `detail` for a skip for `reason`: an
/// unchanged transcript's size, the cwd that maps to no repo. Asked where the decision is made, so a
/// `--json` sweep holds no words for 100k unchanged transcripts while their ledgers are read.
pub fn derivable(reason: Reason, candidate: &Candidate, detail: &str) -> bool {
    derived_code(reason)
        .and_then(|code| derived_words(code, candidate))
        .is_some_and(|w| w == detail)
}

/// The code of the words a skip for `reason` may be given again from its candidate.
fn derived_code(reason: Reason) -> Option<u32> {
    match reason {
        Reason::Unchanged => Some(UNCHANGED_SIZE),
        Reason::NoAlmanacRepo => Some(NO_REPO_AT_CWD),
        _ => None,
    }
}

/// The words of a derived code (`UNCHANGED_SIZE`, `NO_REPO_AT_CWD`) for `candidate`.
fn derived_words(code: u32, (file, ex): &Candidate) -> Option<String> {
    match code {
        UNCHANGED_SIZE => Some(policy::unchanged_words(file.size)),
        NO_REPO_AT_CWD => ex.cwd.as_deref().map(policy::no_repo_words),
        _ => None,
    }
}

const NO_DETAIL: u32 = 0;
const UNCHANGED_SIZE: u32 = 1;
const NO_REPO_AT_CWD: u32 = 2;
const WORDS: u32 = 3;

/// What the listed are ordered by, as `Summary::sort` orders items: app, then path as text.
fn key<'a>(files: &'a [Candidate], l: &Listed) -> (&'a str, Cow<'a, str>) {
    let (file, _) = &files[l.idx as usize];
    (&file.app, file.path.to_string_lossy())
}

impl std::fmt::Debug for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Skipped {
    fn render(&self, files: &[Candidate], l: &Listed) -> SkippedItem {
        let candidate @ (file, ex) = &files[l.idx as usize];
        let detail = match l.detail {
            NO_DETAIL => None,
            code if code < WORDS => derived_words(code, candidate),
            w => Some(self.words[(w - WORDS) as usize].to_string()),
        };
        SkippedItem::of(file, ex, l.reason, detail)
    }

    pub fn len(&self) -> usize {
        self.items.len() + self.listed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every skipped transcript listed, in order of app and path, each put into words as it comes.
    pub fn iter(&self) -> impl Iterator<Item = SkippedItem> + '_ {
        assert!(
            self.listed.is_empty() || !self.files.is_empty(),
            "skipped candidates listed without their candidates (Summary::attach or settle)"
        );
        let mut items = self.items.iter().peekable();
        let mut listed = self.listed.iter().peekable();
        std::iter::from_fn(move || {
            let item_first = match (items.peek(), listed.peek()) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(i), Some(l)) => {
                    let (app, path) = key(&self.files, l);
                    (i.app.as_str(), i.transcript_path.as_str()) <= (app, &*path)
                }
            };
            Some(match item_first {
                true => items.next().expect("peeked").clone(),
                false => self.render(&self.files, listed.next().expect("peeked")),
            })
        })
    }
}

impl Serialize for Skipped {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn candidate(app: &str, path: &str, size: u64, cwd: Option<&str>) -> Candidate {
        let file = FoundFile {
            app: app.into(),
            path: path.into(),
            rel_offset: 0,
            size,
            mtime: SystemTime::UNIX_EPOCH,
            file_id: (0, 0),
        };
        let mut ex = Examined::unread();
        ex.session_id = Some(path.rsplit('/').next().unwrap().into());
        ex.cwd = cwd.map(Into::into);
        ex.repo = cwd
            .filter(|c| c.starts_with("/repo"))
            .map(|c| Path::new(c).into());
        (file, ex)
    }

    /// Skips listed by their place among the candidates are written exactly as the items made at the
    /// time would be, in the same order (app, then path), mixed with items made at the time; a detail
    /// the candidate does not give back is kept as it was said.
    #[test]
    fn listed_skips_are_written_as_the_items_themselves() {
        let files = vec![
            candidate("codex", "/h/b.jsonl", 10, Some("/repo/x")),
            candidate("claude", "/h/z.jsonl", 20, Some("/elsewhere")),
            candidate("claude", "/h/a.jsonl", 30, Some("/repo/x")),
            candidate("claude", "/h/m.jsonl", 40, None),
        ];
        let said = [
            (0, Reason::Unchanged, Some(policy::unchanged_words(10))),
            (
                1,
                Reason::NoAlmanacRepo,
                Some(policy::no_repo_words("/elsewhere")),
            ),
            // Not what the candidate gives back (another size): kept as said.
            (2, Reason::Unchanged, Some(policy::unchanged_words(31))),
            (3, Reason::NoAlmanacRepo, Some("no cwd to map".to_string())),
        ];
        let mut listed = Summary::new(true, None);
        let mut made = Summary::new(true, None);
        for (i, reason, detail) in said.iter().cloned() {
            listed.skip_candidate(i, &files[i], reason, detail.clone());
            let (f, ex) = &files[i];
            made.skip(SkippedItem::of(f, ex, reason, detail));
        }
        // One made at the time, between the others by its path.
        let (f, ex) = &candidate("claude", "/h/c.jsonl", 5, None);
        let extra = SkippedItem::of(f, ex, Reason::BudgetDeferred, Some("later".into()));
        listed.skip(extra.clone());
        made.skip(extra);
        // Only the two the candidates give back are held without words.
        assert_eq!(listed.skipped.words.len(), 2);
        listed.sort();
        listed.attach(files);
        made.sort();
        let json = |s: &Summary| serde_json::to_value(s).unwrap();
        assert_eq!(json(&listed), json(&made));
        let paths: Vec<String> = listed.skipped.iter().map(|s| s.transcript_path).collect();
        assert_eq!(
            paths,
            [
                "/h/a.jsonl",
                "/h/c.jsonl",
                "/h/m.jsonl",
                "/h/z.jsonl",
                "/h/b.jsonl"
            ]
        );
        assert_eq!(listed.skipped.len(), 5);
        assert_eq!(listed.skipped_total(), 5);
    }

    /// `capture now` keeps its candidates: settling puts the listed into words in place.
    #[test]
    fn settled_skips_are_items() {
        let files = vec![candidate("claude", "/h/a.jsonl", 7, Some("/repo/x"))];
        let mut s = Summary::new(false, None);
        s.skip_candidate(
            0,
            &files[0],
            Reason::Unchanged,
            Some(policy::unchanged_words(7)),
        );
        s.settle(&files);
        drop(files);
        let items: Vec<SkippedItem> = s.skipped.iter().collect();
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0].detail.as_deref(),
            Some("size 7 equals the captured cursor")
        );
        assert_eq!(items[0].repo_root.as_deref(), Some("/repo/x"));
    }
}
