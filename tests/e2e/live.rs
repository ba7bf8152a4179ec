//! The live sweep with a fake agent on PATH: cursors, prompts, retries, lost workers, self-exclusion,
//! locks and a corrupt ledger.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FAKE_AGENT: &str = r#"#!/bin/sh
# A stand-in for a capture agent. Arguments: prompt file, agent session id, run id.
dir="$FAKE_DIR"
echo "$*" >> "$dir/calls.log"
cp "$1" "$dir/prompt-$3.md"
mkdir -p .almanac/pages
echo "- captured by $3" >> .almanac/pages/notes.md
if [ -n "$FAKE_TRANSCRIPTS" ]; then
  # Like a real agent: it writes its own transcript, in this repo, under the session id it was given.
  mkdir -p "$FAKE_TRANSCRIPTS"
  printf '{"type":"user","sessionId":"%s","cwd":"%s","message":{"role":"user","content":"capture"}}\n' "$2" "${FAKE_CWD:-$PWD}" > "$FAKE_TRANSCRIPTS/$2.jsonl"
fi
if [ -f "$dir/sleep" ]; then echo $$ > "$dir/agent.pid"; sleep "$(cat "$dir/sleep")"; fi
if [ -f "$dir/fail-if" ] && case "$3" in *"$(cat "$dir/fail-if")"*) true;; *) false;; esac; then exit 9; fi
exit "$(cat "$dir/exit-code" 2>/dev/null || echo 0)"
"#;

pub struct Live {
    pub w: World,
    pub repo: PathBuf,
    pub fake: PathBuf,
    pub transcript: PathBuf,
}

