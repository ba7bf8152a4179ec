//! A direct evaluator for the JSONPaths rule files use most: member names, indexes, wildcards and
//! filters that compare a member with a string, boolean or null, test that one exists, or `match()` /
//! `search()` one against a literal regex (compiled once here, where the general evaluator compiles it
//! for every node it tests). It selects exactly what `jsonpath_rust` selects, in the same order (a test
//! compares the two on every fixture record); a path with anything else is left to the general one.

use super::doc::Doc;
use jsonpath_rust::parser::model::{
    Comparable, Comparison, Filter, FilterAtom, FnArg, JpQuery, Literal, Segment, Selector,
    SingularQuery, SingularQuerySegment, Test, TestFunction,
};
use regex::Regex;
use serde_json::Value;

#[derive(Debug)]
pub struct FastPath(Vec<Step>);

#[derive(Debug)]
enum Step {
    Name(String),
    Index(i64),
    Wildcard,
    Filter(Cond),
}

#[derive(Debug)]
enum Cond {
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
    /// `@.a.b` selects something.
    Exists(Vec<String>),
    /// `@.a.b == literal` (a missing member equals nothing).
    Equals(Vec<String>, Value),
    /// `match(@.a, 're')` (whole string) or `search(...)`; None: the regex does not compile (false).
    Regex(Vec<String>, Option<Regex>),
}

impl FastPath {
    /// The fast form of `q`, when every part of it has one.
    pub fn of(q: &JpQuery) -> Option<FastPath> {
        q.segments
            .iter()
            .map(step)
            .collect::<Option<_>>()
            .map(FastPath)
    }

    /// A path of member names only, e.g. `$.payload.type`.
    #[cfg(test)]
    pub fn is_names(&self) -> bool {
        self.0.iter().all(|s| matches!(s, Step::Name(_)))
    }

    pub fn select<'a, D: Doc>(&self, root: &'a D) -> Vec<&'a D> {
        let mut out = Vec::new();
        walk(&self.0, root, &mut |v| {
            out.push(v);
            false
        });
        out
    }

    /// Whether `f` holds for a node the path selects, asked in `select`'s order until it does: nothing
    /// is collected.
    pub fn any<'a, D: Doc>(&self, root: &'a D, f: &mut dyn FnMut(&'a D) -> bool) -> bool {
        walk(&self.0, root, f)
    }
}

/// Hands `f` each node `steps` select from `v`, in order, until it returns true (then true).
fn walk<'a, D: Doc>(steps: &[Step], v: &'a D, f: &mut dyn FnMut(&'a D) -> bool) -> bool {
    let Some((first, rest)) = steps.split_first() else {
        return f(v);
    };
    match first {
        Step::Name(n) => v.member(n).is_some_and(|next| walk(rest, next, f)),
        Step::Index(i) => v.elements().is_some_and(|a| {
            let at = if *i < 0 { a.len() as i64 + i } else { *i };
            usize::try_from(at)
                .ok()
                .and_then(|at| a.get(at))
                .is_some_and(|next| walk(rest, next, f))
        }),
        Step::Wildcard => v.any_child(&mut |c| walk(rest, c, f)),
        Step::Filter(cond) => v.any_child(&mut |c| cond.holds(c) && walk(rest, c, f)),
    }
}

fn member<'a, D: Doc>(v: &'a D, names: &[String]) -> Option<&'a D> {
    names.iter().try_fold(v, |v, n| v.member(n))
}

impl Cond {
    fn holds<D: Doc>(&self, v: &D) -> bool {
        match self {
            Cond::And(cs) => cs.iter().all(|c| c.holds(v)),
            Cond::Or(cs) => cs.iter().any(|c| c.holds(v)),
            Cond::Not(c) => !c.holds(v),
            Cond::Exists(names) => member(v, names).is_some(),
            Cond::Equals(names, lit) => member(v, names).is_some_and(|m| m.equals(lit)),
            Cond::Regex(names, re) => match (member(v, names).and_then(|m| m.as_str()), re) {
                (Some(s), Some(re)) => re.is_match(s),
                _ => false,
            },
        }
    }
}

