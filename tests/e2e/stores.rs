//! Stores that are not append-only JSONL, read into views: opencode's SQLite database (written by
//! opencode 1.18.33) and Gemini CLI's replay logs (written by Gemini CLI 0.61.0), both against a mock
//! model (tests/fixtures/README.md). Discovery, ids, projects, prompts, live captures whose cursor is
//! a message count, a WAL-only row under a writer's lock, no byte written beside the stores, no read
//! of an unchanged store, and hostile stores.

use crate::common::*;
use crate::live::{live_world, Live};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

const OPENCODE_DB: &str = "real/stores/opencode/opencode.db";
/// The session with two prompts (a run, then `opencode run --session` with a second one).
const TWO_PROMPTS: &str = "ses_dc5859fdcffe7LjJbRatvtyK20";
const SUBAGENT: &str = "ses_dc5854657ffeHihl0No4BvqpHk";

fn db_path(l: &Live) -> PathBuf {
    l.w.home().join(".local/share/opencode/opencode.db")
}

/// A live world whose opencode database is the fixture's, its sessions' directory this world's repo.
fn opencode_world() -> Live {
    let l = live_world(3);
    let db = db_path(&l);
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    std::fs::copy(Path::new(FIXTURES).join(OPENCODE_DB), &db).unwrap();
    let c = Connection::open(&db).unwrap();
    c.execute(
        "UPDATE session SET directory = ?1",
        [l.repo.to_str().unwrap()],
    )
    .unwrap();
    drop(c);
    l
}

pub(crate) fn sessions(l: &Live, app: &str) -> Vec<serde_json::Value> {
    let mut cmd = l.w.almanac();
    cmd.args(["capture", "sessions", "--json", "--apps", app]);
    let v = json_ok(&mut cmd);
    v["sessions"].as_array().cloned().unwrap_or_default()
}

pub(crate) fn by_id<'a>(rows: &'a [serde_json::Value], id: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["sessionId"] == id)
        .unwrap_or_else(|| panic!("no session {id} in {rows:?}"))
}

