//! Schedulers in the field: the installed systemd service run the way systemd runs it, entries that carry
//! the installer's environment into a bare one, clocks in the future, and the Windows Task Scheduler
//! adapter against a recording fake `schtasks`.

use crate::automation::{sched, Sched};
use crate::common::*;
use std::path::Path;
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::Instant;

const SESSION: &str = "5e551011-aaaa-4bbb-8ccc-0000000000f1";

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn claude_lines(cwd: &Path, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"type\":\"user\",\"sessionId\":\"{SESSION}\",\"cwd\":\"{}\",\"timestamp\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"message {i}\"}}}}\n",
                cwd.display(),
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            )
        })
        .collect()
}

/// A fake capture agent that needs no environment (a scheduler gives it none of the test's).
#[cfg(target_os = "linux")]
fn fake_agent(s: &Sched, sleep_secs: u32) -> std::path::PathBuf {
    let agent = s.w.root().join("fake-agent");
    let calls = s.w.root().join("agent-calls.log");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nsleep {sleep_secs}\nmkdir -p .almanac/pages\necho \"- captured by $3\" >> .almanac/pages/notes.md\nexit 0\n",
            calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    agent
}

#[cfg(target_os = "linux")]
fn agent_config(agent: &Path) -> String {
    format!(
        "[capture]\nagent = \"fake\"\ntimeout = \"1m\"\n\n[capture.agents.fake]\ncommand = [\"{}\", \"{{prompt_file}}\", \"{{session_id}}\", \"{{run_id}}\"]\n",
        agent.display()
    )
}

/// `Key=value` lines of a unit's [Service], unquoted and unescaped as systemd reads ours.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|v| {
            v.trim_matches('"')
                .replace("\\\"", "\"")
                .replace("%%", "%")
                .replace("$$", "$")
        })
        .collect()
}

fn exec_start(unit: &str) -> Vec<String> {
    unit_values(unit, "ExecStart")[0]
        .split("\" \"")
        .map(str::to_string)
        .collect()
}

/// Every process whose parent chain leads to `root` (read from /proc), root excluded.
#[cfg(target_os = "linux")]
fn descendants(root: u32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let after = &stat[stat.rfind(')')? + 2..];
            let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut out = vec![root as i32];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}

/// Runs a unit's ExecStart as systemd does: the main process in a session of its own under a stand-in
/// for the unit's cgroup (a child subreaper, so everything the sweep leaves behind stays below it); when
/// the main process exits, everything left is killed unless `KillMode=process`. Returns the main exit code.
#[cfg(target_os = "linux")]
fn run_like_systemd(argv: &[String], env: &[(String, String)], kill_mode: &str, dir: &Path) -> i32 {
    use std::os::unix::process::CommandExt;
    let status = dir.join("main-exit");
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("\"$@\"; echo $? > \"$0\"; exec sleep 600")
        .arg(&status)
        .args(argv)
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            Ok(())
        });
    }
    let mut unit = cmd.spawn().unwrap();
    let start = Instant::now();
    while !status.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sweep never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    let code: i32 = std::fs::read_to_string(&status)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let left: Vec<i32> = descendants(unit.id())
        .into_iter()
        .filter(|p| {
            // The stand-in's own `sleep` is not the unit's.
            !std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep\x00600"))
        })
        .collect();
    if kill_mode != "process" {
        for p in &left {
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
    }
    let _ = unit.kill();
    let _ = unit.wait();
    code
}