fn step(s: &Segment) -> Option<Step> {
    match s {
        Segment::Selector(Selector::Name(n)) => Some(Step::Name(n.clone())),
        Segment::Selector(Selector::Index(i)) => Some(Step::Index(*i)),
        Segment::Selector(Selector::Wildcard) => Some(Step::Wildcard),
        Segment::Selector(Selector::Filter(f)) => cond(f).map(Step::Filter),
        _ => None,
    }
}

fn cond(f: &Filter) -> Option<Cond> {
    match f {
        Filter::And(fs) => fs.iter().map(cond).collect::<Option<_>>().map(Cond::And),
        Filter::Or(fs) => fs.iter().map(cond).collect::<Option<_>>().map(Cond::Or),
        Filter::Atom(a) => atom(a),
    }
}

fn negated(c: Cond, not: bool) -> Cond {
    match not {
        true => Cond::Not(Box::new(c)),
        false => c,
    }
}

fn atom(a: &FilterAtom) -> Option<Cond> {
    match a {
        FilterAtom::Filter { expr, not } => Some(negated(cond(expr)?, *not)),
        FilterAtom::Test { expr, not } => {
            let c = match &**expr {
                Test::RelQuery(segs) => Cond::Exists(rel_names(segs)?),
                Test::Function(f) => regex_test(f)?,
                Test::AbsQuery(_) => return None,
            };
            Some(negated(c, *not))
        }
        FilterAtom::Comparison(c) => match &**c {
            Comparison::Eq(a, b) => equals(a, b),
            Comparison::Ne(a, b) => Some(Cond::Not(Box::new(equals(a, b)?))),
            _ => None,
        },
    }
}

