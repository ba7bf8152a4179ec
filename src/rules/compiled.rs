//! What the engine runs: rule sets with globs built, JSONPaths parsed once and regexes compiled.

use super::doc::{Doc, Node};
use globset::GlobSet;
use jsonpath_rust::parser::model::JpQuery;
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Where a rule set or policy came from, for messages.
#[derive(Debug, Clone)]
pub enum Origin {
    Builtin(&'static str),
    File(PathBuf),
}

/// What an `extends:` took from its base.
#[derive(Debug, Clone)]
pub struct Extended {
    pub base: String,
    pub base_origin: String,
    /// Top-level keys the extending file gives itself, in its order.
    pub own: Vec<String>,
}

impl fmt::Display for Extended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "extends {} from {}; its own file gives {}, the rest is {}'s",
            self.base,
            self.base_origin,
            self.own.join(", "),
            self.base
        )
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin(name) => write!(f, "{name} (built in)"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug)]
pub struct RuleSet {
    pub id: String,
    pub name: String,
    pub origin: Origin,
    /// The rule set this one `extends`, and the top-level keys its own file gives (the rest are the
    /// base's), for `rules explain` and `rules list`.
    pub extends: Option<Extended>,
    /// Covered by a sweep given no app list (`--apps`, `[automation.capture] apps`); false for a
    /// shipped set that is off until enabled.
    pub enabled_by_default: bool,
    pub stores: Vec<Store>,
    pub head: HeadLimits,
    /// Fields in rule-file order; `session_id` and `cwd` are always present.
    pub fields: Vec<Field>,
    pub subagent_paths: Option<GlobSet>,
    pub subagent_path_patterns: Vec<String>,
    pub subagent_records: Vec<RecordTest>,
    pub exclude_when: Vec<RecordTest>,
    /// Where a record's time is, in order.
    pub timestamps: Vec<JsonPath>,
    /// Where a record's stable id is (`record_id`); None when the app gives records no id.
    pub record_id: Option<JsonPath>,
    /// How to read turns; None when the rule set has no `turns` section.
    pub turns: Option<TurnsRule>,
    /// What of a record the head reader's sources and tests read (`rules::needs`).
    pub head_reads: super::needs::Need,
}

#[derive(Debug)]
pub struct TurnsRule {
    pub ignore: Vec<Predicate>,
    /// The same prompt written again before any assistant text or tool (an app writing one message as
    /// two record kinds) is one turn.
    pub merge_repeated_prompts: bool,
    /// A record after which the app writes the running turn's prompt again (Cursor's context block
    /// mid-turn): the next prompt, if it is the running turn's, is that prompt and not another.
    pub resends_prompt: Option<Predicate>,
    pub skip: Vec<Skip>,
    pub user: Vec<TurnText>,
    /// How queued prompts reach the model (None: a queued prompt counts when it is queued).
    pub queue: Option<Queue>,
    pub assistant: Vec<TurnText>,
    pub tools: Vec<super::conversation::ToolRule>,
    /// Tool results, for the rendering of a conversation only (counts never read them).
    pub results: Vec<super::conversation::ResultRule>,
    /// The agent's thinking, and the reports of subagents and background tasks in records the rules
    /// ignore: for the rendering only.
    pub thinking: Vec<TurnText>,
    pub reports: Vec<TurnText>,
    /// The summaries a client writes when it compacts the session: for renderings only.
    pub compaction: Vec<TurnText>,
    /// What of a record these rules (and the rule set's timestamps) read: the turn reader parses only
    /// that (`rules::needs`)...
    pub reads: super::needs::Need,
    /// ...and what a rendering reads besides: tool calls' arguments and results' text.
    pub render_reads: super::needs::Need,
    /// The byte searches that pass a line on to the parse, built once with the rules (`compile` always
    /// sets it; None only while it builds the rest).
    pub filter: Option<super::prefilter::Prefilter>,
}

