//! Reliability: hostile and broken inputs, concurrent sweeps, and crashes at every point that matters.
//! Each bad-input case runs the real binary on a home holding the bad file next to a good transcript,
//! and checks that the bad one ends in a clear reason (or a clean skip) while the good one is unaffected.

use crate::common::*;
use crate::live::{claude_line, live_world, Live};
use std::path::{Path, PathBuf};
use std::time::Duration;

const GOOD: &str = "5e551011-aaaa-4bbb-8ccc-0000000000e0";

/// A home with one good transcript in a repo; `bad` writes the case's file(s) and returns its path.
fn matrix(bad: impl FnOnce(&World, &Path) -> PathBuf) -> (World, serde_json::Value, PathBuf) {
    let w = World::new();
    let repo = w.repo("r");
    w.write(
        &format!("home/.claude/projects/-r/{GOOD}.jsonl"),
        &claude_line(GOOD, &repo, "good one"),
        HOURS_2,
    );
    let p = bad(&w, &repo);
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run", "--json", "--quiet", "0m"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = v["summary"].clone();
    let good = items(&s, "started")
        .into_iter()
        .find(|i| i["sessionId"] == GOOD)
        .cloned();
    assert!(good.is_some(), "the good transcript is unaffected: {s}");
    (w, s, p)
}

fn reason_of(s: &serde_json::Value, p: &Path) -> Option<String> {
    ["skipped", "needsAttention"]
        .iter()
        .find_map(|l| find_by_path(s, l, p))
        .map(|i| i["reason"].as_str().unwrap().to_string())
}

fn started_of(s: &serde_json::Value, p: &Path) -> Option<serde_json::Value> {
    find_by_path(s, "started", p).cloned()
}

fn bytes(w: &World, name: &str, content: &[u8]) -> PathBuf {
    let p = w.home().join(".claude/projects/-r").join(name);
    write_aged(&p, content, HOURS_2);
    p
}

fn user_line(sid: &str, repo: &Path) -> Vec<u8> {
    claude_line(sid, repo, "hello").into_bytes()
}

macro_rules! bad_input {
    ($name:ident, |$w:ident, $repo:ident| $make:block, |$s:ident, $p:ident| $check:block) => {
        #[test]
        fn $name() {
            let (_w, $s, $p) = matrix(|$w: &World, $repo: &Path| $make);
            $check
        }
    };
}

bad_input!(
    invalid_utf8_inside_a_line,
    |w, repo| {
        let mut b = b"{\"type\":\"user\",\"note\":\"\xff\xfe\xfd\"}\n".to_vec();
        b.extend(user_line("s-utf8", repo));
        bytes(w, "s-utf8.jsonl", &b)
    },
    |s, p| {
        assert_eq!(
            started_of(&s, &p).unwrap()["toLine"],
            2,
            "the bad line is skipped, the next one read"
        );
    }
);

bad_input!(
    nul_bytes,
    |w, repo| {
        let mut b = b"\0\0\0{\"type\":\"x\"}\0\n".to_vec();
        b.extend(user_line("s-nul", repo));
        bytes(w, "s-nul.jsonl", &b)
    },
    |s, p| {
        assert_eq!(started_of(&s, &p).unwrap()["sessionId"], "s-nul");
    }
);

bad_input!(
    a_bom_and_crlf,
    |w, repo| {
        let mut b = b"\xEF\xBB\xBF".to_vec();
        b.extend(
            claude_line("s-bom", repo, "hi")
                .replace('\n', "\r\n")
                .as_bytes(),
        );
        bytes(w, "s-bom.jsonl", &b)
    },
    |s, p| {
        assert_eq!(started_of(&s, &p).unwrap()["toLine"], 1);
    }
);

