//! A repository is cloned from strangers: anything under `.almanac/` (including `runs/`, which a
//! `.gitignore` does not keep out of a commit) may be theirs. These tests plant what a stranger could
//! commit and check that almanac runs nothing of theirs, and writes, chmods, deletes or appends nothing
//! outside the repo's own `runs/` directory.

use crate::common::*;
use crate::live::{live_world, Live};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SID: &str = "5e551011-aaaa-4bbb-8ccc-000000000001";
const QUEUED: &str = "run_20200101T000000000Z_aaaaaaaa";
const ORPHAN: &str = "run_20200101T000000000Z_bbbbbbbb";
const DONE: &str = "run_20200101T000000000Z_cccccccc";

/// A run record as a stranger would commit it: naming files outside `runs/` as its prompt and log.
fn planted_record(l: &Live, id: &str, status: &str, victim: &Path) -> String {
    let mut v = serde_json::json!({
        "version": 1, "runId": id, "status": status,
        "repoRoot": l.repo.display().to_string(), "app": "claude", "sessionId": SID,
        "transcriptPath": l.transcript.display().to_string(),
        "fromLine": 1, "toLine": 1, "fromByte": 0, "toByte": 10, "prefixHash": "sha256:00",
        "agent": "fake", "createdAt": "2020-01-01T00:00:00.000Z",
        "promptPath": victim.join("secret.txt").display().to_string(),
        "logPath": victim.join("bashrc").display().to_string(),
    });
    if status == "done" {
        v["finishedAt"] = "2020-01-01T00:01:00.000Z".into();
    }
    serde_json::to_string_pretty(&v).unwrap()
}

/// A ledger entry for the user's transcript that waits for the planted run.
fn planted_ledger() -> String {
    serde_json::json!({
        "version": 1, "updatedAt": "2020-01-01T00:00:00.000Z",
        "entries": {format!("claude:{SID}"): {
            "path": "/nowhere/planted.jsonl", "app": "claude", "sessionId": SID, "status": "pending",
            "lastCapturedSize": 0, "lastCapturedLine": 0,
            "lastCapturedPrefixHash": "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "pendingRunId": QUEUED, "pendingToSize": 10, "pendingToLine": 1,
            "pendingPrefixHash": "sha256:00", "pendingStartedAt": "2020-01-01T00:00:00.000Z",
            "attempts": 0}}
    })
    .to_string()
}

fn status_json(l: &Live) -> serde_json::Value {
    let mut cmd = l.w.almanac();
    cmd.args(["capture", "status", "--json", "--repo"])
        .arg(&l.repo);
    json_ok(&mut cmd)
}