impl TurnsRule {
    /// What the turn reader's rules read of a record, with the record's time.
    pub(crate) fn needs(&self, timestamps: &[JsonPath]) -> super::needs::Need {
        let mut n = super::needs::Needs::default();
        self.read_by_turns(&mut n, timestamps);
        n.finish()
    }

    fn read_by_turns(&self, n: &mut super::needs::Needs, timestamps: &[JsonPath]) {
        let preds =
            self.ignore
                .iter()
                .chain(&self.resends_prompt)
                .chain(self.skip.iter().flat_map(|s| {
                    [
                        Some(&s.from),
                        Some(&s.until),
                        s.until_after.as_ref(),
                        s.after.as_ref(),
                    ]
                    .into_iter()
                    .flatten()
                }));
        preds.for_each(|p| n.predicate(p));
        if let Some(q) = &self.queue {
            q.predicates().for_each(|p| n.predicate(p));
        }
        for t in self.user.iter().chain(&self.assistant) {
            t.when.iter().for_each(|p| n.predicate(p));
            t.placeholder.iter().for_each(|(p, _)| n.predicate(p));
            // Text and group ids are taken only from strings.
            t.text.iter().chain(&t.group).for_each(|p| n.scalar(p));
        }
        for t in &self.tools {
            t.when.iter().for_each(|p| n.predicate(p));
            // A script's calls are its tools' names.
            n.under(t.each.as_ref(), |n| {
                n.scalar(&t.name);
                t.script.iter().for_each(|s| n.scalar(&s.path));
            });
        }
        timestamps.iter().for_each(|p| n.scalar(p));
    }

    /// What a rendering of the conversation reads: what `needs` reads, the tools' arguments and the
    /// results' text.
    pub(crate) fn render_needs(&self, timestamps: &[JsonPath]) -> super::needs::Need {
        let mut n = super::needs::Needs::default();
        let sources = |n: &mut super::needs::Needs, list: &[super::conversation::TextSource]| {
            list.iter().for_each(|s| n.scalar(&s.path))
        };
        for t in &self.tools {
            n.under(t.each.as_ref(), |n| {
                sources(n, &t.argument);
                sources(n, &t.reason);
                if let Some(s) = &t.script {
                    n.scalar(&s.path);
                }
            });
        }
        for t in (self.thinking.iter().chain(&self.reports)).chain(&self.compaction) {
            t.when.iter().for_each(|p| n.predicate(p));
            t.text.iter().for_each(|p| n.scalar(p));
        }
        for r in &self.results {
            r.when.iter().for_each(|p| n.predicate(p));
            n.under(r.each.as_ref(), |n| {
                sources(n, &r.text);
                sources(n, &r.exit_code);
                sources(n, &r.error);
                r.failed.iter().for_each(|p| n.predicate(p));
            });
        }
        self.read_by_turns(&mut n, timestamps);
        n.finish()
    }
}

/// A region of records that are not part of any turn.
#[derive(Debug)]
pub struct Skip {
    /// The region starts at a record where this holds...
    pub from: Predicate,
    /// ...and ends before the next record where this holds...
    pub until: Predicate,
    /// ...read after a record where this holds was read in the region (None: any)...
    pub until_after: Option<Predicate>,
    /// ...on this transcript line or later (1-based; 1: anywhere)...
    pub earliest_line: u64,
    /// ...and only once a record where this holds has been read (None: from the start).
    pub after: Option<Predicate>,
}

#[derive(Debug)]
pub struct TurnText {
    pub when: Option<Predicate>,
    pub text: Vec<JsonPath>,
    pub group: Option<JsonPath>,
    /// A prompt written when it is queued: the same text written later as a prompt is that prompt.
    pub queued: bool,
    /// The text of a record that holds no text where `when` holds (an image-only prompt: `[image]`).
    pub placeholder: Option<(Predicate, String)>,
    /// The text is group 1 of every match of this regex in what the paths select (Cline's `<task>`,
    /// `<feedback>`, `<user_message>` wrappers); a record where it matches nothing holds no text.
    pub extract: Option<Regex>,
    /// With `extract`: each match is a prompt of its own (Cline merges the messages sent while a
    /// request was interrupted into one), not one text joined by blank lines.
    pub each_match: bool,
    /// How the rendering names a prompt of this entry: `user (<label>)` (the user's answer to the
    /// agent's question, written as a tool's result).
    pub label: Option<String>,
}

