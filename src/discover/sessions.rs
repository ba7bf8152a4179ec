//! Which sessions still have a transcript in the stores: (app, session id) of every file the rule sets'
//! stores hold, subagents included. `capture prune` keeps the ledger entry of each, wherever its file
//! now lives (a Codex rollout moved to `archived_sessions/` is the same session).

use super::{cache, read_head, walk_rule_set, Examined, FoundFile, WalkStats};
use crate::context::Context;
use crate::rules::Catalog;
use std::collections::HashSet;

/// Each file's head: from the discovery cache while the file is unchanged (bytes read None), else read
/// now (in parallel), with the bytes read. What the cache held is moved out of it (looked up in
/// parallel, taken in order), so its strings are not held twice. The head scan itself is not kept
/// (only `rules explain` shows it): memory stays flat.
pub fn heads(
    catalog: &Catalog,
    head_cache: &mut cache::Cache,
    files: &[FoundFile],
) -> Vec<(Examined, Option<u64>)> {
    let read = |file: &FoundFile| {
        let Some(rule) = catalog.get(&file.app) else {
            return (Examined::from_head(Err("no rule set".into())), None);
        };
        let scan = read_head(rule, file).map_err(|e| e.to_string());
        let read = scan.as_ref().map(|h| h.bytes_read).unwrap_or(0);
        let mut ex = Examined::from_head(scan);
        ex.scan = None;
        (ex, Some(read))
    };
    // Err(i): remembered in cache slot i, taken below in order.
    let found = crate::util::par::map(files, |file| {
        match head_cache.find(&file.path, &file.app, &file.stamp()) {
            Some(i) => Err(i),
            None => Ok(read(file)),
        }
    });
    // A slot already taken (one file listed twice, which the walk does not do) is read instead.
    found
        .into_iter()
        .zip(files)
        .map(|(f, file)| {
            f.unwrap_or_else(|i| match head_cache.take(i) {
                Some(c) => (Examined::from_cache(c), None),
                None => read(file),
            })
        })
        .collect()
}

/// Whether the discovery cache must be written after `heads`: some head was read, or the cache holds
/// files that were not walked.
pub fn cache_stale(head_cache: &cache::Cache, heads: &[(Examined, Option<u64>)]) -> bool {
    !(heads.iter().all(|(_, read)| read.is_none()) && head_cache.len() == heads.len())
}

/// Every (app, session id) found in the stores. Heads come from the discovery cache while a file is
/// unchanged, else are read; nothing is written. A file whose head cannot be read adds nothing.
pub fn live_sessions(catalog: &Catalog, cx: &Context) -> HashSet<(String, String)> {
    let mut walk = WalkStats::default();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for rule in &catalog.sets {
        walk_rule_set(
            rule,
            cx,
            &mut seen,
            &mut walk,
            &mut files,
            super::SubagentFiles::List,
        );
    }
    let mut head_cache = cache::Cache::load(&cache::path(&cx.almanac_home), &catalog.fingerprint);
    files
        .iter()
        .zip(heads(catalog, &mut head_cache, &files))
        .filter_map(|(f, (ex, _))| Some((f.app.to_string(), ex.session_id?)))
        .collect()
}

/// A root session `capture sessions` lists: its file, its head and its user turns.
pub struct Listed {
    pub file: FoundFile,
    pub examined: Examined,
    pub user_turns: Option<u64>,
    /// Its first and latest prompt, cut (from the turn index).
    pub prompts: (Option<crate::turns::Prompt>, Option<crate::turns::Prompt>),
}

/// What listing cost: transcript bytes read, and how each count was had (from the turn index
/// unchanged, going on from its checkpoint, or read whole).
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListStats {
    pub bytes_read: u64,
    pub turns_unchanged: u64,
    pub turns_resumed: u64,
    pub turns_read_whole: u64,
}

pub struct Listing {
    pub sessions: Vec<Listed>,
    pub stats: ListStats,
}

