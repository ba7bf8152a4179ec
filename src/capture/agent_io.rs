//! The agent's pipes: the prompt written to its stdin, its stdout and stderr copied into the bounded run
//! log (and stdout searched for the session event, one bounded line at a time). Every thread here stops
//! when told, whoever still holds the other end of a pipe (a child that left the agent's process group),
//! so the end of a run never waits on one. And the agent's descendants that left its group, found after
//! the run because the worker is their subreaper.

use super::logs::BoundedLog;
use crate::config::StdoutEvent;
use crate::util::lines::{parse_object, LineReader};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A stdout line longer than this is never the session event: it is copied to the log, not held.
pub const MAX_EVENT_LINE: usize = 64 * 1024;

/// How often a blocked pipe thread looks whether it was told to stop.
const TICK_MS: i32 = 100;

/// One end of a pipe, read or written in ticks so that a stop request is seen.
struct Pipe {
    fd: OwnedFd,
    stop: Arc<AtomicBool>,
}

impl Pipe {
    /// Waits until `events` are ready on the fd; false once told to stop.
    fn ready(&self, events: i16) -> bool {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events,
                revents: 0,
            };
            if unsafe { libc::poll(&mut p, 1, TICK_MS) } != 0 {
                return true;
            }
        }
    }
}

impl Read for Pipe {
    /// End of file when the writers are gone or when told to stop.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.ready(libc::POLLIN) {
            return Ok(0);
        }
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Copies all it reads into the run log.
struct Tee {
    pipe: Pipe,
    log: Arc<Mutex<BoundedLog>>,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.pipe.read(buf)?;
        if let Ok(mut log) = self.log.lock() {
            log.write(&buf[..n]);
        }
        Ok(n)
    }
}

/// The threads serving one agent's pipes.
pub struct Pipes {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
    done_tx: mpsc::Sender<()>,
    /// Threads that end by themselves at end of file (the stdin writer ends when it is done).
    readers: usize,
    pub log: Arc<Mutex<BoundedLog>>,
}

impl Pipes {
    pub fn new(log: BoundedLog) -> Pipes {
        let (done_tx, done) = mpsc::channel();
        Pipes {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            done,
            done_tx,
            readers: 0,
            log: Arc::new(Mutex::new(log)),
        }
    }

    fn pipe(&self, fd: impl Into<OwnedFd>) -> Pipe {
        Pipe {
            fd: fd.into(),
            stop: self.stop.clone(),
        }
    }

    /// Writes `prompt` to the agent's stdin, then closes it; an agent that exits unread is fine.
    pub fn feed(&mut self, stdin: std::process::ChildStdin, prompt: Vec<u8>) {
        let pipe = self.pipe(stdin);
        unsafe {
            let fd = pipe.fd.as_raw_fd();
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        self.threads.push(std::thread::spawn(move || {
            let mut rest = &prompt[..];
            while !rest.is_empty() && pipe.ready(libc::POLLOUT) {
                let n =
                    unsafe { libc::write(pipe.fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
                match n {
                    n if n > 0 => rest = &rest[n as usize..],
                    _ if std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::WouldBlock => {}
                    _ if std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::Interrupted => {}
                    _ => break,
                }
            }
        }));
    }

    /// Copies a stream to the log.
    pub fn copy(&mut self, from: impl Into<OwnedFd>) {
        let mut tee = Tee {
            pipe: self.pipe(from),
            log: self.log.clone(),
        };
        let done = self.done_tx.clone();
        self.readers += 1;
        self.threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while matches!(tee.read(&mut buf), Ok(n) if n > 0) {}
            let _ = done.send(());
        }));
    }

    /// Copies stdout to the log and sends the `field` of the first JSON line whose `type` is `event`.
    pub fn watch(&mut self, from: impl Into<OwnedFd>, ev: StdoutEvent, tx: mpsc::Sender<String>) {
        let tee = Tee {
            pipe: self.pipe(from),
            log: self.log.clone(),
        };
        let done = self.done_tx.clone();
        self.readers += 1;
        self.threads.push(std::thread::spawn(move || {
            let mut lines = LineReader::with_max_line(tee, MAX_EVENT_LINE);
            let mut sent = false;
            while let Ok(Some(line)) = lines.next_line() {
                if sent || line.oversized {
                    continue;
                }
                let id = parse_object(line.bytes).and_then(|v| {
                    (v.get("type")?.as_str()? == ev.event)
                        .then(|| Some(v.get(&ev.field)?.as_str()?.to_string()))?
                });
                if let Some(id) = id {
                    sent = tx.send(id).is_ok();
                }
            }
            let _ = done.send(());
        }));
    }

    /// Lets the readers reach end of file for at most `grace`, then stops every thread and writes the
    /// log's tail. Returns whether a pipe was still open (held by a process outside the agent's group).
    pub fn finish(self, grace: Duration) -> bool {
        let until = Instant::now() + grace;
        let mut ended = 0;
        while ended < self.readers {
            match self
                .done
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(()) => ended += 1,
                Err(_) => break,
            }
        }
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        if let Ok(mut log) = self.log.lock() {
            log.finish();
        }
        ended < self.readers
    }
}

/// Makes this process the subreaper of its descendants (Linux), so that a child the agent left behind
/// in a group of its own becomes ours when the agent exits, and can be found and reported.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// One process: pid, parent, process group, state and command name, from /proc.
pub struct Proc {
    pub pid: u32,
    pub pgid: u32,
    pub state: char,
    pub comm: String,
}

fn proc_stat(pid: u32) -> Option<(u32, Proc)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = s.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    Some((
        ppid,
        Proc {
            pid,
            pgid: f.get(2)?.parse().ok()?,
            state: f.first()?.chars().next()?,
            comm,
        },
    ))
}

/// This process's children, with every descendant of theirs, from /proc (empty elsewhere).
pub fn descendants() -> Vec<Proc> {
    let me = std::process::id();
    let all: Vec<(u32, Proc)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .collect();
    let mut parents = vec![me];
    let mut out = Vec::new();
    let mut taken = vec![false; all.len()];
    while let Some(p) = parents.pop() {
        for (i, (ppid, proc)) in all.iter().enumerate() {
            if *ppid == p && !taken[i] {
                taken[i] = true;
                parents.push(proc.pid);
                out.push(Proc {
                    pid: proc.pid,
                    pgid: proc.pgid,
                    state: proc.state,
                    comm: proc.comm.clone(),
                });
            }
        }
    }
    out
}

/// Collects children of ours that exited (the agent's, reparented to us): never the running ones.
pub fn reap_zombies(except: Option<u32>) {
    for p in descendants() {
        if p.state == 'Z' && Some(p.pid) != except {
            unsafe {
                libc::waitpid(p.pid as i32, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}
