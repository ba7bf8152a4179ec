//! The agent process as the worker runs it: its argv is exactly what the prompt file says, an agent
//! orphaned by a killed worker never runs beside a second one, and a result the disk had no room for is
//! not captured again.

use crate::common::*;
use crate::live::{claude_line, live_world, Live};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn install_agent(l: &Live, name: &str, script: &str, args: &[&str]) -> PathBuf {
    let agent = l.fake.join(name);
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"probe\"\nmax_attempts = 3\ntimeout = \"1m\"\n\n[capture.agents.probe]\ncommand = [\"{}\", {}]\n",
            agent.display(),
            args.join(", ")
        ),
    )
    .unwrap();
    agent
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

const ARGV_AGENT: &str = r#"#!/bin/sh
# Arguments: the prompt text, the run id, the repo.
printf '%s' "$1" > "$FAKE_DIR/prompt-arg-$2"
printf '%s' "$3" > "$FAKE_DIR/repo-arg-$2"
"#;

#[test]
fn placeholders_in_the_prompt_and_the_repo_path_reach_the_agent_verbatim() {
    let l = live_world(3);
    install_agent(
        &l,
        "argv-agent",
        ARGV_AGENT,
        &["{prompt}", "{run_id}", "{repo}"],
    );
    // A repo whose path holds a placeholder, with instructions that quote every placeholder.
    let repo = l.w.repo("work/a{run_id}b{prompt}");
    std::fs::create_dir_all(repo.join(".almanac/prompts")).unwrap();
    std::fs::write(
        repo.join(".almanac/prompts/capture.md"),
        "Write notes under {repo}/notes for run {run_id} of {session_id} in {transcript}; \
         the prompt file is {prompt_file} and this is {prompt}.\n",
    )
    .unwrap();
    let n = 8;
    for i in 0..n {
        let sid = format!("5e551011-aaaa-4bbb-8ccc-{i:012}");
        let p =
            l.w.home()
                .join(format!(".claude/projects/-odd/{sid}.jsonl"));
        let line = claude_line(&sid, &repo, &format!("put it in {{repo}} please {i}"));
        write_aged(&p, line.as_bytes(), HOURS_2);
    }
    let s = l.sweep_args(&["--max-runs", "100"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), n, "{s}");
    for st in started {
        let run = st["runId"].as_str().unwrap();
        let arg = l.fake.join(format!("repo-arg-{run}"));
        // The shell creates the file before it writes the path: wait for the path.
        wait_for("the agent", 60, || {
            arg.metadata().is_ok_and(|m| m.len() > 0)
        });
        let prompt_file = repo.join(format!(".almanac/runs/{run}.prompt.md"));
        let prompt = std::fs::read_to_string(&prompt_file).unwrap();
        assert!(prompt.contains("{repo}/notes") && prompt.contains("in {repo} please"));
        let got = std::fs::read_to_string(l.fake.join(format!("prompt-arg-{run}"))).unwrap();
        // The prompt file, with the sealed conversation before its last line: no placeholder in
        // either was filled in.
        let conversation =
            std::fs::read_to_string(repo.join(format!(".almanac/runs/{run}.transcript.md")))
                .unwrap();
        let (head, marker) = prompt.rsplit_once("\nalmanac-capture-run: ").unwrap();
        assert!(
            got.starts_with(head)
                && got.contains(conversation.trim_end())
                && got.ends_with(&format!("\nalmanac-capture-run: {marker}")),
            "{run}: the agent's prompt argument is the prompt file with its conversation: {got}"
        );
        assert_eq!(
            std::fs::read_to_string(&arg).unwrap(),
            repo.display().to_string(),
            "{run}: the repo argument is the repo path"
        );
    }
}

const SLOW_AGENT: &str = r#"#!/bin/sh
# The first agent sleeps; each agent notes whether an earlier one is still running when it starts.
dir="$FAKE_DIR"
echo "$*" >> "$dir/calls.log"
if [ -f "$dir/agent.pid" ]; then
  old=$(cat "$dir/agent.pid")
  state=$(sed 's/^.*) //' "/proc/$old/stat" 2>/dev/null | cut -d' ' -f1)
  if [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]; then
    echo "agent $$ started while agent $old ($state) still runs" >> "$dir/overlap.log"
  fi
