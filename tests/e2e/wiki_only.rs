//! The check after every capture run: whatever the agent, a change outside `.almanac/` is
//! recorded (`wroteOutsideWiki`), listed as `agent-wrote-outside-wiki` and never reverted; a file the
//! user had already modified before the run and edits during it is not blamed on the agent.

use crate::common::*;
use crate::live::{live_world, Live};
use std::process::Command;
use std::time::{Duration, Instant};

const PERMISSIVE_AGENT: &str = r##"#!/bin/sh
# A custom agent with no restrictions that "fixes" the code it read about.
echo 'fn main() { println!("fixed by the agent"); }' > src/main.rs
mkdir -p .almanac/pages
echo "# Notes" > .almanac/pages/x.md
"##;

/// A custom agent that writes outside the wiki, changes a file outside it and then fails.
pub const FAILING_AGENT: &str = r##"#!/bin/sh
echo 'fn main() { println!("half fixed"); }' > src/main.rs
echo "the model gave up" >&2
exit 1
"##;

fn permissive_world() -> Live {
    custom_agent_world(PERMISSIVE_AGENT)
}

/// A live world whose agent is `script`, run in the repo root, with `src/main.rs` in the repo.
pub fn custom_agent_world(script: &str) -> Live {
    let l = live_world(3);
    let agent = l.fake.join("permissive-agent");
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"permissive\"\ntimeout = \"1m\"\n\n[capture.agents.permissive]\ncommand = [\"{}\", \"{{prompt_file}}\"]\n",
            agent.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(l.repo.join("src")).unwrap();
    std::fs::write(l.repo.join("src/main.rs"), "fn main() {}\n").unwrap();
    l
}

pub fn attention(s: &serde_json::Value) -> Vec<&serde_json::Value> {
    items(s, "needsAttention")
        .into_iter()
        .filter(|i| i["reason"] == "agent-wrote-outside-wiki")
        .collect()
}

#[test]
fn a_permissive_agent_writing_outside_the_wiki_is_reported_and_not_reverted() {
    let l = permissive_world();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    let run = &l.runs()[0];
    assert_eq!(run["status"], "done", "{run}");
    assert_eq!(
        run["wroteOutsideWiki"],
        serde_json::json!(["src/main.rs"]),
        "{run}"
    );
    assert!(run.get("alsoChangedDuringRun").is_none(), "{run}");
    assert!(
        std::fs::read_to_string(l.repo.join("src/main.rs"))
            .unwrap()
            .contains("fixed by the agent"),
        "never reverted"
    );
    assert!(l.repo.join(".almanac/pages/x.md").is_file());
    assert_eq!(
        l.entry()["lastCapturedLine"],
        3,
        "the cursor moved: the run is done"
    );
    // The next sweep, capture status and doctor say so.
    let s = l.w.dry_run(&["--quiet", "0m"]);
    let a = attention(&s);
    assert_eq!(a.len(), 1, "{s}");
    assert_eq!(a[0]["transcriptPath"], l.transcript.display().to_string());
    assert!(
        a[0]["detail"].as_str().unwrap().contains("src/main.rs"),
        "{s}"
    );
    assert!(a[0]["detail"]
        .as_str()
        .unwrap()
        .contains(run["runId"].as_str().unwrap()));
    let status = json_ok(
        l.w.almanac()
            .args(["capture", "status", "--json", "--repo"])
            .arg(&l.repo),
    );
    assert_eq!(
        status["entries"][0]["wroteOutsideWiki"]["paths"],
        serde_json::json!(["src/main.rs"]),
        "{status}"
    );
    let text =
        l.w.almanac()
            .args(["capture", "status", "--repo"])
            .arg(&l.repo)
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("agent-wrote-outside-wiki") && text.contains("src/main.rs"),
        "{text}"
    );
    let doctor = l.w.almanac().args(["doctor"]).output().unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("agent-wrote-outside-wiki"), "{doctor}");
    // Once checked, `capture reset --skip-existing` clears it.
    let mut reset = l.w.almanac();
    reset
        .args(["capture", "reset", "--skip-existing", "--json"])
        .arg(&l.transcript);
    json_ok(&mut reset);
    assert!(attention(&l.w.dry_run(&["--quiet", "0m"])).is_empty());
}

