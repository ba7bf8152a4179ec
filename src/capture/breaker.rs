//! The circuit breaker: when a sweep's runs fail this many times in a row (across the repos' workers),
//! its remaining queued runs are cancelled instead of spending more agent quota on failures. State lives
//! in `$ALMANAC_HOME/state/breaker.json`, written by the sweep that queues runs and updated by workers
//! under `state/breaker.lock`.

use crate::util::lock::FileLock;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Breaker {
    pub sweep_id: String,
    pub threshold: u32,
    pub failures_in_a_row: u32,
    pub tripped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripped_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

pub fn path(almanac_home: &Path) -> PathBuf {
    almanac_home.join("state").join("breaker.json")
}

pub fn read(almanac_home: &Path) -> Option<Breaker> {
    serde_json::from_slice(&std::fs::read(path(almanac_home)).ok()?).ok()
}

/// A new sweep that queues runs starts a new count.
pub fn start(almanac_home: &Path, sweep_id: &str, threshold: u32) -> std::io::Result<()> {
    let _g = FileLock::acquire(&almanac_home.join("state").join("breaker.lock"))?;
    let b = Breaker {
        sweep_id: sweep_id.to_string(),
        threshold,
        failures_in_a_row: 0,
        tripped: false,
        tripped_at: None,
        reason: None,
    };
    crate::util::atomic::write_json_atomic(&path(almanac_home), &b)
}

/// Whether the breaker stops this sweep's runs.
pub fn tripped(almanac_home: &Path, sweep_id: Option<&str>) -> Option<Breaker> {
    let b = read(almanac_home)?;
    (b.tripped && Some(b.sweep_id.as_str()) == sweep_id).then_some(b)
}

/// Counts one finished run of `sweep_id`: a failure adds one, a success resets the count.
pub fn record(almanac_home: &Path, sweep_id: Option<&str>, failed: bool) {
    let Some(sweep_id) = sweep_id else { return };
    let Ok(_g) = FileLock::acquire(&almanac_home.join("state").join("breaker.lock")) else {
        return;
    };
    let Some(mut b) = read(almanac_home) else {
        return;
    };
    if b.sweep_id != sweep_id || b.tripped {
        return;
    }
    if failed {
        b.failures_in_a_row += 1;
        if b.failures_in_a_row >= b.threshold {
            b.tripped = true;
            b.tripped_at = Some(crate::policy::iso(chrono::Utc::now()));
            b.reason = Some(format!(
                "{} capture runs failed in a row; the sweep's remaining runs were cancelled (see `almanac capture status`)",
                b.failures_in_a_row
            ));
        }
    } else {
        b.failures_in_a_row = 0;
    }
    let _ = crate::util::atomic::write_json_atomic(&path(almanac_home), &b);
}
