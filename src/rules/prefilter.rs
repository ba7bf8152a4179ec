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

/// The requirements of a `turns` section, compiled for searching: every `Pair` is an atom, and a line
/// is searched for a key once, for all the atoms of that key (however many rules ask for them), and
/// only when a rule still in question needs it.
#[derive(Debug)]
pub struct Prefilter {
    /// A line that can start a turn, add assistant text or a tool.
    content: Formula,
    /// A line that can start a turn (a user rule's `when`): all a count needs once its turn is answered.
    prompts: Formula,
    /// Per skip: a line that can start its region (`from`), and the first line that may.
    from: Vec<(Formula, u64)>,
    /// Per skip: a line that can end its region (`until`) / arm it (`after`).
    until: Vec<Formula>,
    after: Vec<Formula>,
    /// Per key: its searcher (the quoted key), and its atoms as (atom number, the value that must
    /// follow the key and its colon).
    keys: Vec<(Finder<'static>, Vec<KeyAtom>)>,
    /// The atom numbers' keys.
    key_of: Vec<usize>,
    escape: Finder<'static>,
}

/// An atom of a key: its number, and the value that must follow the key and its colon.
type KeyAtom = (usize, Option<Vec<u8>>);

/// A `Need` over atoms: bit `i` is set once atom `i`'s key and value were found in the line.
#[derive(Debug)]
enum Formula {
    Always,
    Atom(usize),
    All(Vec<Formula>),
    Any(Vec<Formula>),
}

/// At most this many atoms (distinct key and value pairs) and keys; a `Pair` beyond them is `Always`.
const MAX_ATOMS: usize = 128;

/// What one line's search knows so far: which keys it searched for, and the atoms it found.
#[derive(Default)]
struct Found {
    searched: u128,
    atoms: u128,
}

/// Numbers the pairs of the needs it compiles: the same key and value is one atom.
#[derive(Default)]
struct Atoms {
    keys: Vec<String>,
    pairs: Vec<(usize, Option<String>)>,
}

impl Atoms {
    fn compile(&mut self, n: &Need) -> Formula {
        match n {
            Need::Always => Formula::Always,
            Need::Pair { key, value } => {
                let k = match self.keys.iter().position(|x| x == key) {
                    Some(k) => k,
                    None if self.keys.len() < MAX_ATOMS => {
                        self.keys.push(key.clone());
                        self.keys.len() - 1
                    }
                    None => return Formula::Always,
                };
                let pair = (k, value.clone());
                match self.pairs.iter().position(|p| *p == pair) {
                    Some(i) => Formula::Atom(i),
                    None if self.pairs.len() < MAX_ATOMS => {
                        self.pairs.push(pair);
                        Formula::Atom(self.pairs.len() - 1)
                    }
                    None => Formula::Always,
                }
            }
            Need::All(ns) => Formula::All(ns.iter().map(|n| self.compile(n)).collect()),
            Need::Any(ns) => Formula::Any(ns.iter().map(|n| self.compile(n)).collect()),
        }
    }
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
        let mut atoms = Atoms::default();
        let content = atoms.compile(&content);
        let prompts = atoms.compile(&prompts);
        let from = turns
            .skip
            .iter()
            .map(|s| (atoms.compile(&need(&s.from)), s.earliest_line))
            .collect();
        let until = turns
            .skip
            .iter()
            .map(|s| atoms.compile(&need(&s.until)))
            .collect();
        let after = turns
            .skip
            .iter()
            .map(|s| atoms.compile(&need_of(s.after.as_ref())))
            .collect();
        let mut keys: Vec<(Finder<'static>, Vec<KeyAtom>)> = atoms
            .keys
            .iter()
            .map(|k| {
                (
                    Finder::new(format!("\"{k}\"").as_bytes()).into_owned(),
                    Vec::new(),
                )
            })
            .collect();
        for (i, (k, v)) in atoms.pairs.iter().enumerate() {
            keys[*k]
                .1
                .push((i, v.as_ref().map(|v| v.as_bytes().to_vec())));
        }
        Prefilter {
            content,
            prompts,
            from,
            until,
            after,
            keys,
            key_of: atoms.pairs.iter().map(|(k, _)| *k).collect(),
            escape: Finder::new(b"\\u").into_owned(),
        }
    }

