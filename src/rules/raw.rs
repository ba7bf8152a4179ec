//! Rule files as written: plain serde structs that mirror `schemas/*.schema.json`. Nothing here is
//! executed; `compile.rs` turns these into what the engine runs.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuleSet {
    pub id: String,
    /// Resolved before the set is checked (`rules::extend`): the merged document no longer holds it.
    pub extends: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// Whether a sweep covers the app when no app list is given (default true).
    pub enabled_by_default: Option<bool>,
    pub stores: Vec<RawStore>,
    #[serde(default)]
    pub head: RawHead,
    /// Required when the set has a `jsonl` store; a set whose stores are all views may leave it out.
    #[serde(default)]
    pub fields: BTreeMap<String, Vec<RawSource>>,
    #[serde(default)]
    pub subagent: RawSubagent,
    #[serde(default)]
    pub exclude_when: Vec<RawRecordTest>,
    pub timestamps: Option<Vec<String>>,
    /// JSONPath to a record's stable id (the same in a copy of the record in a fork or resume).
    pub record_id: Option<String>,
    pub turns: Option<RawTurns>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTurns {
    #[serde(default)]
    pub ignore: Vec<RawPredicate>,
    #[serde(default)]
    pub merge_repeated_prompts: bool,
    pub resends_prompt: Option<RawPredicate>,
    #[serde(default)]
    pub skip: Vec<RawSkip>,
    #[serde(default)]
    pub user: Vec<RawTurnText>,
    pub queue: Option<RawQueue>,
    #[serde(default)]
    pub assistant: Vec<RawTurnText>,
    #[serde(default)]
    pub tools: Vec<RawTool>,
    #[serde(default)]
    pub results: Vec<RawResult>,
    /// The agent's thinking: shown only where a turn ends with it and no answer.
    #[serde(default)]
    pub thinking: Vec<RawTurnText>,
    /// Reports a subagent or a background task leaves in records the rules ignore: shown once, bounded.
    #[serde(default)]
    pub reports: Vec<RawTurnText>,
    /// The summary a client writes when it compacts the session: a second capture's earlier context
    /// holds the latest one.
    #[serde(default)]
    pub compaction: Vec<RawTurnText>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSkip {
    pub from: RawPredicate,
    pub until: RawPredicate,
    pub until_after: Option<RawPredicate>,
    pub earliest_line: Option<u64>,
    pub after: Option<RawPredicate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    pub deliver: Option<RawPredicate>,
    pub inject: Option<RawPredicate>,
    pub withdraw: Option<RawPredicate>,
    /// A regex over a prompt record's text whose group 1 is the command it runs (`/review`): that
    /// record carries a queued prompt typed as the command and its arguments.
    pub command: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlaceholder {
    pub when: RawPredicate,
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTurnText {
    pub when: Option<RawPredicate>,
    pub text: Vec<String>,
    pub group: Option<String>,
    #[serde(default)]
    pub queued: bool,
    pub placeholder: Option<RawPlaceholder>,
    /// A regex whose group 1 (every match) is the text: a wrapper around the prompt.
    pub extract: Option<String>,
    /// With `extract`: each match is a prompt of its own.
    #[serde(default)]
    pub each_match: bool,
    /// How the rendering names a prompt of this entry (`user (answer to a question)`).
    pub label: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    pub when: Option<RawPredicate>,
    pub each: Option<String>,
    pub name: String,
    #[serde(default)]
    pub argument: Vec<RawTextSource>,
    /// Why the agent made the call, in its own words (an escalation's justification).
    #[serde(default)]
    pub reason: Vec<RawTextSource>,
    /// The call is a script that calls tools itself: each of those is shown as a call of its own.
    pub script: Option<RawScript>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScript {
    /// The script's text.
    pub path: String,
    /// A regex whose every match is a call in the script, group 1 its tool's name; the value written
    /// right after the match is its argument.
    pub call: String,
    /// Text sources over `{"name": ..., "input": <the argument>}` for each inner call's main argument...
    #[serde(default)]
    pub argument: Vec<RawTextSource>,
    /// ...and the agent's reason for it.
    #[serde(default)]
    pub reason: Vec<RawTextSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResult {
    pub when: Option<RawPredicate>,
    pub each: Option<String>,
    pub text: Vec<RawTextSource>,
    /// The result is a failure where this holds.
    pub failed: Option<RawPredicate>,
    /// The command's exit code: a non-zero one is a failure.
    #[serde(default)]
    pub exit_code: Vec<RawTextSource>,
    /// The error message a failed result carries apart from its text.
    #[serde(default)]
    pub error: Vec<RawTextSource>,
    /// A regex of the lines the tool writes about its run, not output, wherever they are (a named group
    /// `exit`: the exit code).
    pub preamble: Option<String>,
    /// A regex: a result whose text matches it only acknowledges the call, and is shown by its size.
    pub brief: Option<String>,
}

/// A JSONPath, or one with a decoding step (`json`, `regex`) and, for an argument, the tools it is for.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawTextSource {
    Path(String),
    Full(RawTextSourceFull),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTextSourceFull {
    #[serde(default)]
    pub tools: Vec<String>,
    pub path: String,
    pub json: Option<String>,
    pub regex: Option<String>,
    /// With `regex`: group 1 of every match, not only the first.
    #[serde(default)]
    pub each_match: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub name: String,
    pub roots: Vec<RawRoot>,
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    pub follow_symlinks: Option<bool>,
    /// `jsonl` (default), `jsonl-replay`, `json` or `sqlite`.
    pub format: Option<String>,
    pub sqlite: Option<RawSqlite>,
    pub document: Option<RawDocument>,
    pub markdown: Option<RawMarkdown>,
    pub text: Option<RawText>,
    pub directory: Option<RawDirectory>,
    #[serde(default)]
    pub session: RawViewSession,
    #[serde(default)]
    pub project: Vec<RawProject>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSqlite {
    pub sessions: String,
    pub messages: String,
    #[serde(default)]
    pub json_columns: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDocument {
    pub messages: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMarkdown {
    pub session: String,
    pub prompt: String,
    pub status: Option<String>,
    pub input: Option<RawMarkdownInput>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDirectory {
    pub messages: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawText {
    pub block: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLookup {
    pub stores: String,
    pub ids: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMarkdownInput {
    pub file: String,
    pub entry: String,
    pub line: String,
}

/// A session field's source: a JSONPath over the session, or a value read as a project's is (a
/// `sidecar`, the store's `path`, the `messages`; for the parent, a `lookup` too).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawValueSource {
    Path(String),
    Full(Box<RawProject>),
}

/// One source or a list of them, tried in order.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSources {
    One(RawValueSource),
    Many(Vec<RawValueSource>),
}

impl RawSources {
    pub fn list(&self) -> Vec<&RawValueSource> {
        match self {
            RawSources::One(s) => vec![s],
            RawSources::Many(v) => v.iter().collect(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawViewSession {
    #[serde(default)]
    pub id: Vec<RawValueSource>,
    pub id_from_path: Option<String>,
    pub parent: Option<RawSources>,
    pub updated: Option<String>,
    pub message_id: Option<String>,
    /// Messages whose id this regex matches are left out of the view (a store's own duplicates).
    pub drop_message_ids: Option<String>,
    /// A store file beside a file of one of these names is not read (another store reads its session).
    #[serde(default)]
    pub not_beside: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProject {
    pub field: Option<String>,
    pub path: Option<String>,
    pub slug: Option<String>,
    pub lookup: Option<RawLookup>,
    pub hash: Option<String>,
    #[serde(default)]
    pub uri: bool,
    pub sidecar: Option<String>,
    pub text: Option<String>,
    pub store_dir: Option<u32>,
    /// `field` is read in each message, in order; the first that has it gives the value.
    #[serde(default)]
    pub messages: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoot {
    pub env: Option<String>,
    pub split: Option<String>,
    #[serde(default)]
    pub default: Vec<String>,
    pub join: Option<String>,
    /// The repos almanac knows (`state/repos.txt`) are the root's directories.
    #[serde(default)]
    pub known_repos: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHead {
    pub max_records: Option<u32>,
    pub max_bytes: Option<SizeValue>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub when: Option<RawPredicate>,
    #[serde(default)]
    pub first_only: bool,
    pub value: Option<String>,
    pub regex: Option<String>,
    pub filename: Option<String>,
    /// A regex over the transcript's path under its store root: group 1 is the value.
    pub path: Option<String>,
    /// A file beside the transcript (a template starting `{dir}`): its text, or `value` in its JSON.
    pub sidecar: Option<String>,
    /// Added by the engine: a view header's source, read from views only.
    #[serde(skip)]
    pub header: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSubagent {
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub records: Vec<RawRecordTest>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecordTest {
    pub when: Option<RawPredicate>,
    #[serde(default)]
    pub first_only: bool,
    pub test: RawPredicate,
    /// Added by the engine: a view header's test, applied to views only.
    #[serde(skip)]
    pub header: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawPredicate {
    Exists(String),
    Missing(String),
    Equals(RawPathValue),
    In(RawPathValues),
    Matches(RawPathRegex),
    All(Vec<RawPredicate>),
    Any(Vec<RawPredicate>),
    Not(Box<RawPredicate>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPathValue {
    pub path: String,
    pub value: serde_json::Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPathValues {
    pub path: String,
    pub values: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPathRegex {
    pub path: String,
    pub regex: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub checks: Vec<RawCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    pub check: String,
    pub enabled: Option<bool>,
    pub quiet: Option<String>,
    #[serde(default)]
    pub apps: BTreeMap<String, String>,
}
