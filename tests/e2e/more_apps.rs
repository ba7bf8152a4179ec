//! The rule sets of apps added from rule files alone (Goose, Kimi CLI, Mistral Vibe, Zed) on sessions
//! their real clients wrote (tests/fixtures/real/PROVENANCE.md) or, for Zed, a store made to its schema
//! (tests/fixtures/README.md): `capture sessions`, `capture turns` and a live sweep agree on each root
//! session's prompts and project; subagents are not captured; and once the session grows, the next
//! sweep captures only what was added. Expectations come from reading the files.

use crate::common::*;
use crate::cursor::copy_tree;
use crate::live::{live_world, Live};
use crate::stores::{by_id, sessions, started};
use crate::turn_fidelity::{agree_and_capture, fixture_dir};
use std::path::Path;

/// After `agree_and_capture`: `grow` adds to the session, and the one run the next sweep of `app`
/// starts for `id` begins after the last captured line and ends at the view's last; the conversation it
/// reads as its new part holds `added` and not `old`. A sweep after that starts none.
fn captures_only_what_was_added(
    l: &Live,
    (app, id): (&str, &str),
    (old, added): (&str, &str),
    grow: impl FnOnce(),
) {
    let view_lines = |l: &Live| -> u64 {
        let row = sessions(l, app)
            .into_iter()
            .find(|r| r["sessionId"] == id)
            .unwrap();
        let view = std::fs::read_to_string(row["transcriptPath"].as_str().unwrap()).unwrap();
        view.lines().count() as u64
    };
    let captured = view_lines(l);
    grow();
    let s = l.sweep_args(&["--apps", app]);
    l.wait_idle();
    let runs: Vec<_> = started(&s)
        .into_iter()
        .filter(|r| r["sessionId"] == id)
        .collect();
    assert_eq!(runs.len(), 1, "{s}");
    assert_eq!(runs[0]["fromLine"], captured + 1, "{s}");
    assert_eq!(runs[0]["toLine"], view_lines(l), "{s}");
    // Earlier prompts are shown for context only; the part to capture holds just the new one.
    let conversation = l.conversation(runs[0]["runId"].as_str().unwrap());
    let (_, new_part) = conversation
        .split_once("## The new part, to capture")
        .unwrap_or_else(|| panic!("{conversation}"));
    assert!(new_part.contains(added), "{conversation}");
    assert!(!new_part.contains(old), "{conversation}");
    let s = l.sweep_args(&["--apps", app]);
    assert!(started(&s).iter().all(|r| r["sessionId"] != id), "{s}");
}

/// The sweep starts no run for the subagent `id`, and `capture sessions` does not list it as a root;
/// its view says it is a subagent's.
fn subagent_not_captured(l: &Live, app: &str, id: &str) {
    let views = l.w.almanac_home().join("state/views").join(app);
    let view = walk_named(&views, &format!("{id}.jsonl"));
    assert_eq!(
        view.len(),
        1,
        "the subagent's view under {}",
        views.display()
    );
    let header: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&view[0])
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["almanac_view"]["subagent"], true, "{header}");
    assert!(
        sessions(l, app).iter().all(|r| r["sessionId"] != id),
        "a subagent is no root session"
    );
    let runs = l.runs();
    assert!(runs.iter().all(|r| r["sessionId"] != id), "{runs:?}");
}

