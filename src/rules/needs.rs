//! What of a record a set of rules can read, derived from their parsed JSONPaths: the turn reader parses
//! only that (docs/performance.md), so a Claude tool call's input, a tool result's
//! `toolUseResult` or a Codex record's token counts are skipped without being built into a tree.
//!
//! A `Need` is kept by `turns::partial`; evaluating the same rules on the pruned record gives exactly
//! what they give on the whole one, because every member a path can step into, test or compare is
//! kept. Anything this module does not follow exactly (descendant segments, custom functions) keeps
//! the whole subtree.

use super::compiled::{JsonPath, Predicate};
use super::doc::same;
use jsonpath_rust::parser::model::{
    Comparable, Comparison, Filter, FilterAtom, FnArg, Segment, Selector, SingularQuery,
    SingularQuerySegment, Test, TestFunction,
};

#[derive(Debug, Clone, PartialEq)]
pub enum Need {
    /// The whole value.
    All,
    /// The value itself (a scalar whole); of an object only `keys` (each with its need) and, with
    /// `elems`, every other member too; of an array every element with `elems` (or nothing of them).
    Node {
        /// Sorted by name: a short list searched in order beats an ordered map's walk (a record is
        /// looked up member by member, line after line).
        keys: Vec<(String, Need)>,
        elems: Option<Box<Need>>,
    },
}

impl Need {
    /// The value is there (an existence test): none of its members are read.
    pub fn presence() -> Need {
        Need::Node {
            keys: Vec::new(),
            elems: None,
        }
    }

    /// Member `k` of an object, with `child`'s need.
    fn key(k: &str, child: Need) -> Need {
        Need::Node {
            keys: vec![(k.to_string(), child)],
            elems: None,
        }
    }

    /// Every element (or member value), with `child`'s need.
    fn each(child: Need) -> Need {
        Need::Node {
            keys: Vec::new(),
            elems: Some(Box::new(child)),
        }
    }

    pub fn merge(self, other: Need) -> Need {
        match (self, other) {
            (Need::All, _) | (_, Need::All) => Need::All,
            (
                Need::Node { mut keys, elems },
                Need::Node {
                    keys: k2,
                    elems: e2,
                },
            ) => {
                for (k, n) in k2 {
                    match keys.iter().position(|(x, _)| *x == k) {
                        Some(i) => {
                            let old = std::mem::replace(&mut keys[i].1, Need::All);
                            keys[i].1 = old.merge(n);
                        }
                        None => keys.push((k, n)),
                    }
                }
                keys.sort_by(|a, b| a.0.cmp(&b.0));
                let elems = match (elems, e2) {
                    (Some(a), Some(b)) => Some(Box::new(a.merge(*b))),
                    (a, b) => a.or(b),
                };
                Need::Node { keys, elems }
            }
        }
    }

    /// The need of an object member named `key`, None when it is not read.
    pub fn member(&self, key: &str) -> Option<&Need> {
        self.slot(key.as_bytes()).map(|(_, n)| n)
    }

    /// As `member`, for a key as the line spells it (without an escape), with its slot: the key's place
    /// among the named keys (which are sorted by name, as a record's members are), or `None` for a
    /// member kept only because every member is (`elems`).
    pub fn slot(&self, key: &[u8]) -> Option<(Option<usize>, &Need)> {
        match self {
            Need::All => Some((None, self)),
            Need::Node { keys, elems } => {
                match keys.iter().position(|(k, _)| same(k.as_bytes(), key)) {
                    Some(i) => Some((Some(i), &keys[i].1)),
                    None => elems.as_deref().map(|n| (None, n)),
                }
            }
        }
    }

    /// The need of an array's elements.
    pub fn element(&self) -> &Need {
        static PRESENCE: Need = Need::Node {
            keys: Vec::new(),
            elems: None,
        };
        match self {
            Need::All => self,
            Need::Node { elems, .. } => elems.as_deref().unwrap_or(&PRESENCE),
        }
    }

