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
    content: Terms,
    /// A line that can start a turn (a user rule's `when`): all a count needs once its turn is answered.
    prompts: Terms,
    /// A line a rendering of the conversation shows: content, or a tool result.
    render: Terms,
    /// Per skip: a line that can start its region (`from`), and the first line that may.
    from: Vec<(Terms, u64)>,
    /// Per skip: a line that can end its region (`until`) or let it end (`until_after`) / arm it
    /// (`after`).
    until: Vec<Terms>,
    until_after: Vec<Option<Terms>>,
    after: Vec<Terms>,
    /// Per key: its searcher (the quoted key), and its atoms by the value that must follow the key
    /// and its colon.
    keys: Vec<(Finder<'static>, KeyAtoms)>,
    escape: Finder<'static>,
}

/// The atoms of one key, as bits of `Found::atoms`, by what must follow the key and its colon. Each
/// occurrence of the key checks its string atoms by the one string there (its bytes up to the next
/// quote, compared by length first) instead of testing every atom's value in turn: Codex's `"type"`
/// has a dozen values and comes twice in every line.
#[derive(Debug, Default)]
struct KeyAtoms {
    /// Atoms that need only the key and its colon (`exists`).
    any: u128,
    /// Atoms that need an opening quote after the colon (`matches`).
    quote: u128,
    /// String values without a backslash, quotes included, each with its atom's bit.
    strings: Vec<(Vec<u8>, u128)>,
    /// The longest of `strings`.
    longest: usize,
    /// Any other value (`true`, `false`, `null`, a string with an escape): its bytes must follow.
    others: Vec<(Vec<u8>, u128)>,
}

impl KeyAtoms {
    fn add(&mut self, atom: usize, value: Option<&str>) {
        let bit = 1u128 << atom;
        let Some(v) = value else {
            self.any |= bit;
            return;
        };
        let v = v.as_bytes();
        let string = v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"';
        if v == b"\"" {
            self.quote |= bit;
        } else if string && !v[1..v.len() - 1].iter().any(|b| matches!(b, b'"' | b'\\')) {
            self.longest = self.longest.max(v.len());
            self.strings.push((v.to_vec(), bit));
        } else {
            self.others.push((v.to_vec(), bit));
        }
    }

    /// The atoms that hold where the key's colon is followed by `rest` (JSON whitespace skipped).
    fn found(&self, rest: &[u8]) -> u128 {
        let mut found = self.any;
        if rest.first() == Some(&b'"') {
            found |= self.quote;
            // The string's bytes up to its closing quote: a string value matches only all of them.
            let within = &rest[..rest.len().min(self.longest)];
            if let Some(end) = within.iter().skip(1).position(|b| *b == b'"') {
                let s = &within[..end + 2];
                for (v, bit) in &self.strings {
                    if v.as_slice() == s {
                        found |= bit;
                    }
                }
            }
        }
        for (v, bit) in &self.others {
            if starts(rest, v) {
                found |= bit;
            }
        }
        found
    }
}

/// A `Need` over atoms: bit `i` is set once atom `i`'s key and value were found in the line.
#[derive(Debug)]
enum Formula {
    Always,
    Atom(usize),
    All(Vec<Formula>),
    Any(Vec<Formula>),
}

/// A formula as what is searched: it holds when one of its terms does, and a term when every atom
/// of it was found. A term lists its keys in the order the formula asks for them, each with the atoms
/// it needs of that key, so a line is searched for a key only while the term can still hold (as the
/// formula's own `All` stops at its first part that fails). Evaluating a tree of `All` and `Any` on
/// every line cost more than the searches it saved (a recursive call and a 128-bit shift per atom).
#[derive(Debug)]
struct Terms(Vec<Term>);

#[derive(Debug, Clone, Default)]
struct Term(Vec<(usize, u128)>);

/// A formula with more terms than this (an `All` of many `Any`s multiplies them) asks for every line:
/// parsing it is always correct, only slower.
const MAX_TERMS: usize = 64;

