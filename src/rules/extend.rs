//! `extends:` — a rule set written as changes to another. Roo Code and Kilo Code are forks of Cline that
//! keep the same task files under other directories: their sets say only what differs.
//!
//! The file's document is laid over its base's (as merged, when the base extends one too): a mapping key
//! by key, anything else (a list, a string, a number) replacing the base's value; a `null` removes the
//! key. The merged document is then checked against the schema as any rule file is, so a problem is
//! named in the file that extends. A file may extend the set of its own id: it changes the set loaded
//! before it (a built-in one) in place.

use super::{Diagnostic, Extended, Origin};
use serde_json::Value;
use std::collections::BTreeMap;

/// Each loaded rule set's merged document and where it came from, by id.
pub type Bases = BTreeMap<String, (Value, String)>;

/// How many sets one `extends` chain may pass through.
const MAX_DEPTH: usize = 8;

/// `doc` laid over the set it extends (if it does), with what it took; None with a diagnostic when the
/// base is not loaded.
pub fn resolve(
    doc: Value,
    origin: &Origin,
    bases: &Bases,
    diags: &mut Vec<Diagnostic>,
) -> Option<(Value, Option<Extended>)> {
    let Some(base_id) = doc
        .get("extends")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Some((doc, None));
    };
    let Some((base, base_origin)) = bases.get(&base_id) else {
        let known: Vec<&str> = bases.keys().map(String::as_str).collect();
        diags.push(Diagnostic {
            file: origin.to_string(),
            field: "extends".into(),
            message: format!("extends `{base_id}`, which no rule set loaded before it has"),
            help: Some(format!(
                "name a built-in set or one in a rule file of the same directory: {}",
                known.join(", ")
            )),
        });
        return None;
    };
    let own: Vec<String> = doc
        .as_object()
        .map(|o| o.keys().filter(|k| *k != "extends").cloned().collect())
        .unwrap_or_default();
    let mut merged = base.clone();
    if let Some(o) = merged.as_object_mut() {
        // The base's own `extends` was resolved when it loaded.
        o.remove("extends");
    }
    lay_over(&mut merged, doc);
    Some((
        merged,
        Some(Extended {
            base: base_id,
            base_origin: base_origin.clone(),
            own,
        }),
    ))
}

/// `over` laid over `base`: mappings key by key, anything else replacing; `null` removes the key.
fn lay_over(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(&k);
                } else if let Some(slot) = b.get_mut(&k) {
                    lay_over(slot, v);
                } else {
                    b.insert(k, v);
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Rule files in an order where each comes after the file that defines the set it extends (a file that
/// extends its own id builds on what was loaded before the files). A cycle, or a chain longer than
/// [`MAX_DEPTH`], is named and its files left out.
pub fn in_order(
    mut pending: Vec<(Value, Origin)>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(Value, Origin)> {
    let id_of = |d: &Value| d.get("id").and_then(Value::as_str).map(str::to_string);
    let base_of = |d: &Value| d.get("extends").and_then(Value::as_str).map(str::to_string);
    let mut out = Vec::with_capacity(pending.len());
    let mut rounds = 0;
    while !pending.is_empty() {
        // A file waits while another pending file defines the set it extends.
        let waits = |i: usize, pending: &[(Value, Origin)]| {
            let Some(base) = base_of(&pending[i].0) else {
                return false;
            };
            pending
                .iter()
                .enumerate()
                .any(|(j, (d, _))| j != i && id_of(d).as_deref() == Some(base.as_str()))
        };
        let ready: Vec<bool> = (0..pending.len()).map(|i| !waits(i, &pending)).collect();
        rounds += 1;
        if !ready.iter().any(|r| *r) || rounds > MAX_DEPTH {
            for (d, origin) in pending {
                diags.push(Diagnostic {
                    file: origin.to_string(),
                    field: "extends".into(),
                    message: format!(
                        "extends `{}`, which extends it back (or a chain of more than {MAX_DEPTH} sets)",
                        base_of(&d).unwrap_or_default()
                    ),
                    help: Some("a rule set extends one that does not extend it".into()),
                });
            }
            break;
        }
        let mut next = Vec::new();
        for (item, ok) in pending.into_iter().zip(ready) {
            match ok {
                true => out.push(item),
                false => next.push(item),
            }
        }
        pending = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_mapping_is_laid_over_key_by_key_and_anything_else_replaces() {
        let mut base = json!({"id": "cline", "name": "Cline", "turns": {"user": [1], "tools": [2]},
            "subagent": {"paths": ["a"]}, "stores": [{"name": "x"}]});
        lay_over(
            &mut base,
            json!({"id": "roo", "turns": {"user": [3]}, "subagent": null, "stores": [{"name": "y"}]}),
        );
        assert_eq!(
            base,
            json!({"id": "roo", "name": "Cline", "turns": {"user": [3], "tools": [2]},
                "stores": [{"name": "y"}]})
        );
    }

    #[test]
    fn files_come_after_the_sets_they_extend_and_a_cycle_is_named() {
        let f = |id: &str, base: Option<&str>| {
            let mut d = json!({"id": id});
            if let Some(b) = base {
                d["extends"] = json!(b);
            }
            (d, Origin::Builtin("x"))
        };
        let mut diags = Vec::new();
        let order = in_order(
            vec![
                f("kilo", Some("roo")),
                f("roo", Some("cline")),
                f("cline", Some("cline")),
            ],
            &mut diags,
        );
        let ids: Vec<&str> = order
            .iter()
            .map(|(d, _)| d["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["cline", "roo", "kilo"]);
        assert!(diags.is_empty());
        let order = in_order(vec![f("a", Some("b")), f("b", Some("a"))], &mut diags);
        assert!(order.is_empty());
        assert_eq!(diags.len(), 2);
        assert!(diags[0].message.contains("extends it back"), "{diags:?}");
    }
}
