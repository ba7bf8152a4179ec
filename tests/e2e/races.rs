//! The races the seeded soak (`scripts/soak.py`) found, each made deterministic: a worker paused at a
//! fault point (debug builds), an agent that sleeps, a worker killed at a chosen moment.

use crate::common::*;
use crate::live::{claude_line, live_world, Live};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn worker_log(repo: &Path) -> String {
    std::fs::read_to_string(repo.join(".almanac/runs/worker.log")).unwrap_or_default()
}

/// A sweep that reconciles a run its worker has just recorded is not a ledger someone replaced: the
/// worker records a run's outcome and its ledger entry under one hold of the repo lock, so no sweep gets
/// in between; no `ledger-overwritten` alarm, and nothing is written back.
#[test]
fn a_sweep_meeting_a_run_as_its_worker_records_it_raises_no_alarm() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let gate = l.w.root().join("gate");
    std::fs::write(&gate, b"").unwrap();
    // The worker (started by this sweep, with its environment) stops once the run's record is written.
    let mut first = l.w.almanac();
    first
        .env("FAKE_DIR", &l.fake)
        .env("ALMANAC_FAULT", "pause-run-recorded")
        .env("ALMANAC_FAULT_FILE", &gate)
        .args(["capture", "sweep", "--json", "--quiet", "0m"]);
    json_ok(&mut first);
    let reached = l.w.root().join("gate.reached");
    wait_for("the worker's pause", Duration::from_secs(30), || {
        reached.exists()
    });
    let run = &l.runs()[0];
    assert_eq!(run["status"], "done", "the record is written: {run}");
    // Another sweep meanwhile: it waits for the lock the worker holds...
    let second =
        l.w.almanac_process()
            .env("FAKE_DIR", &l.fake)
            .args(["capture", "sweep", "--json", "--quiet", "0m"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    std::fs::remove_file(&gate).unwrap();
    let out = second.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    l.wait_idle();
    // ...and finds the run settled, as does every sweep after.
    let s = l.summary();
    assert!(
        !items(&s, "needsAttention")
            .iter()
            .any(|i| i["reason"] == "ledger-overwritten"),
        "{s}"
    );
    let log = worker_log(&l.repo);
    assert!(!log.contains("deleted or replaced"), "{log}");
    assert_eq!(l.entry()["status"], "done");
    assert_eq!(l.entry()["lastCapturedLine"], 2);
    assert!(l.ledger().get("overwritten").is_none(), "{}", l.ledger());
}

/// An agent that notes how many agents run when it starts (itself, and any a dead worker left), then
/// works; the first one to run sleeps a minute.
const COUNTING_AGENT: &str = r#"#!/bin/sh
dir="$FAKE_DIR"
mkdir -p "$dir/active"
echo "$PWD" > "$dir/active/$$"
n=0
for f in "$dir/active"/*; do
  case "$(cat "/proc/$(basename "$f")/stat" 2>/dev/null)" in ""|*") Z "*) ;; *) n=$((n+1)) ;; esac
done
echo "$n $1" >> "$dir/counts.log"
if mkdir "$dir/first" 2>/dev/null; then echo $$ > "$dir/first/pid"; sleep 60; fi
mkdir -p .almanac/pages && echo "- captured" >> .almanac/pages/notes.md
"#;

/// Two repos, each a session to capture, one agent slot, the agent `script` and a 4 s timeout.
fn two_repos(script: &str) -> (Live, PathBuf) {
    let l = crate::wiki_only::custom_agent_world(script);
    let config = l.w.almanac_home().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "timeout = \"1m\"",
        "timeout = \"4s\"\nmax_parallel_agents = 1",
    );
    std::fs::write(&config, text).unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let other = l.w.repo("work/other");
    let id = "5e551011-aaaa-4bbb-8ccc-0000000000f2";
    write_aged(
        &l.w.home()
            .join(format!(".claude/projects/-work-other/{id}.jsonl")),
        claude_line(id, &other, "the other repo").as_bytes(),
        HOURS_2,
    );
    (l, other)
}

/// Processes whose command line holds every one of `parts`.
fn pids_of(parts: &[&str]) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            parts.iter().all(|p| cmd.contains(p))
        })
        .collect()
}

/// A worker killed while its agent runs lets go of its agent slot, but the agent runs on in a process
/// group of its own: it still counts against `max_parallel_agents` until it ends, and once past its
/// timeout the worker waiting for the slot stops it and goes on.
#[test]
fn an_agent_whose_worker_died_keeps_its_slot_until_its_timeout_stops_it() {
    let (l, other) = two_repos(COUNTING_AGENT);
    let s = l.sweep_args(&[]);
    assert_eq!(items(&s, "started").len(), 2, "{s}");
    let pid_file = l.fake.join("first/pid");
    wait_for("the first agent", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| !p.trim().is_empty())
    });
    let agent: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cwd = std::fs::read_link(format!("/proc/{agent}/cwd")).unwrap();
    let worker = pids_of(&["capture", "worker", &cwd.display().to_string()]);
    assert_eq!(worker.len(), 1, "{cwd:?}");
    let killed = Instant::now();
    unsafe { libc::kill(worker[0], libc::SIGKILL) };
    // The other repo's worker waits for the slot: its agent starts only once the first is gone.
    let counts = l.fake.join("counts.log");
    wait_for("the second agent", Duration::from_secs(30), || {
        std::fs::read_to_string(&counts).is_ok_and(|c| c.lines().count() >= 2)
    });
    let waited = killed.elapsed();
    let text = std::fs::read_to_string(&counts).unwrap();
    for line in text.lines() {
        assert!(line.starts_with("1 "), "two agents at once: {text}");
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{agent}")).exists()
            || std::fs::read_to_string(format!("/proc/{agent}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "the orphan was stopped"
    );
    assert!(
        waited >= Duration::from_secs(2),
        "it waited for the orphan's timeout: {waited:?}"
    );
    let other_log = worker_log(&other);
    let log = worker_log(&l.repo);
    assert!(
        other_log.contains("outlived its worker") || log.contains("outlived its worker"),
        "{other_log}\n{log}"
    );
}

/// A run queued for lines that are gone by the time its worker gets to it (the transcript rewritten
/// shorter while another run held the worker) is not run: no agent starts, no attempt is spent, the
/// cursor stays, and the next sweep captures the transcript as it is now.
#[test]
fn a_run_whose_transcript_was_rewritten_while_it_waited_is_not_run() {
    let l = live_world(3);
    let other =
        l.w.home()
            .join(".claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-0000000000f3");
    let other = other.with_extension("jsonl");
    let id = "5e551011-aaaa-4bbb-8ccc-0000000000f3";
    let three: String = (0..3)
        .map(|i| claude_line(id, &l.repo, &format!("other {i}")))
        .collect();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    write_aged(&other, three.as_bytes(), HOURS_2);
    // The first agent to run sleeps; the transcript of the other run is rewritten meanwhile.
    std::fs::write(l.fake.join("sleep"), "3").unwrap();
    let s = l.sweep_args(&[]);
    assert_eq!(items(&s, "started").len(), 2, "{s}");
    wait_for("the first agent", Duration::from_secs(30), || {
        l.fake.join("agent.pid").exists()
    });
    std::fs::remove_file(l.fake.join("sleep")).unwrap();
    let running = l
        .runs()
        .into_iter()
        .find(|r| r["status"] == "running")
        .expect("a run is running");
    let waiting = if running["transcriptPath"] == l.transcript.display().to_string() {
        other.clone()
    } else {
        l.transcript.clone()
    };
    let kept: String = std::fs::read_to_string(&waiting)
        .unwrap()
        .lines()
        .take(1)
        .map(|l| {
            format!(
                "{}\n",
                l.replace("\"content\":\"", "\"content\":\"rewritten ")
            )
        })
        .collect();
    std::fs::write(&waiting, kept.as_bytes()).unwrap();
    l.wait_idle();
    let runs = l.runs();
    let of = |p: &Path| -> Vec<serde_json::Value> {
        runs.iter()
            .filter(|r| r["transcriptPath"] == p.display().to_string())
            .cloned()
            .collect()
    };
    let gone = &of(&waiting)[0];
    assert_eq!(gone["status"], "cancelled", "{gone}");
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .starts_with("transcript-changed:"),
        "{gone}"
    );
    assert_eq!(l.calls().len(), 1, "only the first run's agent ran");
    let key = |p: &Path| format!("claude:{}", p.file_stem().unwrap().to_string_lossy());
    let entry = &l.ledger()["entries"][key(&waiting)];
    assert_eq!(entry["attempts"], 0, "{entry}");
    assert_eq!(entry["lastCapturedLine"], 0, "the cursor stayed: {entry}");
    // The next sweep captures the transcript as it is now, from its start.
    let s = l.summary();
    let again = find_by_path(&s, "started", &waiting).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(
        (again["fromLine"].as_u64(), again["toLine"].as_u64()),
        (Some(1), Some(1))
    );
    let last = l.runs().into_iter().last().unwrap();
    assert_eq!(last["status"], "done", "{last}");
}

/// A Claude Code record with its own id (`uuid`, which a fork copies unchanged under its own session id).
fn record(session: &str, cwd: &Path, uuid: &str, text: &str) -> String {
    claude_line(session, cwd, text).replacen("{", &format!("{{\"uuid\":\"{uuid}\","), 1)
}

/// The record ids each run that captured lines (done) held, as a person reading its transcript's lines
/// would list them.
fn captured_ids(l: &Live) -> Vec<String> {
    let mut out = Vec::new();
    for r in l.runs().iter().filter(|r| r["status"] == "done") {
        let text = std::fs::read_to_string(r["transcriptPath"].as_str().unwrap()).unwrap();
        let (from, to) = (
            r["fromLine"].as_u64().unwrap(),
            r["toLine"].as_u64().unwrap(),
        );
        for line in text
            .lines()
            .skip(from as usize - 1)
            .take((to + 1 - from) as usize)
        {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            out.extend(v["uuid"].as_str().map(str::to_string));
        }
    }
    out.sort();
    out
}

const FORK: &str = "5e551011-aaaa-4bbb-8ccc-0000000000f0";

/// A session and its fork (three records copied, then one of its own), both first seen by one sweep:
/// both runs are queued from line 1, the older one captures, the other is cancelled before its agent
/// starts (`captured-elsewhere`, no attempt spent), and the next sweep captures only the fork's own
/// record. Every record is captured once, and the sweeps after start nothing.
#[test]
fn a_session_and_its_fork_first_seen_together_capture_each_record_once() {
    let l = live_world(3);
    let parent_id = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let fork = l.transcript.with_file_name(format!("{FORK}.jsonl"));
    let shared = ["r-a", "r-b", "r-c"];
    let parent: String = shared
        .iter()
        .map(|u| record(parent_id, &l.repo, u, u))
        .collect();
    let mut copy: String = shared.iter().map(|u| record(FORK, &l.repo, u, u)).collect();
    copy += &record(FORK, &l.repo, "f-d", "the fork's own");
    write_aged(&l.transcript, parent.as_bytes(), HOURS_2);
    write_aged(&fork, copy.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 2, "{s}");
    let cancelled: Vec<_> = l
        .runs()
        .into_iter()
        .filter(|r| r["status"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1, "{:?}", l.runs());
    let why = cancelled[0]["error"].as_str().unwrap();
    assert!(why.starts_with("captured-elsewhere:"), "{why}");
    assert_eq!(l.calls().len(), 1, "one agent ran");
    let key = format!("claude:{}", cancelled[0]["sessionId"].as_str().unwrap());
    assert_eq!(l.ledger()["entries"][&key]["attempts"], 0);
    // The next sweep captures what is left (the fork's own record, when the parent ran first), and the
    // one after starts nothing.
    l.summary();
    let s = l.summary();
    assert!(items(&s, "started").is_empty(), "{s}");
    assert_eq!(captured_ids(&l), ["f-d", "r-a", "r-b", "r-c"]);
    // Each appends a record of its own: each is captured, once.
    let more = record(parent_id, &l.repo, "p-e", "the parent goes on");
    write_aged(&l.transcript, (parent + &more).as_bytes(), HOURS_2);
    let more = record(FORK, &l.repo, "f-e", "the fork goes on");
    write_aged(&fork, (copy + &more).as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 2, "{s}");
    assert_eq!(captured_ids(&l), ["f-d", "f-e", "p-e", "r-a", "r-b", "r-c"]);
}

/// A fork first seen while the session it copied has a run queued for the copied records: they are the
/// queued run's, and the fork's run starts after them.
#[test]
fn a_fork_of_a_session_with_a_run_queued_starts_after_the_records_it_queued() {
    let l = live_world(3);
    let parent_id = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let shared = ["r-a", "r-b", "r-c"];
    let parent: String = shared
        .iter()
        .map(|u| record(parent_id, &l.repo, u, u))
        .collect();
    write_aged(&l.transcript, parent.as_bytes(), HOURS_2);
    std::fs::write(l.fake.join("sleep"), "3").unwrap();
    let s = l.sweep_args(&[]);
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    wait_for("the parent's agent", Duration::from_secs(30), || {
        l.fake.join("agent.pid").exists()
    });
    std::fs::remove_file(l.fake.join("sleep")).unwrap();
    // The parent's run is under way (its lines pending) when the fork appears.
    let fork = l.transcript.with_file_name(format!("{FORK}.jsonl"));
    let mut copy: String = shared.iter().map(|u| record(FORK, &l.repo, u, u)).collect();
    copy += &record(FORK, &l.repo, "f-d", "the fork's own");
    write_aged(&fork, copy.as_bytes(), HOURS_2);
    let s = l.sweep_args(&[]);
    let started = find_by_path(&s, "started", &fork).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(
        (started["fromLine"].as_u64(), started["toLine"].as_u64()),
        (Some(4), Some(4)),
        "{started}"
    );
    l.wait_idle();
    assert_eq!(captured_ids(&l), ["f-d", "r-a", "r-b", "r-c"]);
}