impl Terms {
    fn always() -> Terms {
        Terms(vec![Term::default()])
    }

    fn of(f: &Formula, key_of: &[usize]) -> Terms {
        Terms::expand(f, key_of).map_or_else(Terms::always, Terms)
    }

    fn expand(f: &Formula, key_of: &[usize]) -> Option<Vec<Term>> {
        Some(match f {
            Formula::Always => vec![Term::default()],
            Formula::Atom(i) => vec![Term(vec![(key_of[*i], 1u128 << i)])],
            Formula::Any(fs) => {
                let mut out = Vec::new();
                for f in fs {
                    out.extend(Terms::expand(f, key_of)?);
                    if out.len() > MAX_TERMS {
                        return None;
                    }
                }
                out
            }
            Formula::All(fs) => {
                let mut out = vec![Term::default()];
                for f in fs {
                    let parts = Terms::expand(f, key_of)?;
                    if out.len() * parts.len() > MAX_TERMS {
                        return None;
                    }
                    out = out
                        .iter()
                        .flat_map(|t| parts.iter().map(move |p| t.and(p)))
                        .collect();
                }
                out
            }
        })
    }
}

impl Term {
    /// Both terms' atoms, keys in the order they are first asked for.
    fn and(&self, other: &Term) -> Term {
        let mut t = self.clone();
        for &(k, m) in &other.0 {
            match t.0.iter_mut().find(|(x, _)| *x == k) {
                Some((_, atoms)) => *atoms |= m,
                None => t.0.push((k, m)),
            }
        }
        t
    }
}

/// At most this many atoms (distinct key and value pairs) and keys; a `Pair` beyond them is `Always`.
const MAX_ATOMS: usize = 128;

/// What one line's search knows so far: which keys it searched the whole line for, the atoms it
/// found, and for each of the first `RESUMED` keys where its search stopped (0: not begun).
#[derive(Default)]
struct Found {
    searched: u128,
    atoms: u128,
    resume: [usize; RESUMED],
}

