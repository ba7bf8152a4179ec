//! What the rendering of a conversation (`turns::render`, the file the capture agent reads) takes from a
//! record beyond prompts and answers: each tool call's name and main argument (`turns.tools`), and each
//! tool result's text (`turns.results`). A text source is a JSONPath, optionally decoding the string it
//! selects as JSON (Codex writes a call's arguments as a JSON string) or taking a regex's group.

use super::compiled::{capture, JsonPath, Predicate};
use super::doc::{Doc, Node};
use regex::Regex;
use serde_json::Value;

/// The largest string a `json` text source decodes (a call's arguments, a result's envelope): longer
/// ones are not decoded, and the next source is tried.
pub const MAX_DECODED_BYTES: usize = 1 << 20;

/// Tool calls in records where `when` holds.
#[derive(Debug)]
pub struct ToolRule {
    pub when: Option<Predicate>,
    /// Each call in a matching record (a Claude message's `tool_use` blocks); None: the record is the
    /// call. `name` and `argument` are read from each.
    pub each: Option<JsonPath>,
    pub name: JsonPath,
    /// The call's main argument (a file path, a command, a pattern): the first source that gives text.
    pub argument: Vec<TextSource>,
    /// Why the agent made the call, in its words (the first source that gives text).
    pub reason: Vec<TextSource>,
    /// The call runs a script that calls tools itself (Codex's code mode): each of those is a call.
    pub script: Option<Script>,
}

/// A call whose argument is a script calling tools: each match of `call` in the text at `path` is a
/// call, its tool the match's group 1 and its argument the value written right after the match
/// (`script::calls`); `argument` and `reason` sources read `{"name": <tool>, "input": <argument>,
/// "script": <the whole script>}`.
#[derive(Debug)]
pub struct Script {
    pub path: JsonPath,
    pub call: Regex,
    pub argument: Vec<TextSource>,
    pub reason: Vec<TextSource>,
}

/// The most calls one script is read for.
const MAX_SCRIPT_CALLS: usize = 64;

/// One call as the rendering shows it.
#[derive(Debug, PartialEq)]
pub struct Call {
    pub name: String,
    pub argument: Option<String>,
    pub reason: Option<String>,
}

/// Tool results in records where `when` holds: shown as a head and a size.
#[derive(Debug)]
pub struct ResultRule {
    pub when: Option<Predicate>,
    /// Each result in a matching record; None: the record is the result.
    pub each: Option<JsonPath>,
    /// The result's text: the first source that gives any.
    pub text: Vec<TextSource>,
    /// The result is a failure where this holds (on the result: each one, or the record).
    pub failed: Option<Predicate>,
    /// The command's exit code (the first source that gives one); non-zero is a failure.
    pub exit_code: Vec<TextSource>,
    /// The error message a failed result carries beside its text.
    pub error: Vec<TextSource>,
    /// Lines the tool writes about its run, not output (`Wall time: 0.2 seconds`): never shown as the
    /// output's start. A named group `exit` in it is the exit code. Compiled anchored at both ends
    /// (`\A(?:…)\z`): it matches a whole line or not at all.
    pub preamble: Option<Regex>,
    /// A result whose text matches only acknowledges its call: shown by its size alone.
    pub brief: Option<Regex>,
}

/// A result as the rules read it.
#[derive(Debug)]
pub struct ResultText<'r> {
    pub text: String,
    /// `failed` held.
    pub failed: bool,
    pub exit_code: Option<String>,
    pub error: Option<String>,
    pub rule: &'r ResultRule,
}

/// Text read from a record (or a call in it).
#[derive(Debug)]
pub struct TextSource {
    /// Only for calls of these tools (empty: any); arguments only.
    pub tools: Vec<String>,
    pub path: JsonPath,
    /// The string `path` selects holds JSON, and this path in it gives the text.
    pub json: Option<JsonPath>,
    /// The text is group 1 of this regex's first match (after `json`)...
    pub regex: Option<Regex>,
    /// ...or of every match, one a line.
    pub each_match: bool,
}

