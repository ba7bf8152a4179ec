//! The conversation a capture run's agent reads, `runs/<run-id>.transcript.md`: the part to capture
//! rendered from the rule set's `turns` section (`turns::render`), after the prompts of the part before
//! it, for context. The prompt still names the original transcript and its cursor; the agent may open
//! it at any line an entry cites, but what it is asked to read is this, about a tenth of the JSONL.
//!
//! The earlier part is listed compactly: its user prompts with their lines, each cut at
//! `EARLIER_PROMPT_MAX` characters, within a budget of half the new part's rendering (at least
//! `EARLIER_MIN`, at most `EARLIER_MAX` bytes), the first prompt and the latest ones first to keep.

use crate::rules::views::VIEW_HEADER;
use crate::rules::RuleSet;
use crate::turns::render::{self, Cite, Shown};
use crate::turns::text::quoted;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Characters of an earlier prompt shown.
pub const EARLIER_PROMPT_MAX: usize = 240;
/// The earlier prompts' budget: half the new part's rendering, within these bounds.
pub const EARLIER_MIN: u64 = 2 * 1024;
pub const EARLIER_MAX: u64 = 16 * 1024;
/// Earlier prompts read at most (the latest of them kept).
const EARLIER_READ_MAX: usize = 1000;
/// The most of the latest answer before the new part shown (its end), within the earlier part's
/// budget (at most half of it): what the new part's first prompt ("do option 1", "proceed") answers.
pub const EARLIER_ANSWER_MAX: usize = 2 * 1024;
/// At most this much of the latest compaction summary before the part (its start).
pub const EARLIER_COMPACTION_MAX: usize = 4 * 1024;
/// What a rendering adds to its part's entries, at most: its header and the footer.
pub const HEADER_BYTES: u64 = 1024;

/// The part of a transcript (or of a view, `discover::views`) a run captures.
pub struct Part<'a> {
    pub rule: &'a RuleSet,
    /// The file read: the JSONL transcript, or the view.
    pub transcript: &'a Path,
    pub session_id: &'a str,
    /// Lines `from_line..=to_line`, bytes `[from_byte, to_byte)`.
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
}

/// What a rendering wrote.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// Bytes of the whole file...
    pub bytes: u64,
    /// ...of them the new part's entries...
    pub part_bytes: u64,
    /// ...and what they showed.
    pub shown: Shown,
}

/// The earlier prompts' budget for a new part whose entries take `part_bytes`.
pub fn earlier_budget(part_bytes: u64) -> u64 {
    (part_bytes / 2).clamp(EARLIER_MIN, EARLIER_MAX)
}

/// What a run's agent reads of a part whose entries take `part_bytes`, at most: the entries, the header
/// and footer, and (after line 1) the earlier prompts.
pub fn reads_at_most(part_bytes: u64, from_line: u64) -> u64 {
    let earlier = match from_line > 1 {
        true => earlier_budget(part_bytes),
        false => 0,
    };
    part_bytes + HEADER_BYTES + earlier
}

/// What a view's header says of the store it was read from.
fn view_store(transcript: &Path) -> Option<String> {
    let mut first = Vec::new();
    let f = crate::discover::open_transcript(transcript).ok()?;
    io::BufRead::read_until(&mut io::BufReader::new(f.take(1 << 20)), b'\n', &mut first).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&first).ok()?;
    v[VIEW_HEADER]["store"].as_str().map(str::to_string)
}