/// How queued prompts reach the model: a queued prompt is held, not counted, until a record delivers
/// it and dropped when a record withdraws every held one (`withdraw`); one still held when the file
/// ends is not a prompt yet. A prompt record carrying its text delivers it (and is the prompt). The
/// queue's own records deliver the oldest held one: `deliver` hands it on (a record carrying its text
/// usually follows and is the prompt, possibly after other prompts; if none comes before the end of the
/// read, it counts where it was queued), `inject` takes it into the running turn (it counts now, where it was queued).
#[derive(Debug)]
pub struct Queue {
    pub deliver: Option<Predicate>,
    pub inject: Option<Predicate>,
    pub withdraw: Option<Predicate>,
    /// Group 1 is the command a prompt record runs: it carries a queued prompt that was typed as that
    /// command, alone or followed by its arguments (Claude Code queues `/review args` as typed and
    /// writes the record in its `<command-name>` form).
    pub command: Option<Regex>,
}

impl Queue {
    pub fn predicates(&self) -> impl Iterator<Item = &Predicate> {
        [&self.deliver, &self.inject, &self.withdraw]
            .into_iter()
            .flatten()
    }
}

impl TurnText {
    pub fn applies<D: Doc>(&self, record: &D) -> bool {
        self.when.as_ref().is_none_or(|w| w.holds(record))
    }

    /// Whether `text` would give any: the same test, without joining the parts.
    pub fn has_text<D: Doc>(&self, record: &D) -> bool {
        if self.extract.is_some() {
            return self.text(record).is_some();
        }
        self.text
            .iter()
            .any(|p| p.any(record, |v| v.as_str().is_some_and(|s| !s.trim().is_empty())))
            || self
                .placeholder
                .as_ref()
                .is_some_and(|(w, _)| w.holds(record))
    }

    /// The prompts of a record: its text, or with `each_match` each match of `extract` (in order).
    pub fn prompts<D: Doc>(&self, record: &D) -> Option<Vec<String>> {
        match (&self.extract, self.each_match) {
            (Some(re), true) => self
                .first(record, |joined| {
                    let parts = matches(re, &joined);
                    (!parts.is_empty()).then(|| parts.into_iter().map(str::to_string).collect())
                })
                .or_else(|| self.placeholder_text(record).map(|t| vec![t])),
            _ => self.text(record).map(|t| vec![t]),
        }
    }

    /// The text of the first path that selects non-empty strings, several joined by a blank line.
    pub fn text<D: Doc>(&self, record: &D) -> Option<String> {
        self.first(record, |joined| match &self.extract {
            None => Some(joined),
            Some(re) => extracted(re, &joined),
        })
        .or_else(|| self.placeholder_text(record))
    }

    /// The placeholder's text, where it holds.
    fn placeholder_text<D: Doc>(&self, record: &D) -> Option<String> {
        let (when, text) = self.placeholder.as_ref()?;
        when.holds(record).then(|| text.clone())
    }

    /// `take` of the text of the first path that selects non-empty strings (several joined by a blank
    /// line) for which it gives something.
    fn first<D: Doc, T>(&self, record: &D, take: impl Fn(String) -> Option<T>) -> Option<T> {
        self.text.iter().find_map(|p| {
            let mut joined: Option<String> = None;
            p.any(record, |v| {
                if let Some(s) = v.as_str().filter(|s| !s.trim().is_empty()) {
                    match &mut joined {
                        Some(j) => {
                            j.push_str("\n\n");
                            j.push_str(s);
                        }
                        None => joined = Some(s.to_string()),
                    }
                }
                false
            });
            take(joined?)
        })
    }
}

