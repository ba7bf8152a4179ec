//! Amp and Auggie, the real CLIs (`.ci/run` installs them), run offline against the mock server, which
//! speaks Amp's model route (Anthropic Messages under `/api/provider/anthropic`, its other `/api/`
//! routes answered empty) and Augment's own API: each writes its store as it does for a user, and a
//! dry-run sweep of the app finds the session the CLI made, places it in the repo and counts the one
//! typed prompt.

use crate::agents_real::{describe, run_program};
use crate::common::*;
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::client_or_skip;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PROMPT: &str = "Say hello to the mock, please";

fn env(w: &World, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        ),
        ("HOME".to_string(), w.home().to_string_lossy().into_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    env
}

/// The dry-run sweep of `app` starts exactly one run: the session in `file`, placed in `repo`, with
/// one prompt.
fn found_mapped_and_counted(w: &World, app: &str, repo: &Path, id: &str) {
    let s = w.dry_run(&["--apps", app, "--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "the one session: {s}");
    let st = started[0];
    assert_eq!(st["sessionId"], id, "{st}");
    assert_eq!(st["repoRoot"], repo.to_string_lossy().as_ref(), "{st}");
    assert_eq!(st["newTurns"], 1, "one prompt was typed: {st}");
}

fn only_file(dir: &Path, suffix: &str) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
fn real_amp_thread_is_found_mapped_and_counted() {
    let Some(amp) = client_or_skip("amp") else {
        return;
    };
    let w = World::new();
    let repo = w.repo("proj/amp-app");
    let mock = MockModel::start(vec![Turn::Text("Hello from the mock.".into())]);
    let out = run_program(
        &amp,
        &["-x", PROMPT],
        &repo,
        &env(
            &w,
            &[
                ("AMP_URL", mock.url()),
                ("AMP_API_KEY", "sk-dummy-for-tests".into()),
            ],
        ),
        None,
        Duration::from_secs(180),
    );
    // 0.0.1767830505 may exit 1 after the turn (the mock answers its account routes with `{}`): the
    // thread is what counts.
    let threads = w.home().join(".local/share/amp/threads");
    let said = describe(&out, &mock);
    assert!(threads.is_dir(), "no threads directory: {said}");
    let file = only_file(&threads, ".json");
    let thread: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let id = thread["id"].as_str().unwrap_or_else(|| panic!("{thread}"));
    assert!(
        thread["messages"].as_array().is_some_and(|m| m.len() >= 2),
        "a prompt and an answer: {thread} {said}"
    );
    found_mapped_and_counted(&w, "amp", &repo, id);
}

#[test]
fn real_auggie_session_is_found_mapped_and_counted() {
    let Some(auggie) = client_or_skip("auggie") else {
        return;
    };
    let w = World::new();
    let repo = w.repo("proj/auggie-app");
    let mock = MockModel::start(vec![Turn::Text("Hello from the mock.".into())]);
    let auth = serde_json::json!({"accessToken": "mock", "tenantURL": format!("{}/", mock.url()),
        "scopes": ["read", "write"]});
    let out = run_program(
        &auggie,
        &["--print", "-i", PROMPT],
        &repo,
        &env(&w, &[("AUGMENT_SESSION_AUTH", auth.to_string())]),
        None,
        Duration::from_secs(180),
    );
    let said = describe(&out, &mock);
    assert!(out.status.success(), "{said}");
    let sessions = w.home().join(".augment/sessions");
    let file = only_file(&sessions, ".json");
    let session: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        session["chatHistory"][0]["exchange"]["request_message"], PROMPT,
        "{session} {said}"
    );
    let id = session["sessionId"].as_str().unwrap();
    found_mapped_and_counted(&w, "auggie", &repo, id);
}