/// Waits until the repo's worker has left (a planted queued record stays queued forever).
fn wait_worker_gone(l: &Live) {
    let start = Instant::now();
    while status_json(l)["workerAlive"] == true {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "worker never left"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    tree(dir)
        .into_iter()
        .map(|rel| {
            let p = dir.join(&rel);
            let m = std::fs::symlink_metadata(&p).unwrap();
            let bytes = if m.is_file() {
                std::fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            (rel, bytes, m.permissions().mode())
        })
        .collect()
}

fn victim_dir(l: &Live) -> PathBuf {
    let victim = l.w.root().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("secret.txt"), "TOP SECRET\n").unwrap();
    std::fs::write(victim.join("bashrc"), "# the user's shell rc\n").unwrap();
    victim
}

#[test]
fn a_planted_run_record_is_never_run_modified_or_pruned_and_is_reported_as_foreign() {
    let l = live_world(3);
    let victim = victim_dir(&l);
    let runs = l.repo.join(".almanac/runs");
    for (id, status) in [(QUEUED, "queued"), (ORPHAN, "queued"), (DONE, "done")] {
        std::fs::write(
            runs.join(format!("{id}.json")),
            planted_record(&l, id, status, &victim),
        )
        .unwrap();
    }
    std::fs::write(runs.join("capture-ledger.json"), planted_ledger()).unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let planted: Vec<(String, Vec<u8>)> = [QUEUED, ORPHAN, DONE]
        .iter()
        .map(|id| {
            let p = runs.join(format!("{id}.json"));
            (id.to_string(), std::fs::read(p).unwrap())
        })
        .collect();
    let victim_before = snapshot(&victim);

    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    // The user's own sweep still captures the transcript, from its start.
    let start = Instant::now();
    while l.entry()["status"] != "done" || l.entry()["lastCapturedLine"] != 3 {
        let calls = l.calls();
        assert!(
            !calls.iter().any(|c| c.contains(QUEUED)),
            "a planted run was executed: {calls:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the transcript was never captured: {}",
            l.entry()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_worker_gone(&l);

    let calls = l.calls();
    assert_eq!(calls.len(), 1, "only the user's own run: {calls:?}");
    for id in [QUEUED, ORPHAN, DONE] {
        assert!(
            !calls[0].contains(id),
            "a planted run was executed: {calls:?}"
        );
    }
    assert_eq!(
        snapshot(&victim),
        victim_before,
        "files the records name are untouched"
    );
    assert_eq!(l.entry()["attempts"], 0, "the planted run spent no attempt");

    let prune =
        l.w.almanac()
            .args(["capture", "prune", "--older-than", "0s", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    assert!(prune.status.success());
    for (id, bytes) in &planted {
        let now = std::fs::read(runs.join(format!("{id}.json")))
            .unwrap_or_else(|_| panic!("{id} was deleted"));
        assert_eq!(&now, bytes, "{id} was modified");
    }

    let st = status_json(&l);
    let foreign: Vec<&str> = st["foreign"]
        .as_array()
        .unwrap_or_else(|| panic!("status lists foreign records: {st}"))
        .iter()
        .map(|f| f["runId"].as_str().unwrap())
        .collect();
    assert_eq!(foreign, [QUEUED, ORPHAN, DONE], "{st}");
    let text =
        l.w.almanac()
            .args(["capture", "status", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("foreign") && text.contains(ORPHAN), "{text}");
    let wlog = std::fs::read_to_string(runs.join("worker.log")).unwrap();
    assert!(
        wlog.contains("foreign") && wlog.contains(QUEUED),
        "the worker reports what it will not run: {wlog}"
    );
    let doctor = l.w.almanac().args(["doctor"]).output().unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor.contains("foreign") && doctor.contains(ORPHAN),
        "{doctor}"
    );
}

fn reason_of_repo(s: &serde_json::Value, repo: &Path) -> Vec<String> {
    items(s, "needsAttention")
        .into_iter()
        .filter(|i| i["repoRoot"] == repo.display().to_string().as_str())
        .map(|i| i["reason"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_symlinked_runs_dir_is_refused_and_nothing_in_its_target_is_touched() {
    let l = live_world(3);
    let runs = l.repo.join(".almanac/runs");
    std::fs::remove_dir(&runs).unwrap();
    let elsewhere = l.w.root().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(elsewhere.join("notes.txt"), "mine\n").unwrap();
    // Looks like a temp file of an interrupted almanac write whose process is gone.
    std::fs::write(elsewhere.join(".data.json.tmp-4000000-abcd"), "keep\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &runs).unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let before = snapshot(&elsewhere);
    let mode_before = std::fs::metadata(&elsewhere).unwrap().permissions().mode();

    for dry in [true, false] {
        let mut cmd = l.w.almanac();
        cmd.env("FAKE_DIR", &l.fake)
            .args(["capture", "sweep", "--json", "--quiet", "0m"]);
        if dry {
            cmd.arg("--dry-run");
        }
        let s = json_ok(&mut cmd)["summary"].clone();
        assert_eq!(reason_of_repo(&s, &l.repo), ["runs-dir-unsafe"], "{s}");
        assert!(items(&s, "started").is_empty(), "{s}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(l.calls().is_empty(), "no agent ran");
    assert_eq!(snapshot(&elsewhere), before, "nothing written or deleted");
    assert_eq!(
        std::fs::metadata(&elsewhere).unwrap().permissions().mode(),
        mode_before,
        "not chmod'ed"
    );
    assert!(std::fs::symlink_metadata(&runs)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_symlinked_worker_log_gets_nothing_appended() {
    let l = live_world(3);
    let runs = l.repo.join(".almanac/runs");
    let target = l.w.root().join("victim.log");
    std::fs::write(&target, "original\n").unwrap();
    std::os::unix::fs::symlink(&target, runs.join("worker.log")).unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);

    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    let s = &v["summary"];
    assert_eq!(reason_of_repo(s, &l.repo), ["runs-dir-unsafe"], "{s}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(l.calls().is_empty(), "no agent ran");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original\n");
}

#[test]
fn a_symlinked_lock_file_is_never_truncated() {
    let l = live_world(3);
    let runs = l.repo.join(".almanac/runs");
    let target = l.w.root().join("victim.rc");
    std::fs::write(&target, "export IMPORTANT=1\n").unwrap();
    std::os::unix::fs::symlink(&target, runs.join("ledger.lock")).unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);

    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        reason_of_repo(&v["summary"], &l.repo),
        ["runs-dir-unsafe"],
        "{v}"
    );
    let reset =
        l.w.almanac()
            .args(["capture", "prune", "--older-than", "0s", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    assert!(!reset.status.success(), "prune refuses the unsafe store");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "export IMPORTANT=1\n"
    );
}
