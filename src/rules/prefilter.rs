//! A byte prefilter for turn reading: from the compiled `turns` rules, what a line must contain for any
//! rule to possibly hold on it, checked with a byte search before the line is parsed.
//!
//! Only safe requirements are derived; anything else is `Always` (the line is parsed). For
//! `equals`/`in` on a path that is a plain chain of names (`$.a.b`) with a string, boolean or null
//! value, the line must hold the last key, JSON whitespace, `:`, JSON whitespace and the value as
//! compact JSON writes it (`"type" : "user"` matches as well as `"type":"user"`); `exists` needs the key
//! and its colon, `matches` the key, its colon and an opening quote. A key or string value holding `/`
//! or a character JSON may write escaped (`\u`-escapes, control characters) gives no requirement, and a
//! line holding `\u` is always parsed: a `\u`-escape can spell any key or value. `missing`, `not`,
//! numbers, objects and arrays give none either.

use crate::rules::{Predicate, TurnsRule};
use memchr::memmem::Finder;

/// What a line must contain for a predicate to possibly hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Need {
    /// Nothing derivable: any line may match.
    Always,
    /// `"key"`, JSON whitespace, `:`, JSON whitespace, then `value` (compact JSON) when given.
    Pair {
        key: String,
        value: Option<String>,
    },
    All(Vec<Need>),
    Any(Vec<Need>),
}

/// The last name of a path that is a plain chain of names (`$.a.b` -> `b`), safe to search for.
fn last_name(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("$.")?;
    let segments: Vec<&str> = rest.split('.').collect();
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    segments
        .iter()
        .all(|s| plain(s))
        .then(|| *segments.last().expect("split yields one"))
}

/// `value` as compact JSON, when that is the only way a line without `\u` can spell it.
fn literal(value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) => Some(value.to_string()),
        Value::String(s) if s.chars().all(|c| c >= ' ' && c != '/' && c != '\u{7f}') => {
            Some(value.to_string())
        }
        _ => None,
    }
}

fn pair(path: &str, value: Option<&serde_json::Value>) -> Need {
    let Some(key) = last_name(path) else {
        return Need::Always;
    };
    match value.map(literal) {
        None => Need::Pair {
            key: key.to_string(),
            value: None,
        },
        Some(Some(v)) => Need::Pair {
            key: key.to_string(),
            value: Some(v),
        },
        Some(None) => Need::Always,
    }
}

/// The requirement of one predicate.
pub fn need(p: &Predicate) -> Need {
    match p {
        Predicate::Exists(path) => pair(&path.text, None),
        Predicate::Matches(path, _) => match pair(&path.text, None) {
            Need::Pair { key, .. } => Need::Pair {
                key,
                value: Some("\"".into()),
            },
            other => other,
        },
        Predicate::Equals(path, v) => pair(&path.text, Some(v)),
        Predicate::In(path, vs) => any(vs.iter().map(|v| pair(&path.text, Some(v))).collect()),
        Predicate::All(ps) => {
            let parts: Vec<Need> = ps.iter().map(need).filter(|n| *n != Need::Always).collect();
            match parts.len() {
                0 => Need::Always,
                1 => parts.into_iter().next().expect("one"),
                _ => Need::All(parts),
            }
        }
        Predicate::Any(ps) => any(ps.iter().map(need).collect()),
        Predicate::Missing(_) | Predicate::Not(_) => Need::Always,
    }
}

fn any(parts: Vec<Need>) -> Need {
    if parts.is_empty() || parts.contains(&Need::Always) {
        return Need::Always;
    }
    if parts.len() == 1 {
        return parts.into_iter().next().expect("one");
    }
    Need::Any(parts)
}

fn need_of(when: Option<&Predicate>) -> Need {
    when.map_or(Need::Always, need)
}

/// The requirements of a `turns` section, compiled for searching.
#[derive(Debug)]
pub struct Prefilter {
    /// A line that can start a turn, add assistant text or a tool.
    content: Compiled,
    /// A line that can start a turn (a user rule's `when`): all a count needs once its turn is answered.
    prompts: Compiled,
    /// A line that can start a skip region (any `from`).
    from: Compiled,
    /// Per skip: a line that can end its region (`until`) / arm it (`after`).
    until: Vec<Compiled>,
    after: Vec<Compiled>,
    escape: Finder<'static>,
}