pub fn live_world(max_attempts: u32) -> Live {
    let w = World::new();
    let repo = w.repo("work/app");
    let fake = w.root().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    let agent = fake.join("fake-agent");
    std::fs::write(&agent, FAKE_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(w.almanac_home()).unwrap();
    std::fs::write(
        w.almanac_home().join("config.toml"),
        format!(
            "# test config\n[capture]\nagent = \"fake\"\nmax_attempts = {max_attempts}\ntimeout = \"1m\"\n\n[capture.agents.fake]\ncommand = [\"{}\", \"{{prompt_file}}\", \"{{session_id}}\", \"{{run_id}}\"]\n",
            agent.display()
        ),
    )
    .unwrap();
    let transcript = w
        .home()
        .join(".claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-000000000001.jsonl");
    Live {
        w,
        repo,
        fake,
        transcript,
    }
}

pub fn claude_line(session: &str, cwd: &Path, text: &str) -> String {
    format!(
        "{{\"type\":\"user\",\"sessionId\":\"{session}\",\"cwd\":\"{}\",\"timestamp\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"{text}\"}}}}\n",
        cwd.display(),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

impl Live {
    pub fn lines(&self, n: std::ops::Range<usize>) -> String {
        n.map(|i| {
            claude_line(
                "5e551011-aaaa-4bbb-8ccc-000000000001",
                &self.repo,
                &format!("message {i}"),
            )
        })
        .collect()
    }

    pub fn sweep(&self, extra_env: &[(&str, &str)]) -> (i32, serde_json::Value) {
        let mut cmd = self.w.almanac();
        cmd.env("FAKE_DIR", &self.fake)
            .args(["capture", "sweep", "--json", "--quiet", "0m"]);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "stdout is JSON: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), v)
    }

    /// A live sweep with extra arguments; its summary, without waiting for the workers.
    pub fn sweep_args(&self, extra: &[&str]) -> serde_json::Value {
        let mut cmd = self.w.almanac();
        cmd.env("FAKE_DIR", &self.fake)
            .args(["capture", "sweep", "--json", "--quiet", "0m"])
            .args(extra);
        json_ok(&mut cmd)["summary"].clone()
    }

    pub fn summary(&self) -> serde_json::Value {
        let (code, v) = self.sweep(&[]);
        assert_eq!(code, 0, "{v}");
        let s = v["summary"].clone();
        self.wait_idle();
        s
    }

    pub fn runs(&self) -> Vec<serde_json::Value> {
        let dir = self.repo.join(".almanac/runs");
        let mut out: Vec<serde_json::Value> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with("run_") && n.ends_with(".json")
                    })
                    .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a: &serde_json::Value, b| a["runId"].as_str().cmp(&b["runId"].as_str()));
        out
    }

    /// Waits until no run is queued or running (the worker is detached from the sweep).
    pub fn wait_idle(&self) {
        let start = Instant::now();
        loop {
            // The worker writes the run record, then the ledger: wait for both.
            let pending = std::fs::read(self.repo.join(".almanac/runs/capture-ledger.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_some_and(|l| {
                    l["entries"]
                        .as_object()
                        .is_some_and(|e| e.values().any(|x| x["status"] == "pending"))
                });
            let busy = pending
                || self
                    .runs()
                    .iter()
                    .any(|r| r["status"] == "queued" || r["status"] == "running");
            if !busy {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "runs did not finish: {:?}",
                self.runs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn ledger(&self) -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(self.repo.join(".almanac/runs/capture-ledger.json")).unwrap(),
        )
        .unwrap()
    }

    pub fn entry(&self) -> serde_json::Value {
        self.ledger()["entries"]["claude:5e551011-aaaa-4bbb-8ccc-000000000001"].clone()
    }

    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.fake.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub fn prompt(&self, run_id: &str) -> String {
        std::fs::read_to_string(self.fake.join(format!("prompt-{run_id}.md"))).unwrap()
    }

    /// The conversation a run's agent reads (`.almanac/runs/<run>.transcript.md`).
    pub fn conversation(&self, run_id: &str) -> String {
        std::fs::read_to_string(
            self.repo
                .join(format!(".almanac/runs/{run_id}.transcript.md")),
        )
        .unwrap()
    }

    pub fn set_exit(&self, code: i32) {
        std::fs::write(self.fake.join("exit-code"), code.to_string()).unwrap();
    }
}

#[test]
fn first_sweep_captures_all_then_only_what_was_appended() {
    let l = live_world(3);
    let first = l.lines(0..5);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(s["dryRun"], false);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1);
    let run1 = started[0]["runId"].as_str().unwrap().to_string();
    assert!(run1.starts_with("run_") && run1 != "dry-run");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(1), Some(5))
    );
    // The agent ran in the repo, with the argv from config, and wrote a page.
    let calls = l.calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].ends_with(&run1), "{calls:?}");
    assert!(l.repo.join(".almanac/pages/notes.md").is_file());
    let p1 = l.prompt(&run1);
    assert!(p1.contains(&l.transcript.display().to_string()));
    assert!(p1.contains("Capture lines 1 to 5"), "{p1}");
    assert!(p1.contains(&format!("almanac-capture-run: {run1}")));
    assert!(
        p1.contains("decisions"),
        "the capture instructions come first"
    );
    let e = l.entry();
    assert_eq!(e["status"], "done");
    assert_eq!(e["lastCapturedLine"], 5);
    assert_eq!(e["lastCapturedSize"], first.len());
    assert_eq!(e["lastRunId"], run1.as_str());
    assert!(e["lastCapturedPrefixHash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    let run = &l.runs()[0];
    assert_eq!(run["status"], "done");
    assert_eq!(run["exitCode"], 0);
    assert!(run["agentSessionId"]
        .as_str()
        .is_some_and(|s| s.len() == 36));

    // Nothing new: unchanged, no run.
    let s = l.summary();
    assert_eq!(s["counts"]["unchanged"], 1);
    assert_eq!(l.calls().len(), 1);
    // The live sweep leaves its result for status commands.
    let last: serde_json::Value = serde_json::from_slice(
        &std::fs::read(l.w.almanac_home().join("state/last-sweep.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(last["exit"], 0);
    assert_eq!(last["counts"]["unchanged"], 1);
    assert_eq!(last["started"], 0);

    // Append 3 lines and a partial one: lines 6-8 are captured, the partial line waits.
    let more = l.lines(5..8);
    write_aged(
        &l.transcript,
        format!("{first}{more}{{\"type\":\"user\",\"sess").as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(6), Some(8))
    );
    assert_eq!(started[0]["fromByte"], first.len());
    assert_eq!(started[0]["toByte"], first.len() + more.len());
    let run2 = started[0]["runId"].as_str().unwrap();
    assert!(run2 > run1.as_str(), "run ids sort by time");
    let p2 = l.prompt(run2);
    assert!(p2.contains("previously captured through line 5"), "{p2}");
    assert!(p2.contains("Focus on line 6 onward"), "{p2}");
    assert!(p2.contains("Do not re-document"), "{p2}");
    assert_eq!(l.entry()["lastCapturedLine"], 8);
    // The run records are private: transcripts hold secrets.
    let mode = std::fs::metadata(l.repo.join(".almanac/runs/capture-ledger.json"))
        .unwrap()
        .permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077, 0);
}

#[test]
fn an_edited_early_line_is_a_prefix_mismatch_until_reset() {
    let l = live_world(3);
    let text = l.lines(0..4);
    write_aged(&l.transcript, text.as_bytes(), HOURS_2);
    l.summary();
    assert_eq!(l.calls().len(), 1);
    let edited = text.replacen("message 1", "message X", 1) + &l.lines(4..6);
    write_aged(&l.transcript, edited.as_bytes(), HOURS_2);
    let s = l.summary();
    let att = items(&s, "needsAttention");
    assert_eq!(att.len(), 1);
    assert_eq!(att[0]["reason"], "prefix-mismatch");
    assert!(att[0]["detail"].as_str().unwrap().contains("capture reset"));
    assert_eq!(l.calls().len(), 1, "no run on a rewritten transcript");
    assert_eq!(l.entry()["status"], "needs_attention");
    assert_eq!(l.entry()["lastCapturedLine"], 4, "the cursor is kept");
    // It stays so on the next sweep.
    assert_eq!(
        items(&l.summary(), "needsAttention")[0]["reason"],
        "prefix-mismatch"
    );
    // A truncated file is a mismatch too, not "unchanged".
    write_aged(&l.transcript, l.lines(0..1).as_bytes(), HOURS_2);
    assert_eq!(
        items(&l.summary(), "needsAttention")[0]["reason"],
        "prefix-mismatch"
    );

    // reset: the next sweep starts over from line 1.
    write_aged(&l.transcript, edited.as_bytes(), HOURS_2);
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
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(1), Some(6))
    );
    assert_eq!(l.entry()["status"], "done");
}

