//! What the rules evaluate: a JSON document, either a `serde_json::Value` (a head's record, `rules
//! explain`, tests) or a `Pruned` record borrowed from its line (the turn reader, line after line).
//!
//! A pruned record is what `serde_json::Value` would be after the same pruning, minus its cost: strings
//! without an escape are slices of the line, an object is a short list of its kept members sorted by
//! name (as serde_json's ordered map keeps them; a repeated name keeps its last value, as there), and
//! nothing is allocated for a member no rule reads. Paths with no fast form (`rules::fastpath`) are
//! evaluated on it made a `Value`, so every rule gives what it gives on the `Value` (a test compares
//! the two on every fixture record).

use serde_json::{Map, Number, Value};
use std::borrow::Cow;

/// A JSON value pruned to what the rules read, borrowing its text from the line it was read from.
#[derive(Debug, Clone, PartialEq)]
pub enum Pruned<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Pruned<'a>>),
    /// Members sorted by name, each name once.
    Object(Vec<(Cow<'a, str>, Pruned<'a>)>),
}

/// A document the rules can be evaluated on.
pub trait Doc {
    fn member(&self, name: &str) -> Option<&Self>;
    fn elements(&self) -> Option<&[Self]>
    where
        Self: Sized;
    /// Whether `f` holds for one of an array's elements or an object's member values, asked in order.
    fn any_child<'a>(&'a self, f: &mut dyn FnMut(&'a Self) -> bool) -> bool;
    fn as_str(&self) -> Option<&str>;
    fn number(&self) -> Option<&Number>;
    fn is_object(&self) -> bool;
    /// Equal to `v` as serde_json compares values.
    fn equals(&self, v: &Value) -> bool;
    /// `f` of the document as a `Value`: itself, or a copy made for the general evaluator.
    fn with_value<R>(&self, f: impl FnOnce(&Value) -> R) -> R;
}

impl Doc for Value {
    fn member(&self, name: &str) -> Option<&Value> {
        self.as_object().and_then(|o| o.get(name))
    }

    fn elements(&self) -> Option<&[Value]> {
        self.as_array().map(Vec::as_slice)
    }

    fn any_child<'a>(&'a self, f: &mut dyn FnMut(&'a Value) -> bool) -> bool {
        match self {
            Value::Array(a) => a.iter().any(f),
            Value::Object(o) => o.values().any(f),
            _ => false,
        }
    }

    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }

    fn number(&self) -> Option<&Number> {
        match self {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }

    fn is_object(&self) -> bool {
        Value::is_object(self)
    }

    fn equals(&self, v: &Value) -> bool {
        self == v
    }

    fn with_value<R>(&self, f: impl FnOnce(&Value) -> R) -> R {
        f(self)
    }
}

impl Doc for Pruned<'_> {
    fn member(&self, name: &str) -> Option<&Self> {
        match self {
            // A kept object has a few members; one kept whole may have any number (sorted, each once).
            Pruned::Object(members) if members.len() <= 16 => members
                .iter()
                .find(|(k, _)| same(k.as_bytes(), name.as_bytes()))
                .map(|(_, v)| v),
            Pruned::Object(members) => members
                .binary_search_by(|(k, _)| (**k).cmp(name))
                .ok()
                .map(|i| &members[i].1),
            _ => None,
        }
    }

    fn elements(&self) -> Option<&[Self]> {
        match self {
            Pruned::Array(a) => Some(a),
            _ => None,
        }
    }

    fn any_child<'a>(&'a self, f: &mut dyn FnMut(&'a Self) -> bool) -> bool {
        match self {
            Pruned::Array(a) => a.iter().any(f),
            Pruned::Object(o) => o.iter().any(|(_, v)| f(v)),
            _ => false,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Pruned::String(s) => Some(s),
            _ => None,
        }
    }

    fn number(&self) -> Option<&Number> {
        match self {
            Pruned::Number(n) => Some(n),
            _ => None,
        }
    }

    fn is_object(&self) -> bool {
        matches!(self, Pruned::Object(_))
    }

