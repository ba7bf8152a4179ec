//! The uncaptured range of an eligible transcript: verify the captured prefix (or place a first-seen
//! transcript at its `capture_since` baseline), find the complete lines after the cursor, cut them into
//! chunks that fit one run, and read their turns.

use super::measure::{Measure, Sizing};
use crate::discover::{self, FoundFile};
use crate::ledger::{cursor, LedgerEntry};
use crate::policy::Settings;
use crate::rules::RuleSet;
use std::io::Read;

/// A cursor in a transcript: bytes and lines before it, and the `sha256:` of those bytes.
pub struct CursorAt {
    pub bytes: u64,
    pub lines: u64,
    pub hash: String,
}

/// A transcript rewritten before its captured cursor whose last captured record is still in it: the
/// capture resumes after that record (`recovered-prefix`) instead of needing attention.
pub struct Recovered {
    /// The cursor in the rewritten file: just after the line holding the last captured record.
    pub at: CursorAt,
    /// Words for the summary and the prompt: what changed and where the capture resumes.
    pub detail: String,
}

/// The uncaptured range of an eligible transcript.
pub struct Range {
    /// Lines already captured (the new range starts at the next one).
    pub from_line_before: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
    pub hash_at_cursor: String,
    pub hash_at_end: String,
    /// Chunk ends inside the range (see `cursor::scan_lines`).
    pub boundaries: Vec<(u64, u64, String)>,
    /// Each chunk's rendering, in bytes, when the part was measured as its lines were found
    /// (`measure`): one more than `boundaries`.
    pub rendered: Option<Vec<u64>>,
    /// A first-seen transcript's leading lines copied from a session already captured (skipped).
    pub copied: Option<super::overlap::Copied>,
    /// The captured prefix was rewritten and the range resumes after its last captured record.
    pub recovered: Option<Recovered>,
}

pub enum RangeOutcome {
    Capture(Range),
    /// No complete new line. `baseline`: where a first-seen transcript's cursor goes (`copied`: after
    /// the records it copied); `recovered`: where a rewritten one's cursor moves to.
    Unchanged {
        baseline: Option<CursorAt>,
        copied: Option<super::overlap::Copied>,
        recovered: Option<Recovered>,
    },
    PrefixMismatch(String),
}

/// Reads the transcript once: verifies the captured prefix (or places a first-seen transcript at its
/// `capture_since` baseline), then finds the complete lines after the cursor. `hash` off skips hashing
/// (a dry run's first look at a transcript needs only where lines end). `shared`: how the transcript
/// stands against the records its session family claimed: the range starts after those right at its
/// cursor (`copied`) and ends before the next (`until`).
#[allow(clippy::too_many_arguments)]
pub fn decide_range(
    rule: &RuleSet,
    file: &FoundFile,
    entry: Option<&LedgerEntry>,
    shared: super::overlap::Shared,
    settings: &Settings,
    hash: bool,
    sizing: Sizing,
    counting: Option<&mut Counting>,
    bytes_read: &mut u64,
) -> Result<RangeOutcome, String> {
    let outcome = decide_range_in(
        rule, file, entry, shared, settings, hash, sizing, counting, bytes_read,
    )?;
    match rule.is_view(&file.path) {
        true => super::view_cursor::to_ids(&file.path, outcome),
        false => Ok(outcome),
    }
}