fn sqlite(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

#[test]
fn goose_sessions_of_a_real_database_are_read_and_grow() {
    // goose 1.45.0 (WildChildForLife/lantern): four sessions in /work, one typed prompt each; the user
    // rows after them hold tool results (toolResponse parts), not prompts.
    let l = live_world(3);
    let dir = l.w.home().join(".local/share/goose/sessions");
    copy_tree(&fixture_dir("goose-1.45/.local/share/goose/sessions"), &dir);
    let db = dir.join("sessions.db");
    let repo = l.repo.to_str().unwrap().to_string();
    sqlite(&db)
        .execute("UPDATE sessions SET working_dir = ?1", [&repo])
        .unwrap();
    let rows = sessions(&l, "goose");
    let turns: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["sessionId"].as_str().unwrap().to_string(),
                r["userTurns"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            ("20260805_4".to_string(), 1),
            ("20260805_3".to_string(), 1),
            ("20260805_2".to_string(), 1),
            ("20260805_1".to_string(), 1),
        ]
    );
    let first = "Read the file /work/src/orders.py using an absolute path and reply with its first line only.";
    agree_and_capture(&l, "goose", "20260805_4", &[(2, first.into())]);
    // The user asks again: goose adds a user row and an answer, and moves updated_at.
    let added = "Now make the reader skip blank lines, please.";
    captures_only_what_was_added(&l, ("goose", "20260805_4"), (&first[..40], added), || {
        let conn = sqlite(&db);
        conn.execute(
            "INSERT INTO messages (message_id, session_id, role, content_json, created_timestamp, metadata_json) VALUES
               ('msg_new_1', '20260805_4', 'user', json_array(json_object('type', 'text', 'text', ?1)), 1785966000, '{\"userVisible\":true,\"agentVisible\":true}'),
               ('chatcmpl-9', '20260805_4', 'assistant', json_array(json_object('type', 'text', 'text', 'Done: blank lines are skipped.')), 1785966010, '{\"userVisible\":true,\"agentVisible\":true}')",
            [added],
        )
        .unwrap();
        conn.execute(
            "UPDATE sessions SET updated_at = '2026-08-05 22:00:10' WHERE id = '20260805_4'",
            [],
        )
        .unwrap();
    });
}

#[test]
fn vibe_sessions_take_their_ids_parents_and_projects_from_meta_json() {
    // Mistral Vibe 2.26.1 (--legacy-harness), run here against the mock model: three sessions, one of
    // which delegated to a subagent (agents/explore_…, its parent only in its meta.json).
    let l = live_world(3);
    let root = l.w.home().join(".vibe/logs/session");
    copy_tree(&fixture_dir("vibe-2.26.1/.vibe/logs/session"), &root);
    let ran_in = "/work/stage/51-kimi-vibe/projects/vibe-demo";
    for meta in walk_named(&root, "meta.json") {
        replace_in(&meta, &[(ran_in, l.repo.to_str().unwrap())]);
    }
    let id = "9c2ea442-0e8b-c28c-1532-e176adc50d7d";
    let first = "What does this project do? Please list the files.";
    agree_and_capture(
        &l,
        "vibe",
        id,
        &[
            (2, first.into()),
            (6, "Now explain util.py in one sentence, thanks.".into()),
        ],
    );
    subagent_not_captured(&l, "vibe", "61974d40-4a18-07f1-c8b1-796041096ad3");
    let rows = sessions(&l, "vibe");
    let delegating = by_id(&rows, "a7dd86eb-9fcd-c6a9-7b3a-dbb89809b0a6");
    assert_eq!(delegating["userTurns"], 1, "{delegating}");
    // An injected message (middleware's) is no prompt; a typed one is.
    let added = "Add a docstring to util.py.";
    let file = root.join("session_20261205_034604_9c2ea442/messages.jsonl");
    captures_only_what_was_added(&l, ("vibe", id), (first, added), || {
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str(&format!(
            "{}\n{}\n{}\n",
            serde_json::json!({"role": "user", "content": "Plan mode is off.", "injected": true}),
            serde_json::json!({"role": "user", "content": added, "injected": false, "message_id": "m-added"}),
            serde_json::json!({"role": "assistant", "content": "Added.", "injected": false, "message_id": "m-answer"}),
        ));
        std::fs::write(&file, text).unwrap();
    });
    let rows = sessions(&l, "vibe");
    assert_eq!(by_id(&rows, id)["userTurns"], 3);
}