bad_input!(
    a_5_mib_first_line,
    |w, repo| {
        let id = "01a22824-67fc-72a0-8696-000000000005";
        let big = "x".repeat(5 << 20);
        let body = format!(
        "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":\"{}\",\"base_instructions\":{{\"text\":\"{big}\"}}}}}}\n{{\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"hi\"}}}}\n",
        repo.display()
    );
        let p = w.home().join(format!(
            ".codex/sessions/2026/11/29/rollout-2026-11-29T10-00-00-{id}.jsonl"
        ));
        write_aged(&p, body.as_bytes(), HOURS_2);
        p
    },
    |s, p| {
        let st = started_of(&s, &p).expect("a several-MiB first line is read");
        assert_eq!(st["sessionId"], "01a22824-67fc-72a0-8696-000000000005");
    }
);

bad_input!(
    a_100_mib_line_is_skipped_with_bounded_memory,
    |w, repo| {
        let p = w.home().join(".claude/projects/-r/s-huge.jsonl");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
        use std::io::Write;
        f.write_all(&user_line("s-huge", repo)).unwrap();
        f.write_all(
            b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"",
        )
        .unwrap();
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..100 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(b"\"}]}}\n").unwrap();
        f.write_all(&user_line("s-huge", repo)).unwrap();
        drop(f);
        set_age(&p, HOURS_2);
        p
    },
    |s, p| {
        // A line past the reader's bound is never held whole: the conversation a run reads holds its
        // text's first 64 KiB (the rest named by its size), so the three lines are one run, and what it
        // reads is the two prompts and that much of the answer.
        let runs: Vec<_> = items(&s, "started")
            .into_iter()
            .filter(|i| i["transcriptPath"] == p.display().to_string())
            .collect();
        assert_eq!(runs.len(), 1, "{s}");
        assert_eq!(runs[0]["toLine"], 3);
        assert_eq!(runs[0]["newTurns"], 2);
        assert!(runs[0]["estimatedTokens"].as_u64().unwrap() < 20_000, "{s}");
    }
);

bad_input!(
    a_binary_file_named_jsonl,
    |w, _repo| {
        let b: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        bytes(w, "binary.jsonl", &b)
    },
    |s, p| {
        assert_eq!(reason_of(&s, &p).as_deref(), Some("no-cwd"));
    }
);

bad_input!(
    an_empty_file_and_whitespace_only,
    |w, _repo| {
        bytes(w, "blank.jsonl", b" \n\t\n\n");
        bytes(w, "empty.jsonl", b"")
    },
    |s, p| {
        assert_eq!(reason_of(&s, &p).as_deref(), Some("no-cwd"));
        assert_eq!(
            reason_of(&s, &p.with_file_name("blank.jsonl")).as_deref(),
            Some("no-cwd")
        );
    }
);

bad_input!(
    lines_that_are_arrays_strings_or_numbers,
    |w, repo| {
        let mut b = b"[1,2,3]\n\"a string\"\n42\nnull\ntrue\n".to_vec();
        b.extend(user_line("s-nonobj", repo));
        bytes(w, "s-nonobj.jsonl", &b)
    },
    |s, p| {
        assert_eq!(started_of(&s, &p).unwrap()["toLine"], 6);
    }
);

bad_input!(
    hostile_session_ids_are_only_data,
    |w, repo| {
        for (i, id) in [
            "../../etc/passwd",
            "a/b/c",
            "nul\\u0000id",
            &"z".repeat(4096),
        ]
        .iter()
        .enumerate()
        {
            let line = format!("{{\"type\":\"user\",\"sessionId\":\"{id}\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n", repo.display());
            bytes(w, &format!("hostile-{i}.jsonl"), line.as_bytes());
        }
        w.home().join(".claude/projects/-r/hostile-0.jsonl")
    },
    |s, p| {
        assert_eq!(started_of(&s, &p).unwrap()["sessionId"], "../../etc/passwd");
        assert!(items(&s, "started")
            .iter()
            .any(|i| i["sessionId"].as_str().unwrap().len() == 4096));
    }
);