pub fn git(repo: &std::path::Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

#[test]
fn a_user_edit_during_the_run_is_not_blamed_on_the_agent() {
    let l = live_world(3);
    std::fs::create_dir_all(l.repo.join("src")).unwrap();
    std::fs::write(l.repo.join("src/lib.rs"), "pub fn a() {}\n").unwrap();
    git(&l.repo, &["init", "-q"]);
    git(&l.repo, &["add", "src"]);
    git(&l.repo, &["commit", "-qm", "init"]);
    // The user is in the middle of editing src/lib.rs when the run starts...
    std::fs::write(l.repo.join("src/lib.rs"), "pub fn a() { todo!() }\n").unwrap();
    std::fs::write(l.fake.join("sleep"), "3").unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[]);
    assert_eq!(code, 0, "{v}");
    // ...and saves it again while the (well-behaved) agent works.
    let start = Instant::now();
    while !l.fake.join("agent.pid").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the agent never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(l.repo.join("src/lib.rs"), "pub fn a() { 1 }\n").unwrap();
    l.wait_idle();
    let run = &l.runs()[0];
    assert_eq!(run["status"], "done", "{run}");
    assert!(run.get("wroteOutsideWiki").is_none(), "not blamed: {run}");
    assert_eq!(
        run["alsoChangedDuringRun"],
        serde_json::json!(["src/lib.rs"]),
        "{run}"
    );
    assert!(attention(&l.w.dry_run(&["--quiet", "0m"])).is_empty());
    assert_eq!(
        std::fs::read_to_string(l.repo.join("src/lib.rs")).unwrap(),
        "pub fn a() { 1 }\n"
    );
}

#[test]
fn a_failed_run_that_wrote_outside_the_wiki_is_listed_too() {
    let l = custom_agent_world(FAILING_AGENT);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    let run = &l.runs()[0];
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        run["wroteOutsideWiki"],
        serde_json::json!(["src/main.rs"]),
        "{run}"
    );
    // The failure spent an attempt and kept the cursor, and the entry keeps what the run changed.
    let e = l.entry();
    assert_eq!(
        (e["status"].as_str(), e["attempts"].as_u64()),
        (Some("failed"), Some(1)),
        "{e}"
    );
    assert_eq!(e["lastCapturedLine"], 0, "{e}");
    assert_eq!(e["wroteOutsideWiki"]["runId"], run["runId"], "{e}");
    assert_eq!(
        e["wroteOutsideWiki"]["paths"],
        serde_json::json!(["src/main.rs"]),
        "{e}"
    );
    assert!(
        std::fs::read_to_string(l.repo.join("src/main.rs"))
            .unwrap()
            .contains("half fixed"),
        "never reverted"
    );
    // Sweeps, capture status and doctor list it.
    let s = l.w.dry_run(&["--quiet", "0m"]);
    let a = attention(&s);
    assert_eq!(a.len(), 1, "{s}");
    assert!(
        a[0]["detail"].as_str().unwrap().contains("src/main.rs"),
        "{s}"
    );
    let status = json_ok(
        l.w.almanac()
            .args(["capture", "status", "--json", "--repo"])
            .arg(&l.repo),
    );
    assert_eq!(
        status["entries"][0]["wroteOutsideWiki"]["paths"],
        serde_json::json!(["src/main.rs"]),
        "{status}"
    );
    let doctor = l.w.almanac().args(["doctor"]).output().unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("agent-wrote-outside-wiki"), "{doctor}");
    // The retry (the agent still fails) keeps the finding; a later success would not clear it either.
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "retried: {s}");
    assert_eq!(attention(&s).len(), 1, "{s}");
    assert_eq!(l.entry()["attempts"], 2);
    assert!(l.entry()["wroteOutsideWiki"].is_object());
}
