//! Phase 3, plan: read each eligible transcript's new part (in parallel: prefix check, complete lines,
//! whether it holds a prompt), ask the policy again now that the part is known (`no-new-content`), then
//! spend the sweep's budget, most recently active first: what does not fit waits for the next sweep.

use super::act::Updates;
use super::decide::Work;
use super::facts::{facts, EntryView};
use super::gather::Candidate;
use super::measure::Sizing;
use super::overlap;
use super::range::{
    chunk_turns, chunks_of, counting_options, decide_range, new_part_turns, Chunk, Counting, Range,
    RangeOutcome,
};
use super::summary::{SkippedItem, Summary};
use super::SweepOptions;
use crate::ledger::{key, LedgerEntry};
use crate::policy::{self, Decision};
use crate::reason::Reason;
use crate::rules::Catalog;
use crate::turns::PartSummary;

/// An eligible transcript whose new part was read, waiting for the budget.
pub struct Plan {
    idx: usize,
    /// The ledger entry as the sweep found it.
    entry: Option<Box<LedgerEntry>>,
    r: Range,
    /// The rule set has turn rules: the part's turns are summarised for the runs this sweep starts.
    has_turns: bool,
    /// Each chunk's summary, when they were read with the part's lines (`will_start_all`).
    counted: Option<Vec<Option<PartSummary>>>,
}

/// A new part the budget lets this sweep start: the chunks that fit (at least one).
pub struct Planned {
    pub idx: usize,
    pub entry: Option<Box<LedgerEntry>>,
    pub r: Range,
    pub chunks: Vec<Chunk>,
    /// Chunks of the whole new part (more than `chunks` when the budget ran out midway), counting those
    /// earlier sweeps captured; `chunks[0]` is chunk `first` of them.
    pub of: u32,
    pub first: u32,
    /// The whole new part's lines, from where its first chunk began (perhaps in an earlier sweep).
    pub part_lines: (u64, u64),
    /// What the chunks this sweep starts hold, all together (for the totals)...
    pub part: Option<PartSummary>,
    /// ...and each one's own, for its prompt.
    pub summaries: Vec<Option<PartSummary>>,
    /// Record ids to remember (live only), and where the transcript came from, for the prompt.
    pub ids: super::overlap::ChunkIds,
    pub context: Option<String>,
}

struct WorkResult {
    outcome: Result<RangeOutcome, String>,
    /// Whether the new part holds a user turn (None without turn rules); the summary itself waits for
    /// the budget, so thousands of eligible transcripts hold no prompt text.
    part: Result<Option<u64>, String>,
    counted: Option<Vec<Option<PartSummary>>>,
    bytes_read: u64,
}

/// Whether the budget will start every chunk of every eligible part (a large `--max-runs`, a long
/// weekend's backlog): then each part's turns are counted in the pass that finds its lines, not read
/// again once the budget is spent. An estimate from sizes (a chunk ends past `max_tokens_per_run`, so
/// a part has at most that many); it decides only how the file is read, never what is counted.
fn will_start_all(candidates: &[Candidate], work: &[Work], opts: &SweepOptions) -> bool {
    let b = opts.budget;
    let chunk = b.max_tokens_per_run * crate::config::BYTES_PER_TOKEN;
    let (mut runs, mut tokens) = (0u64, 0u64);
    for w in work {
        let cursor = w.entry.as_ref().map_or(0, |e| e.last_captured_size);
        let new = candidates[w.idx].0.size.saturating_sub(cursor);
        let chunks = new.div_ceil(chunk.max(1)).max(1);
        runs += chunks;
        tokens += super::measure::run_tokens(None, new, 1) + chunks;
    }
    runs <= b.max_runs && b.max_tokens.is_none_or(|m| tokens <= m)
}