#[test]
fn reset_skip_existing_marks_current_lines_captured() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    l.summary();
    write_aged(
        &l.transcript,
        format!(
            "{}{}",
            l.lines(0..3).replacen("message 0", "message Z", 1),
            l.lines(3..5)
        )
        .as_bytes(),
        HOURS_2,
    );
    assert_eq!(
        items(&l.summary(), "needsAttention")[0]["reason"],
        "prefix-mismatch"
    );
    let out =
        l.w.almanac()
            .args(["capture", "reset", "--skip-existing"])
            .arg(&l.transcript)
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("lines 1-5"));
    assert_eq!(l.summary()["counts"]["unchanged"], 1);
    assert_eq!(l.calls().len(), 1);
}

#[test]
fn a_failing_agent_is_retried_then_needs_attention() {
    let l = live_world(2);
    l.set_exit(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    l.summary();
    let e = l.entry();
    assert_eq!(e["status"], "failed");
    assert_eq!(e["attempts"], 1);
    assert_eq!(
        e["lastCapturedLine"], 0,
        "a failed run never moves the cursor"
    );
    assert!(
        e["lastError"]
            .as_str()
            .unwrap()
            .contains("exited with code 3"),
        "{e}"
    );
    let runs = l.runs();
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["exitCode"], 3);

    // Retried on the next sweep, same range.
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(1), Some(3))
    );
    assert_eq!(l.entry()["attempts"], 2);

    // Budget (max_attempts = 2) spent: needs attention, no run.
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 0);
    let att = items(&s, "needsAttention");
    assert_eq!(att[0]["reason"], "retry-budget-exhausted");
    assert_eq!(l.calls().len(), 2);
    let status =
        l.w.almanac()
            .args(["capture", "status", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    let text = String::from_utf8(status.stdout).unwrap();
    assert!(
        text.contains("failed (2 attempts)") && text.contains("exited with code 3"),
        "{text}"
    );

    // After fixing the cause, reset lets it run again.
    l.set_exit(0);
    assert!(l
        .w
        .almanac()
        .args(["capture", "reset"])
        .arg(&l.transcript)
        .output()
        .unwrap()
        .status
        .success());
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1);
    assert_eq!(l.entry()["status"], "done");
    assert_eq!(l.entry()["lastCapturedLine"], 3);
}