#[test]
fn kimi_sessions_are_read_from_their_wire_logs_and_placed_by_the_hash_of_their_directory() {
    // Kimi CLI 1.51.0, run here against the mock model: sessions/<md5 of the cwd>/<id>/wire.jsonl; one
    // session ran /compact and /clear between its three prompts, one delegated to a subagent
    // (subagents/<agent id>/wire.jsonl, its parent the directory it is in).
    let l = live_world(3);
    let sessions_dir = l.w.home().join(".kimi/sessions");
    let hash = {
        use md5::Digest;
        format!(
            "{:x}",
            md5::Md5::digest(l.repo.to_str().unwrap().as_bytes())
        )
    };
    copy_tree(
        &fixture_dir("kimi-1.51.0/.kimi/sessions/c8429327a12a48c44464ce17d90cb9d8"),
        &sessions_dir.join(&hash),
    );
    // Nothing in a session names its directory: only a repo almanac knows is placed.
    let unplaced = sessions(&l, "kimi");
    assert!(
        unplaced.iter().all(|r| r["projectDir"].is_null()),
        "{unplaced:?}"
    );
    let mut init = l.w.almanac();
    init.args(["init", l.repo.to_str().unwrap()]);
    assert!(init.output().unwrap().status.success());
    let id = "34682019-e113-4e63-a28c-0ff32d42c093";
    let first = "First question before clearing: what is main.py?";
    agree_and_capture(
        &l,
        "kimi",
        id,
        &[
            (3, first.into()),
            (14, "Question after compaction: what is util.py?".into()),
            (23, "Question after clear: hello again".into()),
        ],
    );
    subagent_not_captured(&l, "kimi", "accc530e3");
    let wire = sessions_dir.join(&hash).join(id).join("wire.jsonl");
    let added = "One more: what does README.md say?";
    captures_only_what_was_added(&l, ("kimi", id), (first, added), || {
        let mut text = std::fs::read_to_string(&wire).unwrap();
        for m in [
            serde_json::json!({"type": "TurnBegin", "payload": {"user_input": added}}),
            serde_json::json!({"type": "ContentPart", "payload": {"type": "text", "text": "It says hello."}}),
            serde_json::json!({"type": "TurnEnd", "payload": {}}),
        ] {
            text.push_str(&format!(
                "{}\n",
                serde_json::json!({"timestamp": 1796443000.5, "message": m})
            ));
        }
        std::fs::write(&wire, text).unwrap();
    });
}

/// The synthetic Zed store (tests/fixtures/README.md) with its project paths made `repo`, each thread
/// compressed again as Zed writes it.
fn zed_store(l: &Live) -> std::path::PathBuf {
    let dir = l.w.home().join(".local/share/zed/threads");
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("threads.db");
    std::fs::copy(
        Path::new(FIXTURES).join("synthetic/stores/zed/threads.db"),
        &db,
    )
    .unwrap();
    let conn = sqlite(&db);
    let repo = l.repo.to_str().unwrap();
    let rows: Vec<(String, String, Vec<u8>)> = conn
        .prepare("SELECT id, data_type, data FROM threads")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (id, kind, data) in rows {
        let text = zed_json(&kind, &data).replace("/home/dev/proj-alpha", repo);
        conn.execute(
            "UPDATE threads SET data = ?1, folder_paths = replace(folder_paths, '/home/dev/proj-alpha', ?2) WHERE id = ?3",
            rusqlite::params![zed_blob(&kind, &text), repo, id],
        )
        .unwrap();
    }
    db
}

fn zed_json(kind: &str, data: &[u8]) -> String {
    match kind {
        "zstd" => {
            use std::io::Read;
            let mut out = String::new();
            ruzstd::decoding::StreamingDecoder::new(data)
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            out
        }
        _ => String::from_utf8(data.to_vec()).unwrap(),
    }
}

fn zed_blob(kind: &str, text: &str) -> Vec<u8> {
    match kind {
        "zstd" => ruzstd::encoding::compress_to_vec(
            text.as_bytes(),
            ruzstd::encoding::CompressionLevel::Fastest,
        ),
        _ => text.as_bytes().to_vec(),
    }
}

#[test]
fn zed_threads_are_decompressed_and_a_subagent_thread_is_not_captured() {
    let l = live_world(3);
    let db = zed_store(&l);
    let id = "6a1f0c2e-5b7d-4c11-9e0a-1d2c3b4a5f60";
    let first =
        "The test in tests/date_parse.rs fails about once in ten runs. Find out why and fix it.";
    // Message 4 is Zed's "Resume" marker; message 5's two text parts surround a file mention, which
    // is left out.
    let mention = "Also check \n\n and add a regression test for the midnight case.".to_string();
    agree_and_capture(&l, "zed", id, &[(2, first.into()), (6, mention)]);
    subagent_not_captured(&l, "zed", "0b9e8d7c-6a5f-4e3d-8c2b-1a0f9e8d7c6b");
    // The first agent panel's threads (0.2.0, stored as JSON) are read too.
    let rows = sessions(&l, "zed");
    let legacy = by_id(&rows, "legacy-0d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a");
    assert_eq!(legacy["userTurns"], 2, "{legacy}");
    assert_eq!(
        legacy["lastPrompt"], "Can we skip it in CI when nothing changed?",
        "{legacy}"
    );
    // Zed writes the whole thread again, one message longer.
    let added = "Run the whole suite ten times to be sure.";
    captures_only_what_was_added(&l, ("zed", id), (first, added), || {
        let conn = sqlite(&db);
        let data: Vec<u8> = conn
            .query_row("SELECT data FROM threads WHERE id = ?1", [id], |r| r.get(0))
            .unwrap();
        let mut thread: serde_json::Value = serde_json::from_str(&zed_json("zstd", &data)).unwrap();
        let messages = thread["messages"].as_array_mut().unwrap();
        messages.push(serde_json::json!({"User": {"id": "5b7d9f1a-3c5e-4f6a-8b9c-0d1e2f3a4b5c", "content": [{"Text": added}]}}));
        messages.push(serde_json::json!({"Agent": {"content": [{"Text": "All ten runs passed."}], "tool_results": {}, "reasoning_details": null}}));
        conn.execute(
            "UPDATE threads SET data = ?1, updated_at = '2026-03-02T11:00:00+00:00' WHERE id = ?2",
            rusqlite::params![zed_blob("zstd", &thread.to_string()), id],
        )
        .unwrap();
    });
}