/// Reads the new parts and settles what reading them decides (unchanged, prefix mismatch, no new
/// turns); the rest become plans.
pub fn read_new_parts(
    catalog: &Catalog,
    candidates: &[Candidate],
    work: Vec<Work>,
    repos: &[super::decide::RepoDone],
    opts: &SweepOptions,
    updates: &mut Updates,
    summary: &mut Summary,
) -> Vec<Plan> {
    let live = !opts.dry_run;
    let count_now = will_start_all(candidates, &work, opts);
    // Runs are cut and estimated by what their agent reads. A token budget needs every part's estimate
    // before it starts any; a part counted in the pass that finds its lines is measured there too.
    let sizing = Sizing {
        limit: opts.budget.max_tokens_per_run * crate::config::BYTES_PER_TOKEN,
        always: opts.budget.max_tokens.is_some() || count_now,
    };
    let counting_opts = counting_options(keep(opts));
    let results: Vec<WorkResult> = crate::util::par::map(&work, |w| {
        let (file, _) = &candidates[w.idx];
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let mut bytes_read = 0;
        // Hash when a prefix must be verified, or when a live run needs the new prefix's hash.
        let hash = live || w.entry.is_some();
        // `capture now --from-start`: from line 1, as if nothing had been captured (nor any baseline).
        let from_start = opts.manual.is_some_and(|m| m.from_start);
        let mut start_over = opts.settings.clone();
        if from_start {
            start_over.capture_since = None;
        }
        // A first-seen transcript that starts with records captured under another session.
        let known = candidates[w.idx].1.repo.as_deref().and_then(|r| {
            repos
                .iter()
                .find(|d| d.repo == r)
                .map(|d| d.known.as_slice())
        });
        let sid = candidates[w.idx].1.session_id.as_deref();
        let shared = match (&w.entry, known) {
            (None, Some(k)) if !from_start => {
                super::overlap::copied_from(rule, file, sid, k, &mut bytes_read)
                    .ok()
                    .flatten()
            }
            // A copy's entry, whose source may have captured or queued lines past its cursor since.
            (Some(e), Some(k)) if !from_start => {
                super::overlap::copied_past(rule, file, e, k, &mut bytes_read)
                    .ok()
                    .flatten()
            }
            _ => None,
        }
        .unwrap_or_default();
        let mut counting = count_now
            .then(|| Counting::new(rule, &counting_opts))
            .flatten();
        let outcome = decide_range(
            rule,
            file,
            w.entry.as_deref().filter(|_| !from_start),
            shared,
            &start_over,
            hash,
            sizing,
            counting.as_mut(),
            &mut bytes_read,
        );
        let mut counted = None;
        let part = match &outcome {
            Ok(RangeOutcome::Capture(r)) => match counting.and_then(|c| c.finish(r)) {
                Some((first, chunks)) => {
                    counted = Some(chunks);
                    Ok(Some(first))
                }
                // Only whether the part holds content; the full count waits for the budget.
                None => new_part_turns(rule, file, r, r.to_byte, true, &mut bytes_read)
                    .map(|p| p.map(|p| p.turns)),
            },
            _ => Ok(None),
        };
        WorkResult {
            outcome,
            part,
            counted,
            bytes_read,
        }
    });
    work.into_iter()
        .zip(results)
        .filter_map(|(w, res)| settle(catalog, candidates, w, res, opts, updates, summary))
        .collect()
}

