//! Bounded resources: a sweep over more repos than it may open files, an entry another process changes
//! between a sweep's decide and act passes, and one very long turn.

use crate::common::*;
use crate::live::{claude_line, live_world, Live};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("almanac")
}

/// The entries of a repo's ledger (empty when it has none yet).
fn entries(repo: &Path) -> serde_json::Map<String, serde_json::Value> {
    std::fs::read(repo.join(".almanac/runs/capture-ledger.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["entries"].as_object().cloned())
        .unwrap_or_default()
}

#[test]
fn a_sweep_over_more_repos_than_open_files_allowed_starts_runs_in_every_repo() {
    let l = live_world(3);
    let n = 100;
    let repos: Vec<PathBuf> = (0..n).map(|i| l.w.repo(&format!("work/r{i:03}"))).collect();
    for (i, repo) in repos.iter().enumerate() {
        let sid = format!("5e551011-aaaa-4bbb-8ccc-{i:012}");
        let t =
            l.w.home()
                .join(format!(".claude/projects/-work-r{i:03}/{sid}.jsonl"));
        write_aged(&t, claude_line(&sid, repo, "hello").as_bytes(), HOURS_2);
    }
    // 64 open files: fewer than the repos (macOS allows 256 by default, for 250 repos).
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" capture sweep --json --quiet 0m --max-runs 1000")
        .arg(bin())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", l.w.home())
        .env("ALMANAC_HOME", l.w.almanac_home())
        .env("FAKE_DIR", &l.fake)
        .current_dir(l.w.root())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !stdout.contains("Too many open files") && !stderr.contains("Too many open files"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["summary"];
    assert_eq!(items(s, "needsAttention").len(), 0, "{s}");
    let started = items(s, "started");
    assert_eq!(started.len(), n, "{s}");
    // Every repo's worker runs its capture.
    let start = Instant::now();
    for repo in &repos {
        loop {
            let e = entries(repo);
            if e.len() == 1 && e.values().all(|e| e["status"] == "done") {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(240),
                "{}: {e:?}",
                repo.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_eq!(l.calls().len(), n);
}

/// A live sweep of `home` stopped between its decide and act passes (debug builds' fault point) until
/// `release` is called; returns its JSON output.
struct Paused {
    child: std::process::Child,
    gate: PathBuf,
}

impl Paused {
    fn start(l: &Live, home: &Path) -> Paused {
        let gate = l.w.root().join("pause-gate");
        std::fs::write(&gate, b"").unwrap();
        let child = std::process::Command::new(bin())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", l.w.home())
            .env("ALMANAC_HOME", home)
            .env("FAKE_DIR", &l.fake)
            .env("ALMANAC_FAULT", "pause-before-act")
            .env("ALMANAC_FAULT_FILE", &gate)
            .current_dir(l.w.root())
            .args(["capture", "sweep", "--json", "--quiet", "0m"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let reached = l.w.root().join("pause-gate.reached");
        let start = Instant::now();
        while !reached.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the sweep never paused"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Paused { child, gate }
    }

    fn release(self) -> serde_json::Value {
        std::fs::remove_file(&self.gate).unwrap();
        let out = self.child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["summary"].clone()
    }
}

#[test]
fn another_homes_sweep_capturing_between_the_passes_is_not_captured_twice() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let second_home = l.w.root().join("home/.codealmanac-second");
    std::fs::create_dir_all(&second_home).unwrap();
    std::fs::copy(
        l.w.almanac_home().join("config.toml"),
        second_home.join("config.toml"),
    )
    .unwrap();

    // Our sweep has decided (a first capture of lines 1-3) and holds no lock while paused...
    let paused = Paused::start(&l, &l.w.almanac_home());
    // ...so the other home's sweep is not kept waiting: it captures the transcript.
    let mut other = l.w.almanac();
    other
        .env("ALMANAC_HOME", &second_home)
        .env("FAKE_DIR", &l.fake)
        .args(["capture", "sweep", "--json", "--quiet", "0m"]);
    let other = json_ok(&mut other)["summary"].clone();
    assert_eq!(items(&other, "started").len(), 1, "{other}");
    l.wait_idle();
    assert_eq!(l.entry()["status"], "done");

    // Ours finds the entry changed: no second run.
    let s = paused.release();
    assert_eq!(items(&s, "started").len(), 0, "{s}");
    let skipped = find_by_path(&s, "skipped", &l.transcript).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "changed-during-sweep", "{s}");
    assert_eq!(s["eligible"], 0, "{s}");
    assert_eq!(s["totals"]["runs"], 0, "{s}");
    l.wait_idle();
    assert_eq!(l.calls().len(), 1, "captured once: {:?}", l.calls());
    assert_eq!(l.runs().len(), 1, "no run record was queued for nothing");
    assert_eq!(l.entry()["lastCapturedLine"], 3);
}

#[test]
fn a_reset_between_the_passes_wins_over_the_sweep() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    assert_eq!(items(&l.summary(), "started").len(), 1);
    let mut text = std::fs::read_to_string(&l.transcript).unwrap();
    text.push_str(&l.lines(2..4));
    write_aged(&l.transcript, text.as_bytes(), HOURS_2);

    let paused = Paused::start(&l, &l.w.almanac_home());
    let out =
        l.w.almanac()
            .args(["capture", "reset"])
            .arg(&l.transcript)
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = paused.release();
    assert_eq!(items(&s, "started").len(), 0, "{s}");
    let skipped = find_by_path(&s, "skipped", &l.transcript).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "changed-during-sweep", "{s}");
    l.wait_idle();
    assert_eq!(l.calls().len(), 1);

    // The next sweep does what the reset asked: everything from line 1.
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["fromLine"], 1);
    assert_eq!(started[0]["toLine"], 4);
}

/// One turn of 100,000 assistant blocks (each written twice, as streaming replays do, 200 bytes of text
/// each), read as `capture turns` reads it: the text is the first blocks, cut at 4 KiB, the tool used at
/// the very end is seen, and memory does not grow with the turn.
#[test]
fn one_turn_of_a_hundred_thousand_assistant_blocks_is_read_in_bounded_memory() {
    let w = World::new();
    let repo = w.repo("work/app");
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000009";
    let mut text = claude_line(sid, &repo, "do everything");
    let filler = "x".repeat(190);
    let block = |i: usize| format!("part {i:06} {filler}");
    for i in 0..100_000 {
        let n = i / 2;
        text.push_str(&format!(
            "{{\"type\":\"assistant\",\"sessionId\":\"{sid}\",\"message\":{{\"id\":\"msg_{n}\",\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}]}}}}\n",
            block(n)
        ));
    }
    text.push_str(&format!(
        "{{\"type\":\"assistant\",\"sessionId\":\"{sid}\",\"message\":{{\"id\":\"msg_last\",\"role\":\"assistant\",\"content\":[{{\"type\":\"tool_use\",\"name\":\"Bash\",\"input\":{{}}}}]}}}}\n"
    ));
    let t = w
        .home()
        .join(format!(".claude/projects/-work-app/{sid}.jsonl"));
    write_aged(&t, text.as_bytes(), HOURS_2);

    let turns_of = |t: &std::path::Path| {
        let mut cmd = std::process::Command::new(bin());
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", w.home())
            .env("ALMANAC_HOME", w.almanac_home())
            .current_dir(w.root())
            .args(["capture", "turns", "--json"])
            .arg(t);
        output_and_peak_rss(cmd)
    };
    // What the binary and its rules take, on a transcript of one prompt.
    let small = w.home().join(".claude/projects/-work-app/small.jsonl");
    write_aged(
        &small,
        format!("{{\"type\":\"user\",\"sessionId\":\"{sid}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n").as_bytes(),
        HOURS_2,
    );
    let (_, _, base_kib) = turns_of(&small);
    let (out, code, peak_kib) = turns_of(&t);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["userTurns"], 1, "{v}");
    assert_eq!(v["totalTurns"], 1, "{v}");
    let records = v["records"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r["user"], "do everything");
    assert_eq!(r["truncated"], serde_json::json!(["assistant"]));
    assert_eq!(r["tools"], serde_json::json!(["Bash"]));
    let whole: Vec<String> = (0..25).map(block).collect();
    let expected = &whole.join("\n\n")[..4096];
    assert_eq!(r["assistant"].as_str().unwrap(), expected);
    // 10 MB of distinct block text held until the turn ends would show over what the binary and its
    // rules take (measured on the one-prompt transcript: it grows with the rule sets that ship); the
    // reader keeps 4 KiB of it.
    if let (Some(kib), Some(base)) = (peak_kib, base_kib) {
        assert!(
            kib < base + 8 * 1024,
            "peak RSS {kib} KiB, {base} KiB on one prompt"
        );
    }
}
