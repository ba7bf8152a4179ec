//! At most `[capture] max_parallel_agents` capture agents run at a time across all repos: a worker takes
//! one of N slot locks (`$ALMANAC_HOME/state/agent-slots/slot-<i>.lock`) before it picks a run and lets
//! go of it when the run is recorded; with every slot taken it waits. Waiting happens before a run is
//! marked running, so it never counts against the run's timeout, and the worker holds its worker lock
//! meanwhile, so no sweep takes it for lost or starts another worker in the repo. Slots are OS file locks:
//! a worker that dies frees its slot.

use crate::util::lock::FileLock;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn slots_dir(almanac_home: &Path) -> PathBuf {
    almanac_home.join("state").join("agent-slots")
}

/// How often a waiting worker looks for a free slot.
const POLL: Duration = Duration::from_millis(200);

/// Waits for a free slot of `max` and returns it (held until dropped). `Err` when the slot files cannot
/// be opened at all (the caller then runs without one rather than never).
pub fn acquire(almanac_home: &Path, max: u32, note: impl Fn(&str)) -> std::io::Result<FileLock> {
    let dir = slots_dir(almanac_home);
    crate::util::atomic::private_dir(&dir)?;
    let mut told = false;
    loop {
        let (mut errors, mut last_err) = (0, None);
        for i in 0..max.max(1) {
            match FileLock::try_acquire(&dir.join(format!("slot-{i}.lock"))) {
                Ok(Ok(lock)) => {
                    if told {
                        note("an agent slot is free; going on");
                    }
                    return Ok(lock);
                }
                Ok(Err(_)) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_taken_once_until_dropped() {
        let home = tempfile::tempdir().unwrap();
        let a = acquire(home.path(), 2, |_| {}).unwrap();
        let b = acquire(home.path(), 2, |_| {}).unwrap();
        assert_ne!(a.path, b.path);
        drop(a);
        let c = acquire(home.path(), 2, |_| {}).unwrap();
        assert_ne!(c.path, b.path);
    }
}
