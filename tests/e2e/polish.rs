//! The CLI contract: completions and man pages from the clap definitions, exit codes, stdout for results
//! only, a closed pipe, `doctor`, and JSON output that matches the schemas in schemas/output/.

use crate::common::*;
use crate::live::{claude_line, live_world};
use std::io::Read;

/// Every subcommand path, e.g. ["capture", "sweep"], from `--help` output (what a user sees).
fn subcommands(w: &World, path: &[&str]) -> Vec<Vec<String>> {
    let out = w.almanac().args(path).arg("--help").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut found = Vec::new();
    let mut in_cmds = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_cmds = true;
            continue;
        }
        if in_cmds {
            let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            else {
                break;
            };
            if name == "help" {
                continue;
            }
            let mut p: Vec<String> = path.iter().map(|s| s.to_string()).collect();
            p.push(name.to_string());
            found.push(p.clone());
            let refs: Vec<&str> = p.iter().map(String::as_str).collect();
            found.extend(subcommands(w, &refs));
        }
    }
    found
}

/// Where `v` does not match `schemas/output/<schema>`.
fn schema_errors(schema: &str, v: &serde_json::Value) -> Vec<String> {
    let path = format!("{}/schemas/output/{schema}", env!("CARGO_MANIFEST_DIR"));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let validator = jsonschema::draft202012::new(&s).unwrap();
    validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

pub fn validate(schema: &str, v: &serde_json::Value) {
    let errors = schema_errors(schema, v);
    assert!(errors.is_empty(), "{schema}: {errors:?}\n{v}");
}

#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    let w = World::new();
    let cmds = subcommands(&w, &[]);
    assert!(cmds.len() >= 20, "{cmds:?}");
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let out = w.almanac().args(["completions", shell]).output().unwrap();
        assert!(out.status.success());
        let script = String::from_utf8(out.stdout).unwrap();
        for c in &cmds {
            assert!(
                script.contains(c.last().unwrap().as_str()),
                "{shell} completion lacks {c:?}"
            );
        }
    }
    let dir = w.root().join("man");
    let out = w
        .almanac()
        .args(["man", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    for c in &cmds {
        let page = dir.join(format!("almanac-{}.1", c.join("-")));
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|_| panic!("no page {}", page.display()));
        assert!(
            text.contains(".TH") && text.contains(".SH NAME"),
            "{}",
            page.display()
        );
    }
    let main = String::from_utf8(w.almanac().arg("man").output().unwrap().stdout).unwrap();
    for top in cmds.iter().filter(|c| c.len() == 1) {
        assert!(main.contains(&top[0]), "main page lists {top:?}");
    }
}

#[test]
fn exit_codes_follow_the_contract() {
    let l = live_world(1);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    l.set_exit(3);
    let run = |args: &[&str]| {
        l.w.almanac()
            .env("FAKE_DIR", &l.fake)
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
            .unwrap()
    };
    assert_eq!(run(&["capture", "sweep", "--quiet", "0m"]), 0);
    l.wait_idle();
    // The run failed with max_attempts 1: the transcript needs attention.
    assert_eq!(
        run(&["capture", "sweep", "--dry-run", "--quiet", "0m"]),
        0,
        "needs attention is not an error by default"
    );
    assert_eq!(
        run(&["capture", "sweep", "--dry-run", "--quiet", "0m", "--strict"]),
        1
    );
    assert_eq!(run(&["capture", "sweep", "--bogus"]), 2);
    assert_eq!(run(&["capture", "sweep", "--quiet", "soon"]), 2);
    std::fs::write(l.w.almanac_home().join("config.toml"), "[capture\n").unwrap();
    assert_eq!(run(&["capture", "sweep"]), 78);
}