    /// Members named in `keys` read as every member is too: folded in once, so a lookup is one step.
    fn settle(self) -> Need {
        match self {
            Need::All => Need::All,
            Need::Node { keys, elems } => {
                let elems = elems.map(|e| Box::new(e.settle()));
                let keys = keys
                    .into_iter()
                    .map(|(k, n)| {
                        let n = match &elems {
                            Some(e) => n.merge((**e).clone()),
                            None => n,
                        };
                        (k, n.settle())
                    })
                    .collect();
                Need::Node { keys, elems }
            }
        }
    }
}

/// A JSON value that no array or object equals.
fn scalar(v: &serde_json::Value) -> bool {
    !v.is_array() && !v.is_object()
}

/// Collects what a set of paths and predicates reads of a record.
pub struct Needs {
    root: Need,
}

impl Default for Needs {
    fn default() -> Self {
        Needs {
            root: Need::presence(),
        }
    }
}

impl Needs {
    /// A path whose selected values are used whole (compared, read as text).
    pub fn value(&mut self, p: &JsonPath) {
        let n = self.segments(&p.query().segments, Need::All);
        self.add(n);
    }

    /// A path whose selected values are used only when they are scalars: text (a prompt, a name, a
    /// time, an id), a regex match, an equality with a scalar. A selected array or object then counts
    /// only as not being one, so what it holds is kept only as far as other paths read it (a Claude
    /// `message.content` array: its elements' `type` and `text`, not a tool call's input).
    pub fn scalar(&mut self, p: &JsonPath) {
        self.presence(p)
    }

    /// A path only tested for whether it selects something.
    pub fn presence(&mut self, p: &JsonPath) {
        let n = self.segments(&p.query().segments, Need::presence());
        self.add(n);
    }

    /// What `f` adds, read of each node `each` selects (relative paths, whose `$` is that node); without
    /// `each`, of the record itself.
    pub fn under(&mut self, each: Option<&JsonPath>, f: impl FnOnce(&mut Needs)) {
        let Some(each) = each else {
            return f(self);
        };
        let mut inner = Needs::default();
        f(&mut inner);
        let n = self.segments(&each.query().segments, inner.root);
        self.add(n);
    }

    pub fn predicate(&mut self, p: &Predicate) {
        match p {
            Predicate::Exists(path) | Predicate::Missing(path) => self.presence(path),
            Predicate::Matches(path, _) => self.scalar(path),
            Predicate::Equals(path, v) if scalar(v) => self.scalar(path),
            Predicate::In(path, vs) if vs.iter().all(scalar) => self.scalar(path),
            Predicate::Equals(path, _) | Predicate::In(path, _) => self.value(path),
            Predicate::All(ps) | Predicate::Any(ps) => ps.iter().for_each(|p| self.predicate(p)),
            Predicate::Not(p) => self.predicate(p),
        }
    }

    pub fn finish(self) -> Need {
        self.root.settle()
    }

    fn add(&mut self, n: Need) {
        let root = std::mem::replace(&mut self.root, Need::All);
        self.root = root.merge(n);
    }

    fn segments(&mut self, segs: &[Segment], end: Need) -> Need {
        let Some((first, rest)) = segs.split_first() else {
            return end;
        };
        let child = self.segments(rest, end);
        match first {
            Segment::Descendant(_) => Need::All,
            Segment::Selector(s) => self.selector(s, child),
            Segment::Selectors(sels) => sels
                .iter()
                .map(|s| self.selector(s, child.clone()))
                .reduce(Need::merge)
                .unwrap_or_else(Need::presence),
        }
    }

    fn selector(&mut self, s: &Selector, child: Need) -> Need {
        match s {
            Selector::Name(k) => Need::key(k, child),
            Selector::Wildcard | Selector::Index(_) | Selector::Slice(..) => Need::each(child),
            Selector::Filter(f) => {
                let tested = self.filter(f);
                Need::each(child.merge(tested))
            }
        }
    }

    /// What a filter reads of the element (`@`) it tests; what it reads from the root is added there.
    fn filter(&mut self, f: &Filter) -> Need {
        match f {
            Filter::Or(fs) | Filter::And(fs) => fs
                .iter()
                .map(|f| self.filter(f))
                .fold(Need::presence(), Need::merge),
            Filter::Atom(FilterAtom::Filter { expr, .. }) => self.filter(expr),
            Filter::Atom(FilterAtom::Test { expr, .. }) => self.test(expr, Need::presence()),
            Filter::Atom(FilterAtom::Comparison(c)) => {
                let (a, b) = match &**c {
                    Comparison::Eq(a, b)
                    | Comparison::Ne(a, b)
                    | Comparison::Gt(a, b)
                    | Comparison::Gte(a, b)
                    | Comparison::Lt(a, b)
                    | Comparison::Lte(a, b) => (a, b),
                };
                let a = self.comparable(a);
                a.merge(self.comparable(b))
            }
        }
    }