/// A selected node as text: a string, the strings of an array joined by spaces (a command's argv), or a
/// number.
fn node_text<D: Doc>(node: &Node<'_, D>) -> Option<String> {
    if let Some(s) = node.as_str() {
        return Some(s.to_string());
    }
    if let Some(n) = node.number() {
        return Some(n.to_string());
    }
    let parts: Vec<&str> = match node {
        Node::Doc(d) => d.elements()?.iter().filter_map(|e| e.as_str()).collect(),
        Node::Json(v) => v.as_array()?.iter().filter_map(Value::as_str).collect(),
    };
    (!parts.is_empty()).then(|| parts.join(" "))
}

impl TextSource {
    /// The text of every node `path` selects in `at`, decoded, joined by a newline; None when there is
    /// none (or only blank text).
    pub fn text<D: Doc>(&self, at: &D) -> Option<String> {
        let mut out: Option<String> = None;
        self.path.any(at, |node| {
            if let Some(t) = node_text(&node).and_then(|t| self.decode(t)) {
                match &mut out {
                    Some(o) => {
                        o.push('\n');
                        o.push_str(&t);
                    }
                    None => out = Some(t),
                }
            }
            false
        });
        out.filter(|t| !t.trim().is_empty())
    }

    fn decode(&self, text: String) -> Option<String> {
        let text = match &self.json {
            None => text,
            Some(inner) => {
                if text.len() > MAX_DECODED_BYTES {
                    return None;
                }
                let v: Value = serde_json::from_str(&text).ok()?;
                let mut found: Vec<String> = Vec::new();
                inner.any(&v, |n| {
                    found.extend(node_text(&n));
                    false
                });
                (!found.is_empty()).then(|| found.join("\n"))?
            }
        };
        match &self.regex {
            None => Some(text),
            Some(re) if self.each_match => {
                let all: Vec<&str> = re
                    .captures_iter(&text)
                    .filter_map(|c| c.get(1).map(|m| m.as_str().trim()))
                    .filter(|m| !m.is_empty())
                    .collect();
                (!all.is_empty()).then(|| all.join("\n"))
            }
            Some(re) => capture(re, &text),
        }
    }
}

/// The first source that gives text, of those that apply to `tool` (None: any tool).
fn first_text<D: Doc>(sources: &[TextSource], at: &D, tool: Option<&str>) -> Option<String> {
    sources
        .iter()
        .filter(|s| s.tools.is_empty() || tool.is_some_and(|t| s.tools.iter().any(|x| x == t)))
        .find_map(|s| s.text(at))
}

/// Calls `f` with each node `each` selects in `record` (the record itself without `each`), as whatever
/// `pick` makes of it.
fn each_node<D: Doc, T>(
    each: Option<&JsonPath>,
    record: &D,
    pick: impl Fn(&dyn PickFrom) -> T,
    mut f: impl FnMut(T),
) {
    match each {
        None => f(pick(&record)),
        Some(each) => {
            each.any(record, |node| {
                match node {
                    Node::Doc(d) => f(pick(&d)),
                    Node::Json(v) => f(pick(&v)),
                }
                false
            });
        }
    }
}

/// What the rules read of one call or result, whatever kind of document holds it.
trait PickFrom {
    fn name(&self, path: &JsonPath) -> Option<String>;
    fn first_text(&self, sources: &[TextSource], tool: Option<&str>) -> Option<String>;
    fn holds(&self, p: &Predicate) -> bool;
    fn script(&self, path: &JsonPath) -> Option<String>;
}

impl<D: Doc> PickFrom for &D {
    fn name(&self, path: &JsonPath) -> Option<String> {
        let mut found = None;
        path.any(*self, |v| {
            found = v.as_str().filter(|n| !n.is_empty()).map(str::to_string);
            found.is_some()
        });
        found
    }

    fn first_text(&self, sources: &[TextSource], tool: Option<&str>) -> Option<String> {
        first_text(sources, *self, tool)
    }

    fn holds(&self, p: &Predicate) -> bool {
        p.holds(*self)
    }

    fn script(&self, path: &JsonPath) -> Option<String> {
        let mut found = None;
        path.any(*self, |v| {
            found = v.as_str().map(str::to_string);
            found.is_some()
        });
        found
    }
}

impl ToolRule {
    pub fn applies<D: Doc>(&self, record: &D) -> bool {
        self.when.as_ref().is_none_or(|w| w.holds(record))
    }

