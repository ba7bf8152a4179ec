//! The real Claude Code and Codex CLIs write transcripts that the dry-run sweep finds and maps.
//! `.ci/run` installs the pinned versions with npm and sets ALMANAC_CLIENTS_BIN and
//! ALMANAC_REQUIRE_REAL_CLIENTS=1. Offline, each CLI writes its transcript within seconds and then
//! retries the network forever, so the test waits for the file and kills the process group.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

pub fn find_client(name: &str) -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("ALMANAC_CLIENTS_BIN") {
        let p = Path::new(&dir).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

pub fn require() -> bool {
    std::env::var("ALMANAC_REQUIRE_REAL_CLIENTS").is_ok_and(|v| v == "1")
}

pub fn client_or_skip(name: &str) -> Option<PathBuf> {
    match find_client(name) {
        Some(p) => Some(p),
        None if require() => panic!("ALMANAC_REQUIRE_REAL_CLIENTS=1 but `{name}` is not installed (set ALMANAC_CLIENTS_BIN or PATH)"),
        None => {
            eprintln!("skipping: `{name}` not found on ALMANAC_CLIENTS_BIN or PATH; .ci/run installs it");
            None
        }
    }
}

struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        // The client was started as a process-group leader: kill the whole group.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

fn spawn_client(w: &World, program: &Path, args: &[&str], cwd: &Path) -> Group {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", w.home())
        .env("ANTHROPIC_API_KEY", "sk-ant-dummy-for-tests")
        .env("OPENAI_API_KEY", "sk-dummy-for-tests")
        .env("CODEX_API_KEY", "sk-dummy-for-tests")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    Group(cmd.spawn().expect("start the client"))
}

fn wait_for(dir: &Path, pred: impl Fn(&Path) -> bool, limit: Duration) -> Option<PathBuf> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(p) = walkdir::WalkDir::new(dir)
            .into_iter()
            .filter_map(|e| e.ok())
            .map(|e| e.into_path())
            .find(|p| pred(p) && std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

#[test]
fn real_claude_code_session_is_found_and_mapped() {
    let Some(claude) = client_or_skip("claude") else {
        return;
    };
    let w = World::new();
    let repo = w.repo("my_repo.x");
    let session = "0b6f3c2e-58a1-4e0f-9d7c-2a4b6c8d0e1f";
    let client = spawn_client(
        &w,
        &claude,
        &["-p", "Say hello", "--session-id", session],
        &repo,
    );
    let file = wait_for(
        &w.home().join(".claude"),
        |p| {
            p.file_name()
                .is_some_and(|n| n == format!("{session}.jsonl").as_str())
        },
        Duration::from_secs(120),
    )
    .expect("claude wrote its transcript within 120 s");
    // Let it write a few more records, then stop it: the sweep must cope with whatever is on disk.
    std::thread::sleep(Duration::from_secs(2));
    drop(client);
    let s = w.dry_run(&["--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "exactly the one real session: {s}");
    assert_eq!(started[0]["app"], "claude");
    assert_eq!(started[0]["sessionId"], session);
    assert_eq!(started[0]["transcriptPath"], file.display().to_string());
    assert_eq!(started[0]["repoRoot"], repo.display().to_string());
}

#[test]
fn real_codex_session_is_found_and_mapped() {
    let Some(codex) = client_or_skip("codex") else {
        return;
    };
    let w = World::new();
    let repo = w.repo("my_repo.x");
    let client = spawn_client(
        &w,
        &codex,
        &["exec", "--skip-git-repo-check", "Say hello"],
        &repo,
    );
    let file = wait_for(
        &w.home().join(".codex/sessions"),
        |p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy().starts_with("rollout-")
                    && n.to_string_lossy().ends_with(".jsonl")
            })
        },
        Duration::from_secs(120),
    )
    .expect("codex wrote its rollout within 120 s");
    std::thread::sleep(Duration::from_secs(2));
    drop(client);
    let name = file
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches(".jsonl")
        .to_string();
    let id_from_name = &name[name.len() - 36..];
    let s = w.dry_run(&["--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "exactly the one real session: {s}");
    assert_eq!(started[0]["app"], "codex");
    assert_eq!(started[0]["sessionId"], id_from_name);
    assert_eq!(started[0]["repoRoot"], repo.display().to_string());
}