#[allow(clippy::too_many_arguments)]
fn decide_range_in(
    rule: &RuleSet,
    file: &FoundFile,
    entry: Option<&LedgerEntry>,
    shared: super::overlap::Shared,
    settings: &Settings,
    hash: bool,
    sizing: Sizing,
    counting: Option<&mut Counting>,
    bytes_read: &mut u64,
) -> Result<RangeOutcome, String> {
    let super::overlap::Shared { copied, until } = shared;
    let open = || discover::open_transcript(&file.path).map_err(|e| e.to_string());
    // A view's captured prefix is its messages' ids, wherever their bytes now end.
    let view_at = match entry {
        Some(e)
            if e.last_captured_prefix_hash
                .starts_with(super::view_cursor::IDS_PREFIX) =>
        {
            let at = super::view_cursor::place(
                &file.path,
                e.last_captured_line,
                &e.last_captured_prefix_hash,
            )
            .map_err(|e| e.to_string())?;
            match at {
                Some(at) => Some(at),
                None => {
                    let why = format!(
                        "the first {} messages are not the ones captured (the session was rewound or rewritten)",
                        e.last_captured_line.saturating_sub(1)
                    );
                    return recover(rule, file, e, why, sizing, bytes_read);
                }
            }
        }
        _ => None,
    };
    // A copy whose family has since claimed the records at its cursor moves past them, once its own
    // captured prefix is verified (else it recovers, below, from where it stands).
    let copied = match (entry, copied) {
        (Some(e), Some(c)) => prefix_holds(file, e)?.then_some(c),
        (_, c) => c,
    };
    let (cursor_bytes, cursor_lines, baseline) = match (entry, settings.capture_since) {
        (Some(_), _) if view_at.is_some() => {
            let at = view_at.as_ref().expect("checked");
            (at.bytes, at.lines, false)
        }
        (Some(_), _) if copied.is_some() => {
            let c = copied.as_ref().expect("checked");
            (c.bytes, c.lines, true)
        }
        (Some(e), _) => {
            if file.size < e.last_captured_size {
                let why = format!(
                    "the transcript is {} bytes, shorter than the {} already captured: it was truncated or replaced",
                    file.size, e.last_captured_size
                );
                return recover(rule, file, e, why, sizing, bytes_read);
            }
            (e.last_captured_size, e.last_captured_line, false)
        }
        (None, _) if copied.is_some() => {
            let c = copied.as_ref().expect("checked");
            (c.bytes, c.lines, true)
        }
        (None, Some(since)) => {
            let b = cursor::baseline(open()?, since, |v| rule.record_time(v))
                .map_err(|e| e.to_string())?;
            *bytes_read += b.bytes_read;
            (b.bytes, b.lines, true)
        }
        (None, None) => (0, 0, false),
    };
    let (scan, rendered) = scan_sized(
        rule,
        file,
        (cursor_bytes, cursor_lines),
        hash,
        sizing,
        counting,
        until.map(|u| u.0),
    )?;
    *bytes_read += scan.bytes_read;
    let Some(hash_at_cursor) = scan.hash_at_cursor.clone() else {
        return Ok(RangeOutcome::PrefixMismatch(format!(
            "the transcript became shorter than the captured {cursor_bytes} bytes while being read"
        )));
    };
    // (A copy's cursor that moved past its family's records was verified where it stood.)
    if let Some(e) = entry.filter(|_| view_at.is_none() && copied.is_none()) {
        if hash_at_cursor != e.last_captured_prefix_hash {
            let why = format!(
                "the first {} bytes changed since they were captured (rewritten or replaced)",
                e.last_captured_size
            );
            return recover(rule, file, e, why, sizing, bytes_read);
        }
    }
    let at = CursorAt {
        bytes: cursor_bytes,
        lines: cursor_lines,
        hash: hash_at_cursor,
    };
    Ok(outcome(at, (scan, rendered), baseline, copied, None))
}