    fn test(&mut self, t: &Test, end: Need) -> Need {
        match t {
            Test::RelQuery(segs) => self.segments(segs, end),
            Test::AbsQuery(q) => {
                let n = self.segments(&q.segments, end);
                self.add(n);
                Need::presence()
            }
            Test::Function(f) => self.function(f),
        }
    }

    fn comparable(&mut self, c: &Comparable) -> Need {
        let singular = |segs: &[SingularQuerySegment]| {
            segs.iter().rev().fold(Need::All, |child, s| match s {
                SingularQuerySegment::Name(k) => Need::key(k, child),
                SingularQuerySegment::Index(_) => Need::each(child),
            })
        };
        match c {
            Comparable::Literal(_) => Need::presence(),
            Comparable::SingularQuery(SingularQuery::Current(segs)) => singular(segs),
            Comparable::SingularQuery(SingularQuery::Root(segs)) => {
                let n = singular(segs);
                self.add(n);
                Need::presence()
            }
            Comparable::Function(f) => self.function(f),
        }
    }

    fn function(&mut self, f: &TestFunction) -> Need {
        match f {
            TestFunction::Length(a) => self.arg(a),
            TestFunction::Value(a) | TestFunction::Count(a) => self.arg(a),
            TestFunction::Search(a, b) | TestFunction::Match(a, b) => {
                let a = self.arg(a);
                a.merge(self.arg(b))
            }
            // A function this module does not know may read anything of the element.
            TestFunction::Custom(..) => Need::All,
        }
    }

    fn arg(&mut self, a: &FnArg) -> Need {
        match a {
            FnArg::Literal(_) => Need::presence(),
            FnArg::Test(t) => self.test(t, Need::All),
            FnArg::Filter(f) => self.filter(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(values: &[&str], presence: &[&str]) -> Need {
        let mut n = Needs::default();
        for p in values {
            n.value(&JsonPath::parse(p).unwrap());
        }
        for p in presence {
            n.presence(&JsonPath::parse(p).unwrap());
        }
        n.finish()
    }

    fn keys(n: &Need) -> Vec<&str> {
        match n {
            Need::All => vec!["*all*"],
            Need::Node { keys, .. } => keys.iter().map(|(k, _)| k.as_str()).collect(),
        }
    }

    #[test]
    fn a_filter_keeps_what_it_tests_and_what_follows_it() {
        let n = need(
            &["$.message.content[?@.type == 'text'].text", "$.type"],
            &["$.message.content[?@.type == 'tool_result']"],
        );
        assert_eq!(keys(&n), ["message", "type"]);
        let content = n.member("message").unwrap().member("content").unwrap();
        let el = content.element();
        assert_eq!(keys(el), ["text", "type"]);
        assert_eq!(el.member("type"), Some(&Need::All));
        assert_eq!(el.member("input"), None, "a tool call's input is not read");
        assert_eq!(n.member("toolUseResult"), None);
    }

    #[test]
    fn functions_wildcards_and_descendants_read_what_they_may() {
        let n = need(
            &["$.payload.content[?@.type == 'input_text' && !match(@.text, 'x')].text"],
            &[],
        );
        let el = n
            .member("payload")
            .unwrap()
            .member("content")
            .unwrap()
            .element();
        assert_eq!(keys(el), ["text", "type"]);
        let n = need(&["$.a[*].b"], &[]);
        let a = n.member("a").unwrap();
        assert_eq!(a.member("anything").map(keys), Some(vec!["b"]));
        assert_eq!(need(&["$..b"], &[]), Need::All);
        // A filter on the root reads from the root.
        let n = need(&["$.a[?$.flag == true]"], &[]);
        assert_eq!(keys(&n), ["a", "flag"]);
    }
}