/// Every file named `name` below `dir`.
fn walk_named(dir: &Path, name: &str) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.file_name() == name)
        .map(|e| e.into_path())
        .collect()
}

/// `file` with each `(from, to)` replaced: a fixture's paths made the test's.
fn replace_in(file: &Path, pairs: &[(&str, &str)]) {
    let mut text = std::fs::read_to_string(file).unwrap();
    for (from, to) in pairs {
        text = text.replace(from, to);
    }
    std::fs::write(file, text).unwrap();
}

#[test]
fn a_roo_task_holds_its_prompts_and_not_the_wrappers_a_tool_printed() {
    // Roo Code 3.2x, September 2025 (jsboige/jsboige-mcp-servers): the task, then two sends after
    // interrupted requests ("New instructions for task continuation:" + <user_message>); message 18 is
    // a command's output that printed other tasks' histories, <task> and <user_message> JSON-escaped
    // inside it: no prompt of this task.
    let l = live_world(3);
    let tasks =
        l.w.home()
            .join(".config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks");
    copy_tree(
        &fixture_dir("roo-3.2x/.config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks"),
        &tasks,
    );
    let file = tasks.join("e73ea764-4971-4adb-9197-52c2f8ede8ef/api_conversation_history.json");
    replace_in(
        &file,
        &[(
            "d:/dev/2025-Epita-Intelligence-Symbolique",
            l.repo.to_str().unwrap(),
        )],
    );
    let (_, read) =
        crate::turn_fidelity::listed_and_read(&l, "roo", "e73ea764-4971-4adb-9197-52c2f8ede8ef");
    let heads: Vec<(u64, String)> = read
        .iter()
        .map(|(line, p)| (*line, p.chars().take(40).collect()))
        .collect();
    assert_eq!(
        heads,
        [
            (2, "**COLLECTE DES DONNÉES DE TEST HIÉRARCHI".to_string()),
            (6, "Ah non tu te moques de moi, je viens d'o".to_string()),
            (8, "Non tu veux juste les uuid des répertoir".to_string()),
        ]
    );
    agree_and_capture(&l, "roo", "e73ea764-4971-4adb-9197-52c2f8ede8ef", &read);
    // Roo writes the history again with the user's next send.
    let added = "Parfait, maintenant copie-les dans test-hierarchy-data.";
    captures_only_what_was_added(
        &l,
        ("roo", "e73ea764-4971-4adb-9197-52c2f8ede8ef"),
        ("COLLECTE DES DONN", added),
        || {
            let mut history: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            let list = history.as_array_mut().unwrap();
            list.push(serde_json::json!({"role": "user", "content": [
                {"type": "text", "text": format!("[ask_followup_question] Result:\n\n<answer>\n{added}\n</answer>")},
            ], "ts": 1758200000000u64}));
            list.push(serde_json::json!({"role": "assistant", "content": [{"type": "text", "text": "Copie en cours."}], "ts": 1758200001000u64}));
            std::fs::write(&file, serde_json::to_string(&history).unwrap()).unwrap();
        },
    );
}

