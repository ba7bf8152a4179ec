//! What a run costs is what its agent reads: the conversation `capture::conversation` renders, not the
//! JSONL around it (about a tenth of it). A new part is measured as its rendering, line by line, in the
//! pass that finds where its lines end: chunks end where their rendering reaches `max_tokens_per_run`, and
//! each run's tokens are estimated from its rendering, the earlier prompts and the prompt.

use crate::capture::conversation::reads_at_most;
use crate::rules::{RuleSet, TurnsRule};
use crate::turns::render::{Cite, Render};
use crate::turns::{Keep, Options, Reader};

/// The capture prompt around a conversation (the instructions, where the conversation is, the range,
/// the summary), at most: what a run reads besides the conversation file.
pub const PROMPT_BYTES: u64 = 3 * 1024;

/// Estimated tokens of so many bytes (the documented four bytes per token).
pub fn tokens(bytes: u64) -> u64 {
    bytes.div_ceil(crate::config::BYTES_PER_TOKEN)
}

/// Estimated tokens a run reads: with a rendering of `rendered` bytes (its entries) of a part starting on
/// `from_line`, the conversation file and the prompt; without one (a rule set with no `turns`), the
/// transcript's `raw` bytes and the prompt.
pub fn run_tokens(rendered: Option<u64>, raw: u64, from_line: u64) -> u64 {
    match rendered {
        Some(r) => tokens(reads_at_most(r, from_line) + PROMPT_BYTES),
        None => tokens(raw + PROMPT_BYTES),
    }
}

/// How a new part is cut into runs: by its rendering's size, `limit` bytes a run.
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    pub limit: u64,
    /// Measure every part, not only one whose raw bytes could pass `limit` (a token budget needs each
    /// part's estimate before it starts any).
    pub always: bool,
}

impl Sizing {
    /// Whether a part of `raw` bytes is measured as its lines are found. One of at most half of `limit`
    /// is one run whatever it holds (an entry never takes twice the bytes of its record).
    pub fn measures(&self, raw: u64) -> bool {
        self.always || raw.saturating_mul(2) > self.limit
    }
}

/// The options a measuring read runs with: only counts besides the rendering.
pub fn options() -> Options {
    Options {
        keep: Keep::Counts,
        ..Options::default()
    }
}

/// The rendering of a new part, measured as the scan hands it each line: where chunks end, and each
/// chunk's rendered bytes (as `capture::conversation` renders that chunk alone) and its turns (as read
/// with `opts`, in the same parse).
pub struct Measure<'a> {
    rule: &'a RuleSet,
    turns: &'a TurnsRule,
    opts: &'a Options,
    cite: Cite,
    limit: u64,
    /// The chunk being measured.
    reader: Option<Reader<'a, Render<std::io::Sink>>>,
    /// Each finished chunk's rendered bytes, and its turns.
    pub sizes: Vec<u64>,
    pub turns_read: Vec<Option<crate::turns::PartSummary>>,
}

impl<'a> Measure<'a> {
    /// None when the rule set has no `turns` section (nothing to render).
    /// `view`: the transcript is a view (its entries cite messages, not lines).
    pub fn new(
        rule: &'a RuleSet,
        opts: &'a Options,
        limit: u64,
        view: bool,
    ) -> Option<Measure<'a>> {
        Some(Measure {
            rule,
            turns: rule.turns.as_ref()?,
            opts,
            cite: match view {
                true => Cite::Message,
                false => Cite::Line,
            },
            limit,
            reader: None,
            sizes: Vec::new(),
            turns_read: Vec::new(),
        })
    }

    /// Complete line `line` of the transcript (`bytes` as the scan gives them, ending `end` bytes into
    /// the file): whether a chunk ends after it.
    pub fn line(&mut self, bytes: &[u8], end: u64, line: u64) -> bool {
        let (rule, turns, opts, cite) = (self.rule, self.turns, self.opts, self.cite);
        let fresh = self.reader.is_none();
        let r = self.reader.get_or_insert_with(|| {
            let sink = Render::new(std::io::sink(), cite, turns.merge_repeated_prompts);
            Reader::with_sink(rule, turns, line, 0, opts, sink)
        });
        // Each read strips a BOM from its own first line, as a reader started there does.
        let bytes = match fresh {
            true => crate::util::lines::without_bom(bytes),
            false => bytes,
        };
        r.line(line, end, bytes);
        if r.sink().written() < self.limit {
            return false;
        }
        self.end_chunk();
        true
    }

    /// The chunk being read ends (at a cut, or the scan's end).
    pub fn end_chunk(&mut self) {
        if let Some(r) = self.reader.take() {
            let (t, sink) = r.finish_with_sink(0);
            self.turns_read.push(Some(crate::turns::summarize(&t)));
            // Writing to a sink does not fail.
            self.sizes
                .push(sink.finish().map(|(_, _, n)| n).unwrap_or(0));
        }
    }

    /// Each chunk's rendered bytes, the last one's too.
    pub fn finish(mut self) -> Vec<u64> {
        self.end_chunk();
        self.sizes
    }
}
