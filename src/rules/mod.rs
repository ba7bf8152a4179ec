//! Rule sets and the eligibility policy: load (built-in, `$ALMANAC_HOME/rules`, `--rules-dir`), validate
//! against the JSON Schemas, compile. Every problem in every file is collected before anything is reported.

mod compile;
mod compile_turns;
mod compile_views;
pub mod compiled;
pub mod conversation;
pub mod doc;
mod extend;
mod fastpath;
pub mod needs;
pub mod prefilter;
pub mod pruned;
#[cfg(test)]
mod pruned_serde;
pub mod raw;
mod scan;
pub mod script;
pub mod stream;
pub mod views;

pub use compiled::*;

use extend::Bases;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Built-in rule files, embedded so the binary works with no files on disk.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    ("rules/claude.yaml", include_str!("../../rules/claude.yaml")),
    ("rules/codex.yaml", include_str!("../../rules/codex.yaml")),
    (
        "rules/copilot.yaml",
        include_str!("../../rules/copilot.yaml"),
    ),
    ("rules/qwen.yaml", include_str!("../../rules/qwen.yaml")),
    ("rules/pi.yaml", include_str!("../../rules/pi.yaml")),
    ("rules/droid.yaml", include_str!("../../rules/droid.yaml")),
    ("rules/gemini.yaml", include_str!("../../rules/gemini.yaml")),
    (
        "rules/opencode.yaml",
        include_str!("../../rules/opencode.yaml"),
    ),
    ("rules/kilo.yaml", include_str!("../../rules/kilo.yaml")),
    ("rules/cline.yaml", include_str!("../../rules/cline.yaml")),
    // Roo Code extends Cline, and Kilo Code extends Roo Code: each after its base.
    ("rules/roo.yaml", include_str!("../../rules/roo.yaml")),
    (
        "rules/kilocode.yaml",
        include_str!("../../rules/kilocode.yaml"),
    ),
    (
        "rules/continue.yaml",
        include_str!("../../rules/continue.yaml"),
    ),
    ("rules/crush.yaml", include_str!("../../rules/crush.yaml")),
    ("rules/aider.yaml", include_str!("../../rules/aider.yaml")),
    ("rules/cursor.yaml", include_str!("../../rules/cursor.yaml")),
    ("rules/goose.yaml", include_str!("../../rules/goose.yaml")),
    ("rules/kimi.yaml", include_str!("../../rules/kimi.yaml")),
    ("rules/vibe.yaml", include_str!("../../rules/vibe.yaml")),
    ("rules/zed.yaml", include_str!("../../rules/zed.yaml")),
    (
        "rules/openhands.yaml",
        include_str!("../../rules/openhands.yaml"),
    ),
    ("rules/amp.yaml", include_str!("../../rules/amp.yaml")),
    ("rules/auggie.yaml", include_str!("../../rules/auggie.yaml")),
];
pub const BUILTIN_POLICY: (&str, &str) =
    ("rules/policy.yaml", include_str!("../../rules/policy.yaml"));
pub const RULES_SCHEMA: &str = include_str!("../../schemas/rules.schema.json");
pub const POLICY_SCHEMA: &str = include_str!("../../schemas/policy.schema.json");

/// Rule files larger than this are refused before parsing: a rule set is a page of YAML.
const MAX_RULE_FILE_BYTES: u64 = 1 << 20;

/// One problem in one rule file, in the words a maintainer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    /// The field, e.g. `stores[0].include[1]`; empty for whole-file problems.
    pub field: String,
    pub message: String,
    pub help: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule file {}: ", self.file)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

/// All rule sets and the policy, compiled.
#[derive(Debug)]
pub struct Catalog {
    pub sets: Vec<RuleSet>,
    pub policy: Policy,
    /// Changes whenever any loaded rule file changes (the discovery cache is keyed by it).
    pub fingerprint: String,
}

impl Catalog {
    pub fn get(&self, id: &str) -> Option<&RuleSet> {
        self.sets.iter().find(|s| s.id == id)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.sets.iter().map(|s| s.id.as_str()).collect()
    }

    /// The apps a sweep covers when no app list is given: every set but those shipped off
    /// (`enabled_by_default: false`), in load order.
    pub fn default_ids(&self) -> Vec<String> {
        self.sets
            .iter()
            .filter(|s| s.enabled_by_default)
            .map(|s| s.id.clone())
            .collect()
    }
}

/// The rule-file directories in the order they override each other.
pub fn rule_dirs(almanac_home: &Path, extra: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = vec![almanac_home.join("rules")];
    if let Some(d) = extra {
        dirs.push(d.to_path_buf());
    }
    dirs
}

