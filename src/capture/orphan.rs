//! An agent whose worker died (`kill -9`, a crash) keeps running in its own process group. Before a run
//! whose worker is gone is marked `worker-lost` and retried, the agent it left must be gone too: two
//! agents never run in one repo.
//!
//! The choice: stop it, not wait for it. Its worker is gone, so nothing enforces its timeout, nothing
//! can record its exit code, and the run is retried anyway; waiting would hold the repo for up to the
//! whole timeout (or for ever) for a result nobody keeps. The group recorded in the run record
//! (`agentProcess`) gets SIGTERM, then, 5 s later, SIGKILL, and only when it is the same process: the
//! leader's start time must match the one recorded. A leader that is gone while its group still has
//! members is ours too (a pid is not reused while it names a process group). Where the start time cannot
//! be read (neither `/proc` nor `proc_pidinfo`), a group that still exists is waited for instead: the run
//! stays pending and a later sweep looks again.

use crate::ledger::record::{AgentProcess, RunRecord};
use crate::platform::{group_exists, has_start_times, running, start_time, stop_group, Stop};
use std::time::{Duration, Instant};

/// Stops the agent `r` left running, if any. Returns whether it is gone (or never ran); false when it
/// still runs and the run must be left pending.
pub fn settle(r: &RunRecord) -> bool {
    let Some(p) = r.agent_process else {
        return true;
    };
    match whose(p) {
        Owner::Nobody => true,
        Owner::Unknown => false,
        Owner::Ours => {
            eprintln!(
                "almanac: stopping agent process group {} left running by the lost worker of {}",
                p.pgid, r.run_id
            );
            stop(p)
        }
    }
}

/// Whether the agent process `p` a run record or a slot names still runs (or cannot be told apart from
/// one that does).
pub fn still_running(p: AgentProcess) -> bool {
    !matches!(whose(p), Owner::Nobody)
}

/// Stops the agent process `p` left running (as `settle` does); whether it is gone.
pub fn stop_left(p: AgentProcess) -> bool {
    match whose(p) {
        Owner::Nobody => true,
        Owner::Unknown => false,
        Owner::Ours => stop(p),
    }
}

enum Owner {
    /// No process of that run is left (or the number now names someone else's process).
    Nobody,
    /// Some process of the recorded group is alive and is the one recorded.
    Ours,
    /// The group exists but cannot be told apart from a stranger's.
    Unknown,
}

fn whose(p: AgentProcess) -> Owner {
    if !group_exists(p.pgid) {
        return Owner::Nobody;
    }
    match (start_time(p.pgid), p.start_time) {
        (Some(now), Some(then)) if now == then => Owner::Ours,
        // The leader's number belongs to another process: our group cannot exist any more.
        (Some(_), _) => Owner::Nobody,
        // The leader is gone but its group lives on: nobody else can have that number yet.
        (None, _) if has_start_times() => Owner::Ours,
        (None, _) => Owner::Unknown,
    }
}

/// SIGTERM to the group, SIGKILL 5 s later; true once the leader no longer runs (gone, or a zombie that
/// whoever inherited it has not reaped yet). What the leader left in its group is killed, as long as the
/// group is still ours.
fn stop(p: AgentProcess) -> bool {
    let leader_done = || !running(p.pgid) || start_time(p.pgid) != p.start_time;
    stop_group(p.pgid, Stop::Term);
    let mut done = wait_until(Duration::from_secs(5), leader_done);
    if matches!(whose(p), Owner::Ours) {
        stop_group(p.pgid, Stop::Kill);
    }
    if !done {
        done = wait_until(Duration::from_secs(2), leader_done);
    }
    done
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