bad_input!(
    a_relative_missing_or_foreign_cwd,
    |w, _repo| {
        let rel = "{\"type\":\"user\",\"sessionId\":\"s-rel\",\"cwd\":\"relative/dir\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
        bytes(w, "s-rel.jsonl", rel.as_bytes());
        let missing = format!("{{\"type\":\"user\",\"sessionId\":\"s-missing\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n", w.root().join("gone/away").display());
        bytes(w, "s-missing.jsonl", missing.as_bytes());
        // Another user's repo: its .almanac/ is not ours to write into.
        let theirs = w.repo("other-user");
        std::os::unix::fs::chown(theirs.join(".almanac"), Some(54321), Some(54321)).unwrap();
        let foreign = format!("{{\"type\":\"user\",\"sessionId\":\"s-foreign\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n", theirs.display());
        bytes(w, "s-foreign.jsonl", foreign.as_bytes());
        w.home().join(".claude/projects/-r/s-rel.jsonl")
    },
    |s, p| {
        for name in ["s-rel.jsonl", "s-missing.jsonl", "s-foreign.jsonl"] {
            assert_eq!(
                reason_of(&s, &p.with_file_name(name)).as_deref(),
                Some("no-almanac-repo"),
                "{name}"
            );
        }
    }
);

bad_input!(
    symlink_loops_dangling_links_and_a_symlinked_root,
    |w, repo| {
        let real = w.root().join("real-projects");
        std::fs::create_dir_all(real.join("-r")).unwrap();
        write_aged(
            &real.join("-r/s-linked.jsonl"),
            &user_line("s-linked", repo),
            HOURS_2,
        );
        std::os::unix::fs::symlink(
            &real,
            w.home().join(".config/claude/projects").tap_mkdir_parent(),
        )
        .unwrap();
        std::os::unix::fs::symlink(&real, real.join("-r/loop")).unwrap();
        std::os::unix::fs::symlink(w.root().join("nowhere"), real.join("-r/dangling.jsonl"))
            .unwrap();
        w.home().join(".config/claude/projects/-r/s-linked.jsonl")
    },
    |s, p| {
        assert!(
            started_of(&s, &p).is_some(),
            "found through the symlinked root: {s}"
        );
        assert!(s["stats"]["unreadable"].as_u64().unwrap() >= 1);
    }
);

bad_input!(
    a_fifo_named_jsonl_does_not_block,
    |w, _repo| {
        let p = w.home().join(".claude/projects/-r/fifo.jsonl");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        p
    },
    |s, p| {
        assert!(
            reason_of(&s, &p).is_none() && started_of(&s, &p).is_none(),
            "not a transcript at all"
        );
    }
);

bad_input!(
    a_hundred_thousand_files_in_one_directory,
    |w, repo| {
        let dir = w.home().join(".claude/projects/-many");
        std::fs::create_dir_all(&dir).unwrap();
        let body = user_line("s-many", repo);
        for i in 0..100_000 {
            std::fs::write(
                dir.join(format!("f{i:06}.jsonl")),
                if i == 0 { &body[..] } else { b"{}\n" },
            )
            .unwrap();
        }
        set_age(&dir.join("f000000.jsonl"), HOURS_2);
        dir.join("f000000.jsonl")
    },
    |s, p| {
        assert!(started_of(&s, &p).is_some());
        assert!(s["scanned"].as_u64().unwrap() >= 100_000);
    }
);

trait MkParent {
    fn tap_mkdir_parent(self) -> Self;
}

impl MkParent for PathBuf {
    fn tap_mkdir_parent(self) -> Self {
        std::fs::create_dir_all(self.parent().unwrap()).unwrap();
        self
    }
}

