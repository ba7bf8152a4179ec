//! The rule sets shipped off (GitHub Copilot CLI, Qwen Code, pi, Factory Droid): a default sweep leaves
//! them out, `--apps` and `[automation.capture] apps` turn them on, and `doctor` and `rules list` point
//! out one whose transcripts exist on this machine, with the command that enables it.

use crate::automation::sched;
use crate::common::*;
use serde_json::Value;
use std::path::Path;

/// A pi session (`pi -p`, the shape of tests/fixtures/real/mock/pi) of `repo` under the world's home.
fn pi_session(w: &World, repo: &Path) -> std::path::PathBuf {
    let id = "01a2309e-99e1-75a0-9e53-468e2592a11c";
    let lines = [
        format!("{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-11-30T08:00:30.178Z\",\"cwd\":\"{}\"}}", repo.display()),
        r#"{"type":"message","id":"0f9ff551","parentId":null,"timestamp":"2026-11-30T08:00:30.300Z","message":{"role":"user","content":[{"type":"text","text":"What is in src/main.rs?"}],"timestamp":1796111448296}}"#.to_string(),
        r#"{"type":"message","id":"6a7f8093","parentId":"0f9ff551","timestamp":"2026-11-30T08:00:30.506Z","message":{"role":"assistant","content":[{"type":"text","text":"It is empty."}],"stopReason":"stop"}}"#.to_string(),
    ];
    let p = w
        .home()
        .join(".pi/agent/sessions/--proj-app--")
        .join(format!("2026-11-30T08-00-30-178Z_{id}.jsonl"));
    write_aged(&p, (lines.join("\n") + "\n").as_bytes(), HOURS_2);
    p
}