fn settle(
    catalog: &Catalog,
    candidates: &[Candidate],
    w: Work,
    res: WorkResult,
    opts: &SweepOptions,
    updates: &mut Updates,
    summary: &mut Summary,
) -> Option<Plan> {
    let (file, ex) = &candidates[w.idx];
    summary.stats.bytes_read += res.bytes_read;
    // The policy always skips a transcript without these (no-almanac-repo and no-session-id are required).
    let (repo, sid) = (ex.repo.as_deref()?, ex.session_id.as_deref()?);
    let k = key(&file.app, sid);
    let found = w.entry.as_deref();
    let attention = |summary: &mut Summary, reason, detail| {
        summary.attention(SkippedItem::of(file, ex, reason, Some(detail)))
    };
    let recovered = |summary: &mut Summary, rc: &super::range::Recovered| {
        let detail = Some(rc.detail.clone());
        summary.recover(SkippedItem::of(file, ex, Reason::RecoveredPrefix, detail))
    };
    let r = match res.outcome {
        Err(e) => {
            attention(summary, Reason::ReadFailed, e);
            return None;
        }
        Ok(RangeOutcome::PrefixMismatch(detail)) => {
            if found.is_some() {
                updates
                    .entry(repo, &k, found, file, sid)
                    .needs_attention(Reason::PrefixMismatch, detail.clone());
            }
            attention(summary, Reason::PrefixMismatch, detail);
            return None;
        }
        Ok(RangeOutcome::Unchanged {
            baseline,
            copied,
            recovered: rescued,
        }) => {
            // Remember where the file stands so the next sweep need not read it again.
            let e = updates.entry(repo, &k, found, file, sid);
            if let Some(b) = baseline {
                // A first-seen transcript's baseline, or a copy's cursor past records its family claimed.
                let first = found.is_none() || e.baseline;
                e.place_cursor(b.bytes, b.lines, b.hash, first);
                // A rewrite before the cursor can still recover.
                if let Some(c) = copied {
                    e.last_record_id = Some(c.last_id);
                    e.skip_copied(c.from, c.bytes);
                }
            }
            if let Some(rc) = rescued {
                recovered(summary, &rc);
                e.recover_cursor(rc.at.bytes, rc.at.lines, rc.at.hash);
            }
            e.follow_file(
                file.path.display().to_string(),
                file.file_id,
                file.mtime_ns(),
            );
            let detail = "no complete new line since the captured cursor".to_string();
            summary.skip_candidate(w.idx, &candidates[w.idx], Reason::Unchanged, Some(detail));
            return None;
        }
        Ok(RangeOutcome::Capture(r)) => r,
    };
    if let Some(rc) = &r.recovered {
        recovered(summary, rc);
    }
    let part = match res.part {
        Ok(p) => p,
        Err(e) => {
            attention(summary, Reason::ReadFailed, e);
            return None;
        }
    };
    // Now that the new part is known, ask the policy again (no-new-content).
    if let Some(content_turns) = part {
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let from_start = opts.manual.is_some_and(|m| m.from_start);
        let view = found.map(|e| EntryView::of(e, file).starting_over(from_start));
        let mut f = facts(rule, file, ex, view, false);
        f.new_content_turns = Some(content_turns);
        let (decision, detail) = policy::decide_fast(&catalog.policy, &f, &opts.settings);
        if let Decision::Skip(reason) = decision {
            if !opts.dry_run && reason == Reason::NoNewContent {
                let e = updates.entry_for_range(repo, &k, found, file, sid, &r);
                e.follow_file(
                    file.path.display().to_string(),
                    file.file_id,
                    file.mtime_ns(),
                );
                e.no_content_at(file.size);
            }
            summary.skip_candidate(w.idx, &candidates[w.idx], reason, detail);
            return None;
        }
    }
    Some(Plan {
        idx: w.idx,
        entry: w.entry,
        r,
        has_turns: part.is_some(),
        counted: res.counted,
    })
}

