//! Run records: `<repo>/.almanac/runs/<run-id>.json` (status, times, agent, range, exit code, error),
//! with `<run-id>.log` (the agent's output) and `<run-id>.prompt.md` (the exact prompt).

use crate::util::atomic::write_json_atomic;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Done,
    Failed,
    /// Stopped by the user (Ctrl-C on `capture now --foreground`): no attempt spent, the cursor stays.
    Cancelled,
}

impl RunStatus {
    /// Whether the run is over (done, failed or cancelled).
    pub fn finished(self) -> bool {
        matches!(
            self,
            RunStatus::Done | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub version: u32,
    pub run_id: String,
    pub status: RunStatus,
    pub repo_root: String,
    pub app: String,
    pub session_id: String,
    pub transcript_path: String,
    pub from_line: u64,
    pub to_line: u64,
    pub from_byte: u64,
    pub to_byte: u64,
    /// `sha256:` of transcript bytes `[0, toByte)` when the run was queued.
    pub prefix_hash: String,
    /// Agent name from config (`claude`, `codex`, or a `[capture.agents.<name>]`).
    pub agent: String,
    /// The session id of the agent's own transcript: never captured (`internal-almanac-session`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session_id: Option<String>,
    /// The worker process running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_pid: Option<u32>,
    /// The agent's process group and start time, written as soon as it starts: what a sweep needs to stop
    /// an agent whose worker died (`capture::orphan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_process: Option<AgentProcess>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub prompt_path: String,
    pub log_path: String,
    /// `sha256:` of the prompt file as queued: the worker runs the agent only on that text (the agent of
    /// an earlier run may write under `.almanac/`, the prompt file included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_sha256: Option<String>,
    /// `sha256:` of the conversation the agent reads (`runs/<run-id>.transcript.md`) as queued: checked
    /// as the prompt is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_sha256: Option<String>,
    /// The live sweep that queued it (the circuit breaker counts per sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_id: Option<String>,
    /// (this chunk, number of chunks) when a new part is captured in several runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<(u32, u32)>,
    /// The whole new part's lines when this run is one chunk of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_lines: Option<(u64, u64)>,
    /// `manual`: queued by `capture now` rather than a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// `capture now --from-start`: captures from line 1 although earlier lines were captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_start: Option<bool>,
    /// Files outside `.almanac/` (relative to the repo) the agent changed during the run, as the check
    /// after the run found them (`capture::verify`); never reverted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrote_outside_wiki: Option<Vec<String>>,
    /// Files outside `.almanac/` that were already modified before the run and changed during it: most
    /// likely the user's work, so not blamed on the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_changed_during_run: Option<Vec<String>>,
    /// HMAC-SHA256 of the rest under this user's run key (`seal`): a record without a valid one is
    /// foreign, never run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// A running agent, identified beyond its pid: the pid may be reused once it is gone, the start time not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentProcess {
    /// The agent's process group (it leads it: the same number as its pid).
    pub pgid: u32,
    /// When it started, as `platform::start_time` reads it (Linux: clock ticks after boot; macOS: µs
    /// since the epoch; Windows: 100 ns since 1601); None where it cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
}

impl RunRecord {
    /// The run ended without success: the error says why, in words.
    pub fn fail(&mut self, error: impl Into<String>, now: &str) {
        self.status = RunStatus::Failed;
        self.error = Some(error.into());
        self.finished_at = Some(now.to_string());
    }

    /// A queued run that must not run now fails with `why`; returns whether it was queued.
    pub fn cancel_if_queued(&mut self, why: &str, now: &str) -> bool {
        if self.status != RunStatus::Queued {
            return false;
        }
        self.fail(why, now);
        true
    }

    /// The worker `pid` starts it.
    pub fn start(&mut self, pid: u32, now: &str) {
        self.status = RunStatus::Running;
        self.pid = Some(pid);
        self.started_at = Some(now.to_string());
    }

    /// The agent finished: done, failed or cancelled, with why in words.
    pub fn finish(&mut self, end: &RunEnd, now: &str) {
        match end {
            RunEnd::Done => {
                self.status = RunStatus::Done;
                self.finished_at = Some(now.to_string());
            }
            RunEnd::Failed(e) => self.fail(e.clone(), now),
            RunEnd::Cancelled(e) => {
                self.fail(e.clone(), now);
                self.status = RunStatus::Cancelled;
            }
        }
    }
}

/// How a run that started ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    Done,
    /// The agent failed (the words say how): an attempt is spent.
    Failed(String),
    /// The user stopped it: no attempt is spent.
    Cancelled(String),
}

impl RunEnd {
    pub fn is_done(&self) -> bool {
        *self == RunEnd::Done
    }
}

/// Marks each queued run in `ids` failed without running it (a chunk before it failed, or the circuit
/// breaker stopped its sweep).
pub fn cancel_queued(runs: &Path, ids: &[String], why: &str, now: &str) {
    for id in ids {
        if let Some(mut r) = read(runs, id) {
            if r.cancel_if_queued(why, now) {
                let _ = write(runs, &r);
            }
        }
    }
}

/// The exact prompt a run gives its agent.
pub fn prompt_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!("{run_id}.prompt.md"))
}

