//! What a rendering hears of a turn read (`Reader::with_sink`).

/// What a rendering of the conversation hears from a turn read, record by record, as the rules classify
/// them (`render::Render`); `()` hears nothing. The reader hands a sink that `RENDERS` every line (not
/// only those a count needs) parsed with what a rendering reads.
pub trait Sink {
    const RENDERS: bool = false;
    /// With `RENDERS`: whether it hears tool calls (with their arguments) and results too.
    const CALLS: bool = true;
    /// A user prompt (`queued`: written when it was queued; `label`: how its rule names it).
    fn prompt(&mut self, _line: u64, _text: &str, _queued: bool, _label: Option<&str>) {}
    /// Assistant text; `group`: its message id.
    fn answer(&mut self, _line: u64, _text: &str, _group: Option<&str>) {}
    fn call(&mut self, _line: u64, _call: &crate::rules::conversation::Call) {}
    fn result(&mut self, _line: u64, _result: &crate::rules::conversation::ResultText<'_>) {}
    /// The agent's thinking (`turns.thinking`).
    fn thinking(&mut self, _line: u64, _text: &str) {}
    /// A subagent's or a background task's report (`turns.reports`), `label` its rule's.
    fn report(&mut self, _line: u64, _text: &str, _label: Option<&str>) {}
    /// The summary the client wrote when it compacted the session (`turns.compaction`).
    fn compaction(&mut self, _line: u64, _text: &str) {}
    /// A record the rules ignore that holds text (a reminder, a local command, the app's notice).
    fn note(&mut self, _line: u64, _text: &str) {}
    /// A record inside a skipped region (a subagent's, a copied history).
    fn skipped(&mut self, _line: u64) {}
    /// The running turn's prompt, written again after a `resends_prompt` record: not a new prompt.
    fn resent(&mut self, _line: u64) {}
    /// After every complete line handed to the reader past `skip_through`, whatever it held.
    fn end_line(&mut self, _line: u64) {}
    /// Line `line` was over the line reader's limit (`bytes` long): read as its compact copy
    /// (`util::salvage`) when `read`, else not at all.
    fn oversized(&mut self, _line: u64, _bytes: u64, _read: bool) {}
}

impl Sink for () {}