/// Spends the run and token budget over the plans, most recently active first. Every plan counts as
/// eligible; one that does not fit is `budget-deferred`. Full turn counts are read only for what starts,
/// on every core once the budget is spent.
pub fn spend_budget(
    catalog: &Catalog,
    candidates: &[Candidate],
    mut plans: Vec<Plan>,
    opts: &SweepOptions,
    summary: &mut Summary,
) -> Vec<Planned> {
    plans.sort_by(|a, b| {
        candidates[b.idx]
            .0
            .mtime
            .cmp(&candidates[a.idx].0.mtime)
            .then(a.idx.cmp(&b.idx))
    });
    let budget = opts.budget;
    let mut runs_left = budget.max_runs;
    let mut tokens_left = budget.max_tokens;
    let mut taken: Vec<(Plan, Vec<Chunk>, u32)> = Vec::new();
    let sizing = Sizing {
        limit: budget.max_tokens_per_run * crate::config::BYTES_PER_TOKEN,
        always: false,
    };
    for mut plan in plans {
        summary.eligible += 1;
        // A part the scan left unmeasured is cut by its rendering once a run is left to start it.
        if runs_left > 0 {
            let (file, _) = &candidates[plan.idx];
            let rule = catalog.get(&file.app).expect("walked apps exist");
            let mut read = 0;
            // A part that cannot be read again now stays one chunk; its run reads it, or says why not.
            let _ = super::range::measure_part(
                rule,
                file,
                &mut plan.r,
                sizing,
                !opts.dry_run,
                &mut read,
            );
            summary.stats.bytes_read += read;
        }
        let mut chunks = chunks_of(&plan.r);
        let of = chunks.len() as u32;
        let (take, tokens) = fit(&chunks, runs_left, tokens_left);
        if take == 0 {
            let why = if runs_left == 0 {
                format!(
                    "this sweep's {} runs are spent (max_runs_per_sweep); the next sweep starts it",
                    budget.max_runs
                )
            } else {
                format!("{} estimated tokens do not fit what is left of max_tokens_per_sweep; the next sweep starts it", chunks[0].tokens())
            };
            summary.skip_candidate(
                plan.idx,
                &candidates[plan.idx],
                Reason::BudgetDeferred,
                Some(why),
            );
            continue;
        }
        chunks.truncate(take);
        // Held per started part (thousands with a large budget): no room for more chunks.
        chunks.shrink_to_fit();
        runs_left -= take as u64;
        tokens_left = tokens_left.map(|l| l - tokens);
        taken.push((plan, chunks, of));
    }
    // Grown by doubling, the lists of started parts held up to twice their size at the peak.
    taken.shrink_to_fit();
    // Turns only for what this sweep starts (reading a huge part's turns costs), chunk by chunk; and,
    // live, the record ids to remember.
    let read = crate::util::par::map(&taken, |(plan, chunks, _)| {
        read_chunks(catalog, candidates, plan, chunks, opts)
    });
    let mut out = Vec::with_capacity(taken.len());
    for ((mut plan, mut chunks, of), (summaries, sizes, ids, bytes_read)) in
        taken.into_iter().zip(read)
    {
        for (c, size) in chunks.iter_mut().zip(sizes) {
            c.rendered = c.rendered.or(size);
        }
        let tokens: u64 = chunks.iter().map(Chunk::tokens).sum();
        let summaries = match plan.counted.take() {
            Some(mut counted) => {
                counted.truncate(chunks.len());
                counted
            }
            None => summaries,
        };
        let (file, ex) = &candidates[plan.idx];
        summary.stats.bytes_read += bytes_read;
        let part = combine(&summaries);
        let rule = catalog.get(&file.app).expect("walked apps exist");
        let context = match opts.dry_run {
            true => None,
            false => overlap::context(rule, file, plan.entry.is_none(), &plan.r, candidates),
        };
        let take = chunks.len();
        let t = &mut summary.totals;
        t.new_bytes += chunks.iter().map(|c| c.to - c.from).sum::<u64>();
        t.estimated_tokens += tokens;
        t.new_turns += part.as_ref().map(|p| p.user_turns).unwrap_or(0);
        t.runs += take as u64;
        // A part an earlier sweep began (the budget ran out, or a chunk failed) keeps its numbering.
        let repo = ex.repo.as_deref();
        let from_start = opts.manual.is_some_and(|m| m.from_start);
        let (done, part_from) = repo
            .filter(|_| !from_start)
            .and_then(|repo| earlier_chunks(repo, plan.entry.as_deref()))
            .unwrap_or((0, plan.r.from_line_before + 1));
        out.push(Planned {
            idx: plan.idx,
            entry: plan.entry,
            part_lines: (part_from, plan.r.to_line),
            r: plan.r,
            chunks,
            of: done + of,
            first: done + 1,
            part,
            summaries,
            ids,
            context,
        });
    }
    out
}

/// What a chunk's turn read keeps: a dry run's output holds only counts, a run's prompt quotes prompts.
fn keep(opts: &SweepOptions) -> crate::turns::Keep {
    match opts.dry_run {
        true => crate::turns::Keep::Counts,
        false => crate::turns::Keep::Summary,
    }
}

