//! `ALMANAC_TRACE=timing` prints how long each phase of a command took, with the process's peak and
//! current memory, to stderr (the sweep, `capture sessions`).

use std::time::Instant;

/// Marks phases when tracing is on; does nothing otherwise.
pub struct Trace {
    start: Instant,
    on: bool,
}

impl Trace {
    pub fn new(start: Instant) -> Trace {
        Trace {
            start,
            on: std::env::var("ALMANAC_TRACE").is_ok_and(|v| v.split(',').any(|t| t == "timing")),
        }
    }

    pub fn mark(&self, phase: &str) {
        if self.on {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let field = |name: &str| {
                let line = status.lines().find(|l| l.starts_with(name));
                line.map(|l| l[name.len()..].trim().to_string())
                    .unwrap_or_default()
            };
            eprintln!(
                "almanac: trace: {:>8.1} ms  peak {:>10}  now {:>10}  {phase}",
                self.start.elapsed().as_secs_f64() * 1000.0,
                field("VmHWM:"),
                field("VmRSS:"),
            );
        }
    }
}
