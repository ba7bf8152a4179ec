//! The agent's environment: the sweep's (the worker inherits it) plus the profile's `env` from config.

use crate::common::*;
use crate::live::live_world;

/// A fake agent that prints its environment to `$FAKE_DIR/env` and exits 0.
const ENV_AGENT: &str = "#!/bin/sh\nenv > \"$FAKE_DIR/env\"\n";

fn agent_env(l: &crate::live::Live) -> Vec<String> {
    std::fs::read_to_string(l.fake.join("env"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_configured_variable_reaches_the_agent_beside_the_sweeps_environment() {
    let l = live_world(1);
    let agent = l.fake.join("env-agent");
    std::fs::write(&agent, ENV_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        format!(
            "[capture]\nagent = \"probe\"\ntimeout = \"1m\"\n[capture.agents.probe]\ncommand = [\"{}\"]\nenv = {{ HTTPS_PROXY = \"http://proxy.test:3128\", SWEEP_VAR = \"from config\", EMPTY = \"\" }}\n",
            agent.display()
        ),
    )
    .unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let (code, v) = l.sweep(&[("SWEEP_VAR", "from the sweep"), ("SWEEP_ONLY", "kept")]);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    assert_eq!(l.runs()[0]["status"], "done", "{:?}", l.runs());
    let env = agent_env(&l);
    for want in [
        "HTTPS_PROXY=http://proxy.test:3128",
        "SWEEP_VAR=from config",
        "SWEEP_ONLY=kept",
        "EMPTY=",
    ] {
        assert!(env.iter().any(|l| l == want), "{want} in {env:?}");
    }
    assert!(env.iter().any(|l| l.starts_with("HOME=")), "{env:?}");
}

#[test]
fn env_alone_adds_to_a_built_in_profile() {
    let l = live_world(1);
    let bin = l.w.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    std::fs::write(&claude, ENV_AGENT).unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        l.w.almanac_home().join("config.toml"),
        "[capture]\nagent = \"claude\"\ntimeout = \"1m\"\n[capture.agents.claude]\nenv = { ANTHROPIC_BASE_URL = \"http://127.0.0.1:9\" }\n",
    )
    .unwrap();
    write_aged(&l.transcript, l.lines(0..2).as_bytes(), HOURS_2);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let (code, v) = l.sweep(&[("PATH", &path)]);
    assert_eq!(code, 0, "{v}");
    l.wait_idle();
    let env = agent_env(&l);
    assert!(
        env.iter()
            .any(|l| l == "ANTHROPIC_BASE_URL=http://127.0.0.1:9"),
        "{env:?}"
    );
    // Still the shipped profile: its preset session id is recorded.
    assert!(l.runs()[0]["agentSessionId"].is_string(), "{:?}", l.runs());
}

#[test]
fn a_non_string_env_value_is_an_error_naming_the_key() {
    let l = live_world(1);
    for (env, key, what) in [
        (
            "env = { RETRIES = 3 }",
            "capture.agents.fake.env.RETRIES",
            "expected a string",
        ),
        (
            "env = { DEBUG = true }",
            "capture.agents.fake.env.DEBUG",
            "expected a string",
        ),
        (
            "env = \"A=1\"",
            "capture.agents.fake.env",
            "expected a table",
        ),
    ] {
        std::fs::write(
            l.w.almanac_home().join("config.toml"),
            format!(
                "[capture]\nagent = \"fake\"\n[capture.agents.fake]\ncommand = [\"x\"]\n{env}\n"
            ),
        )
        .unwrap();
        let out =
            l.w.almanac()
                .args(["capture", "sweep", "--dry-run"])
                .output()
                .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{env}: {err}");
        assert!(err.contains(key) && err.contains(what), "{env}: {err}");
    }
}