/// One exchange more in a session, written as opencode writes it: a user message with a text part,
/// then an assistant message with a text part; the session's time_updated moves.
fn add_exchange(c: &Connection, session: &str, n: u32, prompt: &str) {
    let t: i64 = 1_900_000_000_000 + i64::from(n) * 10;
    let user = format!("msg_zz{n:04}user");
    let reply = format!("msg_zz{n:04}reply");
    c.execute(
        "INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?3, ?4)",
        rusqlite::params![user, session, t, r#"{"role":"user","time":{"created":1}}"#],
    )
    .unwrap();
    c.execute(
        "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
        rusqlite::params![format!("prt_zz{n:04}u"), user, session, t, serde_json::json!({"type": "text", "text": prompt}).to_string()],
    )
    .unwrap();
    c.execute(
        "INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?3, ?4)",
        rusqlite::params![reply, session, t + 1, r#"{"role":"assistant","time":{"created":1}}"#],
    )
    .unwrap();
    c.execute(
        "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
        rusqlite::params![format!("prt_zz{n:04}r"), reply, session, t + 1, r#"{"type":"text","text":"partial"}"#],
    )
    .unwrap();
    c.execute(
        "UPDATE session SET time_updated = ?1 WHERE id = ?2",
        rusqlite::params![t + 2, session],
    )
    .unwrap();
}

pub(crate) fn started(s: &serde_json::Value) -> Vec<serde_json::Value> {
    items(s, "started").into_iter().cloned().collect()
}

/// Every file in `dir` with its size, mtime and content hash.
pub(crate) fn snapshot(dir: &Path) -> Vec<(String, u64, std::time::SystemTime, String)> {
    use sha2::Digest;
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.len(),
                m.modified().unwrap(),
                format!("{:x}", sha2::Sha256::digest(&bytes)),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn opencode_sessions_are_found_with_their_ids_projects_and_prompts() {
    let l = opencode_world();
    let rows = sessions(&l, "opencode");
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["sessionId"].as_str())
        .collect();
    // Six sessions in the database; the task tool's child (parent_id set) is a subagent, not listed.
    assert_eq!(rows.len(), 5, "{ids:?}");
    assert!(!ids.contains(&SUBAGENT));
    for r in &rows {
        assert_eq!(r["projectDir"], l.repo.to_str().unwrap());
        assert_eq!(r["repoRoot"], l.repo.to_str().unwrap());
    }
    let two = by_id(&rows, TWO_PROMPTS);
    assert_eq!(two["userTurns"], 2);
    assert!(two["firstPrompt"]
        .as_str()
        .unwrap()
        .contains("What is in this project?"));
    assert!(two["lastPrompt"]
        .as_str()
        .unwrap()
        .contains("Now check the README once more"));
    // The session whose second message is opencode's own record of a shell command (`/shell`): its
    // synthetic text part is not a prompt.
    let shell = by_id(&rows, "ses_dc585199cffeaUyf4o0OFbbckN");
    assert_eq!(shell["userTurns"], 1);
    let s = l.w.dry_run(&["--apps", "opencode", "--quiet", "0m"]);
    assert_eq!(s["stats"]["subagents"], 1, "{s}");
    assert_eq!(items(&s, "started").len(), 5, "{s}");
}

#[test]
fn an_opencode_capture_moves_its_cursor_and_the_next_takes_only_the_new_exchange() {
    let l = opencode_world();
    let s = l.sweep_args(&["--apps", "opencode"]);
    l.wait_idle();
    let first = started(&s);
    assert_eq!(first.len(), 5, "{s}");
    let run = first
        .iter()
        .find(|r| r["sessionId"] == TWO_PROMPTS)
        .unwrap();
    let run_id = run["runId"].as_str().unwrap();
    let prompt = l.prompt(run_id);
    let copy = l.repo.join(format!(".almanac/runs/{run_id}.transcript.md"));
    assert!(prompt.contains(copy.to_str().unwrap()), "{prompt}");
    let messages = run["toLine"].as_u64().unwrap() - 1;
    assert!(
        prompt.contains(&format!("Capture messages 1 to {messages}.")),
        "{prompt}"
    );
    let text = std::fs::read_to_string(&copy).unwrap();
    assert!(text.contains("[M1] user:"), "{text}");
    assert!(text.contains("Now check the README once more"), "{text}");
    let entry = &l.ledger()["entries"][format!("opencode:{TWO_PROMPTS}")];
    assert!(
        entry["lastCapturedPrefixHash"]
            .as_str()
            .unwrap()
            .starts_with("ids:sha256:"),
        "{entry}"
    );

    // Nothing changed: nothing to do.
    let s = l.sweep_args(&["--apps", "opencode"]);
    assert!(started(&s).is_empty(), "{s}");

    let c = Connection::open(db_path(&l)).unwrap();
    add_exchange(&c, TWO_PROMPTS, 1, "A third prompt, added later.");
    drop(c);
    let s = l.sweep_args(&["--apps", "opencode"]);
    l.wait_idle();
    let second = started(&s);
    assert_eq!(second.len(), 1, "{s}");
    assert_eq!(second[0]["sessionId"], TWO_PROMPTS);
    let run_id = second[0]["runId"].as_str().unwrap();
    let prompt = l.prompt(run_id);
    assert!(
        prompt.contains(&format!("previously captured through message {messages}."))
            && prompt.contains(&format!(
                "Focus on messages {} to {}.",
                messages + 1,
                messages + 2
            )),
        "{prompt}"
    );
    let text = l.conversation(run_id);
    assert!(
        text.contains(&format!(
            "[M{}] user:\n  A third prompt, added later.",
            messages + 1
        )),
        "{text}"
    );

    // The reply that was still streaming is finished in place (same ids, longer text): not a new part,
    // not a mismatch.
    let c = Connection::open(db_path(&l)).unwrap();
    c.execute(
        "UPDATE part SET data = ?1 WHERE id = 'prt_zz0001r'",
        [r#"{"type":"text","text":"partial, and now finished"}"#],
    )
    .unwrap();
    c.execute(
        "UPDATE session SET time_updated = time_updated + 5 WHERE id = ?1",
        [TWO_PROMPTS],
    )
    .unwrap();
    drop(c);
    let s = l.sweep_args(&["--apps", "opencode"]);
    assert!(started(&s).is_empty(), "{s}");
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    assert!(items(&s, "recovered").is_empty(), "{s}");
}

#[test]
fn a_row_only_in_the_wal_is_read_under_a_writers_lock_and_no_file_beside_the_store_changes() {
    let l = opencode_world();
    let s = l.sweep_args(&["--apps", "opencode"]);
    l.wait_idle();
    assert_eq!(started(&s).len(), 5, "{s}");
    // A writer as opencode is while it runs: the database in WAL mode, its new rows committed to the
    // WAL only (no checkpoint), and a write transaction open through the sweep.
    let c = Connection::open(db_path(&l)).unwrap();
    c.pragma_update(None, "journal_mode", "wal").unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    add_exchange(&c, TWO_PROMPTS, 2, "A prompt only the WAL holds.");
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let dir = db_path(&l).parent().unwrap().to_path_buf();
    assert!(dir.join("opencode.db-wal").exists());
    let before = snapshot(&dir);
    let s = l.sweep_args(&["--apps", "opencode"]);
    l.wait_idle();
    let after = snapshot(&dir);
    assert_eq!(before, after, "the sweep changed a file beside the store");
    let runs = started(&s);
    assert_eq!(runs.len(), 1, "{s}");
    let run_id = runs[0]["runId"].as_str().unwrap();
    let text = l.conversation(run_id);
    assert!(text.contains("A prompt only the WAL holds."), "{text}");
    c.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn a_store_that_kept_its_size_and_mtime_is_not_read_again() {
    let l = opencode_world();
    let before = sessions(&l, "opencode");
    let db = db_path(&l);
    let meta = std::fs::metadata(&db).unwrap();
    // Same size, same mtime, same file: garbage a read would fail on.
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &vec![0u8; meta.len() as usize], 0).unwrap();
    f.set_modified(meta.modified().unwrap()).unwrap();
    drop(f);
    let after = sessions(&l, "opencode");
    assert_eq!(before, after);
    let s = l.w.dry_run(&["--apps", "opencode", "--quiet", "0m"]);
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    // Once it changes it is read: not a database (as a half-written copy would be) is read again on the
    // next sweep, the sessions as last read kept meanwhile.
    set_age(&db, std::time::Duration::from_secs(5));
    let s = l.w.dry_run(&["--apps", "opencode", "--quiet", "0m"]);
    let skipped = items(&s, "skipped");
    assert!(
        skipped.iter().any(|i| i["reason"] == "read-failed"
            && i["detail"]
                .as_str()
                .unwrap()
                .contains("read again on the next sweep")),
        "{s}"
    );
    assert_eq!(sessions(&l, "opencode").len(), 5);
}

/// A Gemini home made of the fixture's files, its project root this world's repo.
fn gemini_world() -> Live {
    let l = live_world(3);
    let src = Path::new(FIXTURES).join("real/stores/gemini/.gemini");
    let repo = l.repo.to_str().unwrap().to_string();
    let (old_hash, new_hash) = (sha256_hex(REAL_CWD), sha256_hex(&repo));
    for f in walk(&src) {
        let rel = f.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(&f)
            .unwrap()
            .replace(REAL_CWD, &repo)
            .replace(&old_hash, &new_hash);
        let to = l.w.home().join(".gemini").join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    }
    l
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(s.as_bytes()))
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

const REWOUND: &str = "e1911115-4760-4828-9347-c6c063611250";

fn chats(l: &Live) -> PathBuf {
    l.w.home().join(".gemini/tmp/proj/chats")
}

#[test]
fn gemini_replay_logs_give_sessions_prompts_after_a_rewind_and_projects_by_sidecar_or_hash() {
    let l = gemini_world();
    let rows = sessions(&l, "gemini");
    // Six sessions; the subagent's log (kind "subagent", under chats/<parent id>/) is not listed.
    assert_eq!(rows.len(), 6, "{rows:?}");
    for r in &rows {
        assert_eq!(r["projectDir"], l.repo.to_str().unwrap(), "{r}");
    }
    let rewound = by_id(&rows, REWOUND);
    // "Interactive second prompt." was rewound (and the shell command after it with it); the prompt
    // typed after the rewind replaces it. The session context is the CLI's, not a prompt.
    assert_eq!(rewound["userTurns"], 2, "{rewound}");
    assert_eq!(rewound["firstPrompt"], "Interactive first prompt.");
    assert_eq!(
        rewound["lastPrompt"],
        "Rewritten second prompt after rewind."
    );

    // Without the sidecar the project is known only by its hash: placed once the repo is known; a
    // session whose hash is of a path almanac does not know stays unplaced.
    std::fs::remove_file(l.w.home().join(".gemini/tmp/proj/.project_root")).unwrap();
    let log = chats(&l).join("session-2026-12-03T06-02-e1911115.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let repo_hash = sha256_hex(l.repo.to_str().unwrap());
    std::fs::write(
        &log,
        text.replace(&repo_hash, &sha256_hex("/somewhere/else")),
    )
    .unwrap();
    let rows = sessions(&l, "gemini");
    assert!(rows.iter().all(|r| r["projectDir"].is_null()), "{rows:?}");
    let mut init = l.w.almanac();
    init.args(["init", l.repo.to_str().unwrap()]);
    stdout_ok(&mut init);
    let rows = sessions(&l, "gemini");
    let placed: Vec<&str> = rows
        .iter()
        .filter(|r| r["projectDir"] == l.repo.to_str().unwrap())
        .filter_map(|r| r["sessionId"].as_str())
        .collect();
    assert_eq!(placed.len(), 5, "{rows:?}");
    assert!(by_id(&rows, REWOUND)["projectDir"].is_null(), "{rows:?}");
}

#[test]
fn a_gemini_rewind_past_the_captured_messages_needs_attention_and_one_after_them_does_not() {
    let l = gemini_world();
    let log = chats(&l).join("session-2026-12-03T06-02-e1911115.jsonl");
    let full = std::fs::read_to_string(&log).unwrap();
    let rewind_at = full.find("{\"$rewindTo\"").unwrap();
    // Captured through the shell command, which the rewind then removes.
    std::fs::write(&log, &full[..rewind_at]).unwrap();
    let s = l.sweep_args(&["--apps", "gemini"]);
    l.wait_idle();
    assert!(started(&s).iter().any(|r| r["sessionId"] == REWOUND), "{s}");
    std::fs::write(&log, &full).unwrap();
    let s = l.sweep_args(&["--apps", "gemini"]);
    let attention = items(&s, "needsAttention");
    assert!(
        attention
            .iter()
            .any(|i| i["sessionId"] == REWOUND && i["reason"] == "prefix-mismatch"),
        "{s}"
    );

    // Captured only through the first answer: the rewind drops messages after the cursor only, and
    // the prompt typed after it is captured.
    let l = gemini_world();
    let log = chats(&l).join("session-2026-12-03T06-02-e1911115.jsonl");
    let second = full.find("Interactive second prompt.").unwrap();
    let cut = full[..second].rfind('\n').unwrap() + 1;
    std::fs::write(&log, &full[..cut]).unwrap();
    let s = l.sweep_args(&["--apps", "gemini"]);
    l.wait_idle();
    assert!(started(&s).iter().any(|r| r["sessionId"] == REWOUND), "{s}");
    std::fs::write(&log, &full).unwrap();
    let s = l.sweep_args(&["--apps", "gemini"]);
    l.wait_idle();
    let again: Vec<_> = started(&s)
        .into_iter()
        .filter(|r| r["sessionId"] == REWOUND)
        .collect();
    assert_eq!(again.len(), 1, "{s}");
    let run_id = again[0]["runId"].as_str().unwrap();
    let text = l.conversation(run_id);
    assert!(
        text.contains("Rewritten second prompt after rewind."),
        "{text}"
    );
    assert!(!text.contains("Interactive second prompt."), "{text}");
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
}

#[test]
fn hostile_stores_are_refused_by_name() {
    // A database that is a symbolic link is not read through.
    let l = opencode_world();
    let db = db_path(&l);
    let elsewhere = l.w.root().join("elsewhere.db");
    std::fs::rename(&db, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &db).unwrap();
    let s = l.w.dry_run(&["--apps", "opencode", "--quiet", "0m"]);
    let att = items(&s, "needsAttention");
    assert!(
        att.iter()
            .any(|i| i["detail"].as_str().unwrap().contains("symbolic link")),
        "{s}"
    );
    assert!(items(&s, "started").is_empty(), "{s}");

    // A document larger than almanac reads is refused, named.
    let l = gemini_world();
    let mut cmd = l.w.almanac();
    cmd.env("ALMANAC_TEST_MAX_DOCUMENT_BYTES", "3000").args([
        "capture",
        "sweep",
        "--dry-run",
        "--json",
        "--apps",
        "gemini",
        "--quiet",
        "0m",
    ]);
    let v = json_ok(&mut cmd);
    let att = items(&v["summary"], "needsAttention");
    assert!(
        att.iter()
            .any(|i| i["detail"].as_str().unwrap().contains("is larger than")
                && i["transcriptPath"].as_str().unwrap().ends_with(".jsonl")),
        "{v}"
    );

    // A rule file whose query would write is refused by the validator, naming the rule and the key.
    let w = World::new();
    let dir = w.root().join("rules");
    std::fs::create_dir_all(&dir).unwrap();
    let text = include_str!("../../rules/opencode.yaml")
        .replace("id: opencode", "id: writer")
        .replace(
            "SELECT id, parent_id, directory, title, version, time_created, time_updated FROM session",
            "DELETE FROM session",
        );
    std::fs::write(dir.join("writer.yaml"), text).unwrap();
    let out = w
        .almanac()
        .args(["rules", "validate", "--rules-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        err.contains("writer.yaml")
            && err.contains("stores[0].sqlite.sessions")
            && err.contains("would write"),
        "{err}"
    );
}

/// Copies a fixture tree into the world's home under `to`, its project this world's repo.
fn copied_world(fixture: &str, to: &str) -> Live {
    let l = live_world(3);
    let src = Path::new(FIXTURES).join(fixture);
    let repo = l.repo.to_str().unwrap().to_string();
    for f in walk(&src) {
        let rel = f.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(&f)
            .unwrap()
            .replace(REAL_CWD, &repo);
        let dest = l.w.home().join(to).join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, text).unwrap();
    }
    l
}

#[test]
fn cline_cli_sessions_give_prompts_inside_their_wrapper_and_subagents() {
    let l = copied_world("real/stores/cline/.cline", ".cline");
    let rows = sessions(&l, "cline");
    // Two sessions; the spawn_agent child (agent_*.messages.json, origin.parentThreadId) is a subagent.
    assert_eq!(rows.len(), 2, "{rows:?}");
    let resumed = by_id(&rows, "1796277338110_se3e8");
    assert_eq!(resumed["projectDir"], l.repo.to_str().unwrap());
    // Tool results are user-role messages too; only the <user_input> text blocks are prompts.
    assert_eq!(resumed["userTurns"], 2);
    assert_eq!(
        resumed["firstPrompt"],
        "Summarize README.md in one sentence."
    );
    assert_eq!(resumed["lastPrompt"], "Now list the Python files here.");
    let helper = by_id(&rows, "1796277435297_m9yj6");
    assert_eq!(helper["userTurns"], 1);
    assert_eq!(
        helper["firstPrompt"],
        "Ask a helper agent to check README.md."
    );
    let s = l.w.dry_run(&["--apps", "cline", "--quiet", "0m"]);
    assert_eq!(s["stats"]["subagents"], 1, "{s}");
}

#[test]
fn a_cline_vscode_task_is_placed_by_its_environment_details() {
    let l = copied_world(
        "synthetic/cline-vscode",
        ".config/Code/User/globalStorage/saoudrizwan.claude-dev",
    );
    let rows = sessions(&l, "cline");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let task = by_id(&rows, "1777073160794");
    assert_eq!(task["projectDir"], l.repo.to_str().unwrap());
    // The <task> and the <feedback> are the prompts; the tool result and the completion's result are not.
    assert_eq!(task["userTurns"], 2, "{task}");
    assert_eq!(task["firstPrompt"], "What does src/main.rs do?");
    assert_eq!(task["lastPrompt"], "Add a hello world to it.");
}

/// A VS Code task directory holding only ui_messages.json (Cline has not written the API history yet):
/// still one session, read from the UI messages; once the API history is there, read from it alone.
#[test]
fn a_cline_vscode_task_with_only_ui_messages_is_one_session_and_one_with_both_is_read_once() {
    let tasks = ".config/Code/User/globalStorage/saoudrizwan.claude-dev";
    let l = copied_world("synthetic/cline-vscode", tasks);
    let ui_only = copied_world("synthetic/cline-vscode-ui", tasks);
    let from = ui_only.w.home().join(tasks).join("tasks/1777074200000");
    let dir = l.w.home().join(tasks).join("tasks/1777074200000");
    std::fs::create_dir_all(&dir).unwrap();
    let ui = std::fs::read_to_string(from.join("ui_messages.json"))
        .unwrap()
        .replace(ui_only.repo.to_str().unwrap(), l.repo.to_str().unwrap());
    std::fs::write(dir.join("ui_messages.json"), ui).unwrap();
    let rows = sessions(&l, "cline");
    // The fixture's task has both files: one session, from its API history; the new one from its UI.
    assert_eq!(rows.len(), 2, "{rows:?}");
    let task = by_id(&rows, "1777074200000");
    assert_eq!(task["projectDir"], l.repo.to_str().unwrap(), "{task}");
    // The task and the user's feedback; the follow-up question, API requests and the completion are not.
    assert_eq!(task["userTurns"], 2, "{task}");
    assert_eq!(task["firstPrompt"], "Which tests cover the parser?");
    assert_eq!(task["lastPrompt"], "Yes, add one for empty input.");
    assert!(
        text_of(&task["transcriptPath"]).ends_with("1777074200000.jsonl"),
        "{task}"
    );
    let old = by_id(&rows, "1777073160794");
    assert_eq!(old["userTurns"], 2, "{old}");
    // A history that is a dangling link is no history: the task is still read from its UI messages.
    std::os::unix::fs::symlink(
        l.w.root().join("gone.json"),
        dir.join("api_conversation_history.json"),
    )
    .unwrap();
    let rows = sessions(&l, "cline");
    assert_eq!(by_id(&rows, "1777074200000")["userTurns"], 2, "{rows:?}");
    std::fs::remove_file(dir.join("api_conversation_history.json")).unwrap();
    // The API history appears beside it: the same task, now read from the history alone.
    let history =
        l.w.home()
            .join(tasks)
            .join("tasks/1777073160794/api_conversation_history.json");
    std::fs::copy(history, dir.join("api_conversation_history.json")).unwrap();
    let rows = sessions(&l, "cline");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let d = l.w.dry_run(&["--apps", "cline", "--quiet", "0m"]);
    assert_eq!(d["stats"]["duplicates"], 0, "{d}");
}

fn text_of(v: &serde_json::Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

const CONTINUED: &str = "be78b65e-74dd-4539-bea4-241a55434035";

#[test]
fn a_continue_document_rewritten_with_the_same_messages_starts_no_run_and_a_new_exchange_one() {
    let l = copied_world("real/stores/continue/.continue", ".continue");
    let rows = sessions(&l, "continue");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let two = by_id(&rows, CONTINUED);
    assert_eq!(two["projectDir"], l.repo.to_str().unwrap());
    assert_eq!(two["userTurns"], 2);
    assert_eq!(two["lastPrompt"], "Now list the Python files here.");
    let s = l.sweep_args(&["--apps", "continue"]);
    l.wait_idle();
    assert!(
        started(&s).iter().any(|r| r["sessionId"] == CONTINUED),
        "{s}"
    );

    // Rewritten whole, as `cn` does after every turn: same messages, other totals and layout.
    let path =
        l.w.home()
            .join(format!(".continue/sessions/{CONTINUED}.json"));
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    doc["usage"]["totalCost"] = serde_json::json!(0.5);
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let s = l.sweep_args(&["--apps", "continue"]);
    assert!(started(&s).is_empty(), "{s}");
    assert!(items(&s, "needsAttention").is_empty(), "{s}");

    let history = doc["history"].as_array_mut().unwrap();
    let before = history.len() as u64;
    history.push(serde_json::json!({"message": {"role": "user", "content": "And the tests?"}, "contextItems": []}));
    history.push(serde_json::json!({"message": {"role": "assistant", "content": "There are none."}, "contextItems": []}));
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let s = l.sweep_args(&["--apps", "continue"]);
    l.wait_idle();
    let runs = started(&s);
    assert_eq!(runs.len(), 1, "{s}");
    let prompt = l.prompt(runs[0]["runId"].as_str().unwrap());
    assert!(
        prompt.contains(&format!(
            "Focus on messages {} to {}.",
            before + 1,
            before + 2
        )),
        "{prompt}"
    );
}

#[test]
fn an_unchanged_store_costs_no_read_and_a_changed_session_one_query() {
    let l = opencode_world();
    let reads = |s: &serde_json::Value| {
        (
            s["stats"]["storesRead"].clone(),
            s["stats"]["sessionsRead"].clone(),
        )
    };
    let dry = || l.w.dry_run(&["--apps", "opencode", "--quiet", "0m"]);
    assert_eq!(
        reads(&dry()),
        (1.into(), 6.into()),
        "first read: every session"
    );
    assert_eq!(
        reads(&dry()),
        (0.into(), 0.into()),
        "nothing changed: no copy, no query"
    );
    let c = Connection::open(db_path(&l)).unwrap();
    add_exchange(&c, TWO_PROMPTS, 3, "One more.");
    drop(c);
    assert_eq!(
        reads(&dry()),
        (1.into(), 1.into()),
        "one session's messages read again"
    );
}

/// Stores inside projects are looked for in the repos almanac knows, never by walking the disk.
#[test]
fn crush_and_old_opencode_stores_inside_a_repo_are_found_once_the_repo_is_known() {
    for (app, fixture, dir, main, child) in [
        (
            "crush",
            "synthetic/stores/crush/.crush/crush.db",
            ".crush/crush.db",
            "47e21250-a807-4bdd-8363-ef06531e5f2a",
            "44858f3e-bd66-4658-820e-bbb209ca7554$$toolu_01XuBosfQOuGWB4CnK8Jihzl",
        ),
        (
            "opencode",
            "synthetic/stores/opencode-go/.opencode/opencode.db",
            ".opencode/opencode.db",
            "a924814d-e9d3-4d22-aa49-e1484add107f",
            "toolu_01I4P8r50zTBPrI15qxq0kGH",
        ),
    ] {
        let l = live_world(3);
        let db = l.repo.join(dir);
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        std::fs::copy(Path::new(FIXTURES).join(fixture), &db).unwrap();
        assert!(
            sessions(&l, app).is_empty(),
            "{app}: found before the repo is known"
        );
        let mut init = l.w.almanac();
        init.args(["init", l.repo.to_str().unwrap()]);
        stdout_ok(&mut init);
        let rows = sessions(&l, app);
        // Two sessions; the agent tool's child session (parent_session_id) is a subagent.
        assert_eq!(rows.len(), 2, "{app}: {rows:?}");
        assert!(!rows.iter().any(|r| r["sessionId"] == child), "{app}");
        let two = by_id(&rows, main);
        assert_eq!(two["projectDir"], l.repo.to_str().unwrap(), "{app}");
        // Tool messages are their own role; the attachment is not a prompt of its own.
        assert_eq!(two["userTurns"], 2, "{app}: {two}");
        assert_eq!(
            two["lastPrompt"], "Where is the config file actually loaded? See my notes.",
            "{app}"
        );
        let s = l.w.dry_run(&["--apps", app, "--quiet", "0m"]);
        assert_eq!(s["stats"]["subagents"], 1, "{app}: {s}");
        // Nothing is written beside the store.
        let entries: Vec<String> = std::fs::read_dir(db.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(entries.len(), 1, "{app}: {entries:?}");
    }
}

/// Real Crush (2025 and 2026 schemas) and Go opencode databases people committed to public repositories
/// (tests/fixtures/README.md): each session's prompts as a person reading them counts, the agent tool's
/// child session a subagent.
#[test]
fn real_crush_and_old_opencode_stores_from_public_repositories_give_their_sessions_and_prompts() {
    for (app, fixture, dir, expected, children) in [
        (
            "crush",
            "real/stores/crush-real/.crush/crush.db",
            ".crush/crush.db",
            &[
                // Five typed prompts; a tool result is a `tool` row.
                (
                    "0d21b928-b749-4f15-afae-f036954bae3f",
                    5,
                    "Forgejo keeps going down in my k3s cluster.",
                    "I tried:",
                ),
                (
                    "dc3d92ac-cf53-49d1-92b0-6df9c267c183",
                    1,
                    "Please help fix my kubernetes yaml files.",
                    "Please help fix my kubernetes yaml files.",
                ),
                // A summary the person pasted by hand is a prompt.
                (
                    "093f9963-97b6-4279-9bea-ded429193b34",
                    1,
                    "Summary of the last session:",
                    "Summary of the last session:",
                ),
            ][..],
            1,
        ),
        (
            "crush",
            "real/stores/crush-real-2026/.crush/crush.db",
            ".crush/crush.db",
            &[
                // Nine typed prompts; the row Crush writes after summarising is not one.
                ("e369aabc-3f6a-4c03-b4bc-4293becef366", 9, "hola", "Hazlo"),
                // A file pasted with no words.
                (
                    "05193330-a419-4f38-a955-8ea6c72cccc2",
                    1,
                    "[attached file]",
                    "[attached file]",
                ),
            ][..],
            0,
        ),
        (
            "opencode",
            "real/stores/opencode-go-real/.opencode/opencode.db",
            ".opencode/opencode.db",
            &[
                // `/init`'s canned prompt, then three typed ones (the last is ":q", sent as a prompt).
                (
                    "8807c293-21aa-4832-b386-fa0ed7f4b628",
                    4,
                    "Please analyze this codebase and create a OpenCode.md file",
                    ":q",
                ),
                (
                    "b306a5a8-d696-4c74-ba26-c7a65552ef78",
                    3,
                    "do you remmeber what my last question was?",
                    "I would like you to text the functionality",
                ),
                (
                    "db7b3d68-4f9c-4930-a9ca-5f589333424a",
                    2,
                    "OKay, here is your chance to shine bot.",
                    "can you test teh game really quick",
                ),
            ][..],
            1,
        ),
    ] {
        let l = live_world(3);
        let db = l.repo.join(dir);
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        std::fs::copy(Path::new(FIXTURES).join(fixture), &db).unwrap();
        let mut init = l.w.almanac();
        init.args(["init", l.repo.to_str().unwrap()]);
        stdout_ok(&mut init);
        let rows = sessions(&l, app);
        assert_eq!(rows.len(), expected.len(), "{fixture}: {rows:?}");
        for (id, turns, first, last) in expected {
            let r = by_id(&rows, id);
            assert_eq!(r["projectDir"], l.repo.to_str().unwrap(), "{r}");
            assert_eq!(r["userTurns"], *turns, "{fixture}: {r}");
            assert!(r["firstPrompt"].as_str().unwrap().starts_with(first), "{r}");
            assert!(r["lastPrompt"].as_str().unwrap().starts_with(last), "{r}");
        }
        let s = l.w.dry_run(&["--apps", app, "--quiet", "0m"]);
        assert_eq!(s["stats"]["subagents"], children, "{fixture}: {s}");
        assert!(items(&s, "needsAttention").is_empty(), "{fixture}: {s}");
        // Every session would be captured (a long one in chunks).
        let mut started: Vec<&str> = items(&s, "started")
            .iter()
            .filter_map(|i| i["sessionId"].as_str())
            .collect();
        started.dedup();
        assert_eq!(started.len(), expected.len(), "{fixture}: {s}");
    }
}

/// Aider's chat log of a repo with six sessions (Aider 0.86.2 against the mock: `--message` runs, `/ask`,
/// an interactive session ending in `/exit`, piped input, a multi-line prompt).
#[test]
fn aider_sessions_take_their_prompts_from_the_input_history_and_a_grown_one_is_captured_alone() {
    let l = live_world(3);
    for f in [".aider.chat.history.md", ".aider.input.history"] {
        std::fs::copy(
            Path::new(FIXTURES).join("real/stores/aider").join(f),
            l.repo.join(f),
        )
        .unwrap();
    }
    assert!(
        sessions(&l, "aider").is_empty(),
        "found before the repo is known"
    );
    let mut init = l.w.almanac();
    init.args(["init", l.repo.to_str().unwrap()]);
    stdout_ok(&mut init);
    let rows = sessions(&l, "aider");
    assert_eq!(rows.len(), 6, "{rows:?}");
    let log = l.repo.join(".aider.chat.history.md");
    let at = |time: &str| by_id(&rows, &format!("{}#2026-12-03 {time}", log.display())).clone();
    for r in &rows {
        assert_eq!(r["projectDir"], l.repo.to_str().unwrap());
    }
    let turns = |r: &serde_json::Value| {
        (
            r["userTurns"].as_u64().unwrap(),
            r["firstPrompt"].clone(),
            r["lastPrompt"].clone(),
        )
    };
    assert_eq!(
        turns(&at("05:59:50")),
        (
            1,
            "Summarize README.md in one sentence.".into(),
            "Summarize README.md in one sentence.".into()
        )
    );
    // `/ask Q` is echoed twice in the log; the typed entry is one prompt, Q.
    assert_eq!(
        turns(&at("06:00:48")),
        (
            1,
            "What does hello.py do?".into(),
            "What does hello.py do?".into()
        )
    );
    // Two prompts typed, then `/exit`: a local command.
    assert_eq!(
        turns(&at("06:01:08")),
        (
            2,
            "What is in README.md?".into(),
            "And what does hello.py return?".into()
        )
    );
    // Piped input writes no input history: the `#### ` lines are the prompts.
    assert_eq!(
        turns(&at("06:01:45")),
        (2, "Piped prompt one.".into(), "Piped prompt two.".into())
    );
    // A multi-line prompt is one.
    assert_eq!(at("06:01:55")["userTurns"], 1);

    let s = l.sweep_args(&["--apps", "aider"]);
    l.wait_idle();
    assert_eq!(started(&s).len(), 6, "{s}");
    // The last session goes on: one prompt more, in both files.
    let mut md = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut md, b"\n#### And the tests?  \n\nThere are none.\n\n").unwrap();
    let mut input = std::fs::OpenOptions::new()
        .append(true)
        .open(l.repo.join(".aider.input.history"))
        .unwrap();
    std::io::Write::write_all(
        &mut input,
        b"\n# 2026-12-03 06:05:00.120000\n+And the tests?\n",
    )
    .unwrap();
    let s = l.sweep_args(&["--apps", "aider"]);
    l.wait_idle();
    let runs = started(&s);
    assert_eq!(runs.len(), 1, "{s}");
    assert_eq!(
        runs[0]["sessionId"],
        format!("{}#2026-12-03 06:01:55", log.display())
    );
    let run_id = runs[0]["runId"].as_str().unwrap();
    let text = l.conversation(run_id);
    assert!(text.contains("] user:\n  And the tests?"), "{text}");
    assert!(
        l.prompt(run_id)
            .contains("previously captured through message"),
        "{}",
        l.prompt(run_id)
    );
}

#[test]
fn a_store_file_of_one_session_names_it_and_one_of_many_says_how_to_choose() {
    let l = copied_world("real/stores/continue/.continue", ".continue");
    let doc =
        l.w.home()
            .join(format!(".continue/sessions/{CONTINUED}.json"));
    let mut cmd = l.w.almanac();
    cmd.args(["capture", "turns", "--json", doc.to_str().unwrap()]);
    let v = json_ok(&mut cmd);
    assert!(
        v["transcriptPath"]
            .as_str()
            .unwrap()
            .contains("/state/views/continue/"),
        "{v}"
    );
    let turns = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "turn")
        .count();
    assert_eq!(turns, 2, "{v}");
    let mut cmd = l.w.almanac();
    cmd.args(["rules", "explain", doc.to_str().unwrap()]);
    assert!(stdout_ok(&mut cmd).contains(&format!("session_id = {CONTINUED}")));

    let l = opencode_world();
    let out =
        l.w.almanac()
            .args(["capture", "turns", db_path(&l).to_str().unwrap()])
            .output()
            .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("holds 6 sessions") && err.contains("capture sessions"),
        "{err}"
    );
}