#[test]
fn a_worker_killed_mid_run_is_marked_lost_and_retried() {
    let l = live_world(3);
    std::fs::write(l.fake.join("sleep"), "30").unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    let run1 = v["summary"]["started"][0]["runId"]
        .as_str()
        .unwrap()
        .to_string();
    // Wait for the agent to be running, then SIGKILL the worker (and the agent it started).
    let agent = wait_for_pid(&l.fake.join("agent.pid"));
    let run = l
        .runs()
        .into_iter()
        .find(|r| r["runId"] == run1.as_str())
        .unwrap();
    assert_eq!(run["status"], "running");
    let worker = run["pid"].as_i64().unwrap() as i32;
    unsafe {
        libc::kill(worker, libc::SIGKILL);
        libc::kill(agent, libc::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_file(l.fake.join("sleep")).unwrap();

    let s = l.summary();
    let lost = l
        .runs()
        .into_iter()
        .find(|r| r["runId"] == run1.as_str())
        .unwrap();
    assert_eq!(lost["status"], "failed");
    assert!(
        lost["error"].as_str().unwrap().starts_with("worker-lost"),
        "{lost}"
    );
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "retried in the same sweep");
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(1), Some(2))
    );
    assert_eq!(
        l.entry()["status"],
        "done",
        "{:?} {:?}",
        l.entry(),
        l.runs()
    );
    assert_eq!(l.entry()["lastCapturedLine"], 2);
}

#[test]
fn a_second_sweep_while_one_holds_the_lock_does_nothing_and_exits_75() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let lock_path = l.w.almanac_home().join("capture-sweep.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap();
    f.lock().unwrap();
    std::fs::write(
        &lock_path,
        r#"{"pid":4242,"startedAt":"2026-11-29T10:00:00.000Z"}"#,
    )
    .unwrap();
    let out =
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .args(["capture", "sweep"])
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("another capture sweep") && err.contains("pid 4242"),
        "{err}"
    );
    assert!(l.runs().is_empty());
    drop(f);
    // Released: the next sweep works.
    assert_eq!(items(&l.summary(), "started").len(), 1);
}

#[test]
fn the_agents_own_transcript_is_never_captured() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let store = l.w.home().join(".claude/projects/-work-app");
    let env = [("FAKE_TRANSCRIPTS", store.to_str().unwrap())];
    let (code, v) = l.sweep(&env);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    let agent_session = l.runs()[0]["agentSessionId"].as_str().unwrap().to_string();
    let own = store.join(format!("{agent_session}.jsonl"));
    assert!(
        own.is_file(),
        "the fake agent wrote its transcript into the Claude store"
    );
    // Make it look old and finished: only the run record link stops it.
    set_age(&own, HOURS_2);
    let (_, v) = l.sweep(&env);
    l.wait_idle();
    let s = &v["summary"];
    let skipped = find_by_path(s, "skipped", &own).expect("the agent's transcript is reported");
    assert_eq!(skipped["reason"], "internal-almanac-session");
    assert!(items(s, "started").is_empty());
    assert_eq!(l.calls().len(), 1);
}