/// Scans the part after the cursor (`at`: its bytes and lines), cutting it into runs by `sizing`: when
/// the part is measured, where each chunk's rendering reaches the limit, with each chunk's size; else by
/// raw bytes (a rule set with nothing to render), or not at all (a part too small to need it). Lines end
/// at byte `until` when given (a record another session claimed begins there).
fn scan_sized(
    rule: &RuleSet,
    file: &FoundFile,
    (bytes, lines): (u64, u64),
    hash: bool,
    sizing: Sizing,
    counting: Option<&mut Counting>,
    until: Option<u64>,
) -> Result<(cursor::Scan, Option<Vec<u64>>), String> {
    let open = discover::open_transcript(&file.path)
        .map_err(|e| e.to_string())?
        .take(until.unwrap_or(u64::MAX));
    let opts = super::measure::options();
    let view = rule.is_view(&file.path);
    // Counting measures too, in the same read of each line (one parse, not two). Without a need for
    // every part's estimate, a transcript's part is measured once the budget takes it (`measure_part`):
    // a sweep that finds a thousand new parts and starts twenty renders twenty. A view's is measured
    // here, where its cursor is placed by message ids.
    let measured = sizing.measures(file.size.saturating_sub(bytes))
        && counting.is_none()
        && (sizing.always || view);
    let mut measure = Measure::new(rule, &opts, sizing.limit, view).filter(|_| measured);
    // Lines are numbered from the cursor by the scan, from the transcript's start by the turn reads.
    let mut counting = counting;
    let mut by_count = counting.as_deref_mut().map(|c| {
        c.cut_at(sizing.limit, view);
        move |l: &[u8], end: u64, n: u64| c.line(l, end, lines + n)
    });
    let mut by_measure = measure
        .as_mut()
        .map(|m| move |l: &[u8], end: u64, n: u64| m.line(l, end, lines + n));
    let cut = match (&mut by_count, &mut by_measure, rule.turns.is_some()) {
        (Some(f), _, _) => cursor::Cut::By(f),
        (None, Some(f), _) => cursor::Cut::By(f),
        (None, None, false) => cursor::Cut::Bytes(sizing.limit),
        (None, None, true) => cursor::Cut::None,
    };
    let scan = cursor::scan_lines(open, bytes, hash, cut, None).map_err(|e| e.to_string())?;
    let rendered = match counting {
        Some(c) => Some(c.close()),
        None => measure.map(Measure::finish),
    };
    Ok((scan, rendered))
}

/// Cuts a part the scan did not measure (`Sizing::always` off) where each chunk's rendering reaches the
/// limit, reading it again: the budget measures what it is about to start. `hash`: the chunks' ends are
/// hashed (a live sweep records them). A part whose lines changed since the first scan stays as it was
/// (one chunk: the run reads it whole).
pub fn measure_part(
    rule: &RuleSet,
    file: &FoundFile,
    r: &mut Range,
    sizing: Sizing,
    hash: bool,
    bytes_read: &mut u64,
) -> Result<(), String> {
    let raw = r.to_byte - r.from_byte;
    if r.rendered.is_some()
        || rule.turns.is_none()
        || rule.is_view(&file.path)
        || !sizing.measures(raw)
    {
        return Ok(());
    }
    let at = (r.from_byte, r.from_line_before);
    let always = Sizing {
        always: true,
        ..sizing
    };
    let (scan, rendered) = scan_sized(rule, file, at, hash, always, None, Some(r.to_byte))?;
    *bytes_read += scan.bytes_read;
    let same = scan.complete_end == r.to_byte
        && scan.new_lines == r.to_line - r.from_line_before
        && (!hash
            || (scan.hash_at_cursor.as_deref() == Some(r.hash_at_cursor.as_str())
                && scan.hash_at_end == r.hash_at_end));
    if same {
        r.rendered = rendered.filter(|s| s.len() == scan.boundaries.len() + 1);
        r.boundaries = scan.boundaries;
    }
    Ok(())
}

/// Whether the transcript still starts with the bytes `e` captured.
fn prefix_holds(file: &FoundFile, e: &LedgerEntry) -> Result<bool, String> {
    let open = discover::open_transcript(&file.path).map_err(|e| e.to_string())?;
    let h = cursor::prefix_hash(open, e.last_captured_size).map_err(|e| e.to_string())?;
    Ok(h.as_deref() == Some(e.last_captured_prefix_hash.as_str()))
}