/// The conversation a run's agent reads (`capture::conversation`).
pub fn conversation_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!("{run_id}.transcript.md"))
}

/// The agent's output (and the worker's notes about the run).
pub fn log_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!("{run_id}.log"))
}

pub fn record_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!("{run_id}.json"))
}

/// Writes `r` sealed with this user's run key (every record almanac writes goes through here).
pub fn write(runs: &Path, r: &RunRecord) -> std::io::Result<()> {
    let mut sealed = r.clone();
    super::seal::seal(&mut sealed)?;
    write_json_atomic(&record_path(runs, &r.run_id), &sealed)
}

/// What `<run-id>.json` holds.
pub enum Found {
    /// A record this user's almanac wrote.
    Ours(Box<RunRecord>),
    /// Anything else (planted, copied from elsewhere, a symlink, unreadable): the words say why.
    Foreign(String),
    Missing,
}

/// The record of `run_id`, checked. Never follows a symlink; reads at most `MAX_RECORD` bytes.
pub fn find(runs: &Path, run_id: &str) -> Found {
    use std::io::Read;
    if !crate::util::ids::is_safe_run_id(run_id) {
        return Found::Missing;
    }
    let f = match crate::platform::open_no_follow(
        std::fs::OpenOptions::new().read(true),
        &record_path(runs, run_id),
    ) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Missing,
        Err(e) if crate::platform::is_link_refused(&e) => {
            return Found::Foreign("it is a symbolic link".into())
        }
        Err(e) => return Found::Foreign(format!("it cannot be read: {e}")),
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Found::Foreign("it is not a regular file".into());
    }
    let mut text = Vec::new();
    if let Err(e) = f.take(MAX_RECORD + 1).read_to_end(&mut text) {
        return Found::Foreign(format!("it cannot be read: {e}"));
    }
    if text.len() as u64 > MAX_RECORD {
        return Found::Foreign("it is too large".into());
    }
    let r: RunRecord = match serde_json::from_slice(&text) {
        Ok(r) => r,
        Err(e) => return Found::Foreign(format!("it does not parse: {e}")),
    };
    if r.run_id != run_id {
        return Found::Foreign(format!("it names another run ({})", r.run_id));
    }
    match super::seal::verify(&r) {
        Ok(()) => Found::Ours(Box::new(r)),
        Err(why) => Found::Foreign(why),
    }
}

const MAX_RECORD: u64 = 1 << 20;

/// The record of `run_id` if this user's almanac wrote it; a foreign one is never returned.
pub fn read(runs: &Path, run_id: &str) -> Option<RunRecord> {
    match find(runs, run_id) {
        Found::Ours(r) => Some(*r),
        _ => None,
    }
}

/// Every run record of ours in `runs`, sorted by run id (= creation time). Foreign ones (and files
/// that do not parse) are left out: `list_foreign` names them.
pub fn list(runs: &Path) -> Vec<RunRecord> {
    list_ids(runs)
        .into_iter()
        .filter_map(|id| read(runs, &id))
        .collect()
}

/// A run record this user's almanac did not write: never run, changed or deleted.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Foreign {
    pub run_id: String,
    pub path: String,
    pub why: String,
}

/// Every foreign run record in `runs`, sorted by run id.
pub fn list_foreign(runs: &Path) -> Vec<Foreign> {
    list_ids(runs)
        .into_iter()
        .filter_map(|id| match find(runs, &id) {
            Found::Foreign(why) => Some(Foreign {
                path: record_path(runs, &id).display().to_string(),
                run_id: id,
                why,
            }),
            _ => None,
        })
        .collect()
}

/// Run ids in `runs`, sorted (= by creation time), from file names only.
pub fn list_ids(runs: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(runs) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_suffix(".json")?;
            crate::util::ids::is_safe_run_id(id).then(|| id.to_string())
        })
        .collect();
    ids.sort();
    ids
}