/// The synthetic VS Code globalStorage holding Roo Code (3.49+, history_item.json) and Kilo Code (5.x,
/// parents and workspaces only in state.vscdb) tasks (tests/fixtures/README.md), placed in `repo`.
fn vscode_global_storage(l: &Live) -> std::path::PathBuf {
    let g = l.w.home().join(".config/Code/User/globalStorage");
    copy_tree(
        &Path::new(FIXTURES).join("synthetic/stores/vscode-roo-kilo/globalStorage"),
        &g,
    );
    let repo = l.repo.to_str().unwrap();
    for f in walk_named(&g, "history_item.json")
        .into_iter()
        .chain(walk_named(&g, "api_conversation_history.json"))
    {
        replace_in(
            &f,
            &[("/home/dev/webshop", repo), ("/home/dev/kilo-demo", repo)],
        );
    }
    let conn = sqlite(&g.join("state.vscdb"));
    conn.execute(
        "UPDATE ItemTable SET value = replace(replace(CAST(value AS TEXT), '/home/dev/webshop', ?1), '/home/dev/kilo-demo', ?1)",
        [repo],
    )
    .unwrap();
    g
}

#[test]
fn roo_and_kilo_code_subtasks_are_known_by_their_history_items() {
    let l = live_world(3);
    let g = vscode_global_storage(&l);
    // Roo Code: the subtask's history_item.json names its parent; the parent's, its workspace. The
    // user's answer to a tool's question is that tool's result, opening with <user_message>.
    let answer = "Looks good, but also persist the choice in localStorage.";
    agree_and_capture(
        &l,
        "roo",
        "1f0e2d3c-4b5a-4968-8776-a5b4c3d2e1f0",
        &[
            (2, "Add a dark mode toggle to the settings page.".into()),
            (4, answer.into()),
        ],
    );
    subagent_not_captured(&l, "roo", "2e1f0d3c-5b4a-4a69-9877-b6c5d4e3f2a1");
    // Before 3.49 there is no history_item.json: VS Code's state.vscdb still names the parent.
    let child = g.join("rooveterinaryinc.roo-cline/tasks/2e1f0d3c-5b4a-4a69-9877-b6c5d4e3f2a1");
    std::fs::remove_file(child.join("history_item.json")).unwrap();
    let file = child.join("api_conversation_history.json");
    replace_in(
        &file,
        &[("Implement the toggle", "Implement the dark toggle")],
    );
    let s = l.sweep_args(&["--apps", "roo"]);
    assert!(
        started(&s)
            .iter()
            .all(|r| r["sessionId"] != "2e1f0d3c-5b4a-4a69-9877-b6c5d4e3f2a1"),
        "{s}"
    );
    subagent_not_captured(&l, "roo", "2e1f0d3c-5b4a-4a69-9877-b6c5d4e3f2a1");
    // Kilo Code 5.x: only VS Code's state.vscdb says which task is whose, and where each ran. With no
    // environment details naming it, the project comes from there too.
    let kilo_parent = "3a2b1c0d-6e5f-4a7b-8c9d-0e1f2a3b4c5d";
    let file = g.join(format!(
        "kilocode.kilo-code/tasks/{kilo_parent}/api_conversation_history.json"
    ));
    replace_in(&file, &[("# Current Workspace Directory", "# Workspace")]);
    agree_and_capture(
        &l,
        "kilocode",
        kilo_parent,
        &[
            (
                2,
                "Refactor the CSV importer into smaller functions.".into(),
            ),
            (4, answer.into()),
        ],
    );
    subagent_not_captured(&l, "kilocode", "4b3c2d1e-7f6a-4b8c-9d0e-1f2a3b4c5d6e");
    // `rules explain` says where the set's rules come from.
    let explain =
        l.w.almanac()
            .args(["rules", "explain", "--app", "kilocode"])
            .arg(&file)
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("extends roo from rules/roo.yaml (built in); its own file gives"),
        "{text}"
    );
}