/// The root sessions of `apps` (most recently modified first), modified within `max_age` and in
/// `repo` when given, each with its user turns: heads from the discovery cache and counts from the turn
/// index where the files are unchanged, so an unchanged store costs a walk and no transcript byte. Both
/// caches are written back when something was read (the discovery cache only when every transcript of
/// those apps was listed, so none is forgotten).
pub fn list(
    catalog: &Catalog,
    cx: &Context,
    apps: &[String],
    max_age: Option<std::time::Duration>,
    repo: Option<&std::path::Path>,
    trace: &crate::sweep::Trace,
) -> Listing {
    use super::turn_index::{self, Counted, TurnIndex};
    let cache_file = cache::path(&cx.almanac_home);
    let index_file = turn_index::path(&cx.almanac_home);
    // The discovery cache and the turn index load while the stores are walked.
    let (files, mut head_cache, mut index) = std::thread::scope(|sc| {
        let cache = sc.spawn(|| cache::Cache::load(&cache_file, &catalog.fingerprint));
        let index = sc.spawn(|| TurnIndex::load(&index_file, &catalog.fingerprint));
        // Subagent files are never listed: those their path names are not even held.
        let files = super::locate::recent(catalog, cx, apps, max_age, super::SubagentFiles::Count);
        let cache = cache.join().unwrap_or_default();
        (files, cache, index.join().unwrap_or_default())
    });
    trace.mark("walk and cache load");
    let heads = heads(catalog, &mut head_cache, &files);
    let mut stats = ListStats {
        bytes_read: heads.iter().filter_map(|(_, r)| *r).sum(),
        ..ListStats::default()
    };
    if max_age.is_none() && cache_stale(&head_cache, &heads) {
        let entries = files
            .iter()
            .zip(&heads)
            .map(|(file, (ex, _))| cache::Entry::of(file, ex));
        cache::Cache::save(&cache_file, &catalog.fingerprint, entries);
    }
    drop(head_cache);
    let mut mapper = super::repo::RepoMapper::new(&cx.almanac_home);
    // Rows are made once, their counts filled in after: a second list of 100k rows is never held.
    let mut sessions: Vec<Listed> = Vec::new();
    for (file, (mut ex, _)) in files.into_iter().zip(heads) {
        if ex.subagent || ex.error.is_some() {
            continue;
        }
        ex.repo = ex.cwd.as_deref().and_then(|c| mapper.map(c));
        if repo.is_some_and(|want| ex.repo.as_deref() != Some(want)) {
            continue;
        }
        sessions.push(Listed {
            file,
            examined: ex,
            user_turns: None,
            prompts: (None, None),
        });
    }
    trace.mark("heads and repo mapping");
    let mut counted = crate::util::par::map(&sessions, |s| {
        let rule = catalog.get(&s.file.app)?;
        index.count(rule, &s.file).ok().flatten()
    });
    for (s, c) in sessions.iter_mut().zip(counted.iter_mut()) {
        let Some(c) = c else { continue };
        s.prompts = std::mem::take(&mut c.prompts);
        s.user_turns = Some(c.user_turns);
        stats.bytes_read += c.bytes_read;
        match c.how {
            Counted::Unchanged => stats.turns_unchanged += 1,
            Counted::Resumed => stats.turns_resumed += 1,
            Counted::Whole => stats.turns_read_whole += 1,
        }
    }
    trace.mark("turns counted");
    let everything = max_age.is_none() && repo.is_none();
    if index.update(counted.into_iter().flatten(), everything.then_some(apps)) {
        index.save(&index_file, &catalog.fingerprint);
    }
    trace.mark("turn index saved");
    Listing { sessions, stats }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A file listed twice gets what the cache remembers once; the second is read, never left empty.
    #[test]
    fn a_cached_head_is_handed_out_once_and_a_second_listing_is_read() {
        let cat = crate::rules::load(&[]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let line = r#"{"type":"user","sessionId":"s-file","cwd":"/r","isSidechain":false,"uuid":"u1","message":{"role":"user","content":"hi"}}"#;
        std::fs::write(&path, format!("{line}\n")).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let file = FoundFile {
            app: "claude".into(),
            path: path.clone(),
            rel_offset: dir.path().to_string_lossy().len(),
            size: meta.len(),
            mtime: meta.modified().unwrap(),
            file_id: {
                use std::os::unix::fs::MetadataExt;
                (meta.dev(), meta.ino())
            },
        };
        let cache_file = dir.path().join("cache.tsv");
        let entry = cache::Entry {
            path: Path::new(&path),
            app: "claude",
            stamp: file.stamp(),
            session_id: Some("s-cached"),
            cwd: Some("/r"),
            subagent: false,
            excluded: None,
        };
        cache::Cache::save(&cache_file, &cat.fingerprint, std::iter::once(entry));
        let mut c = cache::Cache::load(&cache_file, &cat.fingerprint);
        let got = heads(&cat, &mut c, &[file.clone(), file]);
        assert_eq!(got[0].0.session_id.as_deref(), Some("s-cached"));
        assert_eq!(got[0].1, None, "from the cache");
        assert_eq!(got[1].0.session_id.as_deref(), Some("s-file"));
        assert!(got[1].1.is_some_and(|n| n > 0), "read from the file");
    }
}