/// A search for one of the first this many keys stops once the term asking has its atoms, and goes on
/// from there if another term asks for more; a later key's search reads the whole line at once.
const RESUMED: usize = 8;

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
        // A queue's records start turns (`deliver`) or change which prompts will (`withdraw`), and a
        // `resends_prompt` record decides whether the next prompt is one.
        let queue: Vec<Need> = turns
            .queue
            .iter()
            .flat_map(|q| q.predicates())
            .chain(&turns.resends_prompt)
            .map(need)
            .collect();
        let content = any(turns
            .user
            .iter()
            .chain(&turns.assistant)
            .map(|t| need_of(t.when.as_ref()))
            .chain(turns.tools.iter().map(|t| need_of(t.when.as_ref())))
            .chain(queue.iter().cloned())
            .collect());
        let render = any([content.clone()]
            .into_iter()
            .chain(turns.results.iter().map(|r| need_of(r.when.as_ref())))
            .chain(
                (turns.thinking.iter().chain(&turns.reports))
                    .chain(&turns.compaction)
                    .map(|t| need_of(t.when.as_ref())),
            )
            .collect());
        let prompts = any(turns
            .user
            .iter()
            .map(|t| need_of(t.when.as_ref()))
            .chain(queue)
            .collect());
        let mut atoms = Atoms::default();
        let content = atoms.compile(&content);
        let prompts = atoms.compile(&prompts);
        let render = atoms.compile(&render);
        let from: Vec<(Formula, u64)> = turns
            .skip
            .iter()
            .map(|s| (atoms.compile(&need(&s.from)), s.earliest_line))
            .collect();
        let until: Vec<Formula> = turns
            .skip
            .iter()
            .map(|s| atoms.compile(&need(&s.until)))
            .collect();
        let until_after: Vec<Option<Formula>> = turns
            .skip
            .iter()
            .map(|s| s.until_after.as_ref().map(|a| atoms.compile(&need(a))))
            .collect();
        let after: Vec<Formula> = turns
            .skip
            .iter()
            .map(|s| atoms.compile(&need_of(s.after.as_ref())))
            .collect();
        let key_of: Vec<usize> = atoms.pairs.iter().map(|(k, _)| *k).collect();
        let terms = |f: &Formula| Terms::of(f, &key_of);
        let mut keys: Vec<(Finder<'static>, KeyAtoms)> = atoms
            .keys
            .iter()
            .map(|k| {
                (
                    Finder::new(format!("\"{k}\"").as_bytes()).into_owned(),
                    KeyAtoms::default(),
                )
            })
            .collect();
        for (i, (k, v)) in atoms.pairs.iter().enumerate() {
            keys[*k].1.add(i, v.as_deref());
        }
        Prefilter {
            content: terms(&content),
            prompts: terms(&prompts),
            render: terms(&render),
            from: from.iter().map(|(f, e)| (terms(f), *e)).collect(),
            until: until.iter().map(terms).collect(),
            until_after: until_after.iter().map(|f| f.as_ref().map(terms)).collect(),
            after: after.iter().map(terms).collect(),
            keys,
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
        skips: (Option<usize>, &[bool]),
        prompts_only: bool,
    ) -> bool {
        let content = match prompts_only {
            true => &self.prompts,
            false => &self.content,
        };
        self.wanted_for(content, line, at, skips)
    }

    /// As `wanted`, for a rendering of the conversation: tool results are wanted too.
    pub fn wanted_for_render(&self, line: &[u8], at: u64, skips: (Option<usize>, &[bool])) -> bool {
        self.wanted_for(&self.render, line, at, skips)
    }

    fn wanted_for(
        &self,
        content: &Terms,
        line: &[u8],
        at: u64,
        (open, armed): (Option<usize>, &[bool]),
    ) -> bool {
        // In an open region a line is skipped unless it ends the region (which changes state). The
        // `\u` search comes last: most lines are wanted without it.
        let f = &mut Found::default();
        let found = match open {
            Some(i) => {
                self.holds(&self.until[i], line, f)
                    || self.until_after[i]
                        .as_ref()
                        .is_some_and(|a| self.holds(a, line, f))
            }
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

    /// Whether `line` holds what `terms` need, searching it for a key the first time an atom of that
    /// key is asked about: every occurrence, for all the key's atoms at once.
    fn holds(&self, terms: &Terms, line: &[u8], f: &mut Found) -> bool {
        terms.0.iter().any(|t| {
            t.0.iter()
                .all(|&(k, atoms)| f.atoms & atoms == atoms || self.search(k, atoms, line, f))
        })
    }

    /// Searches `line` on for key `k` (every occurrence, for all its atoms at once) until `atoms` are
    /// all found; whether they were. A line a rule wants usually has its record's `"type"` near the
    /// start, and a tool result's text need not be searched past it.
    fn search(&self, k: usize, atoms: u128, line: &[u8], f: &mut Found) -> bool {
        if f.searched & (1 << k) != 0 {
            return false;
        }
        let (finder, of_key) = &self.keys[k];
        let n = finder.needle().len();
        let mut from = f.resume.get(k).copied().unwrap_or(0);
        while let Some(at) = finder.find(&line[from..]).map(|at| from + at) {
            from = at + n;
            // What follows the key's colon, once for all its atoms.
            if let Some(rest) = after_colon(&line[from..]) {
                f.atoms |= of_key.found(rest);
                if f.atoms & atoms == atoms {
                    if let Some(r) = f.resume.get_mut(k) {
                        *r = from;
                        return true;
                    }
                }
            }
        }
        f.searched |= 1 << k;
        f.atoms & atoms == atoms
    }
}

/// The bytes after JSON whitespace, `:` and JSON whitespace at the start of `rest`, if it has them.
fn after_colon(rest: &[u8]) -> Option<&[u8]> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    // Compact JSON, as the clients write it: the colon, then the value.
    if let [b':', next, ..] = rest {
        if !ws(next) {
            return Some(&rest[1..]);
        }
    }
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
