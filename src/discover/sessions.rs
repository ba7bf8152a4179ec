//! Which sessions still have a transcript in the stores: (app, session id) of every file the rule sets'
//! stores hold, subagents included. `capture prune` keeps the ledger entry of each, wherever its file
//! now lives (a Codex rollout moved to `archived_sessions/` is the same session).

use super::{cache, read_head, Examined, FoundFile, WalkItem};
use crate::context::Context;
use crate::rules::Catalog;
use std::collections::HashSet;

/// What `heads` read.
pub struct HeadReads {
    /// Bytes read from the heads that were not in the cache.
    pub bytes_read: u64,
    /// How many heads were read (not taken from the cache).
    pub read: usize,
}

/// Fills in each walked file's head: from the discovery cache while the file is unchanged, else read now
/// (in parallel). What the cache held is moved out of it (looked up in parallel, taken in order), so its
/// strings are not held twice, and each head is written beside its file where the walk left it (a list
/// of heads beside the files, then a list of both, held 28 MB at once at 100k). The head scan itself is
/// not kept (only `rules explain` shows it): memory stays flat.
pub fn heads<T: HasHead>(
    catalog: &Catalog,
    head_cache: &mut cache::Cache,
    files: &mut [T],
) -> HeadReads {
    let read = |file: &FoundFile| {
        let Some(rule) = catalog.get(&file.app) else {
            return (Examined::from_head(Err("no rule set".into())), 0);
        };
        let scan = read_head(rule, file).map_err(|e| e.to_string());
        let read = scan.as_ref().map(|h| h.bytes_read).unwrap_or(0);
        let mut ex = Examined::from_head(scan);
        ex.scan = None;
        (ex, read)
    };
    let slots = crate::util::par::map(files, |item| {
        let file = item.file();
        head_cache.find(&file.path, &file.app, &file.stamp())
    });
    // The heads the cache does not have, read in parallel: none in a sweep that finds nothing new.
    let missing: Vec<&FoundFile> = files
        .iter()
        .zip(&slots)
        .filter_map(|(item, s)| s.is_none().then_some(item.file()))
        .collect();
    let mut fresh = crate::util::par::map(&missing, |f| read(f)).into_iter();
    drop(missing);
    let mut out = HeadReads {
        bytes_read: 0,
        read: 0,
    };
    for (item, slot) in files.iter_mut().zip(slots) {
        let (file, ex) = item.head();
        if let Some(c) = slot.and_then(|i| head_cache.take(i)) {
            *ex = Examined::from_cache(c);
            continue;
        }
        // A slot already taken (one file listed twice, which the walk does not do) is read instead.
        let (got, n) = match slot {
            Some(_) => read(file),
            None => fresh.next().expect("a head read for each file not cached"),
        };
        *ex = got;
        out.bytes_read += n;
        out.read += 1;
    }
    out
}

/// Whether the discovery cache must be written after `heads` filled in `files`: some head was read, or
/// the cache holds files that were not walked.
pub fn cache_stale(head_cache: &cache::Cache, reads: &HeadReads, files: usize) -> bool {
    reads.read > 0 || head_cache.len() != files
}

/// Every (app, session id) found in the stores. Heads come from the discovery cache while a file is
/// unchanged, else are read; nothing is written. A file whose head cannot be read adds nothing.
pub fn live_sessions(catalog: &Catalog, cx: &Context) -> HashSet<(String, String)> {
    let mut walk = super::Walk::<(FoundFile, Examined)>::default();
    for rule in &catalog.sets {
        walk.rule_set(rule, cx, super::SubagentFiles::List);
    }
    let (mut files, _) = walk.finish();
    let mut head_cache = cache::Cache::load(&cache::path(&cx.almanac_home), &catalog.fingerprint);
    heads(catalog, &mut head_cache, &mut files);
    files
        .into_iter()
        .filter_map(|(f, ex)| Some((f.app.to_string(), ex.session_id?.into())))
        .collect()
}

/// A root session `capture sessions` lists: its file, its head and its user turns.
pub struct Listed {
    pub file: FoundFile,
    pub examined: Examined,
    pub user_turns: Option<u64>,
    /// Its first and latest prompt, cut, or where the turn index holds them (`Listing::index`).
    pub prompts: super::turn_index::Prompts,
}

/// A row is what the walk lists, filled in where it lies: no list of files is held beside the rows.
impl WalkItem for Listed {
    fn new(file: FoundFile) -> Self {
        Listed {
            file,
            examined: Examined::unread(),
            user_turns: None,
            prompts: super::turn_index::Prompts::None,
        }
    }
    fn file(&self) -> &FoundFile {
        &self.file
    }
}

/// A walked file with a head to fill in (`heads`).
pub trait HasHead: WalkItem + Sync {
    fn head(&mut self) -> (&FoundFile, &mut Examined);
}

impl HasHead for (FoundFile, Examined) {
    fn head(&mut self) -> (&FoundFile, &mut Examined) {
        (&self.0, &mut self.1)
    }
}