    fn equals(&self, v: &Value) -> bool {
        match (self, v) {
            (Pruned::Null, Value::Null) => true,
            (Pruned::Bool(a), Value::Bool(b)) => a == b,
            (Pruned::Number(a), Value::Number(b)) => a == b,
            (Pruned::String(a), Value::String(b)) => **a == **b,
            (Pruned::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.equals(y))
            }
            (Pruned::Object(a), Value::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|((k, x), (l, y))| **k == **l && x.equals(y))
            }
            _ => false,
        }
    }

    fn with_value<R>(&self, f: impl FnOnce(&Value) -> R) -> R {
        f(&self.to_value())
    }
}

/// Two member names (a needed one and a line's, or a path's and a record's): the length and first
/// byte settle most of them without a comparison call.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.first() == b.first() && a == b
}

impl<'a> Pruned<'a> {
    /// The same value as serde_json's.
    pub fn to_value(&self) -> Value {
        match self {
            Pruned::Null => Value::Null,
            Pruned::Bool(b) => Value::Bool(*b),
            Pruned::Number(n) => Value::Number(n.clone()),
            Pruned::String(s) => Value::String(s.to_string()),
            Pruned::Array(a) => Value::Array(a.iter().map(Pruned::to_value).collect()),
            Pruned::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }

    /// A serde_json value as a pruned one (owning its text): a subtree kept whole, a line serde_json
    /// decided.
    pub fn from_value(v: Value) -> Pruned<'static> {
        match v {
            Value::Null => Pruned::Null,
            Value::Bool(b) => Pruned::Bool(b),
            Value::Number(n) => Pruned::Number(n),
            Value::String(s) => Pruned::String(Cow::Owned(s)),
            Value::Array(a) => Pruned::Array(a.into_iter().map(Pruned::from_value).collect()),
            // serde_json's map iterates sorted by name, each once.
            Value::Object(o) => Pruned::Object(
                o.into_iter()
                    .map(|(k, v)| (Cow::Owned(k), Pruned::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// An object from its members in the order the line gives them: sorted by name, a repeated name
    /// keeping its last value (serde_json's map).
    pub(super) fn object(mut members: Vec<(Cow<'a, str>, Pruned<'a>)>) -> Pruned<'a> {
        if members.windows(2).any(|w| w[0].0 >= w[1].0) {
            // A stable sort keeps repeats in line order: the last of each run is the one kept.
            members.sort_by(|a, b| a.0.cmp(&b.0));
            return Pruned::sorted_object(members);
        }
        Pruned::Object(members)
    }

    /// An object from members already sorted by name, stably (repeats in line order): each name once,
    /// with its last value.
    pub(super) fn sorted_object(members: Vec<(Cow<'a, str>, Pruned<'a>)>) -> Pruned<'a> {
        let mut kept: Vec<(Cow<'a, str>, Pruned<'a>)> = Vec::with_capacity(members.len());
        for m in members {
            match kept.last_mut() {
                Some(last) if last.0 == m.0 => *last = m,
                _ => kept.push(m),
            }
        }
        Pruned::Object(kept)
    }
}

/// A node a path selected: in the document, or in the `Value` made of it for the general evaluator.
pub enum Node<'a, D> {
    Doc(&'a D),
    Json(&'a Value),
}

impl<D: Doc> Node<'_, D> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Doc(d) => d.as_str(),
            Node::Json(v) => v.as_str(),
        }
    }

    pub fn number(&self) -> Option<&Number> {
        match self {
            Node::Doc(d) => d.number(),
            Node::Json(v) => v.number(),
        }
    }

    pub fn equals(&self, v: &Value) -> bool {
        match self {
            Node::Doc(d) => d.equals(v),
            Node::Json(x) => x.equals(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::compiled::{JsonPath, Predicate};
    use crate::rules::needs::Needs;
    use crate::rules::pruned::parse_pruned;

    /// What a set of turn rules says of one record, read through `D`.
    /// `render`: what a rendering reads too (tool calls' arguments, results).
    fn verdicts<D: Doc>(rule: &crate::rules::RuleSet, r: &D, render: bool) -> Vec<String> {
        let t = rule.turns.as_ref().unwrap();
        let mut out: Vec<String> = Vec::new();
        let preds = t.ignore.iter().chain(t.skip.iter().flat_map(|s| {
            [Some(&s.from), Some(&s.until), s.after.as_ref()]
                .into_iter()
                .flatten()
        }));
        out.extend(preds.map(|p| format!("{p}: {}", p.holds(r))));
        for x in t.user.iter().chain(&t.assistant) {
            out.push(format!(
                "{} {} {:?}",
                x.applies(r),
                x.has_text(r),
                x.text(r)
            ));
            if let Some(g) = &x.group {
                let mut all = Vec::new();
                g.any(r, |v| {
                    all.push(v.as_str().map(str::to_string));
                    false
                });
                out.push(format!("group {all:?}"));
            }
        }
        for tool in &t.tools {
            let mut names = Vec::new();
            match render {
                true => tool.calls(r, |c| names.push(format!("{} {:?}", c.name, c.argument))),
                false => tool.names(r, |n| names.push(n)),
            }
            out.push(format!("{} {names:?}", tool.applies(r)));
        }
        for result in t.results.iter().filter(|_| render) {
            let mut texts = Vec::new();
            result.texts(r, |t| texts.push(t.text));
            out.push(format!("{} {texts:?}", result.applies(r)));
        }
        out.push(format!("{:?}", rule.record_time(r)));
        out
    }

    /// Every predicate, text, group, tool name and time of the built-in turn rules, on every line of
    /// every fixture: the same on the record borrowed from its line as on it made a `Value`. And paths
    /// that walk an object's members, on lines whose names repeat and come unsorted.
    #[test]
    fn a_pruned_record_gives_what_its_value_gives() {
        let catalog = crate::rules::load(&[]).unwrap();
        let mut compared = 0;
        for (f, i) in crate::util::testing::fixture_transcripts(&catalog) {
            let rule = &catalog.sets[i];
            let Some(t) = &rule.turns else { continue };
            for line in std::fs::read(&f).unwrap().split(|b| *b == b'\n') {
                for (need, render) in [(&t.reads, false), (&t.render_reads, true)] {
                    let Some(p) = parse_pruned(line, need) else {
                        continue;
                    };
                    let v = p.to_value();
                    assert_eq!(
                        verdicts(rule, &p, render),
                        verdicts(rule, &v, render),
                        "{}: {}",
                        f.display(),
                        String::from_utf8_lossy(line)
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 1000, "{compared}");
        let paths = [
            "$.*",
            "$.a.*",
            "$.a[*].k",
            "$.a.z",
            "$.a[?@.k == 'x'].v",
            "$..k",
            "$.a.k",
            "$.a.m07",
        ];
        // An object of over 16 members, out of order, one name repeated.
        let wide: String = (0..40).rev().map(|i| format!("\"m{i:02}\":{i},")).collect();
        let wide = format!("{{\"a\":{{{wide}\"k\":\"x\",\"z\":\"y\",\"m07\":\"again\"}}}}");
        let lines = [
            wide.as_str(),
            r#"{"b":"2","a":{"z":"1","y":"2","z":"3"},"a":{"z":"4","c":"5","b":"6"}}"#,
            r#"{"a":[{"k":"x","v":"1","k":"y"},{"v":"2","k":"x"},{"k":"x","v":"3","v":"4"}]}"#,
            r#"{"z":1,"y":[true,null],"x":{"k":"esc\u00e9\n"},"a":{"k":{"k":"deep"}}}"#,
        ];
        // Each path on the record pruned to what it reads alone, and to what they all read.
        let mut all = Needs::default();
        paths
            .iter()
            .for_each(|t| all.value(&JsonPath::parse(t).unwrap()));
        let all = all.finish();
        for (text, need) in paths.iter().flat_map(|t| {
            let mut n = Needs::default();
            n.value(&JsonPath::parse(t).unwrap());
            [(*t, n.finish()), (*t, all.clone())]
        }) {
            let path = JsonPath::parse(text).unwrap();
            let exists = Predicate::Exists(JsonPath::parse(text).unwrap());
            for line in lines {
                let p = parse_pruned(line.as_bytes(), &need).unwrap();
                let v = p.to_value();
                let whole: Value = serde_json::from_str(line).unwrap();
                let mut got = Vec::new();
                path.any(&p, |n| {
                    got.push(match n {
                        Node::Doc(d) => d.to_value(),
                        Node::Json(j) => j.clone(),
                    });
                    false
                });
                let want: Vec<Value> = path.select(&whole).into_iter().cloned().collect();
                assert_eq!(got, want, "{text} on {line}");
                assert_eq!(path.select(&v), path.select(&whole), "{text} on {line}");
                assert_eq!(exists.holds(&p), exists.holds(&whole), "{text} on {line}");
            }
        }
    }
}
