//! The agent's pipes: the prompt written to its stdin, its stdout and stderr copied into the bounded run
//! log (and stdout searched for the session event, one bounded line at a time). Every thread here stops
//! when told, whoever still holds the other end of a pipe (a child that left the agent's process group),
//! so the end of a run never waits on one.

use super::logs::BoundedLog;
use crate::config::StdoutEvent;
use crate::platform::{OwnedPipe, Pipe};
use crate::util::lines::{parse_object, LineReader};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A stdout line longer than this is never the session event: it is copied to the log, not held.
pub const MAX_EVENT_LINE: usize = 64 * 1024;

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

    fn pipe(&self, from: impl Into<OwnedPipe>) -> Pipe {
        Pipe::reader(from, self.stop.clone())
    }

    /// Writes `prompt` to the agent's stdin, then closes it; an agent that exits unread is fine.
    pub fn feed(&mut self, stdin: std::process::ChildStdin, prompt: Vec<u8>) {
        let pipe = Pipe::writer(stdin, self.stop.clone());
        self.threads
            .push(std::thread::spawn(move || pipe.write_all(&prompt)));
    }

    /// Copies a stream to the log.
    pub fn copy(&mut self, from: impl Into<OwnedPipe>) {
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
    pub fn watch(&mut self, from: impl Into<OwnedPipe>, ev: StdoutEvent, tx: mpsc::Sender<String>) {
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
        for t in &self.threads {
            crate::platform::unblock(t);
        }
        for t in self.threads {
            let _ = t.join();
        }
        if let Ok(mut log) = self.log.lock() {
            log.finish();
        }
        ended < self.readers
    }
}