    /// The name of each call in `record` (the rule applying): a script's, each call it makes.
    pub fn names<D: Doc>(&self, record: &D, mut f: impl FnMut(String)) {
        if self.script.is_some() {
            return self.calls(record, |c| f(c.name));
        }
        match &self.each {
            None => self.record_names(record, f),
            Some(_) => each_node(
                self.each.as_ref(),
                record,
                |c| c.name(&self.name),
                |n| {
                    if let Some(n) = n {
                        f(n)
                    }
                },
            ),
        }
    }

    /// Every name `name` selects in a record that is the call itself: a path may name several calls at
    /// once.
    fn record_names<D: Doc>(&self, record: &D, mut f: impl FnMut(String)) {
        self.name.any(record, |v| {
            if let Some(n) = v.as_str().filter(|n| !n.is_empty()) {
                f(n.to_string());
            }
            false
        });
    }

    /// Each call in `record` (the rule applying): its name, main argument and reason; a script's
    /// calls each as one.
    pub fn calls<D: Doc>(&self, record: &D, mut f: impl FnMut(Call)) {
        if self.each.is_none() {
            let mut names = Vec::new();
            self.record_names(record, |n| names.push(n));
            let script = self.script.as_ref().and_then(|s| (&record).script(&s.path));
            for n in names {
                let argument = first_text(&self.argument, record, Some(&n));
                let reason = first_text(&self.reason, record, Some(&n));
                self.emit(n, argument, reason, script.clone(), &mut f);
            }
            return;
        }
        each_node(
            self.each.as_ref(),
            record,
            |c| {
                let name = c.name(&self.name);
                let argument = c.first_text(&self.argument, name.as_deref());
                let reason = c.first_text(&self.reason, name.as_deref());
                let script = self.script.as_ref().and_then(|s| c.script(&s.path));
                (name, argument, reason, script)
            },
            |(name, argument, reason, script)| {
                if let Some(n) = name {
                    self.emit(n, argument, reason, script, &mut f)
                }
            },
        );
    }

    /// The call `name`, or, when it runs a script that calls tools, each of those.
    fn emit(
        &self,
        name: String,
        argument: Option<String>,
        reason: Option<String>,
        script: Option<String>,
        f: &mut impl FnMut(Call),
    ) {
        if let (Some(s), Some(text)) = (&self.script, script) {
            let mut any = false;
            for (inner, input) in super::script::calls(&s.call, &text, MAX_SCRIPT_CALLS) {
                let doc = serde_json::json!({ "name": inner, "input": input, "script": text });
                let argument = first_text(&s.argument, &doc, Some(&inner));
                let inner_reason = first_text(&s.reason, &doc, Some(&inner));
                f(Call {
                    name: inner,
                    argument,
                    reason: inner_reason.or_else(|| reason.clone()),
                });
                any = true;
            }
            if any {
                return;
            }
        }
        f(Call {
            name,
            argument,
            reason,
        })
    }
}

impl ResultRule {
    pub fn applies<D: Doc>(&self, record: &D) -> bool {
        self.when.as_ref().is_none_or(|w| w.holds(record))
    }