/// Writes the conversation of `part` to `out`: header, earlier prompts, the part's entries, footer.
pub fn write(part: &Part<'_>, out: &mut dyn Write) -> io::Result<Written> {
    let rule = part.rule;
    let Some(turns) = &rule.turns else {
        return Err(io::Error::other(format!(
            "rule set {} has no `turns` section: nothing to render",
            rule.id
        )));
    };
    let views = rule.is_view(part.transcript);
    let cite = match views {
        true => Cite::Message,
        false => Cite::Line,
    };
    // The part's entries first, into memory: the earlier prompts' budget depends on their size.
    let mut f = crate::discover::open_transcript(part.transcript)?;
    f.seek(SeekFrom::Start(part.from_byte))?;
    let span = f.take(part.to_byte.saturating_sub(part.from_byte));
    let (entries, shown, part_bytes) =
        render::part(rule, turns, span, part.from_line, cite, Vec::new())?;
    let mut head = String::new();
    head.push_str(&format!(
        "# Conversation to capture: {} session {}\n\n",
        rule.name,
        quoted(part.session_id)
    ));
    let (what, range) = match views {
        true => (
            format!(
                "the app's store (almanac's copy of the session: {})",
                quoted(&part.transcript.display().to_string())
            ),
            format!(
                "Messages {} to {}",
                part.from_line.saturating_sub(1).max(1),
                part.to_line.saturating_sub(1)
            ),
        ),
        false => (
            "the transcript".to_string(),
            format!(
                "Lines {} to {} (bytes {} to {})",
                part.from_line, part.to_line, part.from_byte, part.to_byte
            ),
        ),
    };
    let original = match views {
        true => {
            view_store(part.transcript).unwrap_or_else(|| part.transcript.display().to_string())
        }
        false => part.transcript.display().to_string(),
    };
    head.push_str(&format!(
        "almanac rendered this from {what}:\n  {}\n{range} are the new part, below in full: prompts and \
         answers, each tool call with its main argument, each result's start ({} characters) and size. {}: \
         read the original there for what an entry cut. Only almanac's headings (`[{}] user:`, `## …`) \
         start a line; the session's text is indented or follows a heading.\n",
        quoted(&original),
        render::RESULT_HEAD,
        cite.legend(),
        cite.at(124)
    ));
    out.write_all(head.as_bytes())?;
    let mut bytes = head.len() as u64;
    if part.from_line > 1 {
        bytes += write_earlier(part, cite, earlier_budget(part_bytes), out)?;
    }
    let new = format!(
        "\n## The new part, to capture: {}\n",
        match views {
            true => format!(
                "messages {} to {}",
                part.from_line.saturating_sub(1).max(1),
                part.to_line.saturating_sub(1)
            ),
            false => format!("lines {} to {}", part.from_line, part.to_line),
        }
    );
    out.write_all(new.as_bytes())?;
    out.write_all(&entries)?;
    bytes += new.len() as u64 + part_bytes;
    Ok(Written {
        bytes,
        part_bytes,
        shown,
    })
}

/// What the part before a new part leaves for its context, besides its prompts: the latest answer.
#[derive(Default)]
struct Before {
    /// The latest assistant text (its end), its line and whether it was cut; none once a prompt
    /// follows it.
    answer: Option<(u64, String, bool)>,
    /// The latest compaction summary (its start, at most `EARLIER_COMPACTION_MAX`), its line and
    /// whether it was cut.
    compaction: Option<(u64, String, bool)>,
}

impl crate::turns::Sink for Before {
    const RENDERS: bool = true;
    const CALLS: bool = false;

    fn prompt(&mut self, _line: u64, _text: &str, _queued: bool, _label: Option<&str>) {
        self.answer = None;
    }

    fn answer(&mut self, line: u64, text: &str, _group: Option<&str>) {
        let cut = text.len() > EARLIER_ANSWER_MAX;
        let tail = match cut {
            true => {
                let mut at = text.len() - EARLIER_ANSWER_MAX;
                while !text.is_char_boundary(at) {
                    at += 1;
                }
                &text[at..]
            }
            false => text,
        };
        self.answer = Some((line, tail.to_string(), cut));
    }

    fn compaction(&mut self, line: u64, text: &str) {
        let (kept, cut) = crate::turns::cut_str(text.trim(), EARLIER_COMPACTION_MAX);
        self.compaction = Some((line, kept.to_string(), cut));
    }
}