/// What the scan after a cursor found: nothing complete (unchanged) or the range to capture.
fn outcome(
    at: CursorAt,
    (scan, rendered): (cursor::Scan, Option<Vec<u64>>),
    baseline: bool,
    copied: Option<super::overlap::Copied>,
    recovered: Option<Recovered>,
) -> RangeOutcome {
    if scan.complete_end <= at.bytes {
        return RangeOutcome::Unchanged {
            baseline: baseline.then_some(at),
            copied,
            recovered,
        };
    }
    RangeOutcome::Capture(Range {
        from_line_before: at.lines,
        to_line: at.lines + scan.new_lines,
        from_byte: at.bytes,
        to_byte: scan.complete_end,
        hash_at_cursor: at.hash,
        hash_at_end: scan.hash_at_end,
        // One size a chunk, or none: a measure that saw no line gives none.
        rendered: rendered.filter(|r| r.len() == scan.boundaries.len() + 1),
        boundaries: scan.boundaries,
        copied,
        recovered,
    })
}

/// The captured prefix no longer matches (`why`): when the rule names record ids and the entry's last
/// captured record is still in the file, the range resumes on the line after it (`recovered-prefix`);
/// otherwise the entry needs attention (`prefix-mismatch`) until `capture reset`.
fn recover(
    rule: &RuleSet,
    file: &FoundFile,
    e: &LedgerEntry,
    why: String,
    sizing: Sizing,
    bytes_read: &mut u64,
) -> Result<RangeOutcome, String> {
    let reset = format!(
        "`almanac capture reset {}` starts over",
        file.path.display()
    );
    let Some(id) = e
        .last_record_id
        .as_deref()
        .filter(|_| rule.record_id.is_some())
    else {
        return Ok(RangeOutcome::PrefixMismatch(format!("{why}; {reset}")));
    };
    let found =
        super::overlap::after_id(rule, &file.path, id, bytes_read).map_err(|e| e.to_string())?;
    let Some((bytes, lines)) = found else {
        return Ok(RangeOutcome::PrefixMismatch(format!(
            "{why}, and its last captured record ({id}) is gone; {reset}"
        )));
    };
    let (scan, rendered) = scan_sized(rule, file, (bytes, lines), true, sizing, None, None)?;
    *bytes_read += scan.bytes_read;
    let Some(hash) = scan.hash_at_cursor.clone() else {
        return Ok(RangeOutcome::PrefixMismatch(format!(
            "{why}, and it changed again while being read; {reset}"
        )));
    };
    let detail = format!(
        "{why}; its last captured record ({id}) is now line {lines} (was line {}): the capture resumes on line {}",
        e.last_captured_line,
        lines + 1
    );
    let at = || CursorAt {
        bytes,
        lines,
        hash: hash.clone(),
    };
    let recovered = Recovered { at: at(), detail };
    Ok(outcome(
        at(),
        (scan, rendered),
        false,
        None,
        Some(recovered),
    ))
}

/// One run's share of a new part: it ends on a newline.
pub struct Chunk {
    pub from: u64,
    pub from_line_before: u64,
    pub to: u64,
    pub to_line: u64,
    /// `sha256:` of `[0, to)`.
    pub hash: String,
    /// Its rendering's bytes, once measured.
    pub rendered: Option<u64>,
}

impl Chunk {
    /// Estimated tokens its run reads (`measure::run_tokens`).
    pub fn tokens(&self) -> u64 {
        super::measure::run_tokens(
            self.rendered,
            self.to - self.from,
            self.from_line_before + 1,
        )
    }
}

pub fn chunks_of(r: &Range) -> Vec<Chunk> {
    let mut out = Vec::new();
    let (mut from, mut lines) = (r.from_byte, r.from_line_before);
    let size = |i: usize| r.rendered.as_ref().and_then(|s| s.get(i).copied());
    for (i, (end, n, hash)) in r.boundaries.iter().enumerate() {
        let to_line = r.from_line_before + n;
        out.push(Chunk {
            from,
            from_line_before: lines,
            to: *end,
            to_line,
            hash: hash.clone(),
            rendered: size(i),
        });
        from = *end;
        lines = to_line;
    }
    out.push(Chunk {
        from,
        from_line_before: lines,
        to: r.to_byte,
        to_line: r.to_line,
        hash: r.hash_at_end.clone(),
        rendered: size(r.boundaries.len()),
    });
    out
}