fi
echo $$ > "$dir/agent.pid"
if [ ! -f "$dir/slept" ]; then touch "$dir/slept"; sleep 30; fi
exit 0
"#;

/// Kills the first agent's group when the test ends, whatever happened.
struct KillGroup(i32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        unsafe {
            libc::kill(-self.0, libc::SIGKILL);
        }
    }
}

/// A process still running (not gone, not a zombie nobody reaped yet).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

#[test]
fn an_agent_orphaned_by_a_killed_worker_never_runs_beside_a_second_one() {
    let l = live_world(3);
    install_agent(
        &l,
        "slow-agent",
        SLOW_AGENT,
        &["{prompt_file}", "{session_id}", "{run_id}"],
    );
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    let orphan = wait_for_pid(&l.fake.join("agent.pid"));
    let _cleanup = KillGroup(orphan);
    // The agent writes its pid file only once let through its gate, which the worker opens after
    // recording the group; wait for the record anyway (a worker killed before it leaves no agent: see
    // hostile::a_worker_lost_before_it_records_its_agent_leaves_no_agent_running).
    wait_for("the agent's process group in the run record", 30, || {
        l.runs()
            .first()
            .is_some_and(|r| r["agentProcess"].is_object())
    });
    let run = l.runs().into_iter().next().unwrap();
    assert_eq!(run["status"], "running", "{run}");
    let worker = run["pid"].as_i64().unwrap() as i32;
    unsafe {
        libc::kill(worker, libc::SIGKILL);
    }
    wait_for("the worker to die", 10, || !running(worker));
    assert!(running(orphan), "the agent outlives its worker");

    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "retried: {s}");
    assert!(
        !l.fake.join("overlap.log").exists(),
        "two agents ran in one repo: {}",
        std::fs::read_to_string(l.fake.join("overlap.log")).unwrap_or_default()
    );
    assert!(!running(orphan), "the orphan was stopped");
    let lost = &l.runs()[0];
    assert!(
        lost["error"].as_str().unwrap().starts_with("worker-lost"),
        "{lost}"
    );
    assert_eq!(l.calls().len(), 2);
    assert_eq!(l.entry()["status"], "done", "{}", l.entry());
    assert_eq!(l.entry()["lastCapturedLine"], 2);
}

fn worker_log(repo: &Path) -> String {
    std::fs::read_to_string(repo.join(".almanac/runs/worker.log")).unwrap_or_default()
}

#[test]
fn a_full_disk_after_the_agent_succeeded_does_not_capture_the_lines_again() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let full = l.fake.join("disk-full");
    std::fs::write(&full, "").unwrap();
    let full_s = full.display().to_string();
    let (code, v) = l.sweep(&[
        ("ALMANAC_FAULT", "enospc-post-run"),
        ("ALMANAC_FAULT_FILE", &full_s),
    ]);
    assert_eq!(code, 0, "{v}");
    wait_for("the agent", 30, || l.calls().len() == 1);
    // The agent exited 0; the worker cannot write the result while the disk is full.
    std::thread::sleep(Duration::from_millis(800));
    let (code, again) = l.sweep(&[]);
    assert_eq!(code, 0, "{again}");
    assert!(
        items(&again["summary"], "started").is_empty(),
        "the same lines started again while the result was unsaved: {again}\n{}",
        worker_log(&l.repo)
    );
    // Room again: the worker saves what it kept, and nothing is captured twice.
    std::fs::remove_file(&full).unwrap();
    l.wait_idle();
    let s = l.summary();
    assert!(items(&s, "started").is_empty(), "{s}");
    assert_eq!(l.calls().len(), 1, "{}", worker_log(&l.repo));
    let e = l.entry();
    assert_eq!(e["status"], "done", "{e}");
    assert_eq!(e["lastCapturedLine"], 2, "{e}");
    assert_eq!(l.runs()[0]["exitCode"], 0);
}
