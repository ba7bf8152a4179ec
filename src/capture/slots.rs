//! At most `[capture] max_parallel_agents` capture agents run at a time across all repos: a worker takes
//! one of N slot locks (`$ALMANAC_HOME/state/agent-slots/slot-<i>.lock`) before it picks a run and lets
//! go of it when the run is recorded; with every slot taken it waits. Waiting happens before a run is
//! marked running, so it never counts against the run's timeout, and the worker holds its worker lock
//! meanwhile, so no sweep takes it for lost or starts another worker in the repo.
//!
//! Slots are OS file locks, which a worker that dies lets go of; its agent, in a process group of its
//! own, may run on. So a slot also names the agent running in it and when its timeout ends
//! (`slot-<i>.agent.json`, written as the agent starts, removed when the run is recorded): a slot whose
//! lock is free but whose agent still runs is taken only once that agent is gone, and whoever finds it
//! past its timeout (a worker waiting for a slot, a live sweep) stops it as the worker would have.

use super::orphan;
use crate::ledger::record::AgentProcess;
use crate::util::lock::FileLock;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn slots_dir(almanac_home: &Path) -> PathBuf {
    almanac_home.join("state").join("agent-slots")
}

/// How often a waiting worker looks for a free slot.
const POLL: Duration = Duration::from_millis(200);

/// A slot held by this worker; its agent file is removed when it is let go.
pub struct Slot {
    _lock: FileLock,
    agent: PathBuf,
}

/// The agent running in a slot, and when its timeout ends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InSlot {
    process: AgentProcess,
    until: chrono::DateTime<chrono::Utc>,
    run_id: String,
}

impl Slot {
    /// The agent `process` of `run_id` now runs in this slot, to be stopped at `until` if its worker is
    /// no longer there to.
    pub fn occupy(
        &self,
        process: AgentProcess,
        until: chrono::DateTime<chrono::Utc>,
        run_id: &str,
    ) -> std::io::Result<()> {
        let run_id = run_id.to_string();
        crate::util::atomic::write_json_atomic(
            &self.agent,
            &InSlot {
                process,
                until,
                run_id,
            },
        )
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.agent);
    }
}

/// Whether the slot whose agent file is `agent` (its lock held by the caller) is free: no agent named,
/// or the one named is gone, or it ran past its timeout and was stopped now.
fn free(agent: &Path, note: &impl Fn(&str)) -> bool {
    let Ok(bytes) = crate::util::untrusted::read_capped(agent, 64 * 1024) else {
        return true;
    };
    let Ok(a) = serde_json::from_slice::<InSlot>(&bytes) else {
        let _ = std::fs::remove_file(agent);
        return true;
    };
    if !orphan::still_running(a.process) {
        let _ = std::fs::remove_file(agent);
        return true;
    }
    if chrono::Utc::now() < a.until {
        return false;
    }
    note(&format!(
        "the agent of {} (process group {}) outlived its worker and its timeout; stopping it",
        a.run_id, a.process.pgid
    ));
    let stopped = orphan::stop_left(a.process);
    if stopped {
        let _ = std::fs::remove_file(agent);
    }
    stopped
}

fn paths(dir: &Path, i: u32) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("slot-{i}.lock")),
        dir.join(format!("slot-{i}.agent.json")),
    )
}

/// Waits for a free slot of `max` and returns it (held until dropped). `Err` when the slot files cannot
/// be opened at all (the caller then runs without one rather than never).
pub fn acquire(almanac_home: &Path, max: u32, note: impl Fn(&str)) -> std::io::Result<Slot> {
    let dir = slots_dir(almanac_home);
    crate::util::atomic::private_dir(&dir)?;
    let mut told = false;
    loop {
        let (mut errors, mut last_err) = (0, None);
        for i in 0..max.max(1) {
            let (lock, agent) = paths(&dir, i);
            match FileLock::try_acquire(&lock) {
                Ok(Ok(lock)) if free(&agent, &note) => {
                    if told {
                        note("an agent slot is free; going on");
                    }
                    return Ok(Slot { _lock: lock, agent });
                }
                Ok(_) => {}
                Err(e) => {
                    errors += 1;
                    last_err = Some(e);
                }
            }
        }
        if let Some(e) = last_err.filter(|_| errors >= max.max(1)) {
            return Err(e);
        }
        if !told {
            note(&format!(
                "all {max} agent slots are taken (max_parallel_agents); waiting for one"
            ));
            told = true;
        }
        std::thread::sleep(POLL);
    }
}

