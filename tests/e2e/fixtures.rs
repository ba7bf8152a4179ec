//! Every fixture transcript yields the session id, cwd and subagent verdict that
//! `tests/fixtures/synthetic/expected.yaml` and `tests/fixtures/README.md` give.

use crate::common::*;
use std::path::Path;

/// A home whose stores hold all synthetic and real fixtures at their documented places.
fn fixture_world() -> World {
    let w = World::new();
    let copy = |from: &str, to: &str| {
        let src = Path::new(FIXTURES).join(from);
        for entry in walkdir::WalkDir::new(&src) {
            let entry = entry.unwrap();
            if entry.file_type().is_file() {
                let rel = entry.path().strip_prefix(&src).unwrap();
                let dst = w.home().join(to).join(rel);
                std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
                std::fs::copy(entry.path(), dst).unwrap();
            }
        }
    };
    copy("synthetic/claude", ".claude");
    copy("synthetic/codex", ".codex");
    copy("real/claude", ".claude");
    copy("real/codex", ".codex");
    w
}

fn explain(w: &World, path: &Path, app: Option<&str>) -> serde_json::Value {
    let mut cmd = w.almanac();
    cmd.args(["rules", "explain", "--json"]).arg(path);
    if let Some(a) = app {
        cmd.args(["--app", a]);
    }
    json_ok(&mut cmd)
}

fn field<'a>(v: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    v["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .and_then(|f| f["value"].as_str())
}

#[test]
fn synthetic_fixtures_match_expected_yaml() {
    let w = fixture_world();
    let expected: serde_json::Value =
        serde_yaml::from_str(&fixture("synthetic/expected.yaml")).expect("expected.yaml parses");
    let mut checked = 0;
    for (rel, exp) in expected.as_object().unwrap() {
        let Some(want_id) = exp.get("session_id").and_then(|v| v.as_str()) else {
            continue; // edge/ files carry notes only; the sweep tests cover them
        };
        let (store, rest) = rel.split_once('/').unwrap();
        let path = w.home().join(format!(".{store}")).join(rest);
        let v = explain(&w, &path, None);
        assert_eq!(v["app"], store, "{rel}");
        assert_eq!(v["sessionId"], want_id, "{rel}: session id");
        assert_eq!(v["cwd"], exp["cwd"], "{rel}: cwd");
        let want_sub = exp["subagent"].as_bool().unwrap();
        assert_eq!(
            !v["subagent"].is_null(),
            want_sub,
            "{rel}: subagent verdict {}",
            v["subagent"]
        );
        if let Some(agent) = exp.get("agent_id").and_then(|a| a.as_str()) {
            assert_eq!(field(&v, "agent_id"), Some(agent), "{rel}: agent id");
        }
        if let Some(parent) = exp.get("parent").and_then(|a| a.as_str()) {
            assert_eq!(field(&v, "parent_id"), Some(parent), "{rel}: parent id");
        }
        checked += 1;
    }
    assert_eq!(
        checked, 10,
        "every synthetic transcript with an expected id was checked"
    );
}

#[test]
fn real_client_fixtures_give_the_ids_the_clients_were_given() {
    let w = fixture_world();
    let mut checked = 0;
    for (store, dir) in [
        ("claude", ".claude/projects/-home-dev-proj-my-repo-x"),
        ("codex", ".codex/sessions/2026/11/29"),
    ] {
        for entry in std::fs::read_dir(w.home().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            // Claude: the --session-id passed is the file stem. Codex: the UUID ending the rollout name.
            let want = if store == "claude" {
                name.trim_end_matches(".jsonl").to_string()
            } else {
                let stem = name.trim_end_matches(".jsonl");
                stem[stem.len() - 36..].to_string()
            };
            let v = explain(&w, &path, None);
            assert_eq!(v["app"], store);
            assert_eq!(v["sessionId"], want.as_str(), "{name}");
            assert_eq!(v["cwd"], REAL_CWD, "{name}");
            assert!(v["subagent"].is_null(), "{name} is a root session");
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}

#[test]
fn codex_subagent_is_keyed_by_its_own_id_not_the_copied_parent_meta() {
    let w = fixture_world();
    let path = w
        .home()
        .join(".codex/sessions/2026/07/13/rollout-2026-07-13T22-21-37-019f624a-cc95-7c50-b9fa-1db381270b73.jsonl");
    let v = explain(&w, &path, None);
    // Line 2 is the parent's session_meta: a last-wins reader would report the parent id.
    assert_eq!(v["sessionId"], "019f624a-cc95-7c50-b9fa-1db381270b73");
    let sid = v["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "session_id")
        .unwrap();
    assert_eq!(sid["line"], 1);
}

#[test]
fn summary_only_file_has_no_cwd_and_is_not_captured() {
    let w = fixture_world();
    let p = w
        .home()
        .join(".claude/projects/-home-dev-x/claude-summary-only.jsonl");
    write_aged(
        &p,
        fixture("synthetic/edge/claude-summary-only.jsonl").as_bytes(),
        HOURS_2,
    );
    let v = explain(&w, &p, None);
    // No sessionId anywhere: the file-name fallback gives the id; there is no cwd to map.
    assert_eq!(v["sessionId"], "claude-summary-only");
    assert!(v["cwd"].is_null());
    assert_eq!(v["decision"], "skip (no-cwd)");
}
