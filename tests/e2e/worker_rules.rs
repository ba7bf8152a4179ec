//! Rules the worker keeps whatever the agent does: one worker and one agent per repo even when
//! the agent deletes `.almanac/runs/`, a ledger the agent overwrote written back from the worker's copy,
//! chunk prompts that summarise their own chunk and keep their numbers across sweeps, and at most
//! `max_parallel_agents` agents at once across repos.

use crate::common::*;
use crate::live::{claude_line, live_world, Live};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SID: &str = "5e551011-aaaa-4bbb-8ccc-000000000001";

fn install_agent(l: &Live, script: &str, extra_config: &str) {
    let agent = l.fake.join("rule-agent");
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"fake\"\nmax_attempts = 3\ntimeout = \"1m\"\n{extra_config}\n\
             [capture.agents.fake]\ncommand = [\"{}\", \"{{prompt_file}}\", \"{{session_id}}\", \"{{run_id}}\"]\n",
            agent.display()
        ),
    )
    .unwrap();
}

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until the repo's worker has exited (`capture status` says so): a worker writes its run record
/// before it writes back or saves the ledger, so "no run queued or running" alone can come too early.
fn wait_worker_gone(l: &Live) {
    wait_for("the worker to exit", 60, || {
        let mut cmd = l.w.almanac();
        cmd.args(["capture", "status", "--json", "--repo"])
            .arg(&l.repo);
        json_ok(&mut cmd)["workerAlive"] == false
    });
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn worker_log(repo: &Path) -> String {
    read(&repo.join(".almanac/runs/worker.log"))
}

const DELETING_AGENT: &str = r#"#!/bin/sh
# The first agent deletes the run store and keeps running; each notes an agent still running at its start.
dir="$FAKE_DIR"
echo "$3" >> "$dir/calls.log"
if [ -f "$dir/running" ]; then echo "$3 started while $(cat "$dir/running") runs" >> "$dir/overlap.log"; fi
echo "$3" > "$dir/running"
if [ ! -f "$dir/deleted" ]; then
  # EMPTY=1: only what runs/ holds (the directory stays, as when `rm -rf` races a writer in it).
  if [ "$EMPTY" = 1 ]; then find .almanac/runs -mindepth 1 -delete; else rm -rf .almanac/runs; fi
  touch "$dir/deleted"; sleep 4
fi
rm -f "$dir/running"
exit 0
"#;

#[test]
fn an_agent_that_deletes_the_run_store_never_gets_a_second_agent_beside_it() {
    deleting_agent(false);
}

/// The directory stays and only its files go: the sweep that follows writes a ledger from nothing, which
/// looks like any change of the file, and the worker must still tell that its run was dropped (before,
/// the worker took that ledger and ran the sweep's run from line 1 after its own).
#[test]
fn an_agent_that_empties_the_run_store_gets_its_lines_captured_once() {
    deleting_agent(true);
}

fn deleting_agent(empty_only: bool) {
    let l = live_world(3);
    install_agent(&l, DELETING_AGENT, "");
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[("EMPTY", if empty_only { "1" } else { "0" })]);
    assert_eq!(code, 0, "{v}");
    wait_for("the agent to delete runs/", 30, || {
        l.fake.join("deleted").exists()
    });
    // The sweep finds no ledger and no worker lock in the repo while the first agent still runs.
    let s = l.sweep_args(&[]);
    wait_for("the first agent", 30, || !l.fake.join("running").exists());
    l.wait_idle();
    wait_worker_gone(&l);
    assert!(
        !l.fake.join("overlap.log").exists(),
        "two agents ran in one repo: {}\n{s}",
        read(&l.fake.join("overlap.log"))
    );
    assert_eq!(
        l.calls().len(),
        1,
        "the lines were captured twice: {:?}\n{s}\nworker.log:\n{}\nledger: {}",
        l.calls(),
        worker_log(&l.repo),
        l.ledger()
    );
    // The worker recreated the store and recorded the run's outcome and its cursor.
    let e = l.entry();
    assert_eq!(e["status"], "done", "{e}");
    assert_eq!(e["lastCapturedLine"], 2, "{e}");
    let log = worker_log(&l.repo);
    assert!(log.contains("deleted"), "{log}");
    // Nothing is captured again.
    let s = l.summary();
    assert!(items(&s, "started").is_empty(), "{s}");
    assert_eq!(l.calls().len(), 1);
}

