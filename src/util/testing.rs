//! Helpers for unit tests.

/// Every property name a JSON Schema defines, at any depth: what the schema-equals-structs tests compare.
pub fn schema_keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(serde_json::Value::Object(props)) = m.get("properties") {
                out.extend(props.keys().cloned());
            }
            m.values().for_each(|x| schema_keys(x, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| schema_keys(x, out)),
        _ => {}
    }
}

/// Every fixture transcript under `tests/fixtures` with the built-in rule set it belongs to (the app id
/// is a directory of its path) when that set has turn rules, as (path, index in `catalog.sets`).
pub fn fixture_transcripts(catalog: &crate::rules::Catalog) -> Vec<(std::path::PathBuf, usize)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
        &mut files,
    );
    files.sort();
    files
        .into_iter()
        .filter_map(|f| {
            let text = f.display().to_string();
            let i = catalog
                .sets
                .iter()
                .position(|s| text.contains(&format!("/{}/", s.id)) && s.turns.is_some())?;
            Some((f, i))
        })
        .collect()
}