/// The turns of the uncaptured part up to `to_byte`, summarised; None when the rule set has no turns
/// section. `first_only` stops at the first turn (all the no-new-content check needs).
pub fn new_part_turns(
    rule: &RuleSet,
    file: &FoundFile,
    r: &Range,
    to_byte: u64,
    first_only: bool,
    bytes_read: &mut u64,
) -> Result<Option<crate::turns::PartSummary>, String> {
    let span = (r.from_byte, r.from_line_before, to_byte);
    let keep = match first_only {
        true => crate::turns::Keep::Counts,
        false => crate::turns::Keep::Summary,
    };
    span_turns(rule, file, span, (first_only, keep), bytes_read)
}

/// The turns of one chunk, summarised (each chunk's prompt quotes only its own prompts); with
/// `Keep::Counts` (a dry run, whose output holds only counts) without its prompts and tools. `measure`:
/// its rendering's bytes too, in the same read.
pub fn chunk_turns(
    rule: &RuleSet,
    file: &FoundFile,
    c: &Chunk,
    keep: crate::turns::Keep,
    measure: bool,
    bytes_read: &mut u64,
) -> Result<(Option<crate::turns::PartSummary>, Option<u64>), String> {
    let span = (c.from, c.from_line_before, c.to);
    if !measure {
        return span_turns(rule, file, span, (false, keep), bytes_read).map(|s| (s, None));
    }
    let Some(turn_rules) = &rule.turns else {
        return Ok((None, None));
    };
    let opts = crate::turns::Options {
        keep,
        ..crate::turns::Options::default()
    };
    let cite = match rule.is_view(&file.path) {
        true => crate::turns::render::Cite::Message,
        false => crate::turns::render::Cite::Line,
    };
    let sink =
        crate::turns::render::Render::new(std::io::sink(), cite, turn_rules.merge_repeated_prompts);
    let mut r =
        crate::turns::Reader::with_sink(rule, turn_rules, c.from_line_before + 1, 0, &opts, sink);
    let part = open_span(file, c.from, c.to)?;
    let mut lines = crate::util::lines::LineReader::new(part);
    while let Some(l) = lines.next_line_salvaged().map_err(|e| e.to_string())? {
        if !l.terminated {
            break;
        }
        r.line(c.from_line_before + l.number, l.end, l.bytes);
    }
    *bytes_read += lines.bytes_read();
    let (t, sink) = r.finish_with_sink(lines.bytes_read());
    let size = sink
        .finish()
        .map(|(_, _, n)| n)
        .map_err(|e| e.to_string())?;
    Ok((Some(crate::turns::summarize(&t)), Some(size)))
}

/// Bytes `[from, to)` of the transcript.
fn open_span(file: &FoundFile, from: u64, to: u64) -> Result<impl std::io::Read, String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = discover::open_transcript(&file.path).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(from)).map_err(|e| e.to_string())?;
    Ok(f.take(to - from))
}

/// The turns of bytes `[from, to)`, which start after line `lines_before`.
fn span_turns(
    rule: &RuleSet,
    file: &FoundFile,
    (from, lines_before, to): (u64, u64, u64),
    (first_only, keep): (bool, crate::turns::Keep),
    bytes_read: &mut u64,
) -> Result<Option<crate::turns::PartSummary>, String> {
    let Some(turn_rules) = &rule.turns else {
        return Ok(None);
    };
    let part = open_span(file, from, to)?;
    let opts = crate::turns::Options {
        stop_after_turns: first_only.then_some(1),
        keep,
        ..crate::turns::Options::default()
    };
    let t = crate::turns::extract(rule, turn_rules, part, lines_before + 1, 0, &opts)
        .map_err(|e| e.to_string())?;
    *bytes_read += t.bytes_read;
    Ok(Some(crate::turns::summarize(&t)))
}