#[test]
fn a_transcript_truncated_replaced_or_deleted_after_capture() {
    let l = live_world(3);
    let text = l.lines(0..3);
    write_aged(&l.transcript, text.as_bytes(), HOURS_2);
    l.summary();
    // Replaced by the same bytes under a new inode: verified, not re-captured.
    let tmp = l.transcript.with_extension("new");
    std::fs::write(&tmp, &text).unwrap();
    std::fs::rename(&tmp, &l.transcript).unwrap();
    set_age(&l.transcript, HOURS_2);
    assert_eq!(l.summary()["counts"]["unchanged"], 1);
    // Replaced by different bytes of the same size: prefix-mismatch.
    let other = text.replace("message 1", "MESSAGE 1");
    std::fs::write(&tmp, &other).unwrap();
    std::fs::rename(&tmp, &l.transcript).unwrap();
    set_age(&l.transcript, HOURS_2);
    assert_eq!(
        items(&l.summary(), "needsAttention")[0]["reason"],
        "prefix-mismatch"
    );
    // Deleted (Claude Code's retention): no error, nothing to do.
    std::fs::remove_file(&l.transcript).unwrap();
    let s = l.summary();
    assert_eq!(s["scanned"], 0);
    assert!(items(&s, "needsAttention").is_empty());
    assert_eq!(l.calls().len(), 1);
}

#[test]
fn hostile_rule_files_are_refused_with_a_reason() {
    let w = World::new();
    let dir = w.root().join("rules");
    std::fs::create_dir_all(&dir).unwrap();
    // A YAML alias bomb ("billion laughs").
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let names = ["b", "c", "d", "e", "f", "g", "h", "i"];
    let mut prev = "a";
    for n in names {
        bomb.push_str(&format!(
            "{n}: &{n} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
        prev = n;
    }
    std::fs::write(dir.join("bomb.yaml"), bomb).unwrap();
    std::fs::write(dir.join("huge.yaml"), "# padding\n".repeat(1_100_000)).unwrap();
    std::fs::write(
        dir.join("regex.yaml"),
        "id: rx\nstores: [ { name: s, roots: [ { default: [\"~/x\"] } ], include: [\"*.jsonl\"] } ]\nfields:\n  session_id: [ { filename: \"(a{1000}){1000}\" } ]\n  cwd: [ { value: \"$.cwd\" } ]\n",
    )
    .unwrap();
    let out = w
        .almanac()
        .args(["rules", "validate"])
        .arg(dir.join("bomb.yaml"))
        .arg(dir.join("huge.yaml"))
        .arg(dir.join("regex.yaml"))
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bomb.yaml"), "{err}");
    assert!(
        err.contains("huge.yaml") && err.contains("limited to"),
        "{err}"
    );
    assert!(
        err.contains("regex.yaml") && err.contains("invalid regex"),
        "{err}"
    );
}

#[test]
fn eight_sweeps_at_once_capture_each_session_once_with_one_worker_per_repo() {
    let l = live_world(3);
    for i in 0..6 {
        let id = format!("5e551011-aaaa-4bbb-8ccc-00000000010{i}");
        write_aged(
            &l.w.home()
                .join(format!(".claude/projects/-work-app/{id}.jsonl")),
            claude_line(&id, &l.repo, "hi").as_bytes(),
            HOURS_2,
        );
    }
    let spawn = || {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", l.w.home())
            .env("ALMANAC_HOME", l.w.almanac_home())
            .env("FAKE_DIR", &l.fake)
            .args(["capture", "sweep", "--quiet", "0m"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c.spawn().unwrap()
    };
    let children: Vec<_> = (0..8).map(|_| spawn()).collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|mut c| c.wait().unwrap().code().unwrap())
        .collect();
    assert!(
        codes.iter().all(|c| *c == 0 || *c == 75) && codes.contains(&0),
        "{codes:?}"
    );
    l.wait_idle();
    let runs = l.runs();
    assert_eq!(runs.len(), 6, "{runs:?}");
    assert_eq!(l.calls().len(), 6);
    // One worker at a time: run intervals in the repo never overlap.
    let mut spans: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            (
                r["startedAt"].as_str().unwrap().into(),
                r["finishedAt"].as_str().unwrap().into(),
            )
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "two captures overlapped in one repo: {pair:?}"
        );
    }
    let ledger = l.ledger();
    assert_eq!(ledger["entries"].as_object().unwrap().len(), 6);
}

#[test]
fn a_sweep_while_the_transcript_is_appended_never_splits_a_line() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let path = l.transcript.clone();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        for i in 0..400 {
            let line = format!("{{\"type\":\"user\",\"sessionId\":\"5e551011-aaaa-4bbb-8ccc-000000000001\",\"cwd\":\"x\",\"message\":{{\"role\":\"user\",\"content\":\"{}\"}}}}\n", "w".repeat(i % 97));
            // Written in two pieces: a reader can see half a line.
            let (a, b) = line.split_at(line.len() / 2);
            f.write_all(a.as_bytes()).unwrap();
            f.flush().unwrap();
            f.write_all(b.as_bytes()).unwrap();
        }
    });
    for _ in 0..5 {
        l.summary();
    }
    writer.join().unwrap();
    let text = std::fs::read(&l.transcript).unwrap();
    let e = l.entry();
    let cursor = e["lastCapturedSize"].as_u64().unwrap() as usize;
    assert!(cursor > 0);
    assert_eq!(
        text[cursor - 1],
        b'\n',
        "the cursor sits just after a newline"
    );
    let lines = text[..cursor].iter().filter(|b| **b == b'\n').count() as u64;
    assert_eq!(e["lastCapturedLine"], lines);
}