#[test]
fn openhands_conversations_are_read_from_their_event_files() {
    // OpenHands CLI 1.16.0, run here against the mock model: a conversation of two prompts (the second
    // a resume), and one that delegated to a sub-conversation (subagents/<id>/, its user message the
    // parent agent's, with a `sender`).
    let l = live_world(3);
    let root = l.w.home().join(".openhands/conversations");
    copy_tree(
        &fixture_dir("openhands-1.16.0/.openhands/conversations"),
        &root,
    );
    for f in walk_named(&root, "base_state.json") {
        replace_in(
            &f,
            &[(
                "/work/stage/51-goose-openhands/run-oh/proj",
                l.repo.to_str().unwrap(),
            )],
        );
    }
    let id = "85a88c55-70dc-480a-adb1-0c296bf6514e";
    let first = "List the files in this project and tell me what app.py does";
    agree_and_capture(
        &l,
        "openhands",
        id,
        &[
            (3, first.into()),
            (7, "Now also check README.md please".into()),
        ],
    );
    subagent_not_captured(&l, "openhands", "41a7ea65-844b-4d58-bb24-54a3fcb02264");
    let views = l.w.almanac_home().join("state/views/openhands");
    let child = walk_named(&views, "41a7ea65-844b-4d58-bb24-54a3fcb02264.jsonl");
    let header = std::fs::read_to_string(&child[0]).unwrap();
    assert!(
        header.contains(r#""parent":"aaaf4000-30be-4d04-9934-1c2432d292e4""#),
        "the parent's own id: {header}"
    );
    // The next turn: two more event files.
    let events = root.join("85a88c5570dc480aadb10c296bf6514e/events");
    let added = "And what does the README say about tests?";
    captures_only_what_was_added(&l, ("openhands", id), (first, added), || {
        let event = |n: u32, source: &str, role: &str, text: &str| {
            let e = serde_json::json!({
                "id": format!("00000000-0000-4000-8000-00000000000{n}"),
                "timestamp": "2026-12-05T04:30:00.000000", "source": source, "kind": "MessageEvent",
                "llm_message": {"role": role, "content": [{"cache_prompt": false, "type": "text", "text": text}], "thinking_blocks": []},
                "activated_skills": [], "extended_content": [], "sender": null,
            });
            std::fs::write(
                events.join(format!(
                    "event-0000{n}-00000000-0000-4000-8000-00000000000{n}.json"
                )),
                e.to_string(),
            )
            .unwrap();
        };
        event(9, "user", "user", added);
        // A file of another pattern in the directory is not an event.
        std::fs::write(events.join("notes.txt"), "not an event").unwrap();
    });
}

/// An event file OpenHands left truncated (it died mid-write) a day ago, and a later decision: the
/// first sweep says the conversation needs attention and names the file; one truncated a moment ago is
/// only being written, read again next sweep.
#[test]
fn a_day_old_truncated_openhands_event_needs_attention_naming_it() {
    let l = live_world(3);
    let root = l.w.home().join(".openhands/conversations");
    copy_tree(
        &fixture_dir("openhands-1.16.0/.openhands/conversations"),
        &root,
    );
    for f in walk_named(&root, "base_state.json") {
        replace_in(
            &f,
            &[(
                "/work/stage/51-goose-openhands/run-oh/proj",
                l.repo.to_str().unwrap(),
            )],
        );
    }
    let events = root.join("85a88c5570dc480aadb10c296bf6514e/events");
    let broken = events.join("event-00006-3e61cefd-b0be-49cf-970d-3324871c665d.json");
    let whole = std::fs::read(&broken).unwrap();
    write_aged(
        &broken,
        &whole[..whole.len() / 2],
        std::time::Duration::from_secs(24 * 3600),
    );
    let decision = serde_json::json!({
        "id": "00000000-0000-4000-8000-000000000009",
        "timestamp": "2026-12-05T04:30:00.000000", "source": "user", "kind": "MessageEvent",
        "llm_message": {"role": "user", "content": [{"cache_prompt": false, "type": "text", "text": "Go with option 2."}], "thinking_blocks": []},
        "activated_skills": [], "extended_content": [], "sender": null,
    });
    write_aged(
        &events.join("event-00009-00000000-0000-4000-8000-000000000009.json"),
        decision.to_string().as_bytes(),
        HOURS_2,
    );
    let attention = |s: &serde_json::Value| -> Vec<String> {
        items(s, "needsAttention")
            .iter()
            .map(|i| i.to_string())
            .collect()
    };
    let s = l.w.dry_run(&["--apps", "openhands"]);
    let named = attention(&s);
    assert!(
        named.iter().any(
            |d| d.contains(broken.file_name().unwrap().to_str().unwrap())
                && d.contains("not a JSON document")
        ),
        "{s}"
    );
    // The same file just written: busy, read again next sweep, nothing for the user to do.
    write_aged(
        &broken,
        &whole[..whole.len() / 2],
        std::time::Duration::from_secs(1),
    );
    let s = l.w.dry_run(&["--apps", "openhands"]);
    assert!(
        !attention(&s)
            .iter()
            .any(|d| d.contains(broken.file_name().unwrap().to_str().unwrap())),
        "{s}"
    );
}

/// The store of one JSON document under `rel` in the home, with `ran_in` made the test's repo.
fn document_store(l: &Live, fixture: &str, rel: &str, ran_in: &str) -> std::path::PathBuf {
    let dir = l.w.home().join(rel);
    copy_tree(&fixture_dir(&format!("{fixture}/{rel}")), &dir);
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        replace_in(&e.path(), &[(ran_in, l.repo.to_str().unwrap())]);
    }
    dir
}