#[test]
fn marker_in_the_first_user_message_excludes_a_transcript() {
    // Second line of defence: a transcript whose first user message carries the run marker (say the run
    // record was pruned) is excluded by the shipped rules.
    let l = live_world(3);
    let marked =
        l.w.home()
            .join(".claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-00000000000f.jsonl");
    write_aged(
        &marked,
        claude_line(
            "5e551011-aaaa-4bbb-8ccc-00000000000f",
            &l.repo,
            "Update the wiki.\\n\\nalmanac-capture-run: run_20261129T000000000Z_abcd1234",
        )
        .as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    assert_eq!(
        find_by_path(&s, "skipped", &marked).unwrap()["reason"],
        "excluded-by-rule"
    );
    assert!(l.calls().is_empty());
}

#[test]
fn a_corrupt_ledger_is_preserved_and_reported() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let ledger = l.repo.join(".almanac/runs/capture-ledger.json");
    std::fs::write(&ledger, "{ this is not json").unwrap();
    let s = l.summary();
    let att = items(&s, "needsAttention");
    // The ledger, and the transcript no run record knows, held as `cursor-lost`.
    assert_eq!(att.len(), 2);
    assert_eq!(att[0]["reason"], "ledger-corrupt");
    assert_eq!(att[1]["reason"], "cursor-lost");
    let moved = PathBuf::from(att[0]["transcriptPath"].as_str().unwrap());
    assert!(moved
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("capture-ledger.json.corrupt-"));
    assert_eq!(
        std::fs::read_to_string(&moved).unwrap(),
        "{ this is not json",
        "the bad file is kept as it was"
    );
    // A ledger rebuilt from the run records took its place. No run record knows this transcript (its
    // runs may have been pruned), so it is held rather than captured again from line 1.
    assert!(items(&s, "started").is_empty());
    assert_eq!(l.entry()["status"], "needs_attention");
    assert_eq!(l.entry()["attention"], "cursor-lost");
}

#[test]
fn a_moved_codex_rollout_continues_from_its_cursor() {
    let l = live_world(3);
    let name = "rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl";
    let meta = format!(
        "{{\"timestamp\":\"2026-11-29T16:30:04.336Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"01a22824-67fc-72a0-8696-7ffb0d4410c0\",\"cwd\":\"{}\"}}}}\n",
        l.repo.display()
    );
    let turn = |t: &str| {
        format!("{{\"timestamp\":\"2026-11-29T16:30:05.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{t}\"}}}}\n")
    };
    let live_path =
        l.w.home()
            .join(format!(".codex/sessions/2026/11/29/{name}"));
    write_aged(
        &live_path,
        format!("{meta}{}", turn("one")).as_bytes(),
        HOURS_2,
    );
    assert_eq!(items(&l.summary(), "started").len(), 1);
    // Codex archives the rollout (a move) and later appends to it.
    let archived = l.w.home().join(format!(".codex/archived_sessions/{name}"));
    std::fs::create_dir_all(archived.parent().unwrap()).unwrap();
    std::fs::rename(&live_path, &archived).unwrap();
    write_aged(
        &archived,
        format!("{meta}{}{}", turn("one"), turn("two")).as_bytes(),
        HOURS_2,
    );
    let s = l.summary();
    let started = items(&s, "started");
    assert_eq!(started.len(), 1);
    assert_eq!(
        (
            started[0]["fromLine"].as_u64(),
            started[0]["toLine"].as_u64()
        ),
        (Some(3), Some(3))
    );
    let e = &l.ledger()["entries"]["codex:01a22824-67fc-72a0-8696-7ffb0d4410c0"];
    assert_eq!(e["path"], archived.display().to_string());
}