#[test]
fn json_goes_to_stdout_alone_and_a_closed_pipe_is_quiet() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let out =
        l.w.almanac()
            .args([
                "capture",
                "sweep",
                "--dry-run",
                "--json",
                "--quiet",
                "0m",
                "--apps",
                "claude,nope",
            ])
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("even an error is JSON on stdout");
    validate("error.schema.json", &v);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("almanac: "));
    // Many sessions, a reader that stops after one line.
    for i in 0..300 {
        let id = format!("5e551011-aaaa-4bbb-8ccc-{i:012}");
        write_aged(
            &l.w.home().join(format!(".claude/projects/-p/{id}.jsonl")),
            claude_line(&id, &l.repo, "x").as_bytes(),
            HOURS_2,
        );
    }
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"))
        .env_clear()
        .env("HOME", l.w.home())
        .env("ALMANAC_HOME", l.w.almanac_home())
        .args(["capture", "sessions"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn json_outputs_match_their_schemas() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (_, dry) = {
        let out =
            l.w.almanac()
                .env("FAKE_DIR", &l.fake)
                .args(["capture", "sweep", "--dry-run", "--json", "--quiet", "0m"])
                .output()
                .unwrap();
        (
            0,
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
        )
    };
    validate("sweep.schema.json", &dry);
    let (_, live) = l.sweep(&[]);
    validate("sweep.schema.json", &live);
    l.wait_idle();
    let (_, again) = l.sweep(&[]);
    validate("sweep.schema.json", &again);
    for (args, schema) in [
        (
            vec!["capture", "turns", "--json", l.transcript.to_str().unwrap()],
            "turns.schema.json",
        ),
        (
            vec![
                "capture",
                "turns",
                "--json",
                "--latest",
                l.transcript.to_str().unwrap(),
            ],
            "turns.schema.json",
        ),
        (
            vec![
                "capture",
                "turns",
                "--json",
                "--conversation",
                "--since-line",
                "1",
                l.transcript.to_str().unwrap(),
            ],
            "turns.schema.json",
        ),
        (
            vec!["capture", "sessions", "--json"],
            "sessions.schema.json",
        ),
        (vec!["doctor", "--json"], "doctor.schema.json"),
    ] {
        let out =
            l.w.almanac()
                .env("FAKE_DIR", &l.fake)
                .args(&args)
                .output()
                .unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        validate(schema, &v);
    }
}

#[test]
fn doctor_names_each_problem_with_its_fix() {
    let l = live_world(1);
    // The fake agent is the configured one and is found (an absolute path).
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let out = l.w.almanac().args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_name = |v: &serde_json::Value, n: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == n)
            .cloned()
    };
    assert_eq!(by_name(&v, "rules").unwrap()["status"], "ok");
    assert_eq!(by_name(&v, "agent").unwrap()["status"], "ok");
    assert!(by_name(&v, "claude stores").unwrap()["detail"]
        .as_str()
        .unwrap()
        .contains("1 transcripts"));
    assert!(by_name(&v, "repos").unwrap()["detail"]
        .as_str()
        .unwrap()
        .contains(l.repo.to_str().unwrap()));
    assert_eq!(
        by_name(&v, "scheduler").unwrap()["fix"],
        "almanac automation install"
    );
    // A failing agent and max_attempts 1: the transcript needs attention; doctor says how to fix it.
    l.set_exit(2);
    l.summary();
    let out = l.w.almanac().args(["doctor"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("FAIL needs attention: retry-budget-exhausted"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fix: almanac capture reset {}",
            l.transcript.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("warn failed run run_") && text.contains("exited with code 2"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fix: almanac capture status --repo {}",
            l.repo.display()
        )),
        "{text}"
    );
}

#[test]
fn every_other_json_output_matches_its_schema() {
    let l = live_world(3);
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    l.summary();
    let t = l.transcript.to_str().unwrap().to_string();
    let repo = l.repo.to_str().unwrap().to_string();
    let rules = format!("{}/rules/claude.yaml", env!("CARGO_MANIFEST_DIR"));
    for (args, schema) in [
        (vec!["rules", "list", "--json"], "rules-list.schema.json"),
        (
            vec!["rules", "validate", "--json"],
            "rules-validate.schema.json",
        ),
        (
            vec!["rules", "validate", "--json", &rules],
            "rules-validate.schema.json",
        ),
        (
            vec!["rules", "explain", "--json", &t],
            "rules-explain.schema.json",
        ),
        (
            vec!["capture", "status", "--json", "--repo", &repo],
            "capture-status.schema.json",
        ),
        (
            vec![
                "capture",
                "prune",
                "--json",
                "--dry-run",
                "--older-than",
                "0s",
                "--repo",
                &repo,
            ],
            "capture-prune.schema.json",
        ),
        (
            vec!["capture", "reset", "--json", "--skip-existing", &t],
            "capture-reset.schema.json",
        ),
    ] {
        let out = l.w.almanac().args(&args).output().unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        validate(schema, &v);
    }
    let s = crate::automation::sched();
    let program = s.program.display().to_string();
    for (args, schema) in [
        (
            vec![
                "automation",
                "install",
                "--json",
                "--scheduler",
                "cron",
                "--program",
                &program,
                "--force",
            ],
            "automation-install.schema.json",
        ),
        (
            vec!["automation", "status", "--json"],
            "automation-status.schema.json",
        ),
        (
            vec!["automation", "uninstall", "--json"],
            "automation-uninstall.schema.json",
        ),
    ] {
        let out = s.run(&args);
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        validate(schema, &v);
    }
}