#[test]
fn an_amp_thread_is_read_whole_and_its_epoch_times_place_capture_since() {
    // Amp 0.0.1767830505, run here against the mock model: two prompts, the second's Read call answered
    // by a user message of tool_result blocks (no prompt). Times are epoch milliseconds.
    let l = live_world(3);
    let dir = document_store(
        &l,
        "amp-0.0.1767830505",
        ".local/share/amp/threads",
        "/work/stage/51-amp-auggie/proj",
    );
    let id = "T-01a24467-51b1-7721-bb7d-69a983e4d310";
    // With capture beginning between the two prompts (sentAt 1796443951557 and 1796443958535 ms), a
    // first sweep starts at the second.
    let since = "2026-12-05T04:12:35Z";
    let cfg = l.w.almanac_home().join("config.toml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text = text.replacen(
        "[capture]",
        &format!("[automation]\ncapture_since = \"{since}\"\n\n[capture]"),
        1,
    );
    std::fs::write(&cfg, text).unwrap();
    let d = l.w.dry_run(&["--apps", "amp", "--quiet", "0m"]);
    let started: Vec<_> = started(&d)
        .into_iter()
        .filter(|r| r["sessionId"] == id)
        .collect();
    assert_eq!(started.len(), 1, "{d}");
    assert_eq!(
        started[0]["fromLine"], 4,
        "the second prompt's message (line 4 of the view): {d}"
    );
    // Without it, the whole thread.
    replace_in(&cfg, &[(&format!("capture_since = \"{since}\""), "")]);
    let first = "say hello please";
    agree_and_capture(
        &l,
        "amp",
        id,
        &[
            (2, first.into()),
            (4, "VIEW README and tell me what it says".into()),
        ],
    );
    // Amp writes the thread again, one exchange longer.
    let file = dir.join(format!("{id}.json"));
    let added = "Now summarise it in five words.";
    captures_only_what_was_added(&l, ("amp", id), (first, added), || {
        let mut thread: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let messages = thread["messages"].as_array_mut().unwrap();
        messages.push(serde_json::json!({"role": "user", "messageId": 6, "content": [{"type": "text", "text": added}], "meta": {"sentAt": 1796444000000u64}}));
        messages.push(serde_json::json!({"role": "assistant", "messageId": 7, "content": [{"type": "text", "text": "The README just says hi."}]}));
        thread["v"] = serde_json::json!(30);
        std::fs::write(&file, serde_json::to_string_pretty(&thread).unwrap()).unwrap();
    });
}

#[test]
fn an_auggie_session_holds_prompts_and_answers_in_one_exchange_and_its_workspace_in_the_messages() {
    // Auggie 0.36.0, run here against a mock of Augment's API: three exchanges, the third a tool's
    // result (empty request_message); the workspace is in each exchange's ide_state node.
    let l = live_world(3);
    let dir = document_store(
        &l,
        "auggie-0.36.0",
        ".augment/sessions",
        "/work/stage/51-amp-auggie/proj",
    );
    // A backup beside it is not a session.
    let id = "bc56f93f-e272-4456-afc2-74c174f56b7b";
    std::fs::copy(
        dir.join(format!("{id}.json")),
        dir.join(format!("{id}-backup1.json")),
    )
    .unwrap();
    let first = "say hello please";
    agree_and_capture(
        &l,
        "auggie",
        id,
        &[
            (2, first.into()),
            (3, "VIEW README and tell me what it says".into()),
        ],
    );
    // The answer is in the same exchange as its prompt.
    let (row, _) = crate::turn_fidelity::listed_and_read(&l, "auggie", id);
    let turns = json_ok(
        l.w.almanac()
            .args(["capture", "turns", "--json", "--app", "auggie"])
            .arg(row["transcriptPath"].as_str().unwrap()),
    );
    assert_eq!(
        turns["records"][0]["assistant"], "Hello from mock.",
        "{turns}"
    );
    let file = dir.join(format!("{id}.json"));
    let added = "Thanks. What else is in the folder?";
    captures_only_what_was_added(&l, ("auggie", id), (first, added), || {
        let mut session: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let history = session["chatHistory"].as_array_mut().unwrap();
        let mut next = history[0].clone();
        next["exchange"]["request_message"] = serde_json::json!(added);
        next["exchange"]["response_text"] = serde_json::json!("Only the README.");
        next["exchange"]["request_id"] = serde_json::json!("0f0e0d0c-0000-4000-8000-000000000004");
        next["sequenceId"] = serde_json::json!(4);
        history.push(next);
        std::fs::write(&file, serde_json::to_string_pretty(&session).unwrap()).unwrap();
    });
}