const OVERWRITING_AGENT: &str = r#"#!/bin/sh
# With "$FAKE_DIR/overwrite" present, the agent overwrites the repo's ledger with garbage.
dir="$FAKE_DIR"
echo "$3" >> "$dir/calls.log"
if [ -f "$dir/overwrite" ]; then printf '{"entries": garbage' > .almanac/runs/capture-ledger.json; fi
exit 0
"#;

#[test]
fn a_ledger_the_agent_overwrote_is_written_back_and_reported() {
    let l = live_world(3);
    install_agent(&l, OVERWRITING_AGENT, "");
    let other = l
        .transcript
        .with_file_name("5e551011-aaaa-4bbb-8ccc-000000000002.jsonl");
    let other_sid = "5e551011-aaaa-4bbb-8ccc-000000000002";
    let other_lines: String = (0..2)
        .map(|i| claude_line(other_sid, &l.repo, &format!("other {i}")))
        .collect();
    write_aged(&other, other_lines.as_bytes(), HOURS_2);
    let first = l.lines(0..2);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 2, "{s}");
    // The other transcript's runs are pruned (`capture prune` removes old run records).
    for r in l.runs() {
        if r["sessionId"] == other_sid {
            let id = r["runId"].as_str().unwrap();
            std::fs::remove_file(l.repo.join(format!(".almanac/runs/{id}.json"))).unwrap();
        }
    }
    // More lines; this run's agent overwrites the ledger.
    write_aged(&l.transcript, (first + &l.lines(2..4)).as_bytes(), HOURS_2);
    std::fs::write(l.fake.join("overwrite"), "").unwrap();
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    wait_worker_gone(&l);
    std::fs::remove_file(l.fake.join("overwrite")).unwrap();
    // The worker wrote back the copy it held: every cursor is there.
    let ledger = l.ledger();
    let e = &ledger["entries"][format!("claude:{SID}")];
    assert_eq!(e["status"], "done", "{ledger}");
    assert_eq!(e["lastCapturedLine"], 4, "{ledger}");
    let o = &ledger["entries"][format!("claude:{other_sid}")];
    assert_eq!(o["status"], "done", "{ledger}");
    assert_eq!(o["lastCapturedLine"], 2, "{ledger}");
    assert!(
        worker_log(&l.repo).contains("overwritten"),
        "{}",
        worker_log(&l.repo)
    );
    // The next sweep reports it, and captures nothing again.
    let s = l.summary();
    let att = items(&s, "needsAttention");
    assert!(
        att.iter().any(|a| a["reason"] == "ledger-overwritten"),
        "{s}"
    );
    assert!(!att.iter().any(|a| a["reason"] == "cursor-lost"), "{s}");
    assert!(items(&s, "started").is_empty(), "{s}");
    assert_eq!(l.calls().len(), 3, "{:?}", l.calls());
}

const PROMPT_AGENT: &str = r#"#!/bin/sh
dir="$FAKE_DIR"
echo "$3" >> "$dir/calls.log"
cp "$1" "$dir/prompt-$3.md"
exit 0
"#;

/// A line whose prompt names its line number, padded to about 1 KB.
fn numbered_line(l: &Live, n: usize) -> String {
    claude_line(
        SID,
        &l.repo,
        &format!("msg-{n:03}-end {}", "x".repeat(1000)),
    )
}