/// The prompts before the part, within `budget` bytes: the first one and the latest that fit; then
/// the latest answer before the part (its end), which the part's first prompt may answer.
fn write_earlier(part: &Part<'_>, cite: Cite, budget: u64, out: &mut dyn Write) -> io::Result<u64> {
    let Some(turns) = &part.rule.turns else {
        return Ok(0);
    };
    let f = crate::discover::open_transcript(part.transcript)?;
    let opts = crate::turns::Options {
        keep: crate::turns::Keep::Prompts,
        max_turns: EARLIER_READ_MAX,
        ..crate::turns::Options::default()
    };
    let mut r = crate::turns::Reader::with_sink(part.rule, turns, 1, 0, &opts, Before::default());
    let mut lines = crate::util::lines::LineReader::new(f.take(part.from_byte));
    while let Some(l) = lines.next_line_salvaged()? {
        if !l.terminated {
            break;
        }
        r.line(l.number, l.end, l.bytes);
    }
    let (t, before) = r.finish_with_sink(lines.bytes_read());
    // The latest answer's end first, within half the budget; the prompts in what is left.
    let answer = before
        .answer
        .filter(|(_, a, _)| !a.trim().is_empty())
        .map(|(line, a, cut)| {
            let room = (budget as usize / 2).min(EARLIER_ANSWER_MAX);
            let a = a.trim();
            let mut at = a.len().saturating_sub(room);
            while !a.is_char_boundary(at) {
                at += 1;
            }
            let block = crate::turns::text::indented(&a[at..]);
            let head = format!(
                "The agent's latest answer before the new part, [{}]{}:\n",
                cite.at(line),
                if cut || at > 0 { " (its end)" } else { "" },
            );
            head + &block
        });
    let budget = budget.saturating_sub(answer.as_ref().map_or(0, |a| a.len() as u64));
    // The latest compaction summary's start, within half of what is left: what the session was about
    // when the client compacted it, which the prompts after it build on.
    let compaction = before
        .compaction
        .filter(|(_, c, _)| !c.is_empty())
        .map(|(line, c, cut)| {
            let room = (budget as usize / 2).min(EARLIER_COMPACTION_MAX);
            let (kept, shorter) = crate::turns::cut_str(&c, room);
            format!(
                "The latest compaction summary before the new part, [{}]{}:\n{}",
                cite.at(line),
                if cut || shorter { " (its start)" } else { "" },
                crate::turns::text::indented(kept)
            )
        });
    let budget = budget.saturating_sub(compaction.as_ref().map_or(0, |c| c.len() as u64));
    let entries: Vec<String> = t
        .records
        .iter()
        .filter_map(|r| {
            let u = r.user.as_deref()?;
            let text = render::one_line(u, EARLIER_PROMPT_MAX);
            Some(format!("[{}] {text}\n", cite.at(r.line)))
        })
        .collect();
    // The first, then the latest while they fit.
    let mut keep = vec![false; entries.len()];
    let mut used = 0u64;
    let order = (0..entries.len()).take(1).chain((1..entries.len()).rev());
    for i in order {
        let n = entries[i].len() as u64;
        if used + n > budget && used > 0 {
            break;
        }
        keep[i] = true;
        used += n;
    }
    let upto = match cite {
        Cite::Line => format!("line {}", part.from_line - 1),
        Cite::Message => format!("message {}", part.from_line.saturating_sub(2)),
    };
    let shown = keep.iter().filter(|k| **k).count() as u64;
    let mut text = format!(
        "\n## Earlier in this session, through {upto}: already captured (or from before capture began), for \
         context only\n{} user prompt{} before the new part{}:\n",
        t.user_turns,
        if t.user_turns == 1 { "" } else { "s" },
        if shown < t.user_turns {
            format!(", {shown} of them shown (the first and the latest)")
        } else {
            String::new()
        }
    );
    let mut gap = false;
    for (i, e) in entries.iter().enumerate() {
        match keep[i] {
            true => {
                text.push_str(e);
                gap = false;
            }
            false if !gap => {
                text.push_str("[…]\n");
                gap = true;
            }
            false => {}
        }
    }
    if let Some(c) = compaction {
        text.push_str(&c);
    }
    if let Some(a) = answer {
        text.push_str(&a);
    }
    out.write_all(text.as_bytes())?;
    Ok(text.len() as u64)
}

/// Writes the conversation of `part` to `path` (private, atomically); what was written and its
/// `sha256:`.
pub fn write_file(part: &Part<'_>, path: &Path) -> io::Result<(Written, String)> {
    use sha2::Digest;
    let mut written = None;
    let mut hasher = sha2::Sha256::new();
    crate::util::atomic::write_atomic_with(path, |w| {
        let mut tee = Tee { w, h: &mut hasher };
        written = Some(write(part, &mut tee)?);
        Ok(())
    })?;
    let hash = format!("sha256:{}", crate::util::ids::hex(&hasher.finalize()));
    Ok((written.expect("written on success"), hash))
}

/// A writer that hashes what it passes on.
struct Tee<'a> {
    w: &'a mut dyn Write,
    h: &'a mut sha2::Sha256,
}

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.w.write(buf)?;
        sha2::Digest::update(self.h, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}