/// The turns of a new part read in the pass that finds where its lines end (`decide_range`), for a
/// sweep whose budget will start every eligible part: each chunk's, and whether the whole part holds
/// any, exactly as `chunk_turns` and `new_part_turns` read them from the file afterwards.
pub struct Counting<'a> {
    rule: &'a RuleSet,
    turns: &'a crate::rules::TurnsRule,
    /// The whole part's first turn (`new_part_turns`' `first_only`), then its count once it stopped.
    first_opts: &'a crate::turns::Options,
    first: Option<crate::turns::Reader<'a>>,
    first_turns: Option<u64>,
    chunk_opts: &'a crate::turns::Options,
    /// The chunks: each one's turns and its rendering measured, one parse of each line for both (set
    /// by `cut_at`, where the scan's limit is known).
    chunks: Option<Measure<'a>>,
    /// The first line handed over.
    first_line: Option<u64>,
}

/// Options of the whole part's first-turn read and of a chunk's read (`Keep::Counts` for a dry run).
pub fn counting_options(keep: crate::turns::Keep) -> [crate::turns::Options; 2] {
    let first = crate::turns::Options {
        stop_after_turns: Some(1),
        keep: crate::turns::Keep::Counts,
        ..crate::turns::Options::default()
    };
    let chunk = crate::turns::Options {
        keep,
        ..crate::turns::Options::default()
    };
    [first, chunk]
}

impl<'a> Counting<'a> {
    /// None when the rule set has no turns section.
    pub fn new(rule: &'a RuleSet, opts: &'a [crate::turns::Options; 2]) -> Option<Counting<'a>> {
        Some(Counting {
            rule,
            turns: rule.turns.as_ref()?,
            first_opts: &opts[0],
            first: None,
            first_turns: None,
            chunk_opts: &opts[1],
            chunks: None,
            first_line: None,
        })
    }

    /// Where the scan cuts chunks: where a chunk's rendering reaches `limit` bytes (as `Measure`).
    fn cut_at(&mut self, limit: u64, view: bool) {
        self.chunks = Measure::new(self.rule, self.chunk_opts, limit, view);
    }

    /// Line `line` (`bytes`, ending `end` bytes into the file): whether a chunk ends after it.
    fn line(&mut self, bytes: &[u8], end: u64, line: u64) -> bool {
        use crate::turns::Reader;
        use crate::util::lines::without_bom;
        // Each read strips a BOM from its own first line, as a reader started there does.
        if self.first_line.is_none() {
            self.first_line = Some(line);
            self.first = Some(Reader::new(self.rule, self.turns, line, 0, self.first_opts));
        }
        if let Some(r) = self.first.as_mut() {
            let b = if Some(line) == self.first_line {
                without_bom(bytes)
            } else {
                bytes
            };
            if !r.line(line, end, b) {
                let r = self.first.take().expect("reading");
                self.first_turns = Some(r.finish(0).total_turns);
            }
        }
        (self.chunks.as_mut()).is_some_and(|m| m.line(bytes, end, line))
    }

    /// The scan is over: each chunk's rendered bytes, the last one's too.
    fn close(&mut self) -> Vec<u64> {
        let Some(m) = self.chunks.as_mut() else {
            return Vec::new();
        };
        m.end_chunk();
        m.sizes.clone()
    }

    /// Whether the part holds a turn, and each chunk's summary: None unless the lines handed over
    /// were `r`'s, chunk by chunk (a prefix that was recovered was scanned again without counting).
    pub fn finish(mut self, r: &Range) -> Option<(u64, Vec<Option<crate::turns::PartSummary>>)> {
        if r.recovered.is_some() || self.first_line != Some(r.from_line_before + 1) {
            return None;
        }
        let first = match self.first.take() {
            Some(f) => f.finish(0).total_turns,
            None => self.first_turns?,
        };
        let mut m = self.chunks?;
        m.end_chunk();
        let mut done = m.turns_read;
        // Held per part until the budget is spent: no room for more.
        done.shrink_to_fit();
        (done.len() == r.boundaries.len() + 1).then_some((first, done))
    }
}

#[cfg(test)]
#[path = "range_tests.rs"]
mod tests;
