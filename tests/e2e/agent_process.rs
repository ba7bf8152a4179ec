//! The agent process and what it is given: the prompt on stdin (never in argv), a missing or unreadable
//! prompt file, a detached child holding the agent's stdout, bounded run logs and stdout lines, the
//! worker log's rotation, and a prompt too long for an argument.

use crate::common::*;
use crate::live::{live_world, Live};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes `script` as `name` in the fake dir and a config whose agent `probe` runs it with `args`;
/// `extra` is appended to the `[capture.agents.probe]` table, `capture` to `[capture]`.
fn probe(l: &Live, script: &str, args: &[&str], capture: &str, extra: &str) -> PathBuf {
    let agent = l.fake.join("probe-agent");
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"probe\"\nmax_attempts = 3\ntimeout = \"1m\"\n{capture}\n[capture.agents.probe]\ncommand = [\"{}\", {}]\n{extra}\n",
            agent.display(),
            args.join(", ")
        ),
    )
    .unwrap();
    agent
}

/// A fake program named `name` first on PATH (for the shipped profiles); returns the PATH to use.
fn on_path(l: &Live, name: &str, script: &str) -> String {
    let bin = l.w.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join(name), script).unwrap();
    std::fs::set_permissions(
        bin.join(name),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Queues one run with the worker lock held, so no worker starts; returns the run id.
fn queue_only(l: &Live) -> String {
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(l.repo.join(".almanac/runs/worker.lock"))
        .unwrap();
    lock.lock().unwrap();
    let s = l.sweep_args(&[]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    drop(lock);
    started[0]["runId"].as_str().unwrap().to_string()
}

/// Runs the repo's worker in the foreground, killed after `secs`; returns how long it took.
fn run_worker(l: &Live, secs: u64) -> Duration {
    let start = Instant::now();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", l.w.home())
        .env("ALMANAC_HOME", l.w.almanac_home())
        .env("FAKE_DIR", &l.fake)
        .args(["capture", "worker", "--repo"])
        .arg(&l.repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            return start.elapsed();
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn run_log(l: &Live, run: &str) -> String {
    String::from_utf8_lossy(
        &std::fs::read(l.repo.join(format!(".almanac/runs/{run}.log"))).unwrap_or_default(),
    )
    .into_owned()
}

fn prompt_path(l: &Live, run: &str) -> PathBuf {
    l.repo.join(format!(".almanac/runs/{run}.prompt.md"))
}

/// A fake shipped CLI: its arguments one per line, then its stdin.
const RECORDER: &str = r#"#!/bin/sh
for a in "$@"; do echo "ARG:$a"; done > "$FAKE_DIR/args"
cat > "$FAKE_DIR/stdin"
echo '{"type":"thread.started","thread_id":"0199aaaa-bbbb-7ccc-8ddd-000000000001"}'
"#;

fn shipped_profile_run(agent: &str) {
    let l = live_world(3);
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!("[capture]\nagent = \"{agent}\"\n"),
    )
    .unwrap();
    let path = on_path(&l, agent, RECORDER);
    let run = queue_only(&l);
    let prompt = std::fs::read_to_string(prompt_path(&l, &run)).unwrap();
    assert!(prompt.contains("almanac-capture-run: "));
    let mut cmd = l.w.almanac();
    cmd.env("PATH", path)
        .env("FAKE_DIR", &l.fake)
        .args(["capture", "worker", "--repo"])
        .arg(&l.repo);
    assert!(cmd.output().unwrap().status.success());
    let args = std::fs::read_to_string(l.fake.join("args")).unwrap();
    assert!(
        !args.contains("almanac-capture-run") && !args.contains("message 1"),
        "argv holds no prompt text: {args}"
    );
    // On stdin: the prompt, with the conversation almanac sealed before its last line (the marker).
    let stdin = std::fs::read_to_string(l.fake.join("stdin")).unwrap();
    let conversation =
        std::fs::read_to_string(l.repo.join(format!(".almanac/runs/{run}.transcript.md"))).unwrap();
    let (head, marker) = prompt.rsplit_once("\nalmanac-capture-run: ").unwrap();
    assert!(
        stdin.starts_with(head),
        "the agent read the prompt on stdin: {stdin}"
    );
    assert!(
        stdin.contains(&format!(
            "=== conversation begins ===\n{}\n=== conversation ends ===\n",
            conversation.trim_end()
        )),
        "{stdin}"
    );
    assert!(
        stdin.ends_with(&format!("\nalmanac-capture-run: {marker}")),
        "{stdin}"
    );
    assert_eq!(l.runs()[0]["status"], "done", "{}", run_log(&l, &run));
    assert!(!run_log(&l, &run).contains("message 1"));
}

#[test]
fn the_shipped_claude_profile_gets_the_prompt_on_stdin_not_in_argv() {
    shipped_profile_run("claude");
}

#[test]
fn the_shipped_codex_profile_gets_the_prompt_on_stdin_not_in_argv() {
    shipped_profile_run("codex");
}

const STDIN_AGENT: &str = r#"#!/bin/sh
cat > "$FAKE_DIR/stdin-$1"
echo started > "$FAKE_DIR/started-$1"
"#;

#[test]
fn a_missing_prompt_file_fails_the_run_and_keeps_the_cursor() {
    let l = live_world(3);
    probe(&l, STDIN_AGENT, &["{run_id}"], "", "stdin = \"prompt\"");
    let run = queue_only(&l);
    let prompt = prompt_path(&l, &run);
    std::fs::remove_file(&prompt).unwrap();
    run_worker(&l, 60);
    assert!(
        !l.fake.join(format!("started-{run}")).exists(),
        "no agent is started without its prompt"
    );
    let r = &l.runs()[0];
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("cannot read the prompt file") && err.contains(&prompt.display().to_string()),
        "{r}"
    );
    assert_eq!(
        l.entry()["lastCapturedLine"].as_u64().unwrap_or(0),
        0,
        "the cursor stays before the lines no agent was asked to capture: {}",
        l.entry()
    );
}

#[test]
fn an_unreadable_prompt_file_fails_the_run_naming_the_file() {
    let l = live_world(3);
    probe(&l, STDIN_AGENT, &["{run_id}"], "", "stdin = \"prompt\"");
    let run = queue_only(&l);
    let prompt = prompt_path(&l, &run);
    std::fs::remove_file(&prompt).unwrap();
    std::fs::create_dir(&prompt).unwrap();
    run_worker(&l, 60);
    assert!(!l.fake.join(format!("started-{run}")).exists());
    let r = &l.runs()[0];
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error"].as_str().unwrap_or_default();
    assert!(err.contains(&prompt.display().to_string()), "{r}");
    assert!(
        l.entry()["lastCapturedLine"].as_u64().unwrap_or(0) == 0,
        "{}",
        l.entry()
    );
}

/// Kills a process group when the test ends, whatever happened.
struct KillGroupFile(PathBuf);

impl Drop for KillGroupFile {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

const ESCAPING_AGENT: &str = r#"#!/bin/sh
echo '{"type":"thread.started","thread_id":"0199aaaa-bbbb-7ccc-8ddd-000000000002"}'
# A child in a session of its own that keeps the agent's stdout open.
setsid sh -c 'echo $$ > "$FAKE_DIR/escaped.pid"; exec sleep 300' &
sleep 0.3
exit 0
"#;

#[test]
fn a_detached_child_holding_stdout_does_not_hang_the_worker() {
    let l = live_world(3);
    probe(
        &l,
        ESCAPING_AGENT,
        &["{run_id}"],
        "",
        "stdout_session_event = \"thread.started\"\nstdout_session_field = \"thread_id\"",
    );
    let run = queue_only(&l);
    let _kill = KillGroupFile(l.fake.join("escaped.pid"));
    // The timeout is 1m; the agent itself exits at once.
    let took = run_worker(&l, 40);
    assert!(took < Duration::from_secs(30), "the worker hung: {took:?}");
    let r = &l.runs()[0];
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(r["agentSessionId"], "0199aaaa-bbbb-7ccc-8ddd-000000000002");
    let pid = std::fs::read_to_string(l.fake.join("escaped.pid")).unwrap();
    let log = run_log(&l, &run);
    assert!(
        log.contains("left its process group") && log.contains(&format!("pid {}", pid.trim())),
        "{log}"
    );
}

const HANGING_AGENT: &str = r#"#!/bin/sh
echo '{"type":"thread.started","thread_id":"0199aaaa-bbbb-7ccc-8ddd-000000000003"}'
setsid sh -c 'echo $$ > "$FAKE_DIR/escaped.pid"; exec sleep 300' &
exec sleep 300
"#;

#[test]
fn the_timeout_bounds_the_whole_run_pipes_included() {
    let l = live_world(3);
    probe(
        &l,
        HANGING_AGENT,
        &["{run_id}"],
        "timeout = \"2s\"",
        "stdout_session_event = \"thread.started\"\nstdout_session_field = \"thread_id\"",
    );
    let cfg = l.w.almanac_home().join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("timeout = \"1m\"\n", "")).unwrap();
    let run = queue_only(&l);
    let _kill = KillGroupFile(l.fake.join("escaped.pid"));
    let took = run_worker(&l, 40);
    assert!(took < Duration::from_secs(20), "the worker hung: {took:?}");
    let r = &l.runs()[0];
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("timed out"), "{r}");
    assert!(run_log(&l, &run).contains("left its process group"));
}

const CHATTY_AGENT: &str = r#"#!/bin/sh
echo FIRST-LINE
i=0
while [ $i -lt 4000 ]; do
  echo "stdout line $i: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
  echo "stderr line $i: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy" >&2
  i=$((i+1))
done
echo LAST-LINE
"#;

#[test]
fn the_run_log_keeps_head_and_tail_within_the_configured_size() {
    let l = live_world(3);
    probe(&l, CHATTY_AGENT, &["{run_id}"], "max_log_bytes = 65536", "");
    let run = queue_only(&l);
    run_worker(&l, 60);
    assert_eq!(l.runs()[0]["status"], "done");
    let log = run_log(&l, &run);
    // About 800 KB written; the log keeps 64 KiB of it plus almanac's own lines.
    assert!(log.len() < 65536 + 4096, "{}", log.len());
    assert!(
        log.contains("FIRST-LINE") && log.contains("LAST-LINE"),
        "{log}"
    );
    assert!(log.contains("bytes of agent output cut"), "{log}");
}

const LONG_LINE_AGENT: &str = r#"#!/bin/sh
head -c 120000000 /dev/zero | tr '\0' x
echo
echo '{"type":"thread.started","thread_id":"0199aaaa-bbbb-7ccc-8ddd-000000000004"}'
"#;

/// Peak resident memory of the process, from /proc.
fn peak_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_huge_stdout_line_is_never_held_whole() {
    let l = live_world(3);
    probe(
        &l,
        LONG_LINE_AGENT,
        &["{run_id}"],
        "max_log_bytes = 65536",
        "stdout_session_event = \"thread.started\"\nstdout_session_field = \"thread_id\"",
    );
    queue_only(&l);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", l.w.home())
        .env("ALMANAC_HOME", l.w.almanac_home())
        .args(["capture", "worker", "--repo"])
        .arg(&l.repo)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut peak = 0;
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(300) {
        peak = peak.max(peak_kib(child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(peak < 50 * 1024, "the worker held {peak} KiB");
    let r = &l.runs()[0];
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(r["agentSessionId"], "0199aaaa-bbbb-7ccc-8ddd-000000000004");
}

#[test]
fn the_worker_log_rotates() {
    let l = live_world(3);
    let runs = l.repo.join(".almanac/runs");
    let old = "old worker output\n".repeat(70_000);
    std::fs::write(runs.join("worker.log"), &old).unwrap();
    // A link in place of the rotated file is replaced, never written through.
    let outside = l.w.root().join("outside.txt");
    std::fs::write(&outside, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&outside, runs.join("worker.log.1")).unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    l.summary();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    let rotated = runs.join("worker.log.1");
    assert!(!rotated.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&rotated).unwrap(), old);
    let now = std::fs::metadata(runs.join("worker.log")).unwrap().len();
    assert!(now < 64 * 1024, "{now}");
}

#[test]
fn a_prompt_over_the_argument_limit_fails_naming_its_size() {
    let l = live_world(3);
    probe(&l, STDIN_AGENT, &["{run_id}", "{prompt}"], "", "");
    std::fs::create_dir_all(l.repo.join(".almanac/prompts")).unwrap();
    let big = "Write the notes carefully. ".repeat(20_000);
    std::fs::write(l.repo.join(".almanac/prompts/capture.md"), &big).unwrap();
    let run = queue_only(&l);
    run_worker(&l, 60);
    // What the agent would be given: the prompt file and the conversation sealed into it.
    let size = std::fs::metadata(prompt_path(&l, &run)).unwrap().len();
    let r = &l.runs()[0];
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error"].as_str().unwrap();
    let given: u64 = err
        .split("the prompt (")
        .nth(1)
        .and_then(|t| t.split(" bytes)").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the error names the prompt's size: {err}"));
    assert!(given > size && err.contains("too long"), "{err}");
}

/// The real CLI behind a wrapper of the same name that records its arguments: the real client, given
/// the prompt on stdin only, completes the capture run against the mock, which sees the prompt.
fn real_capture_run(agent: &str, write: impl FnOnce(&Path) -> crate::mock_model::Turn) {
    use crate::agents_real::client_env;
    use crate::mock_model::{MockModel, Turn};
    let Some(real) = crate::real_clients::client_or_skip(agent) else {
        return;
    };
    let l = live_world(1);
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!("[capture]\nagent = \"{agent}\"\ntimeout = \"1m\"\nmax_attempts = 1\n"),
    )
    .unwrap();
    let path = on_path(
        &l,
        agent,
        &format!(
            "#!/bin/sh\nfor a in \"$@\"; do echo \"ARG:$a\"; done > {}/args\nexec {} \"$@\"\n",
            l.fake.display(),
            real.display()
        ),
    );
    let path = format!("{path}:{}", real.parent().unwrap().display());
    write_aged(&l.transcript, l.lines(0..3).as_bytes(), HOURS_2);
    let mock = MockModel::start(vec![write(&l.repo), Turn::Text("Updated the wiki.".into())]);
    let mut cmd = l.w.almanac();
    for (k, v) in client_env(&l.w, &mock) {
        cmd.env(k, v);
    }
    cmd.env("PATH", &path).args([
        "capture", "sweep", "--json", "--quiet", "0m", "--apps", "claude",
    ]);
    let s = json_ok(&mut cmd)["summary"].clone();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    l.wait_idle();
    let run = &l.runs()[0];
    let log = std::fs::read_to_string(run["logPath"].as_str().unwrap()).unwrap_or_default();
    assert_eq!(run["status"], "done", "{run}\n{log}");
    let args = std::fs::read_to_string(l.fake.join("args")).unwrap();
    assert!(!args.contains("almanac-capture-run"), "{args}");
    assert!(
        mock.requests()
            .iter()
            .any(|r| r.body.to_string().contains("almanac-capture-run: ")),
        "the mock saw the capture prompt\n{log}"
    );
    assert_eq!(
        std::fs::read_to_string(l.repo.join(".almanac/pages/x.md"))
            .ok()
            .as_deref(),
        Some(crate::agents_real::PAGE),
        "{log}"
    );
}

#[test]
fn real_claude_reads_the_prompt_from_stdin() {
    real_capture_run("claude", |repo| {
        let page = repo.join(".almanac/pages/x.md");
        crate::agents_real::claude_write(&page.display().to_string(), crate::agents_real::PAGE)
    });
}

#[test]
fn real_codex_reads_the_prompt_from_stdin() {
    real_capture_run("codex", |_| {
        crate::agents_real::codex_write("pages/x.md", crate::agents_real::PAGE)
    });
}