#[test]
#[cfg(target_os = "linux")] // systemd, and a subreaper standing in for its cgroup
fn the_systemd_service_leaves_the_capture_worker_running_to_done() {
    let s = sched();
    let repo = s.w.repo("work/app");
    let agent = fake_agent(&s, 2);
    std::fs::create_dir_all(s.w.almanac_home()).unwrap();
    std::fs::write(s.w.almanac_home().join("config.toml"), agent_config(&agent)).unwrap();
    ok(&s.install(&["--scheduler", "systemd", "--quiet", "0m"]));
    let unit = std::fs::read_to_string(
        s.w.home()
            .join(".config/systemd/user/codealmanac-capture-sweep.service"),
    )
    .unwrap();
    let kill_mode = unit_values(&unit, "KillMode")
        .pop()
        .unwrap_or("control-group".into());
    assert_eq!(kill_mode, "process", "{unit}");
    // Written after install (capture_since), with a session to capture.
    std::thread::sleep(Duration::from_millis(20));
    let t =
        s.w.home()
            .join(format!(".claude/projects/-work-app/{SESSION}.jsonl"));
    write_aged(&t, claude_lines(&repo, 3).as_bytes(), Duration::ZERO);
    let mut env: Vec<(String, String)> = unit_values(&unit, "Environment")
        .iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    env.push(("HOME".into(), s.w.home().display().to_string()));
    let code = run_like_systemd(&exec_start(&unit), &env, &kill_mode, s.w.root());
    assert_eq!(code, 0);
    let ledger = repo.join(".almanac/runs/capture-ledger.json");
    let start = Instant::now();
    let status = loop {
        let entry = std::fs::read(&ledger)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|l| l["entries"].as_object()?.values().next().cloned());
        let status = entry.map(|e| e["status"].as_str().unwrap_or("").to_string());
        if !matches!(status.as_deref(), Some("pending") | Some("running") | None)
            || start.elapsed() > Duration::from_secs(30)
        {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // A lost worker is only noticed by the next sweep: ask it, as the next tick would.
    let v = json_ok(
        s.w.almanac()
            .args(["capture", "status", "--json", "--repo"])
            .arg(&repo),
    );
    assert_eq!(status.as_deref(), Some("done"), "{v}");
    let notes = std::fs::read_to_string(repo.join(".almanac/pages/notes.md")).unwrap();
    assert!(notes.contains("captured by"), "{notes}");
}

/// The three entries' commands, each with only the environment the entry itself sets (plus HOME, which
/// every scheduler gives a user job), made a dry run with JSON so the result can be compared.
fn scheduled_dry_run(s: &Sched, kind: &str, ah: &Path) -> serde_json::Value {
    let home = s.w.home().display().to_string();
    let json_args = ["--dry-run".to_string(), "--json".to_string()];
    let out = match kind {
        "cron" => {
            let tab = std::fs::read_to_string(s.dir.join("crontab")).unwrap();
            let line = tab
                .lines()
                .find(|l| l.contains("capture sweep --scheduled"))
                .unwrap();
            let command: String = line.splitn(6, ' ').nth(5).unwrap().replace(
                " capture sweep --scheduled ",
                " capture sweep --scheduled --dry-run --json ",
            );
            let _ = std::fs::remove_file(ah.join("logs/capture-sweep.out.log"));
            ok(&std::process::Command::new("/usr/bin/env")
                .args([
                    "-i",
                    &format!("HOME={home}"),
                    "SHELL=/bin/sh",
                    "/bin/sh",
                    "-c",
                    &command,
                ])
                .output()
                .unwrap());
            std::fs::read(ah.join("logs/capture-sweep.out.log")).unwrap()
        }
        "systemd" => {
            let unit = std::fs::read_to_string(
                s.w.home()
                    .join(".config/systemd/user/codealmanac-capture-sweep.service"),
            )
            .unwrap();
            let argv = exec_start(&unit);
            let out = std::process::Command::new("/usr/bin/env")
                .arg("-i")
                .arg(format!("HOME={home}"))
                .args(unit_values(&unit, "Environment"))
                .args(&argv)
                .args(&json_args)
                .output()
                .unwrap();
            ok(&out);
            out.stdout
        }
        _ => {
            let plist: plist::Dictionary = plist::from_file(s.plist()).unwrap();
            let argv: Vec<String> = plist["ProgramArguments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_string().unwrap().to_string())
                .collect();
            let env: Vec<String> = plist["EnvironmentVariables"]
                .as_dictionary()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_string().unwrap()))
                .collect();
            let out = std::process::Command::new("/usr/bin/env")
                .arg("-i")
                .arg(format!("HOME={home}"))
                .args(env)
                .args(&argv)
                .args(&json_args)
                .output()
                .unwrap();
            ok(&out);
            out.stdout
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&out)
        .unwrap_or_else(|_| panic!("{kind}: {}", String::from_utf8_lossy(&out)));
    v["summary"].clone()
}

fn comparable(summary: &serde_json::Value) -> serde_json::Value {
    let mut started: Vec<&str> = summary["started"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["transcriptPath"].as_str().unwrap())
        .collect();
    started.sort();
    serde_json::json!({"scanned": summary["scanned"], "eligible": summary["eligible"],
        "captureSince": summary["captureSince"], "started": started})
}

#[test]
fn every_entry_runs_with_the_installers_home_and_stores_in_a_bare_environment() {
    for kind in ["cron", "systemd", "launchd"] {
        let s = sched();
        let repo = s.w.repo("work/app");
        let ah = s.w.root().join("elsewhere/almanac");
        let claude = s.w.root().join("elsewhere/claude");
        let codex = s.w.root().join("elsewhere/codex");
        let vars = [
            ("ALMANAC_HOME", ah.display().to_string()),
            ("CLAUDE_CONFIG_DIR", claude.display().to_string()),
            ("CODEX_HOME", codex.display().to_string()),
        ];
        let program = s.program.display().to_string();
        let install = |extra: &[&str]| {
            let mut c = s.w.almanac();
            c.env("PATH", s.path())
                .env("FAKE_SCHED_DIR", &s.dir)
                .env("USER", "tester");
            c.envs(vars.iter().map(|(k, v)| (k, v)));
            c.args([
                "automation",
                "install",
                "--program",
                &program,
                "--force",
                "--quiet",
                "0m",
            ]);
            ok(&c.args(extra).output().unwrap())
        };
        install(&["--scheduler", kind]);
        std::thread::sleep(Duration::from_millis(20));
        // What this user captures, and decoys where the defaults would look.
        write_aged(
            &claude.join(format!("projects/-work-app/{SESSION}.jsonl")),
            claude_lines(&repo, 3).as_bytes(),
            Duration::ZERO,
        );
        write_aged(
            &codex.join("sessions/2026/01/01/rollout-mine.jsonl"),
            b"{}\n",
            Duration::ZERO,
        );
        write_aged(
            &s.w.home()
                .join(".claude/projects/-work-app/5e551011-aaaa-4bbb-8ccc-0000000000d0.jsonl"),
            claude_lines(&repo, 2)
                .replace(SESSION, "5e551011-aaaa-4bbb-8ccc-0000000000d0")
                .as_bytes(),
            Duration::ZERO,
        );
        write_aged(
            &s.w.home().join(".codex/sessions/rollout-decoy.jsonl"),
            b"{}\n",
            Duration::ZERO,
        );
        let mut c = s.w.almanac();
        c.envs(vars.iter().map(|(k, v)| (k, v))).args([
            "capture",
            "sweep",
            "--scheduled",
            "--dry-run",
            "--json",
        ]);
        let interactive = comparable(&json_ok(&mut c)["summary"]);
        assert_eq!(
            interactive["started"].as_array().unwrap().len(),
            1,
            "{interactive}"
        );
        assert!(interactive["captureSince"].is_string(), "{interactive}");
        let scheduled = comparable(&scheduled_dry_run(&s, kind, &ah));
        assert_eq!(scheduled, interactive, "{kind}");

        // The same environment: no drift. Another CODEX_HOME here: environment-mismatch, with the fix.
        let status = |codex_home: &str| {
            let mut c = s.w.almanac();
            c.env("PATH", s.path()).env("FAKE_SCHED_DIR", &s.dir);
            c.envs(vars.iter().map(|(k, v)| (k, v)))
                .env("CODEX_HOME", codex_home);
            let out = c.args(["automation", "status", "--json"]).output().unwrap();
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["drift"].clone()
        };
        assert_eq!(
            status(&codex.display().to_string()),
            serde_json::json!([]),
            "{kind}"
        );
        let drift = status("/other/codex");
        let d = drift
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["code"] == "environment-mismatch")
            .unwrap_or_else(|| panic!("{kind}: {drift}"));
        let msg = d["message"].as_str().unwrap();
        assert!(
            msg.contains("CODEX_HOME")
                && msg.contains("/other/codex")
                && msg.contains("almanac automation install"),
            "{msg}"
        );
    }
}