impl HasHead for Listed {
    fn head(&mut self) -> (&FoundFile, &mut Examined) {
        (&self.file, &mut self.examined)
    }
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

/// What counting a chunk of rows taught the turn index: the entries read now.
#[derive(Default)]
struct Learnt {
    stats: ListStats,
    fresh: Vec<super::turn_index::IndexEntry>,
}

pub struct Listing {
    pub sessions: Vec<Listed>,
    pub stats: ListStats,
    /// What reads the rows' prompts where the turn index holds them (`TurnIndex::prompts`).
    pub index: super::turn_index::TurnIndex,
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
    trace: &crate::util::trace::Trace,
) -> Listing {
    use super::turn_index::{self, Counted, TurnIndex};
    let cache_file = cache::path(&cx.almanac_home);
    let index_file = turn_index::path(&cx.almanac_home);
    // The discovery cache loads while the stores are walked; the turn index once the cache is gone
    // (its entries beside the cache's and the walk's were a tenth of the listing's memory at 100k).
    let (mut files, mut head_cache) = std::thread::scope(|sc| {
        let cache = sc.spawn(|| cache::Cache::load(&cache_file, &catalog.fingerprint));
        // Subagent files are never listed: those their path names are not even held.
        let files: Vec<Listed> =
            super::locate::recent(catalog, cx, apps, max_age, super::SubagentFiles::Count);
        (files, cache.join().unwrap_or_default())
    });
    trace.mark("walk and cache load");
    let reads = heads(catalog, &mut head_cache, &mut files);
    let mut stats = ListStats {
        bytes_read: reads.bytes_read,
        ..ListStats::default()
    };
    if max_age.is_none() && cache_stale(&head_cache, &reads, files.len()) {
        let entries = files.iter().map(|l| cache::Entry::of(&l.file, &l.examined));
        cache::Cache::save(&cache_file, &catalog.fingerprint, entries);
    }
    drop(head_cache);
    let mut mapper = super::repo::RepoMapper::new(&cx.almanac_home);
    // Rows are made once, by the walk, their counts filled in after: a second list of 100k rows is
    // never held.
    let mut sessions = files;
    sessions.retain_mut(|s| {
        let ex = &mut s.examined;
        if ex.subagent || ex.error().is_some() {
            return false;
        }
        ex.repo = ex.cwd.as_deref().and_then(|c| mapper.map(c));
        repo.is_none_or(|want| ex.repo.as_deref() == Some(want))
    });
    sessions.shrink_to_fit();
    trace.mark("heads and repo mapping");
    let ids: Vec<&str> = catalog.sets.iter().map(|r| r.id.as_str()).collect();
    let mut index = TurnIndex::load(&index_file, &catalog.fingerprint, &ids);
    trace.mark("turn index loaded");
    // Each row takes its count where it lies; only what the index must learn comes back.
    let learnt = crate::util::par::map_chunks_mut(&mut sessions, 512, |rows| {
        let mut l = Learnt::default();
        for s in rows {
            let Some(rule) = catalog.get(&s.file.app) else {
                continue;
            };
            let Ok(Some(c)) = index.count(rule, &s.file) else {
                continue;
            };
            s.prompts = c.prompts;
            s.user_turns = Some(c.user_turns);
            l.stats.bytes_read += c.bytes_read;
            match c.how {
                Counted::Unchanged => l.stats.turns_unchanged += 1,
                Counted::Resumed => l.stats.turns_resumed += 1,
                Counted::Whole => l.stats.turns_read_whole += 1,
            }
            l.fresh.extend(c.new);
        }
        l
    });
    let mut fresh = Vec::new();
    for l in learnt {
        stats.bytes_read += l.stats.bytes_read;
        stats.turns_unchanged += l.stats.turns_unchanged;
        stats.turns_resumed += l.stats.turns_resumed;
        stats.turns_read_whole += l.stats.turns_read_whole;
        fresh.extend(l.fresh);
    }
    trace.mark("turns counted");
    let everything = max_age.is_none() && repo.is_none();
    // A row with a count is a file counted.
    let seen = sessions.iter().filter(|s| s.user_turns.is_some());
    let seen = seen.map(|s| s.file.file_id);
    if index.update(fresh, seen, everything.then_some(apps)) {
        index.save(&index_file, &catalog.fingerprint);
    }
    index.keep_only_prompts();
    trace.mark("turn index saved");
    Listing {
        sessions,
        stats,
        index,
    }
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
            file_id: crate::platform::file_id(&path, &meta),
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
        let mut files = [file.clone(), file].map(|f| (f, Examined::unread()));
        let got = heads(&cat, &mut c, &mut files);
        assert_eq!(files[0].1.session_id.as_deref(), Some("s-cached"));
        assert_eq!(files[1].1.session_id.as_deref(), Some("s-file"));
        assert_eq!(got.read, 1, "the second is read from the file");
        assert!(got.bytes_read > 0);
    }
}