/// What a started part's chunks hold, read from the file: their turns (unless they were counted with
/// the part's lines, and kept by the plan), the rendering's size of those not measured yet (in the same
/// read) and, live, the record ids to remember.
fn read_chunks(
    catalog: &Catalog,
    candidates: &[Candidate],
    plan: &Plan,
    chunks: &[Chunk],
    opts: &SweepOptions,
) -> (
    Vec<Option<PartSummary>>,
    Vec<Option<u64>>,
    overlap::ChunkIds,
    u64,
) {
    let keep = keep(opts);
    let file = &candidates[plan.idx].0;
    let rule = catalog.get(&file.app).expect("walked apps exist");
    let mut bytes_read = 0;
    let (summaries, sizes): (Vec<Option<PartSummary>>, Vec<Option<u64>>) = match plan.has_turns {
        _ if plan.counted.is_some() => (Vec::new(), Vec::new()),
        true => chunks
            .iter()
            .map(|c| {
                let measure = c.rendered.is_none();
                chunk_turns(rule, file, c, keep, measure, &mut bytes_read).unwrap_or((None, None))
            })
            .unzip(),
        false => chunks.iter().map(|_| (None, None)).unzip(),
    };
    let ids = match opts.dry_run {
        true => Default::default(),
        false => overlap::chunk_ids(
            rule,
            file,
            plan.entry.as_deref(),
            chunks.iter().map(|c| c.to),
        ),
    };
    (summaries, sizes, ids, bytes_read)
}

/// The chunks' summaries as one: turns added up, the first chunk's first prompt, the last one's last.
fn combine(each: &[Option<PartSummary>]) -> Option<PartSummary> {
    let known: Vec<&PartSummary> = each.iter().flatten().collect();
    if known.is_empty() {
        return None;
    }
    let mut tools: Vec<String> = Vec::new();
    for t in known.iter().flat_map(|s| &s.tools) {
        if !tools.contains(t) {
            tools.push(t.clone());
        }
    }
    let with_prompt: Vec<&&PartSummary> = known.iter().filter(|s| s.first_user.is_some()).collect();
    let first = with_prompt.first().and_then(|s| s.first_user.clone());
    let last = with_prompt
        .last()
        .and_then(|s| s.last_user.clone().or(s.first_user.clone()))
        .filter(|l| with_prompt.len() > 1 || Some(l) != first.as_ref());
    Some(PartSummary {
        user_turns: known.iter().map(|s| s.user_turns).sum(),
        turns: known.iter().map(|s| s.turns).sum(),
        first_user: first,
        last_user: last,
        tools,
    })
}

/// How many chunks of the part this entry's cursor sits in were captured by earlier runs, and the line
/// the part began at: read from the entry's last run record (sealed, so ours), when it was a chunk that
/// ended at the cursor (done) or began there (failed, to be retried as the same chunk).
fn earlier_chunks(repo: &std::path::Path, entry: Option<&LedgerEntry>) -> Option<(u32, u64)> {
    use crate::ledger::record::{self, Found, RunStatus};
    let e = entry?;
    let id = e.last_run_id.as_deref()?;
    let Found::Ours(r) = record::find(&crate::ledger::runs_dir(repo), id) else {
        return None;
    };
    let ((i, _), (from_line, _)) = (r.chunk?, r.part_lines?);
    let done = match r.status {
        RunStatus::Done if r.to_byte == e.last_captured_size => i,
        RunStatus::Failed if r.from_byte == e.last_captured_size => i.checked_sub(1)?,
        _ => return None,
    };
    (done > 0).then_some((done, from_line))
}

/// How many of the chunks fit what is left of the budget, and their estimated tokens.
fn fit(chunks: &[Chunk], runs_left: u64, tokens_left: Option<u64>) -> (usize, u64) {
    let mut take = 0usize;
    let mut tokens = 0u64;
    for c in chunks {
        let t = c.tokens();
        if runs_left <= take as u64 || tokens_left.is_some_and(|left| tokens + t > left) {
            break;
        }
        tokens += t;
        take += 1;
    }
    (take, tokens)
}
