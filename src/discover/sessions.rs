//! Which sessions still have a transcript in the stores: (app, session id) of every file the rule sets'
//! stores hold, subagents included. `capture prune` keeps the ledger entry of each, wherever its file
//! now lives (a Codex rollout moved to `archived_sessions/` is the same session).

use super::{cache, read_head, walk_rule_set, Examined, WalkStats};
use crate::context::Context;
use crate::rules::Catalog;
use std::collections::HashSet;

/// Every (app, session id) found in the stores. Heads come from the discovery cache while a file is
/// unchanged, else are read; nothing is written. A file whose head cannot be read adds nothing.
pub fn live_sessions(catalog: &Catalog, cx: &Context) -> HashSet<(String, String)> {
    let mut walk = WalkStats::default();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for rule in &catalog.sets {
        walk_rule_set(rule, cx, &mut seen, &mut walk, &mut files);
    }
    let head_cache = cache::Cache::load(&cache::path(&cx.almanac_home), &catalog.fingerprint);
    let ids = crate::util::par::map(&files, |file| {
        let ex = match head_cache.get(&file.path, &file.app, &file.stamp()) {
            Some(c) => Examined::from_cache(&c),
            None => {
                let rule = catalog.get(&file.app)?;
                Examined::from_head(read_head(rule, file).map_err(|e| e.to_string()))
            }
        };
        ex.session_id
    });
    files
        .iter()
        .zip(ids)
        .filter_map(|(f, id)| Some((f.app.to_string(), id?)))
        .collect()
}