/// Loads built-in rules, then every `*.yaml`/`*.yml` in `dirs` (a file with the same app id replaces the
/// earlier set; `policy.yaml` replaces the policy). Returns every diagnostic from every file on failure.
pub fn load(dirs: &[PathBuf]) -> Result<Catalog, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let mut sets: Vec<RuleSet> = Vec::new();
    let mut policy = None;

    let mut sources: Vec<String> = BUILTIN_RULES.iter().map(|(_, s)| s.to_string()).collect();
    let mut bases = Bases::new();
    for (name, src) in BUILTIN_RULES {
        let origin = Origin::Builtin(name);
        if let Some(doc) = parse_yaml(src, &origin, &mut diags) {
            if let Some(set) = load_doc(doc, origin, &mut bases, &mut diags) {
                sets.push(set);
            }
        }
    }
    policy = policy.or_else(|| {
        load_policy(
            BUILTIN_POLICY.1,
            Origin::Builtin(BUILTIN_POLICY.0),
            &mut diags,
        )
    });

    // Directory by directory, in order: a file that extends a set (its own id's too) builds on the set
    // as loaded so far, and a full replacement replaces whatever the directories before it made.
    for dir in dirs {
        let mut pending: Vec<(serde_json::Value, Origin)> = Vec::new();
        let files = match list_rule_files(dir) {
            Ok(f) => f,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        for file in files {
            let origin = Origin::File(file.clone());
            let Some(src) = read_rule_file(&file, &mut diags) else {
                continue;
            };
            sources.push(format!("{}\n{src}", file.display()));
            if is_policy_file(&file) {
                if let Some(p) = load_policy(&src, origin, &mut diags) {
                    policy = Some(p);
                }
            } else if let Some(doc) = parse_yaml(&src, &origin, &mut diags) {
                pending.push((doc, origin));
            }
        }
        for (doc, origin) in extend::in_order(pending, &mut diags) {
            if let Some(set) = load_doc(doc, origin, &mut bases, &mut diags) {
                match sets.iter_mut().find(|s| s.id == set.id) {
                    Some(existing) => *existing = set,
                    None => sets.push(set),
                }
            }
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let policy = policy.expect("the built-in policy compiles");
    Ok(Catalog {
        sets,
        policy,
        fingerprint: fingerprint(&sources),
    })
}

/// Validates the given files on their own, collecting every problem: one that `extends` a set builds
/// on the built-in sets and the other files given.
pub fn validate_files(files: &[PathBuf]) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut bases = builtin_bases();
    let mut pending = Vec::new();
    for file in files {
        let Some(src) = read_rule_file(file, &mut diags) else {
            continue;
        };
        let origin = Origin::File(file.clone());
        if is_policy_file(file) {
            load_policy(&src, origin, &mut diags);
        } else if let Some(doc) = parse_yaml(&src, &origin, &mut diags) {
            pending.push((doc, origin));
        }
    }
    for (doc, origin) in extend::in_order(pending, &mut diags) {
        load_doc(doc, origin, &mut bases, &mut diags);
    }
    diags
}

/// The built-in rule sets' documents, merged, by id: what a file's `extends` may name.
fn builtin_bases() -> Bases {
    let mut bases = Bases::new();
    let mut ignored = Vec::new();
    for (name, src) in BUILTIN_RULES {
        let origin = Origin::Builtin(name);
        if let Some(doc) = parse_yaml(src, &origin, &mut ignored) {
            load_doc(doc, origin, &mut bases, &mut ignored);
        }
    }
    bases
}

/// Validates one rule set (or, with `policy`, one policy) given as YAML text: every diagnostic. The
/// fuzz target for rule loading drives this.
pub fn check_source(src: &str, policy: bool) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let origin = Origin::Builtin("input");
    if policy {
        load_policy(src, origin, &mut diags);
    } else {
        load_rule_set(src, origin, &mut diags);
    }
    diags
}

pub fn is_policy_file(path: &Path) -> bool {
    path.file_stem().is_some_and(|s| s == "policy")
}

fn list_rule_files(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Diagnostic {
                file: dir.display().to_string(),
                field: String::new(),
                message: format!("cannot read the rules directory: {e}"),
                help: Some("fix its permissions or remove it".into()),
            })
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

fn read_rule_file(file: &Path, diags: &mut Vec<Diagnostic>) -> Option<String> {
    let whole = |message: String, help: &str| Diagnostic {
        file: file.display().to_string(),
        field: String::new(),
        message,
        help: Some(help.into()),
    };
    match std::fs::metadata(file) {
        Ok(m) if m.len() > MAX_RULE_FILE_BYTES => {
            diags.push(whole(
                format!(
                    "is {} bytes; rule files are limited to {MAX_RULE_FILE_BYTES}",
                    m.len()
                ),
                "a rule set is a page of YAML: check that this is the file you meant",
            ));
            return None;
        }
        Ok(_) => {}
        Err(e) => {
            diags.push(whole(format!("cannot read: {e}"), "check the path"));
            return None;
        }
    }
    match std::fs::read_to_string(file) {
        Ok(s) => Some(s),
        Err(e) => {
            diags.push(whole(
                format!("cannot read: {e}"),
                "rule files must be UTF-8 text",
            ));
            None
        }
    }
}