/// A failing agent that changed a clean file and a file the user had already modified: the run record
/// and the ledger entry carry `wroteOutsideWiki` and `alsoChangedDuringRun`, and `capture status`, the
/// sweep and `doctor` still match their schemas, which describe those fields.
#[test]
fn outputs_naming_writes_outside_the_wiki_match_their_schemas() {
    let l = crate::wiki_only::custom_agent_world(
        "#!/bin/sh\necho '// more' >> src/lib.rs\necho 'fn main() { 1; }' > src/main.rs\nexit 1\n",
    );
    std::fs::write(l.repo.join("src/lib.rs"), "pub fn a() {}\n").unwrap();
    crate::wiki_only::git(&l.repo, &["init", "-q"]);
    crate::wiki_only::git(&l.repo, &["add", "src"]);
    crate::wiki_only::git(&l.repo, &["commit", "-qm", "init"]);
    std::fs::write(l.repo.join("src/lib.rs"), "pub fn a() { todo!() }\n").unwrap();
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let (_, live) = l.sweep(&[]);
    validate("sweep.schema.json", &live);
    l.wait_idle();
    let repo = l.repo.to_str().unwrap();
    let mut status = json_ok(
        l.w.almanac()
            .args(["capture", "status", "--json", "--repo", repo]),
    );
    let run = &status["recentFailures"][0];
    assert_eq!(
        run["wroteOutsideWiki"],
        serde_json::json!(["src/main.rs"]),
        "{status}"
    );
    assert_eq!(
        run["alsoChangedDuringRun"],
        serde_json::json!(["src/lib.rs"]),
        "{status}"
    );
    let entry = &status["entries"][0]["wroteOutsideWiki"];
    assert_eq!(
        entry["paths"],
        serde_json::json!(["src/main.rs"]),
        "{status}"
    );
    assert_eq!(
        entry["alsoChangedDuringRun"],
        serde_json::json!(["src/lib.rs"]),
        "{status}"
    );
    validate("capture-status.schema.json", &status);
    for (args, schema) in [
        (
            vec!["capture", "sweep", "--dry-run", "--json", "--quiet", "0m"],
            "sweep.schema.json",
        ),
        (vec!["doctor", "--json"], "doctor.schema.json"),
    ] {
        let out = l.w.almanac().args(&args).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v.to_string().contains("agent-wrote-outside-wiki"), "{v}");
        validate(schema, &v);
    }
    // The schema describes the fields: wrong shapes of them are rejected.
    status["entries"][0]["wroteOutsideWiki"]["paths"] = "src/main.rs".into();
    status["recentFailures"][0]["alsoChangedDuringRun"] = 1.into();
    let errors = schema_errors("capture-status.schema.json", &status);
    assert_eq!(errors.len(), 2, "{errors:?}");
}

#[test]
fn doctor_finds_the_agent_on_its_profiles_own_path_as_the_worker_does() {
    let l = live_world(1);
    let dir = l.w.root().join("agent-only-bin");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(l.fake.join("fake-agent"), dir.join("my-agent")).unwrap();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"mine\"\n[capture.agents.mine]\ncommand = [\"my-agent\", \"{{prompt_file}}\"]\nenv = {{ PATH = \"{}\" }}\n",
            dir.display()
        ),
    )
    .unwrap();
    let out = l.w.almanac().args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent")
        .cloned()
        .unwrap();
    assert_eq!(agent["status"], "ok", "{agent}");
    assert!(
        agent["detail"]
            .as_str()
            .unwrap()
            .contains(dir.join("my-agent").to_str().unwrap()),
        "{agent}"
    );
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let head = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let version = env!("CARGO_PKG_VERSION");
    match head {
        // Built from a git checkout (as here and in CI): the commit it was built from.
        Some(head) => assert_eq!(text, format!("almanac {version} (commit {head})")),
        // Built from a package: its version alone.
        None => assert_eq!(text, format!("almanac {version}")),
    }
}