/// Runs a live sweep with a fault injected; the process aborts at that point.
fn sweep_with_fault(l: &Live, point: &str) {
    let out =
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .env("ALMANAC_FAULT", point)
            .args(["capture", "sweep", "--quiet", "0m"])
            .output()
            .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Either the sweep itself aborted, or (worker points) the sweep succeeded and the worker aborted.
    assert!(
        !out.status.success() || err.is_empty() || err.contains("fault injected"),
        "{err}"
    );
}

fn temps_left(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

fn crash_case(point: &str) {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    sweep_with_fault(&l, point);
    std::thread::sleep(Duration::from_millis(300));
    // Afterwards, ordinary sweeps: the transcript ends captured exactly through line 3.
    for _ in 0..3 {
        l.summary();
    }
    let e = l.entry();
    assert_eq!(e["status"], "done", "{point}: {e}");
    assert_eq!(e["lastCapturedLine"], 3, "{point}");
    let calls = l.calls().len();
    assert!(
        (1..=2).contains(&calls),
        "{point}: captured {calls} times (at most one retry)"
    );
    assert!(
        temps_left(l.w.root()).is_empty(),
        "{point}: temp files left: {:?}",
        temps_left(l.w.root())
    );
    // And a later append is captured from the right place.
    write_aged(
        &l.transcript,
        format!("{first}{}", l.lines(3..4)).as_bytes(),
        HOURS_2,
    );
    let st = items(&l.summary(), "started")[0].clone();
    assert_eq!(
        (st["fromLine"].as_u64(), st["toLine"].as_u64()),
        (Some(4), Some(4)),
        "{point}"
    );
}

#[test]
fn crash_after_the_first_temp_file_is_written() {
    crash_case("atomic-temp-written");
}

#[test]
fn crash_after_a_run_record_is_written() {
    crash_case("run-record-written");
}

#[test]
fn crash_after_the_ledger_is_saved() {
    crash_case("ledger-saved");
}

#[test]
fn crash_after_the_agent_is_spawned() {
    crash_case("agent-spawned");
}

/// A worker killed after it started its agent but before the run record names the agent's process
/// group: no sweep could find that agent to stop it, so it must never start (it would run beside the
/// retry, in the same repo). The gate holds it until the record is written; the worker's death closes
/// the gate, and the agent is never run. `stdin`: the agent profile's, when not the prompt.
fn lost_before_the_agent_is_recorded(stdin: Option<&str>) {
    let l = live_world(3);
    if let Some(stdin) = stdin {
        let config = l.w.almanac_home().join("config.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{text}stdin = \"{stdin}\"\n")).unwrap();
    }
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    sweep_with_fault(&l, "agent-unrecorded");
    // Time for an agent that was not held back to have run (the fake one takes milliseconds).
    std::thread::sleep(Duration::from_millis(1500));
    no_agent_ran(&l);
    captured_once_by_the_retry(&l);
    let log = std::fs::read_to_string(l.runs().last().unwrap()["logPath"].as_str().unwrap());
    let on_stdin = stdin.is_none();
    assert_eq!(
        log.unwrap().contains("(the prompt on stdin)"),
        on_stdin,
        "the profile's stdin was used"
    );
}

