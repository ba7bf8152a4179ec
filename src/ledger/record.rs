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
    /// The live sweep that queued it (the circuit breaker counts per sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_id: Option<String>,
    /// (this chunk, number of chunks) when a new part is captured in several runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<(u32, u32)>,
    /// The whole new part's lines when this run is one chunk of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_lines: Option<(u64, u64)>,
    /// Files outside `.almanac/` (relative to the repo) the agent changed during the run, as the check
    /// after the run found them (`capture::verify`); never reverted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrote_outside_wiki: Option<Vec<String>>,
    /// Files outside `.almanac/` that were already modified before the run and changed during it: most
    /// likely the user's work, so not blamed on the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_changed_during_run: Option<Vec<String>>,
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

    /// The agent finished: done, or failed with its error.
    pub fn finish(&mut self, outcome: &Result<(), String>, now: &str) {
        match outcome {
            Ok(()) => {
                self.status = RunStatus::Done;
                self.finished_at = Some(now.to_string());
            }
            Err(e) => self.fail(e.clone(), now),
        }
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

/// The agent's output (and the worker's notes about the run).
pub fn log_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!("{run_id}.log"))
}

pub fn record_path(runs: &Path, run_id: &str) -> PathBuf {
    runs.join(format!("{run_id}.json"))
}

pub fn write(runs: &Path, r: &RunRecord) -> std::io::Result<()> {
    write_json_atomic(&record_path(runs, &r.run_id), r)
}

pub fn read(runs: &Path, run_id: &str) -> Option<RunRecord> {
    if !crate::util::ids::is_safe_run_id(run_id) {
        return None;
    }
    let text = std::fs::read(record_path(runs, run_id)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Every readable run record in `runs`, sorted by run id (= creation time). Records that do not parse
/// are skipped: they are ours to prune, never a reason to stop.
pub fn list(runs: &Path) -> Vec<RunRecord> {
    let Ok(rd) = std::fs::read_dir(runs) else {
        return Vec::new();
    };
    let mut out: Vec<RunRecord> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_suffix(".json")?;
            if !id.starts_with("run_") {
                return None;
            }
            read(runs, id)
        })
        .collect();
    out.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    out
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