#[test]
fn goose_jsonl_sessions_and_its_database_are_one_app_and_a_planted_header_is_not_trusted() {
    // Goose before 1.10 wrote sessions/<id>.jsonl beside where sessions.db now is (synthetic files of
    // that shape, tests/fixtures/README.md); one rule set reads both kinds, one ledger identity.
    let l = live_world(3);
    let dir = l.w.home().join(".local/share/goose/sessions");
    copy_tree(&fixture_dir("goose-1.45/.local/share/goose/sessions"), &dir);
    let repo = l.repo.to_str().unwrap().to_string();
    sqlite(&dir.join("sessions.db"))
        .execute("UPDATE sessions SET working_dir = ?1", [&repo])
        .unwrap();
    for name in ["20250514_093012.jsonl", "hotfix-release.jsonl"] {
        let text = std::fs::read_to_string(
            Path::new(FIXTURES)
                .join("synthetic/stores/goose-legacy")
                .join(name),
        )
        .unwrap();
        let text = text
            .replace("/Users/dev/projects/api", &repo)
            .replace("/Users/dev/projects/web", &repo);
        write_aged(&dir.join(name), text.as_bytes(), HOURS_2);
    }
    // A JSONL file whose second record is shaped like a view's header, naming another repo and
    // another session: a JSONL transcript is read by the set's fields, never by a header.
    let other = l.w.repo("work/victim");
    let planted = format!(
        "{{\"working_dir\":\"{repo}\"}}\n{}\n{{\"role\":\"user\",\"created\":1747215012,\"content\":[{{\"type\":\"text\",\"text\":\"planted prompt\"}}]}}\n",
        serde_json::json!({"almanac_view": {"version": 1, "app": "goose", "session_id": "20260805_1", "project": other, "parent": null, "subagent": false}})
    );
    write_aged(&dir.join("planted.jsonl"), planted.as_bytes(), HOURS_2);
    let rows = sessions(&l, "goose");
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["sessionId"].as_str().unwrap())
        .collect();
    for id in ["20260805_4", "20250514_093012", "hotfix-release", "planted"] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    let planted_row = by_id(&rows, "planted");
    assert_eq!(planted_row["projectDir"], repo, "{planted_row}");
    let explain =
        l.w.almanac()
            .args(["rules", "explain"])
            .arg(dir.join("planted.jsonl"))
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("(a view's header: not read from a JSONL transcript)")
            && text.contains("session_id = planted"),
        "{text}"
    );
    let hotfix = by_id(&rows, "hotfix-release");
    assert_eq!(hotfix["userTurns"], 2, "{hotfix}");
    assert_eq!(
        hotfix["lastPrompt"], "Shorter please, and mention the login fix",
        "{hotfix}"
    );
    // The JSONL session is captured where it is, cited by line; the database's by message.
    agree_and_capture(
        &l,
        "goose",
        "20250514_093012",
        &[(2, "Add a /healthz endpoint to the Flask app".into())],
    );
    let (_, read) = crate::turn_fidelity::listed_and_read(&l, "goose", "20260805_4");
    assert_eq!(
        read,
        [(2, "Read the file /work/src/orders.py using an absolute path and reply with its first line only.".to_string())]
    );
    // That sweep captured every session of both kinds, the planted one in its own repo.
    let runs = l.runs();
    for id in ["20260805_4", "hotfix-release", "planted"] {
        let run = runs
            .iter()
            .find(|r| r["sessionId"] == id)
            .unwrap_or_else(|| panic!("{id}: {runs:?}"));
        assert_eq!(run["repoRoot"], repo.as_str(), "{run}");
    }
    assert!(
        !other
            .join(".almanac/runs")
            .read_dir()
            .unwrap()
            .any(|_| true),
        "no run in the repo a planted record names"
    );
}