/// No agent of this world ran, and none waits at its gate.
fn no_agent_ran(l: &Live) {
    assert!(l.calls().is_empty(), "an agent ran: {:?}", l.calls());
    assert!(gates_left(l).is_empty(), "{:?}", gates_left(l));
}

/// Ordinary sweeps after a run that started no agent: the three lines captured, by one agent run.
fn captured_once_by_the_retry(l: &Live) {
    for _ in 0..3 {
        l.summary();
    }
    let e = l.entry();
    assert_eq!(e["status"], "done", "{e}");
    assert_eq!(e["lastCapturedLine"], 3);
    assert_eq!(l.calls().len(), 1, "captured once, by the retry");
}

/// The held-back agents of this world still waiting at their gate (`/bin/sh` reading its go line).
fn gates_left(l: &Live) -> Vec<String> {
    let agent = l.fake.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("almanac_gate") && c.contains(&agent))
        .collect()
}

/// A run record that cannot be written when the agent's process exists (a full disk here): the agent
/// is never let start, since a worker lost after that would leave it running unrecorded. The run
/// fails saying why, and a later sweep captures the lines once.
#[test]
fn an_agent_whose_process_group_cannot_be_recorded_is_not_started() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[("ALMANAC_FAULT", "enospc-agent-record")]);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    no_agent_ran(&l);
    let e = l.entry();
    let err = e["lastError"].as_str().unwrap_or_default();
    assert!(
        err.contains("the agent was not started") && err.contains("No space left"),
        "{e}"
    );
    captured_once_by_the_retry(&l);
}

#[test]
fn a_worker_lost_before_it_records_its_agent_leaves_no_agent_running() {
    lost_before_the_agent_is_recorded(None);
}

#[test]
fn a_worker_lost_before_it_records_an_agent_without_stdin_leaves_none_running() {
    lost_before_the_agent_is_recorded(Some("none"));
}

#[test]
fn crash_before_the_cursor_commit() {
    crash_case("before-cursor-commit");
}

#[test]
fn crash_during_a_config_toml_edit() {
    let s = crate::automation::sched();
    std::fs::create_dir_all(s.w.almanac_home()).unwrap();
    let original = "# mine\n[capture]\nagent = \"codex\"\n";
    std::fs::write(s.w.almanac_home().join("config.toml"), original).unwrap();
    let program = s.program.display().to_string();
    let out =
        s.w.almanac()
            .env("PATH", s.path())
            .env("FAKE_SCHED_DIR", &s.dir)
            .env("ALMANAC_FAULT", "config-edit")
            .args([
                "automation",
                "install",
                "--scheduler",
                "cron",
                "--program",
                &program,
                "--force",
            ])
            .output()
            .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        std::fs::read_to_string(s.w.almanac_home().join("config.toml")).unwrap(),
        original,
        "the old config is intact"
    );
    assert!(
        !std::fs::read_to_string(s.dir.join("calls"))
            .unwrap_or_default()
            .contains("crontab /"),
        "nothing registered"
    );
    let out = s.install(&["--scheduler", "cron"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.config().contains("# mine") && s.config().contains("capture_since"));
    assert!(
        temps_left(&s.w.almanac_home()).is_empty(),
        "{:?}",
        temps_left(&s.w.almanac_home())
    );
}

