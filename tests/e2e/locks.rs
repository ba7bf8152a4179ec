//! Repo locks shared by several almanac setups on one machine (two `ALMANAC_HOME`s, a test home and the
//! real one): a sweep never waits without bound for a repo another process holds, so sweeps cannot
//! deadlock on each other's repos.

use crate::common::*;
use crate::live::{claude_line, live_world};
use std::io::Read;
use std::time::{Duration, Instant};

/// Runs `cmd` and returns (exit code, stdout) if it ends within `limit`; None (killed) otherwise.
fn run_within(mut cmd: std::process::Command, limit: Duration) -> Option<(i32, Vec<u8>)> {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = Vec::new();
            child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
            return Some((status.code().unwrap_or(-1), out));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_repo_another_almanac_holds_is_reported_busy_and_the_other_repos_are_captured() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    // A second repo whose ledger lock another almanac setup holds (and keeps, as a sweep of another
    // ALMANAC_HOME blocked on one of our repos would).
    let other = l.w.repo("work/other");
    let other_transcript =
        l.w.home()
            .join(".claude/projects/-work-other/5e551011-aaaa-4bbb-8ccc-000000000002.jsonl");
    let line = claude_line("5e551011-aaaa-4bbb-8ccc-000000000002", &other, "hello");
    write_aged(&other_transcript, line.as_bytes(), HOURS_2);
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(other.join(".almanac/runs/ledger.lock"))
        .unwrap();
    held.lock().unwrap();

    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", l.w.home())
        .env("ALMANAC_HOME", l.w.almanac_home())
        .env("FAKE_DIR", &l.fake)
        .current_dir(l.w.root())
        .args(["capture", "sweep", "--json", "--quiet", "0m"]);
    let (code, out) = run_within(cmd, Duration::from_secs(45))
        .expect("the sweep waits a bounded time for a held repo lock, then goes on");
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let s = &v["summary"];
    let busy: Vec<_> = items(s, "needsAttention")
        .into_iter()
        .filter(|i| i["reason"] == "ledger-busy")
        .collect();
    assert_eq!(busy.len(), 1, "{s}");
    assert_eq!(busy[0]["repoRoot"], other.display().to_string());
    assert!(
        busy[0]["detail"].as_str().unwrap().contains("next sweep"),
        "{s}"
    );
    let started = items(s, "started");
    assert_eq!(started.len(), 1, "the repo that was free is captured: {s}");
    assert_eq!(started[0]["repoRoot"], l.repo.display().to_string());
    assert!(
        !other.join(".almanac/runs/capture-ledger.json").exists(),
        "nothing was written in the busy repo"
    );
    l.wait_idle();

    // Released: the next sweep captures the other repo too.
    drop(held);
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["repoRoot"], other.display().to_string());
}

#[test]
fn two_almanac_homes_sweeping_the_same_repos_at_once_both_finish() {
    let l = live_world(3);
    let repos: Vec<_> = (0..6).map(|i| l.w.repo(&format!("work/r{i}"))).collect();
    let second_home = l.w.root().join("home/.codealmanac-second");
    std::fs::create_dir_all(&second_home).unwrap();
    std::fs::copy(
        l.w.almanac_home().join("config.toml"),
        second_home.join("config.toml"),
    )
    .unwrap();
    for round in 0..4 {
        for (i, repo) in repos.iter().enumerate() {
            let sid = format!("5e551011-aaaa-4bbb-8ccc-00000000010{i}");
            let t =
                l.w.home()
                    .join(format!(".claude/projects/-work-r{i}/{sid}.jsonl"));
            let mut text = std::fs::read_to_string(&t).unwrap_or_default();
            text.push_str(&claude_line(&sid, repo, &format!("round {round}")));
            write_aged(&t, text.as_bytes(), HOURS_2);
        }
        let sweeps: Vec<_> = [l.w.almanac_home(), second_home.clone()]
            .into_iter()
            .map(|home| {
                let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"));
                cmd.env_clear()
                    .env("PATH", std::env::var("PATH").unwrap_or_default())
                    .env("HOME", l.w.home())
                    .env("ALMANAC_HOME", home)
                    .env("FAKE_DIR", &l.fake)
                    .current_dir(l.w.root())
                    .args(["capture", "sweep", "--json", "--quiet", "0m"]);
                std::thread::spawn(move || run_within(cmd, Duration::from_secs(60)))
            })
            .collect();
        for s in sweeps {
            let (code, _) = s.join().unwrap().expect("no sweep hangs");
            assert_eq!(code, 0);
        }
    }
}