#[test]
fn a_kill_mode_that_kills_workers_is_drift() {
    let s = sched();
    ok(&s.install(&["--scheduler", "systemd"]));
    let (code, v) = s.status();
    assert_eq!(code, 0, "{v}");
    let unit =
        s.w.home()
            .join(".config/systemd/user/codealmanac-capture-sweep.service");
    let text = std::fs::read_to_string(&unit)
        .unwrap()
        .replace("KillMode=process\n", "");
    std::fs::write(&unit, text).unwrap();
    let (code, v) = s.status();
    assert_eq!(code, 1);
    let d = v["drift"].as_array().unwrap();
    assert!(
        d.iter().any(|d| d["code"] == "kill-mode"
            && d["message"]
                .as_str()
                .unwrap()
                .contains("KillMode=control-group")),
        "{v}"
    );
}

#[test]
fn a_last_sweep_stamped_in_the_future_does_not_stop_the_schedule() {
    let s = sched();
    ok(&s.install(&["--scheduler", "cron", "--every", "5h"]));
    let state = s.w.almanac_home().join("state/last-sweep.json");
    let future = (chrono::Utc::now() + chrono::Duration::days(30))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    std::fs::write(
        &state,
        format!("{{\"startedAt\":\"{future}\",\"scheduledStartedAt\":\"{future}\",\"exit\":0}}"),
    )
    .unwrap();
    let (_, v) = s.status();
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("in the future") && notes.contains("ignored"),
        "{v}"
    );
    let human = ok(&s.run(&["automation", "status"]));
    assert!(
        human.contains("note: the last sweep is recorded at"),
        "{human}"
    );
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(
        !text.contains("not due") && text.contains("capture sweep:"),
        "{text}"
    );
    assert!(
        !std::fs::read_to_string(&state).unwrap().contains(&future),
        "the sweep ran and recorded now"
    );
}

#[test]
fn a_transcript_modified_in_the_future_counts_as_now() {
    let w = World::new();
    let repo = w.repo("work/app");
    let t = w
        .home()
        .join(format!(".claude/projects/-work-app/{SESSION}.jsonl"));
    write_aged(&t, claude_lines(&repo, 3).as_bytes(), Duration::ZERO);
    let f = std::fs::File::options().write(true).open(&t).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(3 * 3600))
        .unwrap();
    let s = w.dry_run(&["--quiet", "0m"]);
    assert!(find_by_path(&s, "started", &t).is_some(), "{s}");
    let s = w.dry_run(&["--quiet", "45m"]);
    let skipped = find_by_path(&s, "skipped", &t).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "quiet-window");
    let detail = skipped.to_string();
    assert!(
        detail.contains("in the future") && !detail.contains("0s ago"),
        "{detail}"
    );
}