#[test]
fn each_chunk_prompt_quotes_its_own_prompts_and_numbering_continues_across_sweeps() {
    let l = live_world(3);
    install_agent(&l, PROMPT_AGENT, "");
    let body: String = (1..=20).map(|n| numbered_line(&l, n)).collect();
    write_aged(&l.transcript, body.as_bytes(), HOURS_2);
    // About two of these lines' conversation a run (each prompt is 1000 bytes of text).
    let args = ["--max-tokens-per-run", "600", "--max-runs", "2"];
    let mut seen = Vec::new();
    for sweep in 0..4 {
        let s = l.sweep_args(&args);
        l.wait_idle();
        for st in items(&s, "started") {
            seen.push(st.clone());
        }
        if sweep == 0 {
            assert_eq!(items(&s, "started").len(), 2, "{s}");
        }
    }
    let n = seen.len();
    assert!(n >= 4, "{seen:?}");
    for (i, st) in seen.iter().enumerate() {
        assert_eq!(
            st["chunk"],
            serde_json::json!([i + 1, n]),
            "chunk numbers continue across sweeps: {seen:?}"
        );
        let run = st["runId"].as_str().unwrap();
        let prompt = l.prompt(run);
        assert!(
            prompt.contains(&format!("this is chunk {} of {n}", i + 1)),
            "{prompt}"
        );
        assert!(prompt.contains("(lines 1 to 20)"), "{prompt}");
        let (from, to) = (
            st["fromLine"].as_u64().unwrap() as usize,
            st["toLine"].as_u64().unwrap() as usize,
        );
        assert!(prompt.contains(&format!("msg-{from:03}-end")), "{prompt}");
        for k in (1..=20).filter(|k| *k < from || *k > to) {
            assert!(
                !prompt.contains(&format!("msg-{k:03}-end")),
                "chunk {} (lines {from}-{to}) quotes line {k}: {prompt}",
                i + 1
            );
        }
    }
    assert_eq!(l.entry()["lastCapturedLine"], 20);
}

const COUNTING_AGENT: &str = r#"#!/bin/sh
# Notes how many agents run (itself included) when it starts, then works for a while.
dir="$FAKE_DIR"
mkdir -p "$dir/active"
touch "$dir/active/$$"
ls "$dir/active" | wc -l | tr -d ' ' >> "$dir/counts.log"
sleep 2
rm -f "$dir/active/$$"
echo "$3" >> "$dir/calls.log"
exit 0
"#;

fn runs_of(repo: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(repo.join(".almanac/runs"))
        .unwrap()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("run_") && n.ends_with(".json") {
            out.push(serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap());
        }
    }
    out
}

#[test]
fn at_most_max_parallel_agents_run_at_once_across_repos() {
    let l = live_world(3);
    install_agent(&l, COUNTING_AGENT, "max_parallel_agents = 2\n");
    let repos: Vec<PathBuf> = ["work/a", "work/b", "work/c"]
        .iter()
        .map(|r| l.w.repo(r))
        .collect();
    for (i, repo) in repos.iter().enumerate() {
        let sid = format!("5e551011-aaaa-4bbb-8ccc-00000000010{i}");
        let p =
            l.w.home()
                .join(format!(".claude/projects/-r{i}/{sid}.jsonl"));
        write_aged(&p, claude_line(&sid, repo, "hello").as_bytes(), HOURS_2);
    }
    let s = l.sweep_args(&[]);
    assert_eq!(items(&s, "started").len(), 3, "{s}");
    let counts = l.fake.join("counts.log");
    wait_for("two agents", 30, || read(&counts).lines().count() >= 2);
    // A sweep while the third worker waits for a slot: nothing is lost or started again.
    let again = l.sweep_args(&[]);
    assert!(items(&again, "started").is_empty(), "{again}");
    wait_for("all three agents", 60, || {
        read(&l.fake.join("calls.log")).lines().count() == 3
    });
    let max = read(&counts)
        .lines()
        .map(|c| c.trim().parse::<u32>().unwrap())
        .max()
        .unwrap();
    assert!(max <= 2, "{max} agents ran at once: {}", read(&counts));
    for repo in &repos {
        wait_for("the run to finish", 30, || {
            runs_of(repo).iter().all(|r| r["status"] == "done")
        });
        let runs = runs_of(repo);
        assert_eq!(runs.len(), 1, "{runs:?}");
    }
}