#[test]
fn prune_removes_old_runs_and_entries_of_deleted_transcripts() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    l.summary();
    assert_eq!(l.runs().len(), 1);
    // Nothing is older than 30 days yet.
    let out =
        l.w.almanac()
            .args(["capture", "prune", "--older-than", "30d", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    assert!(out.status.success());
    assert_eq!(l.runs().len(), 1);
    // Claude Code deleted the transcript; runs older than 0s go.
    std::fs::remove_file(&l.transcript).unwrap();
    let out =
        l.w.almanac()
            .args(["capture", "prune", "--older-than", "0s", "--json", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runsRemoved"].as_array().unwrap().len(), 1);
    assert_eq!(v["entriesRemoved"].as_array().unwrap().len(), 1);
    assert!(l.runs().is_empty());
    assert!(l.ledger()["entries"].as_object().unwrap().is_empty());
    let leftovers: Vec<String> = std::fs::read_dir(l.repo.join(".almanac/runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run_"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn an_agent_missing_from_path_fails_the_run_with_its_name() {
    let l = live_world(3);
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        "[capture]\nagent = \"claude\"\nmax_attempts = 1\n",
    )
    .unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let mut cmd = l.w.almanac();
    cmd.env("PATH", "/nonexistent")
        .args(["capture", "sweep", "--json", "--quiet", "0m"]);
    assert!(cmd.output().unwrap().status.success());
    l.wait_idle();
    let e = l.entry();
    assert_eq!(e["status"], "failed");
    assert!(
        e["lastError"]
            .as_str()
            .unwrap()
            .contains("\"claude\" not found on PATH"),
        "{e}"
    );
}

/// An agent program that cannot be executed fails the run saying so, as exec would, not as an exit
/// code of the shell that holds the agent back until it is recorded.
#[test]
fn an_agent_that_cannot_be_executed_fails_the_run_saying_why() {
    let l = live_world(1);
    let agent = l.fake.join("fake-agent");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    l.summary();
    let e = l.entry();
    assert_eq!(e["status"], "failed");
    let err = e["lastError"].as_str().unwrap();
    assert!(
        err.contains(&format!("cannot start {}", agent.display()))
            && err.contains("ermission denied"),
        "{e}"
    );
    assert!(l.calls().is_empty());
}

/// A relative program path in `command` is the repo's, where the agent runs; one that begins with `-`
/// is a path too, not an option of the shell's `exec` that starts it.
#[test]
fn a_relative_agent_program_is_the_repos() {
    let l = live_world(1);
    let bin = l.repo.join("-tools");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(l.fake.join("fake-agent"), bin.join("agent")).unwrap();
    std::fs::remove_file(l.fake.join("fake-agent")).unwrap();
    let config = l.w.almanac_home().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        &l.fake.join("fake-agent").display().to_string(),
        "-tools/agent",
    );
    std::fs::write(&config, text).unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    assert_eq!(l.entry()["status"], "done", "{}", l.entry());
    assert_eq!(l.calls().len(), 1);
}

#[test]
fn the_default_claude_agent_gets_the_documented_argv() {
    let l = live_world(3);
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        "[capture]\nagent = \"claude\"\n",
    )
    .unwrap();
    // A fake `claude` first on PATH records its arguments, one per line.
    let bin = l.w.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("claude"),
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do echo \"ARG:$a\"; done > {}/claude-args\n",
            l.fake.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        bin.join("claude"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out =
        l.w.almanac()
            .env("PATH", path)
            .args(["capture", "sweep", "--quiet", "0m"])
            .output()
            .unwrap();
    assert!(out.status.success());
    l.wait_idle();
    let args = std::fs::read_to_string(l.fake.join("claude-args")).unwrap();
    let run = &l.runs()[0];
    assert!(args.starts_with("ARG:-p\nARG:--session-id\n"), "{args}");
    assert!(
        !args.contains("almanac-capture-run: "),
        "the prompt is given on stdin, in no argument: {args}"
    );
    assert!(
        args.contains(&format!(
            "ARG:--session-id\nARG:{}\n",
            run["agentSessionId"].as_str().unwrap()
        )),
        "{args}"
    );
    assert!(
        args.ends_with(&format!(
            "ARG:--setting-sources\nARG:user\nARG:--strict-mcp-config\n\
             ARG:--permission-mode\nARG:dontAsk\nARG:--tools\nARG:Read,Glob,Grep,Write,Edit\n\
             ARG:--allowedTools\nARG:Read,Glob,Grep,Write(./.almanac/**),Edit(./.almanac/**)\n\
             ARG:--disallowedTools\nARG:Read(/{}/**)\n",
            l.w.home().join(".codealmanac/state").display()
        )),
        "{args}"
    );
    assert_eq!(run["status"], "done");
}

#[test]
fn a_repo_prompt_overrides_the_built_in_instructions() {
    let l = live_world(3);
    std::fs::create_dir_all(l.repo.join(".almanac/prompts")).unwrap();
    std::fs::write(
        l.repo.join(".almanac/prompts/capture.md"),
        "Only record deployment facts.\n",
    )
    .unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let s = l.summary();
    let run = items(&s, "started")[0]["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let p = l.prompt(&run);
    assert!(p.starts_with("Only record deployment facts."), "{p}");
    assert!(
        !p.contains("teammate joining tomorrow"),
        "the built-in text is replaced"
    );
    assert!(
        p.contains(&format!("almanac-capture-run: {run}")),
        "the continuation still follows"
    );
}

#[test]
fn a_worker_draining_many_runs_leaves_every_cursor_at_the_end_of_what_it_captured() {
    // The worker keeps the ledger in memory between runs and saves it when due and before it leaves;
    // with an agent that records no session id, no other process writes the ledger while it drains.
    let l = live_world(3);
    let config = l.w.almanac_home().join("config.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"{session_id}\", ", "\"no-session\", ");
    std::fs::write(&config, text).unwrap();
    let n = 40;
    let mut sizes = std::collections::BTreeMap::new();
    for i in 0..n {
        let sid = format!("5e551011-aaaa-4bbb-8ccc-{i:012}");
        let p =
            l.w.home()
                .join(format!(".claude/projects/-work-app/{sid}.jsonl"));
        let body: String = (0..3)
            .map(|j| claude_line(&sid, &l.repo, &format!("turn {j}")))
            .collect();
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_aged(&p, body.as_bytes(), HOURS_2);
        sizes.insert(format!("claude:{sid}"), body.len() as u64);
    }
    let s = l.sweep_args(&["--max-runs", "1000"]);
    assert_eq!(items(&s, "started").len(), n);
    l.wait_idle();
    let runs = l.runs();
    assert_eq!(runs.len(), n);
    assert!(runs.iter().all(|r| r["status"] == "done"), "{runs:?}");
    let ledger = l.ledger();
    for (k, size) in &sizes {
        let e = &ledger["entries"][k];
        assert_eq!(e["status"], "done", "{k}: {e}");
        assert_eq!(e["lastCapturedSize"], *size, "{k}: {e}");
        assert_eq!(e["lastCapturedLine"], 3, "{k}: {e}");
    }
    assert_eq!(l.calls().len(), n);
    // Nothing is captured twice.
    let again = l.sweep_args(&[]);
    assert_eq!(again["counts"]["unchanged"], n);
    assert!(items(&again, "started").is_empty());
}

#[test]
fn an_agent_session_recorded_in_another_repos_ledger_is_never_captured_unless_planted() {
    // Sweeps decide repo by repo; almanac's own sessions are still recognised across repos, but only
    // from what almanac sealed: ids written into a ledger or journal by anything else do not count.
    let l = live_world(3);
    let b = l.w.repo("work/b");
    let b_store = l.w.home().join(".claude/projects/-work-b");
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let b_store_s = b_store.display().to_string();
    let b_s = b.display().to_string();
    let env = [
        ("FAKE_TRANSCRIPTS", b_store_s.as_str()),
        ("FAKE_CWD", b_s.as_str()),
    ];
    let (code, v) = l.sweep(&env);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    let ours = l.runs()[0]["agentSessionId"].as_str().unwrap().to_string();
    let ours_file = b_store.join(format!("{ours}.jsonl"));
    assert!(
        ours_file.is_file(),
        "the fake agent wrote its transcript in b"
    );
    set_age(&ours_file, HOURS_2);
    // A user's session in b that an injected agent in the app repo would like silenced.
    let user_sid = "5e551011-aaaa-4bbb-8ccc-0000000000b1";
    write_aged(
        &b_store.join(format!("{user_sid}.jsonl")),
        claude_line(user_sid, &b, "work in b").as_bytes(),
        HOURS_2,
    );
    let s = l.w.dry_run(&["--quiet", "0m"]);
    let reason_of = |s: &serde_json::Value, sid: &str| {
        ["skipped", "needsAttention", "started"]
            .iter()
            .flat_map(|list| items(s, list).into_iter().map(move |i| (list, i)))
            .find(|(_, i)| i["sessionId"] == sid)
            .map(|(list, i)| format!("{list}:{}", i["reason"].as_str().unwrap_or("")))
            .unwrap_or_else(|| panic!("{sid} not in {s}"))
    };
    assert_eq!(
        reason_of(&s, &ours),
        "skipped:internal-almanac-session",
        "{s}"
    );
    assert_eq!(reason_of(&s, user_sid), "started:", "{s}");

    // What an injected agent in the app repo can write: the id added to the ledger's agentSessions
    // (the JSON still valid) and a journal line.
    let ledger_path = l.repo.join(".almanac/runs/capture-ledger.json");
    let mut ledger = l.ledger();
    ledger["agentSessions"]
        .as_array_mut()
        .unwrap()
        .push(user_sid.into());
    std::fs::write(&ledger_path, serde_json::to_vec_pretty(&ledger).unwrap()).unwrap();
    std::fs::write(
        l.repo.join(".almanac/runs/ledger.journal"),
        format!("{{\"agentSession\":\"{user_sid}\"}}\n"),
    )
    .unwrap();
    let s = l.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(reason_of(&s, user_sid), "started:", "{s}");
    assert_eq!(
        reason_of(&s, &ours),
        "skipped:internal-almanac-session",
        "the run record still names almanac's own session: {s}"
    );
    let unsealed = items(&s, "needsAttention")
        .into_iter()
        .find(|i| i["reason"] == "ledger-unsealed")
        .unwrap_or_else(|| panic!("{s}"));
    let detail = unsealed["detail"].as_str().unwrap();
    assert!(
        detail.contains("1 agent session id no run record names"),
        "{detail}"
    );
    // A live sweep seals it again, without the planted id; the report is not repeated.
    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    assert!(items(&v["summary"], "needsAttention")
        .iter()
        .any(|i| i["reason"] == "ledger-unsealed"));
    l.wait_idle();
    let ids = l.ledger()["agentSessions"].clone();
    assert!(
        ids.as_array().unwrap().iter().any(|i| i == ours.as_str()),
        "{ids}"
    );
    assert!(
        !ids.as_array().unwrap().iter().any(|i| i == user_sid),
        "{ids}"
    );
    let s = l.w.dry_run(&["--quiet", "0m"]);
    assert!(
        !items(&s, "needsAttention")
            .iter()
            .any(|i| i["reason"] == "ledger-unsealed"),
        "{s}"
    );
}