#[test]
fn odd_paths_reach_the_agent_as_one_inert_argument_each() {
    let l = live_world(3);
    // A repo and a transcript whose paths hold spaces, quotes, $() and a newline.
    let repo = l.w.repo("work/we'ird $(touch pwned) \"dir\"\nline");
    let id = "5e551011-aaaa-4bbb-8ccc-0000000000f1";
    let transcript = l.w.home().join(format!(
        ".claude/projects/-odd $(touch pwned2) '\"/{id}.jsonl"
    ));
    let line = serde_json::json!({"type": "user", "sessionId": id, "cwd": repo, "message": {"role": "user", "content": "hi"}}).to_string() + "\n";
    write_aged(&transcript, line.as_bytes(), HOURS_2);
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"fake\"\n[capture.agents.fake]\ncommand = [\"{}\", \"{{prompt_file}}\", \"{{session_id}}\", \"{{run_id}}\", \"{{transcript}}\", \"{{repo}}\"]\n",
            l.fake.join("fake-agent").display()
        ),
    )
    .unwrap();
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    // The worker of the odd repo (l.summary() waits for the usual repo only).
    let start = std::time::Instant::now();
    while !repo.join(".almanac/pages/notes.md").is_file()
        && start.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs_dir = repo.join(".almanac/runs");
    let runs: Vec<String> = std::fs::read_dir(&runs_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let calls = std::fs::read_to_string(l.fake.join("calls.log")).unwrap_or_else(|e| {
        panic!(
            "{e}: {runs:?} {}",
            std::fs::read_to_string(runs_dir.join("worker.log")).unwrap_or_default()
        )
    });
    assert!(calls.contains(&transcript.display().to_string()), "{calls}");
    for pwned in ["pwned", "pwned2"] {
        assert!(
            walkdir::WalkDir::new(l.w.root())
                .into_iter()
                .filter_map(|e| e.ok())
                .all(|e| e.file_name() != pwned),
            "a shell ran {pwned}"
        );
    }
    assert!(
        repo.join(".almanac/pages/notes.md").is_file(),
        "the agent ran in the odd repo"
    );
}

#[test]
fn nothing_is_written_outside_almanac_home_the_wikis_and_the_agent() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let outside = |root: &Path| -> Vec<(String, std::time::SystemTime)> {
        walkdir::WalkDir::new(root)
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let p = e.path();
                !p.starts_with(l.w.almanac_home())
                    && !p.starts_with(l.repo.join(".almanac"))
                    && !p.starts_with(&l.fake)
            })
            .map(|e| {
                (
                    e.path().display().to_string(),
                    e.metadata().unwrap().modified().unwrap(),
                )
            })
            .collect()
    };
    let before = outside(l.w.root());
    l.summary();
    l.summary();
    assert_eq!(
        outside(l.w.root()),
        before,
        "only ALMANAC_HOME and the repo's .almanac/ changed"
    );
    // And what almanac wrote is private.
    // (The test made ALMANAC_HOME itself and wrote config.toml, as a user would.)
    let made_by_test = [l.w.almanac_home(), l.w.almanac_home().join("config.toml")];
    for e in walkdir::WalkDir::new(l.w.almanac_home())
        .into_iter()
        .chain(walkdir::WalkDir::new(l.repo.join(".almanac/runs")))
        .filter_map(|e| e.ok())
        .filter(|e| !made_by_test.contains(&e.path().to_path_buf()))
    {
        let mode = std::os::unix::fs::PermissionsExt::mode(&e.metadata().unwrap().permissions());
        assert_eq!(
            mode & 0o077,
            0,
            "{} is {:o}",
            e.path().display(),
            mode & 0o777
        );
    }
}