fn validator(
    schema_src: &'static str,
    cell: &'static OnceLock<jsonschema::Validator>,
) -> &'static jsonschema::Validator {
    cell.get_or_init(|| {
        let schema: serde_json::Value =
            serde_json::from_str(schema_src).expect("embedded schema is JSON");
        jsonschema::draft202012::new(&schema).expect("embedded schema is valid")
    })
}

pub fn rules_validator() -> &'static jsonschema::Validator {
    static CELL: OnceLock<jsonschema::Validator> = OnceLock::new();
    validator(RULES_SCHEMA, &CELL)
}

pub fn policy_validator() -> &'static jsonschema::Validator {
    static CELL: OnceLock<jsonschema::Validator> = OnceLock::new();
    validator(POLICY_SCHEMA, &CELL)
}

/// YAML -> JSON value -> schema check -> typed struct. `None` (with diagnostics) on any problem.
fn parse_checked<T: serde::de::DeserializeOwned>(
    src: &str,
    origin: &Origin,
    validator: &jsonschema::Validator,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    let value = parse_yaml(src, origin, diags)?;
    checked(value, origin, validator, diags)
}

/// A rule file's YAML as a JSON value, or None with a diagnostic.
fn parse_yaml(
    src: &str,
    origin: &Origin,
    diags: &mut Vec<Diagnostic>,
) -> Option<serde_json::Value> {
    match serde_yaml::from_str(src) {
        Ok(v) => Some(v),
        Err(e) => {
            diags.push(Diagnostic {
                file: origin.to_string(),
                field: String::new(),
                message: format!("not valid YAML: {e}"),
                help: Some("check indentation and quoting at the position shown".into()),
            });
            None
        }
    }
}

/// A document checked against the schema, then typed. `None` (with diagnostics) on any problem.
fn checked<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    origin: &Origin,
    validator: &jsonschema::Validator,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    let file = origin.to_string();
    let before = diags.len();
    for err in validator.iter_errors(&value) {
        let mut message = err.to_string();
        if message.len() > 300 {
            let cut = (0..=300)
                .rev()
                .find(|i| message.is_char_boundary(*i))
                .unwrap_or(0);
            message.truncate(cut);
            message.push('…');
        }
        diags.push(Diagnostic {
            file: file.clone(),
            field: pointer_to_field(&err.instance_path().to_string()),
            message,
            help: Some(schema_help(&err.to_string())),
        });
    }
    if diags.len() > before {
        return None;
    }
    match serde_json::from_value::<T>(value) {
        Ok(t) => Some(t),
        Err(e) => {
            // The schema and the structs agree (a test checks it), so this is a bug if it happens.
            // (yaml_serde reads enums as YAML tags, so the typed step goes through the JSON value.)
            diags.push(Diagnostic {
                file,
                field: String::new(),
                message: e.to_string(),
                help: None,
            });
            None
        }
    }
}

fn schema_help(message: &str) -> String {
    if message.contains("Additional properties") || message.contains("unexpected") {
        "remove or correct the unknown key: a misspelt key would silently disable a rule".into()
    } else if message.contains("is a required property") {
        "add the missing key".into()
    } else {
        "see schemas/ and docs/rules.md".into()
    }
}

