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