/// Group 1 of every match of `re` in `text`, trimmed, joined by a blank line; None when nothing matched.
fn extracted(re: &Regex, text: &str) -> Option<String> {
    let parts = matches(re, text);
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// Group 1 of every match of `re` in `text`, trimmed, the empty ones left out.
fn matches<'t>(re: &Regex, text: &'t str) -> Vec<&'t str> {
    re.captures_iter(text)
        .filter_map(|c| c.get(1).map(|g| g.as_str().trim()))
        .filter(|s| !s.is_empty())
        .collect()
}

impl RuleSet {
    /// Whether every store of the set is read into views (`discover::views`).
    pub fn reads_views(&self) -> bool {
        !self.stores.is_empty() && self.stores.iter().all(|s| s.kind.view().is_some())
    }

    /// Whether a store of the set is read into views.
    pub fn has_views(&self) -> bool {
        self.stores.iter().any(|s| s.kind.view().is_some())
    }

    /// Whether `path`, a transcript of this set, is one of its views. A set with stores of both kinds
    /// (Goose's JSONL files and its database) tells them apart by where the file is, never by what it
    /// holds: a JSONL transcript could carry a record shaped like a view's header.
    pub fn is_view(&self, path: &std::path::Path) -> bool {
        match (self.has_views(), self.reads_views()) {
            (false, _) => false,
            (true, true) => true,
            (true, false) => super::views::under_views_root(path),
        }
    }

    /// What the field sources, subagent and exclusion tests and `record_id` read of a record.
    pub(crate) fn head_needs(&self) -> super::needs::Need {
        let mut n = super::needs::Needs::default();
        for s in self.fields.iter().flat_map(|f| &f.sources) {
            s.when.iter().for_each(|p| n.predicate(p));
            // `FieldSource::extract` takes only a string or a number.
            if let SourceKind::Record { path, .. } = &s.kind {
                n.scalar(path);
            }
        }
        for t in self.subagent_records.iter().chain(&self.exclude_when) {
            t.when.iter().for_each(|p| n.predicate(p));
            n.predicate(&t.test);
        }
        self.record_id.iter().for_each(|p| n.scalar(p));
        n.finish()
    }

    /// The stable id of one record (`record_id`): the first string it selects.
    pub fn record_id_of(&self, record: &Value) -> Option<String> {
        let p = self.record_id.as_ref()?;
        p.select(record)
            .into_iter()
            .find_map(|v| v.as_str().map(str::to_string))
    }

    /// The `subagent.paths` glob a store file's path (relative to its root) matches, if one does.
    pub fn subagent_path(&self, rel: &str) -> Option<&str> {
        let set = self.subagent_paths.as_ref()?;
        let i = *set.matches(rel).first()?;
        self.subagent_path_patterns.get(i).map(String::as_str)
    }

    /// The time of one record: the first time any `timestamps` path selects, an RFC 3339 string or a
    /// number since the Unix epoch ([`epoch_time`]).
    pub fn record_time<D: Doc>(&self, record: &D) -> Option<chrono::DateTime<chrono::Utc>> {
        self.timestamps.iter().find_map(|p| {
            let mut time = None;
            p.any(record, |v| {
                time = match v.number() {
                    Some(n) => n.as_f64().and_then(epoch_time),
                    None => v
                        .as_str()
                        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                        .map(|t| t.with_timezone(&chrono::Utc)),
                };
                time.is_some()
            });
            time
        })
    }
}