/// `@.a.b` as a relative query of names.
fn rel_names(segs: &[Segment]) -> Option<Vec<String>> {
    segs.iter()
        .map(|s| match s {
            Segment::Selector(Selector::Name(n)) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

fn singular_names(c: &Comparable) -> Option<Vec<String>> {
    match c {
        Comparable::SingularQuery(SingularQuery::Current(segs)) => segs
            .iter()
            .map(|s| match s {
                SingularQuerySegment::Name(n) => Some(n.clone()),
                SingularQuerySegment::Index(_) => None,
            })
            .collect(),
        _ => None,
    }
}

/// A literal compared as the general evaluator compares it: numbers are left to it (1 == 1.0 there).
fn literal(c: &Comparable) -> Option<Value> {
    match c {
        Comparable::Literal(Literal::String(s)) => Some(Value::String(s.clone())),
        Comparable::Literal(Literal::Bool(b)) => Some(Value::Bool(*b)),
        Comparable::Literal(Literal::Null) => Some(Value::Null),
        _ => None,
    }
}

fn equals(a: &Comparable, b: &Comparable) -> Option<Cond> {
    let (names, lit) = match (singular_names(a), literal(b)) {
        (Some(n), Some(l)) => (n, l),
        _ => (singular_names(b)?, literal(a)?),
    };
    Some(Cond::Equals(names, lit))
}

fn regex_test(f: &TestFunction) -> Option<Cond> {
    let (arg, pattern, substr) = match f {
        TestFunction::Match(a, b) => (a, b, false),
        TestFunction::Search(a, b) => (a, b, true),
        _ => return None,
    };
    let names = match arg {
        FnArg::Test(t) => match &**t {
            Test::RelQuery(segs) => rel_names(segs)?,
            _ => return None,
        },
        _ => return None,
    };
    let FnArg::Literal(Literal::String(p)) = pattern else {
        return None;
    };
    Some(Cond::Regex(names, Regex::new(&i_regexp(p, substr)).ok()))
}

/// An I-Regexp (RFC 9485) in the `regex` crate's syntax, as `jsonpath_rust` translates it: `.` outside a
/// class matches neither `\n` nor `\r`; `match()` is anchored at both ends.
fn i_regexp(pattern: &str, substring: bool) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some(escaped) = chars.next() {
                    out.push(escaped);
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '.' if !in_class => out.push_str(r"[^\n\r]"),
            _ => out.push(c),
        }
    }
    match substring {
        true => out,
        false => format!("^(?:{out})$"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::compiled::JsonPath;

    fn general<'a>(p: &JsonPath, v: &'a Value) -> Vec<&'a Value> {
        jsonpath_rust::query::js_path_process(p.query(), v)
            .map(|r| r.into_iter().map(|r| r.val()).collect())
            .unwrap_or_default()
    }

    /// Every JSONPath of the built-in rule files and some harder ones, on every record of every fixture
    /// and on hand-made records: the fast evaluator selects what the general one does.
    #[test]
    fn selects_what_the_general_evaluator_selects() {
        let mut texts: Vec<String> = vec![
            "$.a[0].b".into(),
            "$.a[-1]".into(),
            "$.a[5]".into(),
            "$.a[*]".into(),
            "$.*".into(),
            "$.a[?@.t == 'x']".into(),
            "$.a[?@.t != 'x'].v".into(),
            "$.a[?@.t == true || @.u == null]".into(),
            "$.a[?!@.t]".into(),
            "$.a[?@.t && !(@.u == 'y')]".into(),
            "$.a[?match(@.t, 'x.z')]".into(),
            "$.a[?search(@.t, '[.]')]".into(),
            "$.a[?match(@.t, '(')]".into(),
            "$.a[?'x' == @.t]".into(),
            "$.a[?@.t.u == 'x']".into(),
        ];
        for (_, src) in crate::rules::BUILTIN_RULES {
            let yaml: serde_yaml::Value = serde_yaml::from_str(src).unwrap();
            fn strings(v: &serde_yaml::Value, out: &mut Vec<String>) {
                match v {
                    serde_yaml::Value::String(s) if s.starts_with('$') => out.push(s.clone()),
                    serde_yaml::Value::Sequence(s) => s.iter().for_each(|x| strings(x, out)),
                    serde_yaml::Value::Mapping(m) => m.values().for_each(|x| strings(x, out)),
                    _ => {}
                }
            }
            strings(&yaml, &mut texts);
        }
        let paths: Vec<JsonPath> = texts.iter().map(|t| JsonPath::parse(t).unwrap()).collect();
        let fast: Vec<Option<FastPath>> = paths.iter().map(|p| FastPath::of(p.query())).collect();
        // A filter comparing with a number is the general evaluator's (1 == 1.0 there): Auggie's
        // `[?@.type == 4]` nodes. Any other path of the rule files has a fast path.
        let number = regex::Regex::new(r"== -?[0-9]").unwrap();
        let slow: Vec<&String> = texts
            .iter()
            .zip(&fast)
            .filter(|(t, f)| f.is_none() && !number.is_match(t))
            .map(|(t, _)| t)
            .collect();
        assert!(slow.len() <= 2, "{slow:?}");
        let mut records: Vec<Value> = [
            r#"{"a":[{"t":"x","v":1},{"t":"y","v":2},{"u":null},"s",[1],{"t":"xyz"},{"t":{"u":"x"}}]}"#,
            r#"{"a":{"k":{"t":"x"},"j":{"t":true}},"b":1}"#,
            r#"{"a":"x.z"}"#,
            r#"{"a":[{"t":"x\nz"},{"t":"x\rz"},{"t":"x.z"},{"t":"a.b"}]}"#,
            r#"[1,2]"#,
        ]
        .iter()
        .map(|r| serde_json::from_str(r).unwrap())
        .collect();
        let catalog = crate::rules::load(&[]).unwrap();
        for (f, _) in crate::util::testing::fixture_transcripts(&catalog) {
            let text = std::fs::read_to_string(&f).unwrap();
            records.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
        }
        assert!(records.len() > 1000, "{} records", records.len());
        for (p, f) in paths.iter().zip(&fast) {
            let Some(f) = f else { continue };
            for r in &records {
                let want = general(p, r);
                assert_eq!(f.select(r), want, "{} on {r}", p.text);
                // The same record borrowed from its line selects the same nodes.
                let pruned = super::super::doc::Pruned::from_value(r.clone());
                let got: Vec<Value> = f.select(&pruned).iter().map(|n| n.to_value()).collect();
                let want: Vec<Value> = want.into_iter().cloned().collect();
                assert_eq!(got, want, "{} on pruned {r}", p.text);
            }
        }
    }
}
