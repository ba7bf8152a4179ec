//! Bounded logs: a run's log keeps at most `[capture] max_log_bytes` of the agent's output (the first
//! half and the last half, with a line saying how much was cut between them), and `runs/worker.log`
//! moves to `worker.log.1` once it passes `WORKER_LOG_MAX`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The size past which `worker.log` is rotated to `worker.log.1` (the previous one is replaced).
pub const WORKER_LOG_MAX: u64 = 1 << 20;

/// The agent's output on its way to the run log: the head is written as it comes, the tail is held in
/// memory (at most half the limit) and written by `finish`, after a marker when anything was cut.
pub struct BoundedLog {
    file: File,
    head_left: usize,
    tail: VecDeque<u8>,
    tail_max: usize,
    cut: u64,
}

impl BoundedLog {
    pub fn new(file: File, max_bytes: u64) -> BoundedLog {
        let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let head = max / 2;
        BoundedLog {
            file,
            head_left: head,
            tail: VecDeque::new(),
            tail_max: max - head,
            cut: 0,
        }
    }

    pub fn write(&mut self, mut bytes: &[u8]) {
        if self.head_left > 0 {
            let n = self.head_left.min(bytes.len());
            let _ = self.file.write_all(&bytes[..n]);
            self.head_left -= n;
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_max {
            self.cut += (self.tail.len() + bytes.len() - self.tail_max) as u64;
            self.tail.clear();
            bytes = &bytes[bytes.len() - self.tail_max..];
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.tail_max);
        self.tail.drain(..over);
        self.cut += over as u64;
        self.tail.extend(bytes);
    }

    /// Writes the held tail (after the marker, when bytes were cut). Later writes start a new tail.
    pub fn finish(&mut self) {
        if self.cut > 0 {
            let _ = write!(
                self.file,
                "\n[almanac: {} bytes of agent output cut here; [capture] max_log_bytes keeps the first and the last {} bytes]\n",
                self.cut, self.tail_max
            );
            self.cut = 0;
        }
        let (a, b) = self.tail.as_slices();
        let _ = self.file.write_all(a);
        let _ = self.file.write_all(b);
        self.tail.clear();
    }
}

/// Moves `path` to `<path>.1` when it is a regular file larger than `max`. A rename never follows a
/// link: a symbolic link at `<path>.1` is replaced, not written through. Returns whether it moved.
pub fn rotate(path: &Path, max: u64) -> bool {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !m.is_file() || m.len() <= max {
        return false;
    }
    let mut to = path.as_os_str().to_owned();
    to.push(".1");
    std::fs::rename(path, to).is_ok()
}

/// The worker's own log, between runs: when fd 2 is `runs/worker.log` (as the sweep starts the worker)
/// and it passed `WORKER_LOG_MAX`, it moves to `worker.log.1` and a fresh `worker.log` takes fds 1 and 2.
pub fn rotate_worker_log(repo: &Path) {
    let path = crate::ledger::worker_log_path(repo);
    let Ok(m) = std::fs::symlink_metadata(&path) else {
        return;
    };
    if crate::platform::stderr_id() != Some(crate::platform::file_id(&path, &m))
        || !rotate(&path, WORKER_LOG_MAX)
    {
        return;
    }
    if let Ok(f) = crate::util::atomic::open_append_private(&path) {
        crate::platform::redirect_output(&f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_and_says_how_much_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut log = BoundedLog::new(File::create(&p).unwrap(), 10);
        log.write(b"abc");
        log.write(b"defghij");
        log.write(b"klmnopqrstuvwxyz");
        log.write(b"0");
        log.finish();
        let got = std::fs::read_to_string(&p).unwrap();
        assert!(got.starts_with("abcde\n[almanac: 17 bytes"), "{got}");
        assert!(got.ends_with("]\nwxyz0"), "{got}");
        let mut log = BoundedLog::new(File::create(&p).unwrap(), 10);
        log.write(b"short");
        log.write(b"er");
        log.finish();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "shorter");
    }
}
