//! Runs the capture agent: an argv (never a shell) with placeholders filled, in the repo root, in its own
//! process group, stdin from /dev/null, output to the run's log. Past the timeout the whole group is
//! killed. The agent's own session id is either generated and passed (`{session_id}`) or read from its
//! stdout JSON lines.

use crate::config::AgentDef;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct Outcome {
    pub exit_code: Option<i32>,
    /// Why the run failed, in words, when it did.
    pub error: Option<String>,
    pub agent_pid: Option<u32>,
}

/// Replaces `{name}` placeholders in each argument; each stays one argument whatever it contains.
pub fn fill(command: &[String], vars: &HashMap<&str, String>) -> Vec<String> {
    command
        .iter()
        .map(|arg| {
            let mut out = arg.clone();
            for (k, v) in vars {
                out = out.replace(&format!("{{{k}}}"), v);
            }
            out
        })
        .collect()
}

/// Finds `program` on PATH at call time (a path with `/` is taken as it is).
pub fn resolve_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(program))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

pub fn run(
    def: &AgentDef,
    argv: &[String],
    repo: &Path,
    log: &File,
    timeout: Duration,
    mut on_session: impl FnMut(&str),
) -> Outcome {
    use std::os::unix::process::CommandExt;
    let fail = |error: String| Outcome {
        exit_code: None,
        error: Some(error),
        agent_pid: None,
    };
    let Some(program) = resolve_program(&argv[0]) else {
        return fail(format!(
            "agent \"{}\": program \"{}\" not found on PATH; install it or set [capture.agents.{}] command in config.toml",
            def.name, argv[0], def.name
        ));
    };
    let (Ok(out_log), Ok(err_log)) = (log.try_clone(), log.try_clone()) else {
        return fail("cannot open the run log".into());
    };
    let mut cmd = Command::new(&program);
    cmd.args(&argv[1..])
        .current_dir(repo)
        .stdin(Stdio::null())
        .stderr(Stdio::from(err_log))
        .process_group(0);
    if def.stdout_session.is_some() {
        cmd.stdout(Stdio::piped());
    } else {
        cmd.stdout(Stdio::from(out_log));
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return fail(format!(
                "agent \"{}\": cannot start {}: {e}",
                def.name,
                program.display()
            ))
        }
    };
    crate::util::fault::point("agent-spawned");
    let pid = child.id();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = match (child.stdout.take(), &def.stdout_session, log.try_clone()) {
        (Some(stdout), Some((event, field)), Ok(mut log)) => {
            let (event, field) = (event.clone(), field.clone());
            Some(std::thread::spawn(move || {
                let mut sent = false;
                for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
                    let _ = log.write_all(&line);
                    let _ = log.write_all(b"\n");
                    if sent {
                        continue;
                    }
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) {
                        if v.get("type").and_then(|t| t.as_str()) == Some(event.as_str()) {
                            if let Some(id) = v.get(&field).and_then(|f| f.as_str()) {
                                let _ = tx.send(id.to_string());
                                sent = true;
                            }
                        }
                    }
                }
            }))
        }
        _ => None,
    };
    let started = Instant::now();
    let mut timed_out = false;
    let status = loop {
        while let Ok(id) = rx.try_recv() {
            on_session(&id);
        }
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(_) => break None,
        }
        if started.elapsed() >= timeout {
            timed_out = true;
            crate::util::process::kill_group(pid as i32, libc::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            crate::util::process::kill_group(pid as i32, libc::SIGKILL);
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the agent left running in its group goes with it.
    crate::util::process::kill_group(pid as i32, libc::SIGKILL);
    if let Some(r) = reader {
        let _ = r.join();
    }
    while let Ok(id) = rx.try_recv() {
        on_session(&id);
    }
    let exit_code = status.and_then(|s| s.code());
    let error = if timed_out {
        Some(format!(
            "timed out after {}; the agent's process group was killed",
            crate::util::duration::format_duration(timeout)
        ))
    } else {
        match (exit_code, status) {
            (Some(0), _) => None,
            (Some(c), _) => Some(format!("agent \"{}\" exited with code {c}", def.name)),
            (None, Some(s)) => Some(format!("agent \"{}\" was killed ({s})", def.name)),
            (None, None) => Some(format!("agent \"{}\": lost track of the process", def.name)),
        }
    };
    Outcome {
        exit_code,
        error,
        agent_pid: Some(pid),
    }
}