fn doctor(w: &World) -> Value {
    let out = w.almanac().args(["doctor", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
}

fn rules_list(w: &World) -> Value {
    json_ok(w.almanac().args(["rules", "list", "--json"]))
}

fn rule_set<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["ruleSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap()
}

#[test]
fn a_default_sweep_leaves_the_shipped_off_apps_out_and_apps_turns_one_on() {
    let w = World::new();
    let repo = w.repo("proj/app");
    let file = pi_session(&w, &repo);
    let s = w.dry_run(&["--quiet", "0m"]);
    assert_eq!(s["scanned"], 0, "claude,codex only: {s}");
    let s = w.dry_run(&["--apps", "pi", "--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["transcriptPath"], file.display().to_string());
    assert_eq!(
        started[0]["sessionId"],
        "01a2309e-99e1-75a0-9e53-468e2592a11c"
    );
    assert_eq!(started[0]["newTurns"], 1);
    // The config's list turns it on for every sweep.
    write_aged(
        &w.almanac_home().join("config.toml"),
        b"[automation.capture]\napps = [\"claude\", \"codex\", \"pi\"]\n",
        HOURS_2,
    );
    let s = w.dry_run(&["--quiet", "0m"]);
    assert_eq!(items(&s, "started").len(), 1, "{s}");
}

#[test]
fn doctor_and_rules_list_say_how_to_enable_an_app_whose_store_exists() {
    let w = World::new();
    let repo = w.repo("proj/app");
    pi_session(&w, &repo);
    let v = doctor(&w);
    let pi = check(&v, "pi stores").unwrap_or_else(|| panic!("{v}"));
    assert_eq!(pi["status"], "warn");
    assert!(
        pi["detail"]
            .as_str()
            .unwrap()
            .contains(&w.home().join(".pi/agent/sessions").display().to_string()),
        "{pi}"
    );
    let fix = pi["fix"].as_str().unwrap();
    assert!(
        fix.contains("almanac automation install --apps claude,codex,pi")
            && fix.contains(r#"apps = ["claude", "codex", "pi"]"#)
            && fix.contains("almanac capture sweep --apps pi"),
        "{fix}"
    );
    // Apps with no store here are not mentioned at all.
    for off in ["copilot", "qwen", "droid"] {
        assert!(check(&v, &format!("{off} stores")).is_none(), "{v}");
    }
    let list = rules_list(&w);
    let pi = rule_set(&list, "pi");
    assert_eq!(pi["enabled"], false);
    assert!(
        pi["enableWith"]
            .as_str()
            .unwrap()
            .contains("--apps claude,codex,pi"),
        "{pi}"
    );
    assert_eq!(rule_set(&list, "claude")["enabled"], true);
    assert!(rule_set(&list, "qwen").get("enableWith").is_none());
    let text = w.almanac().args(["rules", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("pi (pi) from rules/pi.yaml (built in) [off]")
            && text.contains("its store exists here, but pi is not enabled"),
        "{text}"
    );
}

#[test]
fn no_hint_without_the_store_or_once_the_app_is_enabled() {
    let w = World::new();
    let v = doctor(&w);
    assert!(check(&v, "pi stores").is_none(), "{v}");
    let list = rules_list(&w);
    assert!(rule_set(&list, "pi").get("enableWith").is_none(), "{list}");
    // Enabled: the store is checked like claude's, with no hint.
    let repo = w.repo("proj/app");
    pi_session(&w, &repo);
    write_aged(
        &w.almanac_home().join("config.toml"),
        b"[automation.capture]\napps = [\"pi\"]\n",
        HOURS_2,
    );
    let v = doctor(&w);
    let pi = check(&v, "pi stores").unwrap();
    assert_eq!(pi["status"], "ok", "{pi}");
    assert!(
        pi["detail"].as_str().unwrap().starts_with("1 transcripts"),
        "{pi}"
    );
    assert!(
        check(&v, "claude stores").is_none(),
        "only the configured apps: {v}"
    );
    let list = rules_list(&w);
    assert_eq!(rule_set(&list, "pi")["enabled"], true);
    assert!(rule_set(&list, "pi").get("enableWith").is_none());
}

#[test]
fn automation_install_apps_writes_the_list_to_config() {
    let s = sched();
    let out = s.install(&[
        "--scheduler",
        "cron",
        "--apps",
        "claude,codex,qwen",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["apps"], serde_json::json!(["claude", "codex", "qwen"]));
    let config = std::fs::read_to_string(s.w.almanac_home().join("config.toml")).unwrap();
    assert!(
        config.contains(r#"apps = ["claude", "codex", "qwen"]"#),
        "{config}"
    );
    // An unknown app is refused before anything is written.
    let out = s.install(&["--scheduler", "cron", "--apps", "claude,gemenai"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown app \"gemenai\""));
    let after = std::fs::read_to_string(s.w.almanac_home().join("config.toml")).unwrap();
    assert_eq!(after, config);
}

#[test]
fn capture_now_takes_the_latest_session_of_an_enabled_app_only() {
    let w = World::new();
    let repo = w.repo("proj/app");
    pi_session(&w, &repo);
    // The repo's only session is pi's, and pi is off: `capture now` finds nothing to capture.
    let out = w
        .almanac()
        .current_dir(&repo)
        .args(["capture", "now", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("root sessions of claude, codex"), "{all}");
}

#[test]
fn store_roots_follow_each_apps_own_home_variable() {
    let w = World::new();
    let d = |rel: &str| w.root().join(rel).display().to_string();
    let roots = |var: &str, value: &str, id: &str| -> Vec<String> {
        let v = json_ok(
            w.almanac()
                .env(var, value)
                .args(["rules", "list", "--json"]),
        );
        rule_set(&v, id)["stores"][0]["roots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].as_str().unwrap().to_string())
            .collect()
    };
    let home = |rel: &str| w.home().join(rel).display().to_string();
    assert_eq!(
        roots("COPILOT_HOME", &d("cp"), "copilot"),
        [d("cp/session-state")]
    );
    assert_eq!(roots("QWEN_HOME", &d("qw"), "qwen"), [d("qw/projects")]);
    assert_eq!(
        roots("PI_CODING_AGENT_DIR", &d("pa"), "pi"),
        [d("pa/sessions")]
    );
    // pi's session-directory variable names the directory itself; the agent dir's default stays.
    assert_eq!(
        roots("PI_CODING_AGENT_SESSION_DIR", &d("ps"), "pi"),
        [d("ps"), home(".pi/agent/sessions")]
    );
    assert_eq!(
        roots("FACTORY_HOME_OVERRIDE", &d("fh"), "droid"),
        [d("fh/.factory/sessions")]
    );
    // Unset: the defaults under HOME.
    assert_eq!(
        roots("UNRELATED", "x", "droid"),
        [home(".factory/sessions")]
    );
    assert_eq!(
        roots("UNRELATED", "x", "copilot"),
        [home(".copilot/session-state")]
    );
}

#[test]
fn doctor_points_out_each_app_added_from_rule_files_whose_store_exists() {
    // Each app's store directory (or database) where its default root puts it; each is shipped off.
    let w = World::new();
    let dirs = [
        ("amp", ".local/share/amp/threads"),
        ("auggie", ".augment/sessions"),
        (
            "roo",
            ".config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        ),
        (
            "kilocode",
            ".config/Code/User/globalStorage/kilocode.kilo-code/tasks",
        ),
        ("goose", ".local/share/goose/sessions"),
        ("kimi", ".kimi/sessions"),
        ("vibe", ".vibe/logs/session"),
        ("zed", ".local/share/zed/threads"),
        ("openhands", ".openhands/conversations"),
    ];
    for (_, d) in dirs {
        std::fs::create_dir_all(w.home().join(d)).unwrap();
    }
    let v = doctor(&w);
    let list = rules_list(&w);
    for (app, d) in dirs {
        let c = check(&v, &format!("{app} stores")).unwrap_or_else(|| panic!("{app}: {v}"));
        assert_eq!(c["status"], "warn", "{c}");
        let detail = c["detail"].as_str().unwrap();
        assert!(
            detail.contains(&w.home().join(d).display().to_string()),
            "{c}"
        );
        assert!(
            c["fix"]
                .as_str()
                .unwrap()
                .contains(&format!("almanac capture sweep --apps {app}")),
            "{c}"
        );
        assert_eq!(rule_set(&list, app)["enabled"], false, "{app}");
    }
    // Kilo Code's set extends Roo Code's, itself Cline's: `rules list` says so.
    let kilo = rule_set(&list, "kilocode");
    assert_eq!(kilo["extends"]["base"], "roo", "{kilo}");
    assert_eq!(rule_set(&list, "roo")["extends"]["base"], "cline");
    assert!(rule_set(&list, "cline")["extends"].is_null());
}