#[derive(Debug)]
pub struct Store {
    pub name: String,
    pub roots: Vec<RootSpec>,
    pub include: GlobSet,
    pub include_patterns: Vec<String>,
    pub exclude: GlobSet,
    pub exclude_patterns: Vec<String>,
    pub follow_symlinks: bool,
    /// How its files are read (`format`).
    pub kind: super::views::StoreKind,
    /// How deep below a root a file `include` selects can be, when no pattern has `**`: a walk goes no
    /// deeper (a root that is a whole repo, for Aider's log at its top, is not walked through).
    pub max_depth: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct RootSpec {
    pub env: Option<String>,
    pub split: Option<String>,
    pub default: Vec<String>,
    pub join: Option<String>,
    /// The repos almanac knows are the root's directories (then `join`).
    pub known_repos: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_records: u32,
    pub max_bytes: u64,
}

#[derive(Debug)]
pub struct Field {
    pub name: String,
    pub sources: Vec<Source>,
}

#[derive(Debug)]
pub struct Source {
    /// One of the sources a view's header gives (read from views only).
    pub header: bool,
    pub when: Option<Predicate>,
    pub first_only: bool,
    pub kind: SourceKind,
    /// One line describing the source, for `rules explain`.
    pub describe: String,
}

#[derive(Debug)]
pub enum SourceKind {
    Record {
        path: JsonPath,
        regex: Option<Regex>,
    },
    Filename(Regex),
    /// Group 1 of a regex over the transcript's path under its store root (a directory's name).
    Path(Regex),
    /// A file beside the transcript (`template` from its `{dir}`, `{stem}`): its text, or the value
    /// `path` selects in its JSON; `regex` applied to it.
    Sidecar {
        template: String,
        path: Option<JsonPath>,
        regex: Option<Regex>,
    },
}

#[derive(Debug)]
pub struct RecordTest {
    /// The test a view's header gives (applied to views only).
    pub header: bool,
    pub when: Option<Predicate>,
    pub first_only: bool,
    pub test: Predicate,
    pub describe: String,
}

/// A JSONPath parsed once at load time, with its text kept for messages.
#[derive(Debug)]
pub struct JsonPath {
    pub text: String,
    query: JpQuery,
    /// The direct form of the path, when it has one (`rules::fastpath`): the common case.
    fast: Option<super::fastpath::FastPath>,
}

impl JsonPath {
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let query = jsonpath_rust::parser::parse_json_path(text).map_err(|e| {
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("").trim().to_string();
            format!("invalid JSONPath \"{text}\": {first}")
        })?;
        Ok(JsonPath {
            text: text.to_string(),
            fast: super::fastpath::FastPath::of(&query),
            query,
        })
    }

    pub fn query(&self) -> &JpQuery {
        &self.query
    }