/// A live sweep's look at the slots: an agent left running past its timeout by a worker that died is
/// stopped (a slot held by a live worker is its own business). Slots past `max` are looked at too.
pub fn reap(almanac_home: &Path, note: impl Fn(&str)) {
    let dir = slots_dir(almanac_home);
    let Ok(list) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in list.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(i) = name
            .strip_prefix("slot-")
            .and_then(|n| n.strip_suffix(".agent.json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let (lock, agent) = paths(&dir, i);
        if let Ok(Ok(_held)) = FileLock::try_acquire(&lock) {
            free(&agent, &note);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_taken_once_until_dropped() {
        let home = tempfile::tempdir().unwrap();
        let a = acquire(home.path(), 2, |_| {}).unwrap();
        let b = acquire(home.path(), 2, |_| {}).unwrap();
        assert_ne!(a.agent, b.agent);
        drop(a);
        let c = acquire(home.path(), 2, |_| {}).unwrap();
        assert_ne!(c.agent, b.agent);
    }

    /// An agent left running in a slot (its worker gone, the lock free) keeps the slot until its
    /// timeout; then whoever looks for a slot stops it and takes it.
    #[cfg(unix)]
    #[test]
    fn an_agent_that_outlived_its_worker_keeps_its_slot_until_its_timeout() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let home = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        let p = AgentProcess {
            pgid: child.id(),
            start_time: crate::platform::start_time(child.id()),
        };
        // A worker took the slot and named its agent there, then died: its lock went, the file stayed.
        let (lock, agent) = paths(&slots_dir(home.path()), 0);
        let soon = chrono::Utc::now() + chrono::Duration::seconds(60);
        let slot = acquire(home.path(), 1, |_| {}).unwrap();
        slot.occupy(p, soon, "run_1").unwrap();
        let kept = std::fs::read(&agent).unwrap();
        drop(slot);
        std::fs::write(&agent, kept).unwrap();
        let held = FileLock::try_acquire(&lock).unwrap().unwrap();
        assert!(
            !free(&agent, &|_| {}),
            "the agent still runs within its time"
        );
        assert!(child.try_wait().unwrap().is_none());
        // So a worker waiting for a slot does not take it.
        drop(held);
        let home_path = home.path().to_path_buf();
        let waiting = std::thread::spawn(move || acquire(&home_path, 1, |_| {}).map(|_| ()));
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            !waiting.is_finished(),
            "a slot its agent still holds was taken"
        );
        let held = loop {
            // (The waiting thread polls the same lock: take it between its looks.)
            if let Ok(Ok(h)) = FileLock::try_acquire(&lock) {
                break h;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Past its timeout: stopped, and the slot is free.
        let past = chrono::Utc::now() - chrono::Duration::seconds(1);
        let left = InSlot {
            process: p,
            until: past,
            run_id: "run_1".into(),
        };
        crate::util::atomic::write_json_atomic(&agent, &left).unwrap();
        let told = std::cell::RefCell::new(Vec::new());
        assert!(free(&agent, &|m: &str| told
            .borrow_mut()
            .push(m.to_string())));
        assert!(told.borrow()[0].contains("outlived its worker"), "{told:?}");
        assert!(child.wait().unwrap().signal().is_some(), "stopped");
        assert!(!agent.exists());
        drop(held);
        waiting.join().unwrap().unwrap();
    }
}
