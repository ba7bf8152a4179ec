//! Capture runs: records, prompts, the agent process, and the per-repo background worker that runs a
//! repo's queued captures one after another.

pub mod agent;
mod agent_io;
pub mod breaker;
pub mod conversation;
mod copied;
mod held;
pub mod logs;
pub mod orphan;
pub mod prompt;
pub mod slots;
mod trust;
pub mod verify;
pub mod worker;

use crate::ledger::record::{self as run, RunRecord, RunStatus};
use crate::ledger::runs_dir;
use std::path::Path;

/// How `capture now` differs from a sweep past choosing its one session.
#[derive(Debug, Clone, Copy, Default)]
pub struct Manual {
    /// Capture from line 1, whatever the ledger's cursor (the prompt says so).
    pub from_start: bool,
    /// The caller runs the repo's queue itself: no background worker is started.
    pub foreground: bool,
}

/// What a new run covers.
pub struct RunSpec<'a> {
    pub repo: &'a Path,
    pub app: &'a str,
    pub session_id: &'a str,
    pub transcript: &'a Path,
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
    pub prefix_hash: &'a str,
    pub agent: &'a str,
    /// What the new part holds, for the prompt.
    pub summary: Option<&'a crate::turns::PartSummary>,
    pub sweep_id: Option<&'a str>,
    /// (this chunk, chunks) and the whole new part's lines, when the part is captured in several runs.
    pub chunk: Option<(u32, u32)>,
    pub part_lines: Option<(u64, u64)>,
    /// Shared by the chunks of one part, so their run ids sort in chunk order.
    pub id_base: Option<&'a str>,
    /// `capture now`: `trigger: "manual"` in the record, and whether it captures from line 1 again.
    pub manual: Option<Manual>,
    /// Where the transcript came from (a fork, copied lines), for the prompt.
    pub context: Option<&'a str>,
    /// The rule set to render the conversation with (`conversation`): the agent reads that. None (a
    /// rule set without `turns`): the prompt points at the transcript alone.
    pub render_with: Option<&'a crate::rules::RuleSet>,
}

/// Writes the prompt and a `queued` run record. The caller records the run in the ledger (same lock).
pub fn queue(
    spec: &RunSpec<'_>,
    almanac_home: &Path,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<RunRecord> {
    let runs = runs_dir(spec.repo);
    crate::util::atomic::ensure_private_dir(&runs)?;
    let run_id = match (spec.id_base, spec.chunk) {
        (Some(base), Some((i, _))) => format!("{base}_c{i:04}"),
        _ => crate::util::ids::run_id(now),
    };
    let record = RunRecord {
        version: 1,
        run_id: run_id.clone(),
        status: RunStatus::Queued,
        repo_root: spec.repo.display().to_string(),
        app: spec.app.to_string(),
        session_id: spec.session_id.to_string(),
        transcript_path: spec.transcript.display().to_string(),
        from_line: spec.from_line,
        to_line: spec.to_line,
        from_byte: spec.from_byte,
        to_byte: spec.to_byte,
        prefix_hash: spec.prefix_hash.to_string(),
        agent: spec.agent.to_string(),
        agent_session_id: None,
        pid: None,
        agent_pid: None,
        agent_process: None,
        created_at: crate::policy::iso(now),
        started_at: None,
        finished_at: None,
        exit_code: None,
        error: None,
        prompt_path: run::prompt_path(&runs, &run_id).display().to_string(),
        log_path: run::log_path(&runs, &run_id).display().to_string(),
        sweep_id: spec.sweep_id.map(str::to_string),
        chunk: spec.chunk,
        part_lines: spec.part_lines,
        trigger: spec.manual.map(|_| "manual".to_string()),
        from_start: spec.manual.and_then(|m| m.from_start.then_some(true)),
        mac: None,
        wrote_outside_wiki: None,
        also_changed_during_run: None,
        prompt_sha256: None,
        conversation_sha256: None,
    };
    let mut record = record;
    let conversation = match spec.render_with {
        Some(rule) => {
            let out = crate::ledger::record::conversation_path(&runs, &run_id);
            let part = conversation::Part {
                rule,
                transcript: spec.transcript,
                session_id: spec.session_id,
                from_line: spec.from_line,
                to_line: spec.to_line,
                from_byte: spec.from_byte,
                to_byte: spec.to_byte,
            };
            let (_, hash) = conversation::write_file(&part, &out)?;
            record.conversation_sha256 = Some(hash);
            Some(out)
        }
        None => None,
    };
    let template = prompt::template(almanac_home, spec.repo);
    let text = prompt::render(
        &template.text,
        &record,
        spec.summary,
        spec.context,
        conversation.as_deref(),
        spec.render_with.is_some_and(|r| r.is_view(spec.transcript)),
    );
    record.prompt_sha256 = Some(prompt::digest(&text));
    crate::util::atomic::write_atomic(Path::new(&record.prompt_path), text.as_bytes())?;
    run::write(&runs, &record)?;
    crate::util::fault::point("run-record-written");
    Ok(record)
}

/// Starts the repo's background worker, detached from the sweep and the terminal: a new session, stdin
/// from /dev/null, output appended to `runs/worker.log`.
pub fn spawn_worker(repo: &Path) -> std::io::Result<u32> {
    crate::ledger::guard::ensure_safe(repo)?;
    let path = crate::ledger::worker_log_path(repo);
    logs::rotate(&path, logs::WORKER_LOG_MAX);
    let log = crate::util::atomic::open_append_private(&path)?;
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["capture", "worker", "--repo"])
        .arg(repo)
        .current_dir(repo)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let child = crate::platform::spawn_detached(&mut cmd)?;
    Ok(child.id())
}