    /// Whether `f` holds for a node the path selects in `record`, asked in `select`'s order until it
    /// does (without collecting them when the path has a fast form; a pruned record is made a `Value`
    /// for one without).
    pub fn any<D: Doc>(&self, record: &D, mut f: impl FnMut(Node<'_, D>) -> bool) -> bool {
        match &self.fast {
            Some(fast) => fast.any(record, &mut |d| f(Node::Doc(d))),
            None => record.with_value(|v| self.general(v).into_iter().any(|x| f(Node::Json(x)))),
        }
    }

    /// Every node the path selects in `record`.
    pub fn select<'a>(&self, record: &'a Value) -> Vec<&'a Value> {
        match &self.fast {
            Some(f) => f.select(record),
            None => self.general(record),
        }
    }

    /// What `jsonpath_rust` selects.
    fn general<'a>(&self, record: &'a Value) -> Vec<&'a Value> {
        match jsonpath_rust::query::js_path_process(&self.query, record) {
            Ok(refs) => refs.into_iter().map(|r| r.val()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

#[derive(Debug)]
pub enum Predicate {
    Exists(JsonPath),
    Missing(JsonPath),
    Equals(JsonPath, Value),
    In(JsonPath, Vec<Value>),
    Matches(JsonPath, Regex),
    All(Vec<Predicate>),
    Any(Vec<Predicate>),
    Not(Box<Predicate>),
}

impl Predicate {
    pub fn holds<D: Doc>(&self, record: &D) -> bool {
        match self {
            Predicate::Exists(p) => p.any(record, |_| true),
            Predicate::Missing(p) => !p.any(record, |_| true),
            Predicate::Equals(p, v) => p.any(record, |x| x.equals(v)),
            Predicate::In(p, vs) => p.any(record, |x| vs.iter().any(|v| x.equals(v))),
            Predicate::Matches(p, re) => {
                p.any(record, |x| x.as_str().is_some_and(|s| re.is_match(s)))
            }
            Predicate::All(ps) => ps.iter().all(|p| p.holds(record)),
            Predicate::Any(ps) => ps.iter().any(|p| p.holds(record)),
            Predicate::Not(p) => !p.holds(record),
        }
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, op: &str, ps: &[Predicate]| {
            write!(f, "{op}(")?;
            for (i, p) in ps.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{p}")?;
            }
            write!(f, ")")
        };
        match self {
            Predicate::Exists(p) => write!(f, "exists {}", p.text),
            Predicate::Missing(p) => write!(f, "missing {}", p.text),
            Predicate::Equals(p, v) => write!(f, "{} == {v}", p.text),
            Predicate::In(p, vs) => write!(f, "{} in {}", p.text, Value::Array(vs.clone())),
            Predicate::Matches(p, re) => write!(f, "{} ~ /{}/", p.text, re.as_str()),
            Predicate::All(ps) => list(f, "all", ps),
            Predicate::Any(ps) => list(f, "any", ps),
            Predicate::Not(p) => write!(f, "not({p})"),
        }
    }
}

impl Source {
    /// The value this source reads from `record`, if any: the first non-empty string (or number).
    pub fn extract<D: Doc>(&self, record: &D) -> Option<String> {
        let SourceKind::Record { path, regex } = &self.kind else {
            return None;
        };
        let mut found = None;
        path.any(record, |node| {
            let text = match (node.as_str(), node.number()) {
                (Some(s), _) if !s.is_empty() => s.to_string(),
                (_, Some(n)) => n.to_string(),
                _ => return false,
            };
            found = match regex {
                None => Some(text),
                Some(re) => capture(re, &text),
            };
            found.is_some()
        });
        found
    }
}

/// The first capture group of `re` in `text`, or the whole match when the regex has no group.
pub fn capture(re: &Regex, text: &str) -> Option<String> {
    let caps = re.captures(text)?;
    let m = caps.get(1).or_else(|| caps.get(0))?;
    let s = m.as_str().trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The eligibility policy: ordered checks, data from `rules/policy.yaml`.
#[derive(Debug, Clone)]
pub struct Policy {
    pub origin: Origin,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub kind: CheckKind,
    pub enabled: bool,
}

/// The quiet window when neither the policy's `quiet-window` check, `config.toml` nor `--quiet` sets
/// one. `rules/policy.yaml` writes the same 45m out, for readers of the data (a test keeps them equal).
pub const DEFAULT_QUIET: Duration = Duration::from_secs(45 * 60);

#[derive(Debug, Clone, PartialEq)]
pub enum CheckKind {
    NoSessionId,
    NoCwd,
    NoAlmanacRepo,
    InternalAlmanacSession,
    ExcludedByRule,
    CaptureAlreadyPending,
    RetryBudgetExhausted,
    BeforeAutomationActivation,
    QuietWindow {
        quiet: Duration,
        apps: BTreeMap<String, Duration>,
    },
    Unchanged,
    NoNewContent,
}

impl CheckKind {
    /// The stable kebab-case reason code a failing check reports.
    pub fn code(&self) -> &'static str {
        self.reason().code()
    }

    /// The reason a transcript is skipped when this check fails.
    pub fn reason(&self) -> crate::reason::Reason {
        use crate::reason::Reason;
        match self {
            CheckKind::NoSessionId => Reason::NoSessionId,
            CheckKind::NoCwd => Reason::NoCwd,
            CheckKind::NoAlmanacRepo => Reason::NoAlmanacRepo,
            CheckKind::InternalAlmanacSession => Reason::InternalAlmanacSession,
            CheckKind::ExcludedByRule => Reason::ExcludedByRule,
            CheckKind::CaptureAlreadyPending => Reason::CaptureAlreadyPending,
            CheckKind::RetryBudgetExhausted => Reason::RetryBudgetExhausted,
            CheckKind::BeforeAutomationActivation => Reason::BeforeAutomationActivation,
            CheckKind::QuietWindow { .. } => Reason::QuietWindow,
            CheckKind::Unchanged => Reason::Unchanged,
            CheckKind::NoNewContent => Reason::NoNewContent,
        }
    }

    /// Failing checks that a person must look at are reported under needsAttention, not skipped.
    pub fn needs_attention(&self) -> bool {
        matches!(self, CheckKind::RetryBudgetExhausted)
    }

    /// Checks that guard correctness (a repo to write to, never capturing ourselves, never two runs for one
    /// transcript) and so cannot be disabled or left out.
    pub fn required(&self) -> bool {
        matches!(
            self,
            CheckKind::NoSessionId
                | CheckKind::NoCwd
                | CheckKind::NoAlmanacRepo
                | CheckKind::InternalAlmanacSession
                | CheckKind::CaptureAlreadyPending
        )
    }
}

/// A time given as a number since the Unix epoch, in the unit its size says: seconds below 10^11 (the
/// year 5138), milliseconds below 10^14, microseconds below 10^17, else nanoseconds. Apps write all four
/// (Amp and Cline milliseconds, Goose seconds); no real time of one unit reads as a plausible time of
/// another. Zero, negative and non-finite values are no time.
pub fn epoch_time(n: f64) -> Option<chrono::DateTime<chrono::Utc>> {
    if !n.is_finite() || n <= 0.0 {
        return None;
    }
    let nanos = if n < 1e11 {
        n * 1e9
    } else if n < 1e14 {
        n * 1e6
    } else if n < 1e17 {
        n * 1e3
    } else {
        n
    };
    if nanos >= i64::MAX as f64 {
        return None;
    }
    Some(chrono::DateTime::from_timestamp_nanos(nanos as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_of_names_selects_what_the_general_evaluator_does() {
        let records = [
            r#"{"a":{"b":1}}"#,
            r#"{"a":{"b":null}}"#,
            r#"{"a":{"c":1}}"#,
            r#"{"a":[{"b":1}]}"#,
            r#"{"a":"b"}"#,
            r#"{"a":{"b":{"c":[1,2]}}}"#,
            r#"[1]"#,
        ];
        for text in ["$", "$.a", "$.a.b", "$.a.b.c", "$['a']['b']", "$.x"] {
            let p = JsonPath::parse(text).unwrap();
            assert!(p.fast.as_ref().is_some_and(|f| f.is_names()), "{text}");
            for r in records {
                let v: Value = serde_json::from_str(r).unwrap();
                let general: Vec<&Value> = jsonpath_rust::query::js_path_process(&p.query, &v)
                    .unwrap()
                    .into_iter()
                    .map(|r| r.val())
                    .collect();
                assert_eq!(p.select(&v), general, "{text} on {r}");
            }
        }
        assert!(!JsonPath::parse("$.a[0]").unwrap().fast.unwrap().is_names());
    }

    #[test]
    fn an_epoch_time_is_read_in_the_unit_its_size_says() {
        let t = |n: f64| epoch_time(n).map(|t| t.to_rfc3339());
        let want = Some("2026-12-04T10:00:00+00:00".to_string());
        assert_eq!(t(1_796_378_400.0), want, "seconds");
        assert_eq!(t(1_796_378_400_000.0), want, "milliseconds");
        assert_eq!(t(1_796_378_400_000_000.0), want, "microseconds");
        assert_eq!(t(1_796_378_400_000_000_000.0), want, "nanoseconds");
        assert_eq!(
            t(1_796_378_400.5).as_deref(),
            Some("2026-12-04T10:00:00.500+00:00")
        );
        for bad in [0.0, -5.0, f64::NAN, f64::INFINITY, 1e30] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }
}