impl Prefilter {
    pub fn new(turns: &TurnsRule) -> Prefilter {
        let content = any(turns
            .user
            .iter()
            .chain(&turns.assistant)
            .map(|t| need_of(t.when.as_ref()))
            .chain(turns.tools.iter().map(|(w, _)| need_of(w.as_ref())))
            .collect());
        let prompts = any(turns
            .user
            .iter()
            .map(|t| need_of(t.when.as_ref()))
            .collect());
        let from = any(turns.skip.iter().map(|s| need(&s.from)).collect());
        Prefilter {
            content: Compiled::new(&content),
            prompts: Compiled::new(&prompts),
            from: Compiled::new(&from),
            until: turns
                .skip
                .iter()
                .map(|s| Compiled::new(&need(&s.until)))
                .collect(),
            after: turns
                .skip
                .iter()
                .map(|s| Compiled::new(&need_of(s.after.as_ref())))
                .collect(),
            escape: Finder::new(b"\\u").into_owned(),
        }
    }

    /// Whether `line` must be parsed: some rule may hold on it. `open` is the open skip region,
    /// `armed` per skip whether its `after` record has been read.
    /// With `prompts_only` (a count whose open turn is answered, where assistant text and tools change
    /// nothing), only a line that can start a turn is content.
    pub fn wanted(
        &self,
        line: &[u8],
        (open, armed): (Option<usize>, &[bool]),
        prompts_only: bool,
    ) -> bool {
        // In an open region a line is skipped unless it ends the region (which changes state). The
        // `\u` search comes last: most lines are wanted without it.
        let content = match prompts_only {
            true => &self.prompts,
            false => &self.content,
        };
        let found = match open {
            Some(i) => self.until[i].holds(line),
            None => content.holds(line) || self.from.holds(line) || self.arms(line, armed),
        };
        found || self.escape.find(line).is_some()
    }

    /// Whether `line` may arm a waiting skip (also for lines before the part).
    pub fn may_arm(&self, line: &[u8], armed: &[bool]) -> bool {
        self.arms(line, armed) || self.escape.find(line).is_some()
    }

    fn arms(&self, line: &[u8], armed: &[bool]) -> bool {
        armed
            .iter()
            .zip(&self.after)
            .any(|(armed, a)| !*armed && a.holds(line))
    }
}

/// A `Need` with its byte searchers built.
#[derive(Debug)]
enum Compiled {
    Always,
    Pair(Box<Finder<'static>>, Option<Vec<u8>>),
    All(Vec<Compiled>),
    Any(Vec<Compiled>),
}

impl Compiled {
    fn new(n: &Need) -> Compiled {
        match n {
            Need::Always => Compiled::Always,
            Need::Pair { key, value } => Compiled::Pair(
                Box::new(Finder::new(format!("\"{key}\"").as_bytes()).into_owned()),
                value.as_ref().map(|v| v.as_bytes().to_vec()),
            ),
            Need::All(ns) => Compiled::All(ns.iter().map(Compiled::new).collect()),
            Need::Any(ns) => Compiled::Any(ns.iter().map(Compiled::new).collect()),
        }
    }

    fn holds(&self, line: &[u8]) -> bool {
        match self {
            Compiled::Always => true,
            Compiled::Pair(key, value) => key
                .find_iter(line)
                .any(|at| follows(&line[at + key.needle().len()..], value.as_deref())),
            Compiled::All(cs) => cs.iter().all(|c| c.holds(line)),
            Compiled::Any(cs) => cs.iter().any(|c| c.holds(line)),
        }
    }
}

/// Whether `rest` (the bytes after a key) starts with JSON whitespace, `:`, JSON whitespace and `value`.
fn follows(rest: &[u8], value: Option<&[u8]>) -> bool {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let rest = &rest[rest.iter().take_while(|b| ws(b)).count()..];
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    let rest = &rest[rest.iter().take_while(|b| ws(b)).count()..];
    value.is_none_or(|v| rest.starts_with(v))
}

#[cfg(test)]
#[path = "prefilter_tests.rs"]
mod tests;
