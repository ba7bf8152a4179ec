//! Phase 1, gather: walk the stores, take each transcript's head from the discovery cache (or read it),
//! and map its cwd to a repo. Subagent transcripts and unreadable heads end here.

use super::summary::{SkippedItem, Summary};
use crate::context::Context;
use crate::discover::repo::RepoMapper;
use crate::discover::{self, cache, Examined, FoundFile};
use crate::reason::Reason;
use crate::rules::Catalog;
use crate::util::trace::Trace;
use std::path::PathBuf;

/// A transcript that belongs to a session (not a subagent's) and whose head was read.
pub type Candidate = (FoundFile, Examined);

pub struct Gathered {
    pub candidates: Vec<Candidate>,
    /// Kept only to be cached (live), so a subagent file costs one stat next time.
    pub subagents: Vec<Candidate>,
    /// The discovery cache must be written: a live sweep read a head, or the cache holds other files.
    pub save_cache: bool,
    pub cache_file: PathBuf,
}

pub fn gather(
    catalog: &Catalog,
    cx: &Context,
    apps: &[String],
    live: bool,
    summary: &mut Summary,
    trace: &Trace,
) -> Gathered {
    // The discovery cache loads while the stores are walked.
    let cache_file = cache::path(&cx.almanac_home);
    let (mut files, walk, mut head_cache) = std::thread::scope(|sc| {
        let loader = sc.spawn(|| cache::Cache::load(&cache_file, &catalog.fingerprint));
        let mut walk = discover::Walk::<Candidate>::default();
        for id in apps {
            if let Some(rule) = catalog.get(id) {
                walk.rule_set(rule, cx, discover::SubagentFiles::Count);
            }
        }
        let (files, stats) = walk.finish();
        trace.mark("walked");
        (files, stats, loader.join().unwrap_or_default())
    });
    // By the paths' bytes: `Path`'s own order parses components, several times slower on 100k files.
    // Unstable, so in place (a stable sort takes a copy of up to 8 MB); a path is walked once.
    files.sort_unstable_by(|(a, _), (b, _)| {
        (&a.app, a.path.as_os_str()).cmp(&(&b.app, b.path.as_os_str()))
    });
    trace.mark("walk and cache load");
    summary.stats.files_visited = walk.files_visited;
    summary.stats.unreadable = walk.unreadable;
    summary.stats.duplicates = walk.duplicates;
    // Subagent files their path names were only counted; the others are told by their heads below.
    summary.stats.subagents += walk.subagents_by_path;
    summary.count_n(Reason::Subagent, walk.subagents_by_path);
    (summary.stats.stores_read, summary.stats.sessions_read) = discover::views::take_reads();
    // Stores read into views that could not be read now (a busy one is read again next time), and
    // stores inside projects that are not read at all (tracked by git, behind a link).
    for e in discover::views::take_errors() {
        let attention = e.reason == Reason::ReadFailed && !e.busy;
        let item = SkippedItem {
            app: e.app,
            session_id: None,
            transcript_path: e.store.display().to_string(),
            repo_root: None,
            reason: e.reason,
            detail: Some(e.message),
        };
        match attention {
            true => summary.attention(item),
            false => summary.skip(item),
        }
    }

    // Heads: from the discovery cache when the file is unchanged, else read (in parallel).
    let reads = discover::sessions::heads(catalog, &mut head_cache, &mut files);
    let save_cache = live && discover::sessions::cache_stale(&head_cache, &reads, files.len());
    drop(head_cache);
    summary.stats.bytes_read += reads.bytes_read;
    let mut candidates = files;
    // Unreadable heads and subagents leave the list where they are: it is not made again.
    let mut subagents = Vec::new();
    for (file, ex) in candidates.extract_if(.., |(_, ex)| ex.error().is_some() || ex.subagent) {
        if let Some(e) = ex.error() {
            summary.scanned += 1;
            let why = Some(e.to_string());
            summary.attention(SkippedItem::of(&file, &ex, Reason::ReadFailed, why));
            continue;
        }
        summary.stats.subagents += 1;
        summary.count(Reason::Subagent);
        if save_cache {
            subagents.push((file, ex));
        }
    }
    candidates.shrink_to_fit();
    let mut mapper = RepoMapper::new(&cx.almanac_home);
    for (_, ex) in &mut candidates {
        summary.scanned += 1;
        ex.repo = ex.cwd.as_deref().and_then(|c| mapper.map(c));
    }
    let out = Gathered {
        candidates,
        subagents,
        save_cache,
        cache_file,
    };
    trace.mark("heads and repo mapping");
    out
}

/// Writes the discovery cache (live, and only when something changed).
pub fn save_cache(catalog: &Catalog, g: &Gathered) {
    if !g.save_cache {
        return;
    }
    let entries = g
        .candidates
        .iter()
        .chain(g.subagents.iter())
        .map(|(file, ex)| cache::Entry::of(file, ex));
    cache::Cache::save(&g.cache_file, &catalog.fingerprint, entries);
}