    /// Whether `line` (transcript line `at`) must be parsed: some rule may hold on it. `open` is the
    /// open skip region, `armed` per skip whether its `after` record has been read. A skip's `from`
    /// asks only where it can open a region: once armed, from its `earliest_line` (a Codex rollout's
    /// 20 KiB first line opens none, and is not parsed for it).
    /// With `prompts_only` (a count whose open turn is answered, where assistant text and tools change
    /// nothing), only a line that can start a turn is content.
    pub fn wanted(
        &self,
        line: &[u8],
        at: u64,
        (open, armed): (Option<usize>, &[bool]),
        prompts_only: bool,
    ) -> bool {
        // In an open region a line is skipped unless it ends the region (which changes state). The
        // `\u` search comes last: most lines are wanted without it.
        let content = match prompts_only {
            true => &self.prompts,
            false => &self.content,
        };
        let f = &mut Found::default();
        let found = match open {
            Some(i) => self.holds(&self.until[i], line, f),
            None => {
                self.holds(content, line, f)
                    || self.opens(line, at, armed, f)
                    || self.arms(line, armed, f)
            }
        };
        found || self.escape.find(line).is_some()
    }

    /// Whether `line` may arm a waiting skip (also for lines before the part).
    pub fn may_arm(&self, line: &[u8], armed: &[bool]) -> bool {
        self.arms(line, armed, &mut Found::default()) || self.escape.find(line).is_some()
    }

    /// Whether `line` may open a skip region (as `Skipper::skips` asks).
    fn opens(&self, line: &[u8], at: u64, armed: &[bool], f: &mut Found) -> bool {
        armed
            .iter()
            .zip(&self.from)
            .any(|(armed, (from, earliest))| *armed && at >= *earliest && self.holds(from, line, f))
    }

    fn arms(&self, line: &[u8], armed: &[bool], f: &mut Found) -> bool {
        armed
            .iter()
            .zip(&self.after)
            .any(|(armed, a)| !*armed && self.holds(a, line, f))
    }

    /// Whether `line` holds what `formula` needs, searching it for a key the first time an atom of that
    /// key is asked about: every occurrence, for all the key's atoms at once.
    fn holds(&self, formula: &Formula, line: &[u8], f: &mut Found) -> bool {
        match formula {
            Formula::Always => true,
            Formula::Atom(i) => {
                let k = self.key_of[*i];
                if f.searched & (1 << k) == 0 {
                    f.searched |= 1 << k;
                    let (finder, atoms) = &self.keys[k];
                    for at in finder.find_iter(line) {
                        // What follows the key's colon, once for all its atoms.
                        let Some(rest) = after_colon(&line[at + finder.needle().len()..]) else {
                            continue;
                        };
                        for (i, value) in atoms {
                            if value.as_deref().is_none_or(|v| starts(rest, v)) {
                                f.atoms |= 1 << i;
                            }
                        }
                    }
                }
                f.atoms & (1 << i) != 0
            }
            Formula::All(fs) => fs.iter().all(|x| self.holds(x, line, f)),
            Formula::Any(fs) => fs.iter().any(|x| self.holds(x, line, f)),
        }
    }
}

/// The bytes after JSON whitespace, `:` and JSON whitespace at the start of `rest`, if it has them.
fn after_colon(rest: &[u8]) -> Option<&[u8]> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let rest = &rest[rest.iter().take_while(|b| ws(b)).count()..];
    let rest = rest.strip_prefix(b":")?;
    Some(&rest[rest.iter().take_while(|b| ws(b)).count()..])
}

/// `rest.starts_with(v)`, its first two bytes compared before the rest (a string value's first is
/// always its quote).
fn starts(rest: &[u8], v: &[u8]) -> bool {
    rest.len() >= v.len() && v.iter().zip(rest).take(2).all(|(a, b)| a == b) && rest.starts_with(v)
}

#[cfg(test)]
#[path = "prefilter_tests.rs"]
mod tests;