/// `/stores/0/include/1` -> `stores[0].include[1]`.
pub fn pointer_to_field(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if seg.chars().all(|c| c.is_ascii_digit()) && !seg.is_empty() {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

pub(crate) fn load_rule_set(
    src: &str,
    origin: Origin,
    diags: &mut Vec<Diagnostic>,
) -> Option<RuleSet> {
    let doc = parse_yaml(src, &origin, diags)?;
    load_doc(doc, origin, &mut builtin_bases(), diags)
}

/// One rule set's document: laid over its base when it `extends` one (recorded in `bases` as merged,
/// for the sets that extend it), checked against the schema, compiled.
fn load_doc(
    doc: serde_json::Value,
    origin: Origin,
    bases: &mut Bases,
    diags: &mut Vec<Diagnostic>,
) -> Option<RuleSet> {
    let (doc, extended) = extend::resolve(doc, &origin, bases, diags)?;
    let id = doc.get("id").and_then(|v| v.as_str()).map(str::to_string);
    let raw: raw::RawRuleSet = checked(doc.clone(), &origin, rules_validator(), diags)?;
    let mut set = compile::rule_set(raw, origin.clone(), diags)?;
    set.extends = extended;
    if let Some(id) = id {
        bases.insert(id, (doc, origin.to_string()));
    }
    Some(set)
}

fn load_policy(src: &str, origin: Origin, diags: &mut Vec<Diagnostic>) -> Option<Policy> {
    let raw: raw::RawPolicy = parse_checked(src, &origin, policy_validator(), diags)?;
    compile::policy(raw, origin, diags)
}

/// A fingerprint of the loaded rule sets: a changed rule invalidates every cached verdict.
pub fn fingerprint(sources: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for s in sources {
        h.update(s.as_bytes());
        h.update([0]);
    }
    format!("rules {:x}", h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_compile() {
        let cat = load(&[]).expect("built-in rules load");
        assert_eq!(
            cat.ids(),
            vec![
                "claude",
                "codex",
                "copilot",
                "qwen",
                "pi",
                "droid",
                "gemini",
                "opencode",
                "kilo",
                "cline",
                "roo",
                "kilocode",
                "continue",
                "crush",
                "aider",
                "cursor",
                "goose",
                "kimi",
                "vibe",
                "zed",
                "openhands",
                "amp",
                "auggie"
            ]
        );
        // The design's first build covers Claude Code and Codex; the others ship off until enabled.
        assert_eq!(cat.default_ids(), vec!["claude", "codex"]);
        assert!(cat.policy.checks.len() >= 4);
        // The shipped policy writes out the default quiet window the code falls back to.
        let quiet = cat.policy.checks.iter().find_map(|c| match &c.kind {
            CheckKind::QuietWindow { quiet, .. } => Some(*quiet),
            _ => None,
        });
        assert_eq!(quiet, Some(DEFAULT_QUIET));
    }

    /// Uses every key the schemas define; loading it proves the schema and the serde structs accept the
    /// same keys (the schema rejects unknown keys, the structs deny them).
    const KITCHEN_SINK: &str = r#"
id: sink
name: Sink
description: every key
enabled_by_default: false
stores:
  - name: s
    roots:
      - { env: SINK_HOME, split: ",", default: ["~/.sink"], join: logs }
    include: ["**/*.jsonl"]
    exclude: ["**/tmp/**"]
    follow_symlinks: false
head: { max_records: 5, max_bytes: 1MiB }
fields:
  session_id:
    - when: { all: [ { exists: "$.a" }, { not: { missing: "$.b" } } ] }
      first_only: true
      value: "$.id"
      regex: "(.+)"
    - filename: '^(.+)\.jsonl$'
    - path: '^([^/]+)/'
    - { sidecar: "{dir}/meta.json", value: "$.session_id", regex: "(.+)" }
  cwd:
    - when: { any: [ { equals: { path: "$.t", value: x } }, { in: { path: "$.t", values: [y, z] } } ] }
      value: "$.cwd"
subagent:
  paths: ["**/sub/*.jsonl"]
  records:
    - when: { matches: { path: "$.t", regex: "^s" } }
      first_only: true
      test: { exists: "$.sidechain" }
exclude_when:
  - test: { missing: "$.x" }
timestamps: ["$.timestamp", "$.payload.timestamp"]
record_id: "$.uuid"
turns:
  ignore: [ { exists: "$.isMeta" } ]
  merge_repeated_prompts: true
  resends_prompt: { matches: { path: "$.ctx", regex: "^<ctx>" } }
  skip:
    - from: { exists: "$.copy" }
      until: { missing: "$.copy" }
      until_after: { exists: "$.copied_prompt" }
      earliest_line: 2
      after: { exists: "$.main" }
  user:
    - when: { exists: "$.u" }
      text: ["$.u", "$.v[*].text"]
      placeholder: { when: { exists: "$.image" }, text: "[image]" }
      extract: "<task>(.*?)</task>"
      each_match: true
    - text: ["$.q"]
      queued: true
    - when: { exists: "$.answer" }
      text: ["$.answer"]
      label: answering the agent's question
  queue:
    deliver: { exists: "$.dq" }
    inject: { exists: "$.rm" }
    withdraw: { exists: "$.pop" }
    command: "<cmd>(/[a-z]+)</cmd>"
  assistant:
    - text: ["$.a"]
      group: "$.id"
  tools:
    - when: { exists: "$.tool" }
      name: "$.tool.name"
    - each: "$.calls[*]"
      name: "$.name"
      argument:
        - "$.input.path"
        - { tools: [run], path: "$.args", json: "$.cmd", regex: "^(\\S+)" }
        - { tools: [patch], path: "$.input", regex: "File: (.+)", each_match: true }
      reason: ["$.why"]
    - when: { exists: "$.program" }
      name: "$.program.name"
      script:
        path: "$.program.source"
        call: "tools\\.(\\w+)\\("
        argument: ["$.input.cmd"]
        reason: ["$.input.justification"]
  results:
    - when: { exists: "$.output" }
      each: "$.outputs[*]"
      text: ["$.text", { path: "$.json", json: "$.output" }]
      failed: { equals: { path: "$.ok", value: false } }
      exit_code: ["$.exit"]
      error: ["$.error.message"]
      preamble: "Wall time: .*|Exit code: (?P<exit>\\d+)"
      brief: "^Done\\.$"
  thinking:
    - when: { exists: "$.thinking" }
      text: ["$.thinking"]
  compaction:
    - when: { equals: { path: "$.kind", value: summary } }
      text: ["$.summary"]
  reports:
    - when: { matches: { path: "$.notice", regex: "^<task>" } }
      text: ["$.notice"]
      extract: "<summary>(.*?)</summary>"
      label: a task's notice
"#;

    /// The keys of stores read into views.
    const VIEW_SINK: &str = r#"
id: views
stores:
  - name: db
    format: sqlite
    roots: [ { known_repos: true, join: .app } ]
    include: ["app.db"]
    sqlite:
      sessions: "SELECT id FROM session"
      messages: "SELECT id, data FROM message WHERE session_id = ?1"
      json_columns: [data]
    session: { id: ["$.id"], parent: "$.parent_id", updated: "$.updated", message_id: "$.id", drop_message_ids: "_x$", not_beside: ["other.db"] }
    project: [ { store_dir: 1 } ]
  - name: docs
    format: json
    roots: [ { default: ["~/.app"] } ]
    include: ["*.json"]
    document: { messages: "$.history[*]" }
    session:
      id: ["$.sid", { sidecar: "{dir}/meta.json", field: "$.session_id" }, { field: "$.sid", messages: true }]
      id_from_path: '([^/]+)\.json$'
      parent: [ { sidecar: "{dir}/meta.json", field: "$.parent" }, "$.parent_id" ]
    project:
      - { field: "$.cwd", messages: true }
      - { field: "$.workspace", uri: true }
      - { sidecar: "{dir}/{id}.json", field: "$.cwd" }
      - { field: "$.hash", hash: md5 }
      - { text: "cwd \\((.+?)\\)" }
  - name: log
    format: markdown
    roots: [ { known_repos: true } ]
    include: [".chat.md"]
    markdown:
      session: '^# started (.+)$'
      prompt: '^#### (.*)$'
      status: '^> '
      input: { file: "{dir}/.input", entry: '^# (.+)$', line: '^\+(.*)$' }
    project: [ { store_dir: 0 } ]
  - name: text
    format: text
    roots: [ { default: ["~/.app/projects"] } ]
    include: ["*/t/*.txt"]
    text: { block: '^(user|assistant):\s*$' }
    session: { id_from_path: '^[^/]+/t/([^/]+)\.txt$', message_id: "$.id" }
    project: [ { path: '^([^/]+)/t/', slug: '[^A-Za-z0-9]+' } ]
  - name: events
    format: json-dir
    roots: [ { default: ["~/.app/conversations"] } ]
    include: ["*/base_state.json"]
    directory: { messages: "{dir}/events/event-*.json" }
    session: { id: ["$.id"] }
    project: [ { field: "$.workspace.working_dir" } ]
  - name: kv
    format: sqlite
    roots: [ { default: ["~/.app/chats"] } ]
    include: ["*/*/store.db"]
    sqlite:
      sessions: "SELECT id, ws FROM meta"
      messages: "SELECT j.key AS n, b.data FROM root, json_each(protobuf_bytes_hex(root.data, 1)) AS j JOIN blobs AS b ON b.id = j.value WHERE root.agent = ?1"
    session:
      id: ["$.id"]
      parent: [ { lookup: { stores: "{dir}/../ws/*/state.db", ids: "SELECT id, parent FROM listed" } } ]
    project:
      - { sidecar: "{dir}/../ws/{ws}/workspace.json", field: "$.folder", uri: true }
      - lookup: { stores: "{dir}/../ws/*/state.db", ids: "SELECT id FROM listed" }
        sidecar: "{dir}/workspace.json"
        field: "$.folder"
      - { path: '^([0-9a-f]{32})/', hash: md5 }
"#;

    #[test]
    fn a_view_rule_set_compiles_and_its_mistakes_are_named() {
        let mut diags = Vec::new();
        let set = load_rule_set(VIEW_SINK, Origin::Builtin("views"), &mut diags).unwrap();
        assert!(diags.is_empty(), "{diags:?}");
        assert!(set.reads_views());
        // The header gives the fields, the subagent test and the record id.
        let names: Vec<&str> = set.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["session_id", "cwd", "parent_session"]);
        assert_eq!(set.record_id.as_ref().unwrap().text, "$.almanac_id");
        for (from, to, want) in [
            (
                "format: json\n",
                "format: jsonl\n",
                "`document` is for a `json` store",
            ),
            (
                "      id_from_path: '([^/]+)",
                "      idx: 1\n      id_from_path: '([^/]+)",
                "idx",
            ),
            (
                "{ sidecar: \"{dir}/meta.json\", field: \"$.session_id\" }",
                "{ sidecar: \"{dir}/{id}.json\", field: \"$.session_id\" }",
                "stores[1].session.id[1]: the session id is what it is read to find",
            ),
            (
                "{ sidecar: \"{dir}/meta.json\", field: \"$.parent\" }",
                "{ sidecar: \"{dir}/meta.json\", field: \"$.parent\", hash: md5 }",
                "stores[1].session.parent: [{\"field\":\"$.parent\",\"hash\":\"md5\"",
            ),
            (
                "{ field: \"$.sid\", messages: true }",
                "{ messages: true }",
                "stores[1].session.id[2]: the source reads nothing",
            ),
            (
                "{ field: \"$.cwd\", messages: true }",
                "{ field: \"$.cwd\", messages: true, sidecar: \"{dir}/x.json\" }",
                "stores[1].project[0].messages: `messages: true` reads `field` in the messages",
            ),
            (
                "      parent: [ { sidecar",
                "      parent: [ { path: '^x/', sidecar",
                "stores[1].session.parent[0]: a `path` value is the regex's group 1: it takes no `field`",
            ),
            (
                "{ store_dir: 1 }",
                "{ store_dir: 1, text: 'a(b)' }",
                "project source is one of",
            ),
            (
                "{ field: \"$.hash\", hash: md5 }",
                "{ field: \"$.hash\", hash: crc }",
                "crc",
            ),
            ("format: sqlite", "format: parquet", "parquet"),
            (
                "block: '^(user|assistant):\\s*$'",
                "block: '^user:$'",
                "stores[3].text.block: the regex needs a group",
            ),
            (
                "directory: { messages: \"{dir}/events/event-*.json\" }",
                "directory: { messages: \"{dir}/*/event-*.json\" }",
                "stores[4].directory.messages: `{dir}/*/event-*.json` is not a directory beside the store file",
            ),
            (
                "    directory: { messages:",
                "    text: { block: '^(a)$' }\n    directory: { messages:",
                "stores[4].text: `text` is for a `text` store, not `json-dir`",
            ),
            (
                "slug: '[^A-Za-z0-9]+'",
                "slug: '[^A-Za-z0-9]+', hash: md5",
                "give one",
            ),
            (
                "{ path: '^([0-9a-f]{32})/', hash: md5 }",
                "{ path: '^([0-9a-f]{32})/', field: \"$.x\", hash: md5 }",
                "takes no `field`",
            ),
            (
                "ids: \"SELECT id FROM listed\" }",
                "ids: \"DELETE FROM listed\" }",
                "stores[5].project[1].lookup.ids: the query would write",
            ),
            (
                "        sidecar: \"{dir}/workspace.json\"\n",
                "        sidecar: \"workspace.json\"\n",
                "stores[5].project[1].sidecar: the path starts at the store file's directory",
            ),
            (
                "ids: \"SELECT id, parent FROM listed\" }",
                "ids: \"SELECT id, parent FROM listed; DROP TABLE listed\" }",
                "stores[5].session.parent[0].lookup.ids: the query",
            ),
        ] {
            let bad = VIEW_SINK.replace(from, to);
            assert_ne!(bad, VIEW_SINK, "{from}");
            let mut diags = Vec::new();
            assert!(
                load_rule_set(&bad, Origin::Builtin("views"), &mut diags).is_none(),
                "{from}"
            );
            let text: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
            assert!(text.join("\n").contains(want), "{from}: {text:?}");
        }
        // A jsonl store beside the views: the set needs the jsonl fields, and names no record_id.
        let jsonl = "  - { name: logs, roots: [ { default: [\"~/.app/logs\"] } ], include: [\"*.jsonl\"] }\n";
        let mixed = VIEW_SINK.replacen("stores:\n", &format!("stores:\n{jsonl}"), 1);
        let mut diags = Vec::new();
        assert!(load_rule_set(&mixed, Origin::Builtin("views"), &mut diags).is_none());
        let text: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        assert!(
            text.join("\n")
                .contains("fields.session_id: a rule set with `jsonl` stores needs"),
            "{text:?}"
        );
        let fields = "fields:\n  session_id: [ { filename: '^(.+)\\.jsonl$' } ]\n  cwd: [ { value: \"$.cwd\" } ]\n";
        let mut diags = Vec::new();
        let set = load_rule_set(
            &format!("{mixed}{fields}"),
            Origin::Builtin("views"),
            &mut diags,
        )
        .unwrap_or_else(|| panic!("{diags:?}"));
        assert!(set.has_views() && !set.reads_views());
        // Its header sources are marked: a JSONL transcript never reads them.
        let sid = set.fields.iter().find(|f| f.name == "session_id").unwrap();
        assert!(sid.sources[0].header && !sid.sources[1].header);
        let mut diags = Vec::new();
        let with_id = format!("{mixed}{fields}record_id: \"$.uuid\"\n");
        assert!(load_rule_set(&with_id, Origin::Builtin("views"), &mut diags).is_none());
        assert!(
            diags[0].message.contains("names no `record_id`"),
            "{diags:?}"
        );
    }

    /// A set that extends a built-in one: its own keys laid over the base's.
    const EXTENDS_SINK: &str = r#"
id: roo-test
extends: cline
name: Roo test
turns:
  ignore: [ { exists: "$.partial" } ]
subagent: null
"#;

    #[test]
    fn a_set_extends_another_with_its_own_keys_laid_over_and_says_so() {
        let mut diags = Vec::new();
        let set = load_rule_set(EXTENDS_SINK, Origin::Builtin("roo-test"), &mut diags)
            .unwrap_or_else(|| panic!("{diags:?}"));
        let cline = load(&[]).unwrap();
        let cline = cline.get("cline").unwrap();
        assert_eq!(
            (set.id.as_str(), set.name.as_str()),
            ("roo-test", "Roo test")
        );
        // Cline's stores and prompts, its own ignore rule beside Cline's user rules.
        assert_eq!(set.stores.len(), cline.stores.len());
        let turns = set.turns.as_ref().unwrap();
        assert_eq!(turns.user.len(), cline.turns.as_ref().unwrap().user.len());
        assert_eq!(turns.ignore.len(), 1);
        assert!(!set.enabled_by_default, "inherited");
        let e = set.extends.as_ref().unwrap();
        assert_eq!(e.own, ["id", "name", "subagent", "turns"]);
        assert_eq!(
            e.to_string(),
            "extends cline from rules/cline.yaml (built in); its own file gives id, name, subagent, turns, the rest is cline's"
        );
        // An unknown base is named, with the sets there are; a merged set is checked as any.
        for (from, to, want) in [
            (
                "extends: cline",
                "extends: clyne",
                "extends: extends `clyne`, which no rule set loaded before it has",
            ),
            (
                "name: Roo test",
                "name: Roo test
stores: []",
                "stores: [] has less than 1 item",
            ),
        ] {
            let mut diags = Vec::new();
            let bad = EXTENDS_SINK.replace(from, to);
            assert!(load_rule_set(&bad, Origin::Builtin("x"), &mut diags).is_none());
            let text: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
            assert!(text.join("\n").contains(want), "{text:?}");
        }
    }

    /// A rule file in a rules directory extends a built-in set, or the set of its own id in place.
    #[test]
    fn rule_files_extend_built_in_sets_and_each_other() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a-kilo.yaml"),
            "id: kilo-test\nextends: roo-test\nname: Kilo test\n",
        )
        .unwrap();
        std::fs::write(d.path().join("b-roo.yaml"), EXTENDS_SINK).unwrap();
        std::fs::write(
            d.path().join("claude.yaml"),
            "id: claude\nextends: claude\nenabled_by_default: false\n",
        )
        .unwrap();
        let cat = load(&[d.path().to_path_buf()]).unwrap_or_else(|e| panic!("{e:?}"));
        let kilo = cat.get("kilo-test").unwrap();
        assert_eq!(kilo.extends.as_ref().unwrap().base, "roo-test");
        assert_eq!(kilo.turns.as_ref().unwrap().ignore.len(), 1, "roo's rule");
        let claude = cat.get("claude").unwrap();
        assert!(!claude.enabled_by_default);
        assert!(claude.turns.is_some(), "the built-in set, changed in place");
        let diags = validate_files(&[d.path().join("a-kilo.yaml"), d.path().join("b-roo.yaml")]);
        assert!(diags.is_empty(), "{diags:?}");
    }

    /// The kitchen sink with `from` made `to` is refused, a diagnostic saying `want`.
    fn sink_refused(from: &str, to: &str, want: &str) {
        let bad = KITCHEN_SINK.replace(from, to);
        assert_ne!(bad, KITCHEN_SINK, "{from}");
        let mut diags = Vec::new();
        assert!(load_rule_set(&bad, Origin::Builtin("sink"), &mut diags).is_none());
        let text: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        assert!(text.join("\n").contains(want), "{text:?}");
    }

    #[test]
    fn a_bad_resends_prompt_is_named() {
        sink_refused(
            "regex: \"^<ctx>\"",
            "regex: \"^<ctx(\"",
            "turns.resends_prompt",
        );
        sink_refused(
            "resends_prompt: { matches:",
            "resends_prompt: { matched:",
            "resends_prompt",
        );
    }

    #[test]
    fn a_bad_queue_command_regex_is_named() {
        sink_refused(
            "command: \"<cmd>(/[a-z]+)</cmd>\"",
            "command: \"<cmd>(/[a-z]+</cmd>\"",
            "turns.queue.command: invalid regex",
        );
    }

    #[test]
    fn path_and_sidecar_sources_are_checked() {
        sink_refused(
            "    - path: '^([^/]+)/'\n",
            "    - { path: '^[^/]+/', when: { exists: \"$.a\" } }\n",
            "fields.session_id[2]: a `path` source is the regex alone",
        );
        sink_refused(
            "    - path: '^([^/]+)/'\n",
            "    - path: '^[^/]+/'\n",
            "fields.session_id[2].path: the regex needs a group",
        );
        sink_refused(
            "{ sidecar: \"{dir}/meta.json\",",
            "{ sidecar: \"meta.json\",",
            "fields.session_id[3].sidecar: the path starts at the transcript's directory",
        );
    }

    /// A JSONL transcript whose session id is its directory's name and whose cwd and parent are in a
    /// sidecar: each read without a record, and a parent makes it a subagent's.
    #[test]
    fn a_jsonl_head_reads_paths_and_sidecars() {
        let yaml = r#"
id: t
stores:
  - { name: s, roots: [ { default: ["~/.t"] } ], include: ["*/*/log.jsonl"] }
fields:
  session_id: [ { path: '^[^/]+/([^/]+)/log\.jsonl$' } ]
  cwd: [ { value: "$.cwd" }, { sidecar: "{dir}/meta.json", value: "$.dir" } ]
  parent_session: [ { sidecar: "{dir}/meta.json", value: "$.parent" } ]
"#;
        let mut diags = Vec::new();
        let set = load_rule_set(yaml, Origin::Builtin("t"), &mut diags)
            .unwrap_or_else(|| panic!("{diags:?}"));
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("h/s-1");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("log.jsonl");
        let scan = |text: &str| {
            crate::discover::head::scan_head(
                &set,
                "log.jsonl",
                Some((file.as_path(), "h/s-1/log.jsonl")),
                text.as_bytes(),
            )
            .unwrap()
        };
        let h = scan("{\"x\": 1}\n");
        assert_eq!(h.get("session_id"), Some("s-1"));
        assert_eq!(h.get("cwd"), None);
        assert!(h.subagent.is_none());
        std::fs::write(
            dir.join("meta.json"),
            r#"{"dir": "/home/u/app", "parent": "s-0"}"#,
        )
        .unwrap();
        let h = scan("{\"x\": 1}\n");
        assert_eq!(h.get("cwd"), Some("/home/u/app"));
        assert_eq!(h.subagent.unwrap().reason, "parent_session = s-0");
        // A record's value comes first in the cwd's sources.
        let h = scan("{\"cwd\": \"/home/u/other\"}\n");
        assert_eq!(h.get("cwd"), Some("/home/u/other"));
    }

    #[test]
    fn each_match_without_extract_is_named() {
        let mut diags = Vec::new();
        assert!(load_rule_set(KITCHEN_SINK, Origin::Builtin("sink"), &mut diags).is_some());
        sink_refused(
            "      extract: \"<task>(.*?)</task>\"\n",
            "",
            "turns.user[0].each_match: each_match needs an `extract` regex",
        );
    }

    const POLICY_SINK: &str = "checks:\n  - check: no-session-id\n  - check: no-cwd\n  - check: no-almanac-repo\n  - check: internal-almanac-session\n  - check: excluded-by-rule\n  - check: capture-already-pending\n  - check: retry-budget-exhausted\n    enabled: true\n  - check: before-automation-activation\n  - check: quiet-window\n    quiet: 45m\n    apps: { codex: 10m }\n  - check: unchanged\n  - check: no-new-turns\n";

    use crate::util::testing::schema_keys;

    #[test]
    fn schema_and_structs_accept_the_same_keys() {
        let mut diags = Vec::new();
        let set = load_rule_set(KITCHEN_SINK, Origin::Builtin("sink"), &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
        let set = set.unwrap();
        assert_eq!(set.head.max_bytes, 1 << 20);
        assert!(!set.stores[0].follow_symlinks);
        let policy = load_policy(POLICY_SINK, Origin::Builtin("policy"), &mut diags);
        assert!(diags.is_empty() && policy.is_some(), "{diags:?}");
        // Every property the schemas define appears in the kitchen sinks above.
        let rules_sinks = format!("{KITCHEN_SINK}{VIEW_SINK}{EXTENDS_SINK}");
        for (schema, sink) in [
            (RULES_SCHEMA, rules_sinks.as_str()),
            (POLICY_SCHEMA, POLICY_SINK),
        ] {
            let mut keys = std::collections::BTreeSet::new();
            schema_keys(&serde_json::from_str(schema).unwrap(), &mut keys);
            for k in keys {
                assert!(
                    sink.contains(&format!("{k}:")),
                    "schema key `{k}` is not exercised"
                );
            }
        }
        // An extra key is refused by the schema and would be refused by the structs.
        let extra = KITCHEN_SINK.replace(
            "follow_symlinks: false",
            "follow_symlinks: false\n    follow: true",
        );
        load_rule_set(&extra, Origin::Builtin("x"), &mut diags);
        assert!(
            diags.iter().any(|d| d.message.contains("follow")),
            "{diags:?}"
        );
        let v: serde_json::Value = serde_yaml::from_str(&extra).unwrap();
        assert!(serde_json::from_value::<raw::RawRuleSet>(v).is_err());
    }

    #[test]
    fn pointer_fields_read_like_code() {
        assert_eq!(
            pointer_to_field("/stores/0/include/1"),
            "stores[0].include[1]"
        );
        assert_eq!(pointer_to_field(""), "");
        assert_eq!(
            pointer_to_field("/fields/session_id/0/value"),
            "fields.session_id[0].value"
        );
    }
}