    /// Each result in `record` (the rule applying); a result without text is left out.
    pub fn texts<D: Doc>(&self, record: &D, mut f: impl FnMut(ResultText<'_>)) {
        each_node(
            self.each.as_ref(),
            record,
            |r| {
                let failed = self.failed.as_ref().is_some_and(|p| r.holds(p));
                let error = match failed {
                    true => r.first_text(&self.error, None),
                    false => None,
                };
                // A failed call may carry only its error (Copilot's `success: false`).
                let text = match r.first_text(&self.text, None) {
                    Some(t) => t,
                    None => error.clone()?,
                };
                Some(ResultText {
                    text,
                    failed,
                    exit_code: r.first_text(&self.exit_code, None),
                    error,
                    rule: self,
                })
            },
            |t| {
                if let Some(t) = t {
                    f(t)
                }
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(path: &str, json: Option<&str>, regex: Option<&str>, tools: &[&str]) -> TextSource {
        TextSource {
            tools: tools.iter().map(|t| t.to_string()).collect(),
            path: JsonPath::parse(path).unwrap(),
            json: json.map(|j| JsonPath::parse(j).unwrap()),
            regex: regex.map(|r| Regex::new(r).unwrap()),
            each_match: false,
        }
    }

    #[test]
    fn calls_pair_each_name_with_its_own_argument() {
        let rule = ToolRule {
            when: None,
            each: Some(JsonPath::parse("$.content[?@.type == 'tool_use']").unwrap()),
            name: JsonPath::parse("$.name").unwrap(),
            argument: vec![
                source("$.input.pattern", None, None, &["Grep"]),
                source("$.input.file_path", None, None, &[]),
                source("$.input.command", None, None, &[]),
            ],
            reason: Vec::new(),
            script: None,
        };
        let r: Value = serde_json::from_str(
            r#"{"content":[{"type":"text","text":"x"},
                {"type":"tool_use","name":"Read","input":{"file_path":"/a.rs","pattern":"p"}},
                {"type":"tool_use","name":"Grep","input":{"pattern":"fn main","file_path":"/b"}},
                {"type":"tool_use","name":"Bash","input":{"command":"ls -l"}},
                {"type":"tool_use","name":"Todo","input":{"todos":[]}}]}"#,
        )
        .unwrap();
        let mut calls = Vec::new();
        rule.calls(&r, |c| calls.push((c.name, c.argument)));
        let want = [
            ("Read", Some("/a.rs")),
            ("Grep", Some("fn main")),
            ("Bash", Some("ls -l")),
            ("Todo", None),
        ];
        let want: Vec<(String, Option<String>)> = want
            .iter()
            .map(|(n, a)| (n.to_string(), a.map(str::to_string)))
            .collect();
        assert_eq!(calls, want);
        let mut names = Vec::new();
        rule.names(&r, |n| names.push(n));
        assert_eq!(names, ["Read", "Grep", "Bash", "Todo"]);
    }

    #[test]
    fn a_json_string_is_decoded_and_a_regex_takes_its_group() {
        let rule = ToolRule {
            when: None,
            each: None,
            name: JsonPath::parse("$.name").unwrap(),
            argument: vec![
                source("$.arguments", Some("$.cmd"), None, &[]),
                source("$.arguments", Some("$.command"), None, &["shell"]),
                source(
                    "$.input",
                    None,
                    Some(r"\*\*\* (?:Add|Update) File: ([^\n]+)"),
                    &[],
                ),
            ],
            reason: Vec::new(),
            script: None,
        };
        let one = |s: &str| {
            let v: Value = serde_json::from_str(s).unwrap();
            let mut out = Vec::new();
            rule.calls(&v, |c| out.push((c.name, c.argument)));
            out.pop().unwrap().1
        };
        assert_eq!(
            one(r#"{"name":"exec_command","arguments":"{\"cmd\":\"cat src/main.rs\"}"}"#),
            Some("cat src/main.rs".into())
        );
        assert_eq!(
            one(r#"{"name":"shell","arguments":"{\"command\":[\"bash\",\"-lc\",\"ls\"]}"}"#),
            Some("bash -lc ls".into())
        );
        assert_eq!(
            one(
                r#"{"name":"apply_patch","input":"*** Begin Patch\n*** Update File: src/a.rs\n@@"}"#
            ),
            Some("src/a.rs".into())
        );
        // Not JSON, or no such field: no argument, not an error.
        assert_eq!(one(r#"{"name":"exec_command","arguments":"{oops"}"#), None);
    }

    #[test]
    fn results_are_read_from_each_block_or_the_record() {
        let rule = ResultRule {
            when: None,
            each: Some(JsonPath::parse("$.content[?@.type == 'tool_result']").unwrap()),
            text: vec![
                source("$.content", None, None, &[]),
                source("$.content[?@.type == 'text'].text", None, None, &[]),
            ],
            failed: None,
            exit_code: Vec::new(),
            error: Vec::new(),
            preamble: None,
            brief: None,
        };
        let r: Value = serde_json::from_str(
            r#"{"content":[{"type":"tool_result","content":"one"},
                {"type":"tool_result","content":[{"type":"text","text":"two"},{"type":"text","text":"2"}]},
                {"type":"tool_result","content":[{"type":"image"}]}]}"#,
        )
        .unwrap();
        let mut texts = Vec::new();
        rule.texts(&r, |t| texts.push(t.text));
        assert_eq!(texts, ["one", "two\n2"]);
    }
}
