//! Cursor (rules/cursor.yaml), from real stores of every generation found in public repositories
//! (tests/fixtures/README.md): the IDE's global database of 2025 (composers in `cursorDiskKV`, listed by
//! the workspace's database) and of 2026 (the workspace in the composer), the 2024 workspace database
//! (composers inline, chat tabs) and the 2023 one (chat tabs), an agent transcript in text and in JSONL,
//! and a Cursor CLI store.db. Counts and prompts are what a person reading the stores counts. Live
//! captures with the fake agent of live.rs: the cursor advances, a grown conversation is captured from
//! its new exchange, an unchanged store is not queried, and nothing beside Cursor's files changes.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::stores::{by_id, sessions, snapshot, started};
use rusqlite::Connection;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const STORES: &str = "real/stores/cursor";
const AGENT: &str = "real/stores/cursor-agent/.cursor";
/// The 2025 composer "Sent to Chat": 47 headers, 9 prompts.
const COMPOSER_2025: &str = "22b57e58-4764-45d1-8303-21d00aaa6ec5";
const COMPOSER_2026: &str = "75551d8c-e91c-461d-a120-c2097f755ba4";
const TEXT_TRANSCRIPT: &str = "6045d5b3-92a5-52a9-99fa-fa3562ffeae8";
const JSONL_TRANSCRIPT: &str = "c975c30c-2070-4ca4-9064-9a33c8e06557";
const JSONL_SHORT: &str = "c1d86bc1-8d74-5d56-8ee3-5ead2081f93d";
const CLI_AGENT: &str = "782a8d20-bbae-4776-9cda-17cce05b3b92";

fn user_dir(l: &Live) -> PathBuf {
    l.w.home().join(".config/Cursor/User")
}

fn global_db(l: &Live) -> PathBuf {
    user_dir(l).join("globalStorage/state.vscdb")
}

pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The real agent transcripts, copied under `projects` with the directories their text names (the
/// projects they ran in) made `repo`: a slug is placed only on a repo the session's own text confirms.
fn copy_transcripts(projects: &Path, repo: &Path) {
    let fixtures = Path::new(FIXTURES).join(AGENT).join("projects");
    for (dir, ran_in) in [
        (
            "home-dev-Desktop-coding-Return-It",
            "/home/dev/Desktop/coding/Return-It",
        ),
        (
            "home-dev-work-react-native-test",
            "/home/dev/work/react-native-test",
        ),
    ] {
        for f in walkdir::WalkDir::new(fixtures.join(dir))
            .into_iter()
            .flatten()
        {
            if !f.file_type().is_file() {
                continue;
            }
            let rel = f.path().strip_prefix(fixtures.join(dir)).unwrap();
            let text = std::fs::read_to_string(f.path())
                .unwrap()
                .replace(ran_in, repo.to_str().unwrap());
            let to = projects.join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::write(to, text).unwrap();
        }
    }
}

/// A live world whose Cursor user directory is one generation's fixture.
fn ide_world(generation: &str) -> Live {
    let l = live_world(3);
    copy_tree(
        &Path::new(FIXTURES)
            .join(STORES)
            .join(generation)
            .join("User"),
        &user_dir(&l),
    );
    l
}

/// Every workspace.json of the world names `dir` as its folder.
fn point_workspaces_at(l: &Live, dir: &Path) {
    let ws = user_dir(l).join("workspaceStorage");
    for e in std::fs::read_dir(ws).unwrap().flatten() {
        let f = e.path().join("workspace.json");
        if f.exists() {
            let uri = format!("file://{}", dir.display());
            std::fs::write(&f, json!({ "folder": uri }).to_string()).unwrap();
        }
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

#[test]
fn cursor_ide_conversations_of_every_generation_are_found_with_their_projects_and_prompts() {
    // 2025: one composer with a conversation; the empty ones (listed, and one no workspace lists), the
    // deleted one (NULL), and the one the workspace lists but the database no longer holds are not
    // conversations. The workspace is a Windows folder (file:///c%3A/...).
    let l = ide_world("cursor");
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let c = by_id(&rows, COMPOSER_2025);
    assert_eq!(c["projectDir"], "C:/Users/dev/Desktop/vite", "{c}");
    // Prompts 7 and 8 say the same and each has its own answer: two prompts.
    assert_eq!(c["userTurns"], 9, "{c}");
    assert_eq!(c["firstPrompt"], "нужны настройки сервера vite");
    assert_eq!(
        c["lastPrompt"],
        "нужно добавить возможность создания svg-спрайтов use context7"
    );

    // 2026: the workspace is in the composer; the workspace's own database lists nothing.
    let l = ide_world("cursor-2026");
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let c = by_id(&rows, COMPOSER_2026);
    assert_eq!(c["projectDir"], "/home/dev/codes/training/java/src", "{c}");
    assert_eq!(c["userTurns"], 2, "{c}");
    assert_eq!(
        c["firstPrompt"],
        "fix the errors and made no changes in the actual codes but make it work"
    );
    assert!(text(&c["lastPrompt"]).starts_with(
        "few packages have issues like polymorphism , inheritance , staticExample. fix th"
    ));

    // 2024: four composers with their conversation inline and five chat tabs, in one workspace.
    let l = ide_world("cursor-2024");
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 9, "{rows:?}");
    for (id, turns, first, last) in [
        (
            "090e988a-b2e3-4fcc-84e0-62a9401ae6ea",
            1,
            "add the following elements to the sidebar:",
            "add the following elements to the sidebar:",
        ),
        (
            "b2ee92b8-c589-40ff-9dff-bf3b8f792ff9",
            2,
            "remove the green line appearing",
            "why did you change the header color? keep the one previously entered",
        ),
        (
            "484448da-b049-4d46-b17a-4a3eaf473ad0",
            4,
            "for the messages of the copilot:",
            "change the user icon with a generic icon",
        ),
        (
            "7ab14174-a536-4e2c-98e9-8c5e28fa2006",
            2,
            "by default the dark mode settings is off.",
            "also apply dark mode to the copilot",
        ),
        // Chat tabs end with the empty input box: not a prompt.
        (
            "2aa483d1-573c-4039-ae4e-7415e28d2605",
            16,
            "We are building an ionic app for android",
            "by default the dark mode settings is off.",
        ),
        (
            "55076a5c-1876-426b-90ff-36a3daa69fd7",
            1,
            "For the code present, we get this error:",
            "For the code present, we get this error:",
        ),
        (
            "8128434b-c308-437a-8245-048c250113ac",
            3,
            "For the code present, we get this error:",
            "main.js:23  ChunkLoadError: Loading chunk 179 failed.",
        ),
        (
            "f73a2965-5b2c-403b-a625-d347ab7107a1",
            1,
            "how to run a local server with python in a simple cli command",
            "how to run a local server",
        ),
        (
            "33d81a85-badb-4f6e-99b9-96da6038cde9",
            1,
            "Unable to find any devices: [fatal] native-run failed",
            "Unable to find any devices",
        ),
    ] {
        let r = by_id(&rows, id);
        assert_eq!(r["userTurns"], turns, "{r}");
        assert!(text(&r["firstPrompt"]).starts_with(first), "{r}");
        assert!(text(&r["lastPrompt"]).starts_with(last), "{r}");
        assert_eq!(r["projectDir"], "C:/Users/dev/Documents/mobilechat", "{r}");
    }

    // 2023: chat tabs only; a user bubble holds what was sent in delegate.a (else rawText). Three "New
    // chat" tabs and the tutor workspace's one tab hold only the input box.
    let l = ide_world("cursor-2023");
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 12, "{rows:?}");
    let total: u64 = rows.iter().map(|r| r["userTurns"].as_u64().unwrap()).sum();
    assert_eq!(total, 20);
    for r in &rows {
        assert_eq!(
            r["projectDir"], "/home/dev/coding/github/adam-svelte",
            "{r}"
        );
    }
    // The quick-fix text was prefilled (rawText), but what was sent is delegate.a.
    let r = by_id(&rows, "86eaeba7-4a9c-4953-bf65-5dabeaebf2d9");
    assert_eq!(
        text(&r["firstPrompt"]).trim(),
        "Can you verigfy this event loop",
        "{r}"
    );
    // delegate.a empty, rawText a stale quick-fix text ("For the code present, we get this error: ...
    // A11y: Screenreaders already announce"): what was sent, as the tab's title, its answer and the
    // workspace's prompt history (aiService.prompts) all say, is this.
    let r = by_id(&rows, "7e23ca78-cdb7-422b-a66c-e3a03f22e02d");
    assert_eq!(
        r["firstPrompt"], "How can I make my three element take in a width and height argument?",
        "{r}"
    );
    assert_eq!(r["userTurns"], 1, "{r}");
    let r = by_id(&rows, "51a8f2ac-65b7-4abf-a84f-b526b7f813d7");
    assert_eq!(r["userTurns"], 3, "{r}");
    assert_eq!(r["lastPrompt"], "/edit Apply this change", "{r}");
}

#[test]
fn a_2023_chat_tab_is_one_session_whose_prompts_turns_and_the_sweep_agree_on() {
    // Tab 51a8f2ac of the 2023 workspace: user bubbles 0, 2 and 4 (view lines 2, 4, 6; bubble 0 sent
    // delegate.a, its rawText a stale quick-fix text), each answered, then the empty input box. Its
    // latest prompt is its own last one, not another tab's.
    let l = ide_world("cursor-2023");
    point_workspaces_at(&l, &l.repo);
    let prompts = [
        (2, "Can you show me how I should refer to images in svelte?"),
        (
            4,
            "Can you also implement it such that they're all red in verdana?",
        ),
        (6, "/edit Apply this change"),
    ]
    .map(|(n, p)| (n, p.to_string()));
    let id = "51a8f2ac-65b7-4abf-a84f-b526b7f813d7";
    crate::turn_fidelity::agree_and_capture(&l, "cursor", id, &prompts);
}

/// A composer's JSON and its bubbles, read from the global database.
fn composer(c: &Connection, id: &str) -> Value {
    let v: String = c
        .query_row(
            "SELECT value FROM cursorDiskKV WHERE key = ?1",
            [format!("composerData:{id}")],
            |r| r.get(0),
        )
        .unwrap();
    serde_json::from_str(&v).unwrap()
}

fn set_composer(c: &Connection, id: &str, v: &Value) {
    c.execute(
        "INSERT OR REPLACE INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
        [format!("composerData:{id}"), v.to_string()],
    )
    .unwrap();
}

/// One exchange more in a composer, as Cursor writes it: a bubble row each for the prompt and the
/// answer, their headers appended to the composer's list, and its lastUpdatedAt moved.
fn add_exchange(c: &Connection, id: &str, n: u32, prompt: &str, answer: &str) {
    let mut data = composer(c, id);
    for (i, (kind, said)) in [(1, prompt), (2, answer)].into_iter().enumerate() {
        let bubble = format!("00000000-0000-4000-8000-{n:06}{i:06}");
        c.execute(
            "INSERT INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
            [
                format!("bubbleId:{id}:{bubble}"),
                json!({"_v": 2, "bubbleId": bubble, "type": kind, "text": said}).to_string(),
            ],
        )
        .unwrap();
        data["fullConversationHeadersOnly"]
            .as_array_mut()
            .unwrap()
            .push(json!({"bubbleId": bubble, "type": kind}));
    }
    let at = data["lastUpdatedAt"].as_i64().unwrap_or(0) + 1000;
    data["lastUpdatedAt"] = json!(at);
    set_composer(c, id, &data);
}

#[test]
fn a_composer_no_workspace_lists_is_unplaced_and_says_why_and_a_listed_subagent_is_not_captured() {
    let l = ide_world("cursor");
    let c = Connection::open(global_db(&l)).unwrap();
    // Two composers made from the real one under new ids (the fixture's unlisted composers are empty):
    // one no workspace lists, and one the real composer names as its subagent.
    let stray = "0000aaaa-0000-4000-8000-000000000001";
    let child = "0000aaaa-0000-4000-8000-000000000002";
    let mut parent = composer(&c, COMPOSER_2025);
    for id in [stray, child] {
        let mut copy = parent.clone();
        copy["composerId"] = json!(id);
        set_composer(&c, id, &copy);
        c.execute(
            "INSERT INTO cursorDiskKV (key, value) SELECT 'bubbleId:' || ?1 || substr(key, length('bubbleId:' || ?2) + 1), value FROM cursorDiskKV WHERE key LIKE 'bubbleId:' || ?2 || ':%'",
            [id, COMPOSER_2025],
        )
        .unwrap();
    }
    parent["subagentComposerIds"] = json!([child]);
    set_composer(&c, COMPOSER_2025, &parent);
    drop(c);
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 2, "the subagent is not listed: {rows:?}");
    let s = by_id(&rows, stray);
    assert_eq!(s["projectDir"], Value::Null, "{s}");
    assert_eq!(s["userTurns"], 9, "{s}");
    let d = l.w.dry_run(&["--apps", "cursor", "--quiet", "0m"]);
    assert_eq!(d["stats"]["subagents"], 1, "{d}");
    let skipped = items(&d, "skipped");
    let why = skipped
        .iter()
        .find(|i| i["sessionId"] == stray)
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(why["reason"], "no-cwd", "{why}");
    let detail = text(&why["detail"]);
    assert!(
        detail.contains("workspaceStorage/*/state.vscdb lists the session"),
        "{detail}"
    );
}

#[test]
fn a_cursor_composer_is_captured_then_only_its_new_exchange_and_an_unchanged_store_is_not_queried()
{
    let l = ide_world("cursor");
    point_workspaces_at(&l, &l.repo);
    let rows = sessions(&l, "cursor");
    assert_eq!(
        by_id(&rows, COMPOSER_2025)["repoRoot"],
        l.repo.to_str().unwrap()
    );
    let s = l.sweep_args(&["--apps", "cursor"]);
    l.wait_idle();
    let first = started(&s);
    assert_eq!(first.len(), 1, "{s}");
    let run = first[0]["runId"].as_str().unwrap().to_string();
    let messages = first[0]["toLine"].as_u64().unwrap() - 1;
    // The headers whose bubbles are there (a tool call or thinking step has no text, still a message).
    assert_eq!(messages, 47, "{s}");
    let prompt = l.prompt(&run);
    assert!(prompt.contains("Capture messages 1 to 47."), "{prompt}");
    let copy = l.conversation(&run);
    assert!(
        copy.contains("[M1] user:\n  нужны настройки сервера vite"),
        "{copy}"
    );

    // Nothing changed: no copy, no query, no run.
    let s = l.sweep_args(&["--apps", "cursor"]);
    assert!(started(&s).is_empty(), "{s}");
    assert_eq!(s["stats"]["storesRead"], 0, "{s}");
    assert_eq!(s["stats"]["sessionsRead"], 0, "{s}");

    // One exchange more, written while Cursor holds the database (WAL, a write transaction open): only
    // it is captured, and no file in the user directory changes.
    let c = Connection::open(global_db(&l)).unwrap();
    c.pragma_update(None, "journal_mode", "wal").unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    add_exchange(
        &c,
        COMPOSER_2025,
        1,
        "Add a favicon as well.",
        "Added favicon.svg.",
    );
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let dir = global_db(&l).parent().unwrap().to_path_buf();
    let before = snapshot(&dir);
    let ws_before =
        snapshot(&user_dir(&l).join("workspaceStorage/bc9b6b59a5b0d75e38f27496d537c990"));
    let s = l.sweep_args(&["--apps", "cursor"]);
    l.wait_idle();
    assert_eq!(
        snapshot(&dir),
        before,
        "the sweep changed a file beside the store"
    );
    assert_eq!(
        snapshot(&user_dir(&l).join("workspaceStorage/bc9b6b59a5b0d75e38f27496d537c990")),
        ws_before
    );
    c.execute_batch("ROLLBACK").unwrap();
    assert_eq!(s["stats"]["sessionsRead"], 1, "{s}");
    let second = started(&s);
    assert_eq!(second.len(), 1, "{s}");
    let run = second[0]["runId"].as_str().unwrap();
    let prompt = l.prompt(run);
    assert!(
        prompt.contains("previously captured through message 47.")
            && prompt.contains("Focus on messages 48 to 49."),
        "{prompt}"
    );
    let copy = l.conversation(run);
    assert!(
        copy.contains("[M48] user:\n  Add a favicon as well."),
        "{copy}"
    );
    assert!(
        copy.contains("[M49] assistant:\n  Added favicon.svg."),
        "{copy}"
    );
    let entry = &l.ledger()["entries"][format!("cursor:{COMPOSER_2025}")];
    assert_eq!(entry["status"], "done", "{entry}");
    assert!(
        text(&entry["lastCapturedPrefixHash"]).starts_with("ids:sha256:"),
        "{entry}"
    );
}

/// Cursor's slug of a project path: every run of characters other than A-Z, a-z, 0-9 is one `-`.
fn slug(dir: &Path) -> String {
    let mut out = String::new();
    for c in dir.to_string_lossy().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// One exchange more in a Cursor CLI store, as cursor-agent writes it: the two message blobs, a new root
/// blob whose field 1 lists them after the others, and the meta row naming that root.
fn cli_add_exchange(db: &Path, prompt: &str, answer: &str) {
    let c = Connection::open(db).unwrap();
    let meta_hex: String = c
        .query_row("SELECT value FROM meta WHERE key = '0'", [], |r| r.get(0))
        .unwrap();
    let mut meta: Value = serde_json::from_slice(&unhex(&meta_hex)).unwrap();
    let root_id = text(&meta["latestRootBlobId"]).to_string();
    let mut root: Vec<u8> = c
        .query_row("SELECT data FROM blobs WHERE id = ?1", [&root_id], |r| {
            r.get(0)
        })
        .unwrap();
    for m in [
        json!({"role": "user", "content": [{"type": "text", "text": format!("<timestamp>now</timestamp>\n<user_query>\n{prompt}\n</user_query>")}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": answer}]}),
    ] {
        let data = serde_json::to_vec(&m).unwrap();
        let id = sha256(&data);
        c.execute(
            "INSERT INTO blobs (id, data) VALUES (?1, ?2)",
            rusqlite::params![hex(&id), data],
        )
        .unwrap();
        root.extend([0x0a, 0x20]);
        root.extend(id);
    }
    let id = hex(&sha256(&root));
    c.execute(
        "INSERT INTO blobs (id, data) VALUES (?1, ?2)",
        rusqlite::params![id, root],
    )
    .unwrap();
    meta["latestRootBlobId"] = json!(id);
    c.execute(
        "UPDATE meta SET value = ?1 WHERE key = '0'",
        [hex(meta.to_string().as_bytes())],
    )
    .unwrap();
}

#[test]
fn cursor_agent_transcripts_and_cli_stores_are_placed_on_known_repos_and_grown_ones_captured_from_the_new_part(
) {
    let l = live_world(3);
    let cursor = l.w.home().join(".cursor");
    let fixtures = Path::new(FIXTURES).join(AGENT);
    // The transcripts under this repo's slug, the CLI store under the md5 of its path.
    let projects = cursor.join("projects").join(slug(&l.repo));
    copy_transcripts(&projects, &l.repo);
    let md5 = {
        use md5::Digest;
        hex(&md5::Md5::digest(l.repo.to_string_lossy().as_bytes()))
    };
    copy_tree(
        &fixtures.join("chats/2b37db29235e4f3b3390565530c3f734"),
        &cursor.join("chats").join(&md5),
    );
    // A hash is placed only on a repo almanac knows; a slug's transcripts whose own text names the
    // one directory that gives the slug ran there, known or not.
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in &rows {
        match r["sessionId"] == CLI_AGENT {
            true => assert!(r["projectDir"].is_null(), "{r}"),
            false => assert_eq!(r["projectDir"], l.repo.to_str().unwrap(), "{r}"),
        }
    }
    let mut init = l.w.almanac();
    init.args(["init", l.repo.to_str().unwrap()]);
    stdout_ok(&mut init);
    let rows = sessions(&l, "cursor");
    for r in &rows {
        assert_eq!(r["projectDir"], l.repo.to_str().unwrap(), "{r}");
    }
    for (id, turns, first, last) in [
        (
            TEXT_TRANSCRIPT,
            2,
            "start return it, I want to see the app running in the browser",
            "it's showing a 404 error",
        ),
        (
            JSONL_TRANSCRIPT,
            5,
            "Build a creator mobile app — the submission flow. A creator should be able to:",
            "export your all chat from start to end to /ai-log",
        ),
        (
            JSONL_SHORT,
            1,
            "install react native here and do this",
            "install react native here and do this",
        ),
        // The <user_info> message Cursor puts first is context, not a prompt.
        (
            CLI_AGENT,
            3,
            "只回复两个字：收到",
            "先用一句话说你要做什么，然后用 shell 执行 echo hub-probe，最后用一句话总结结果",
        ),
    ] {
        let r = by_id(&rows, id);
        assert_eq!(r["userTurns"], turns, "{r}");
        assert!(text(&r["firstPrompt"]).starts_with(first), "{r}");
        assert!(text(&r["lastPrompt"]).starts_with(last), "{r}");
    }

    let s = l.sweep_args(&["--apps", "cursor"]);
    l.wait_idle();
    assert_eq!(started(&s).len(), 4, "{s}");
    let captured = |id: &str| -> u64 {
        let run = started(&s)
            .into_iter()
            .find(|r| r["sessionId"] == id)
            .unwrap();
        run["toLine"].as_u64().unwrap() - 1
    };
    let (text_seen, cli_seen) = (captured(TEXT_TRANSCRIPT), captured(CLI_AGENT));
    // 11 blocks in the text transcript; in the CLI store the messages the root lists and the store holds.
    assert_eq!(text_seen, 11, "{s}");
    assert_eq!(cli_seen, 12, "{s}");

    // Both grow by one exchange: one run each, from the message after those captured.
    let txt = projects.join(format!("agent-transcripts/{TEXT_TRANSCRIPT}.txt"));
    let mut body = std::fs::read_to_string(&txt).unwrap();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str("\nuser:\n<user_query>\nand the favicon is missing\n</user_query>\n\nassistant:\nAdded one.\n");
    std::fs::write(&txt, body).unwrap();
    let store = cursor
        .join("chats")
        .join(&md5)
        .join(format!("{CLI_AGENT}/store.db"));
    cli_add_exchange(&store, "now say 完成", "完成");
    let rows = sessions(&l, "cursor");
    assert_eq!(by_id(&rows, CLI_AGENT)["lastPrompt"], "now say 完成");
    assert_eq!(
        by_id(&rows, TEXT_TRANSCRIPT)["lastPrompt"],
        "and the favicon is missing"
    );
    let beside = store.parent().unwrap().to_path_buf();
    let before = snapshot(&beside);
    let s = l.sweep_args(&["--apps", "cursor"]);
    l.wait_idle();
    assert_eq!(
        snapshot(&beside),
        before,
        "the sweep changed a file beside the CLI store"
    );
    let runs = started(&s);
    assert_eq!(runs.len(), 2, "{s}");
    for (id, seen) in [(TEXT_TRANSCRIPT, text_seen), (CLI_AGENT, cli_seen)] {
        let run = runs.iter().find(|r| r["sessionId"] == id).unwrap();
        let run_id = text(&run["runId"]);
        let prompt = l.prompt(run_id);
        assert!(
            prompt.contains(&format!("previously captured through message {seen}."))
                && prompt.contains(&format!("Focus on messages {} to {}.", seen + 1, seen + 2)),
            "{prompt}"
        );
        let copy = l.conversation(run_id);
        assert!(copy.contains(&format!("[M{}] user:", seen + 1)), "{copy}");
    }

    // A second known repo with the same slug: a transcript whose text names paths in this repo is
    // still this repo's; one that names none cannot be placed, and says why.
    let twin = l.repo.parent().unwrap().join(format!(
        "{}_",
        l.repo.file_name().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&twin).unwrap();
    let mut init = l.w.almanac();
    init.args(["init", twin.to_str().unwrap()]);
    stdout_ok(&mut init);
    let bare = "0000bbbb-0000-4000-8000-000000000001";
    std::fs::write(
        projects.join(format!("agent-transcripts/{bare}.txt")),
        "user:\n<user_query>\nwhat is a monad?\n</user_query>\n\nassistant:\nA monoid in the category of endofunctors.\n",
    )
    .unwrap();
    let rows = sessions(&l, "cursor");
    assert_eq!(
        by_id(&rows, TEXT_TRANSCRIPT)["projectDir"],
        l.repo.to_str().unwrap()
    );
    assert_eq!(by_id(&rows, bare)["projectDir"], Value::Null);
    assert_eq!(
        by_id(&rows, CLI_AGENT)["projectDir"],
        l.repo.to_str().unwrap()
    );
    let d = l.w.dry_run(&["--apps", "cursor", "--quiet", "0m"]);
    let why = items(&d, "skipped")
        .into_iter()
        .find(|i| i["sessionId"] == bare)
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(why["reason"], "no-cwd", "{why}");
    let detail = text(&why["detail"]);
    assert!(
        detail.contains(l.repo.to_str().unwrap())
            && detail.contains(twin.to_str().unwrap())
            && detail.contains("[stores.slug_repos]"),
        "{why}"
    );
}

/// What a stranger may leave in Cursor's directories: a database that defines a view (SQL the store
/// would have almanac run), a query that runs too long, a list element that is not an object, a
/// workspace database that is not one, a workspace directory that is a link out of the store. Each is
/// refused or passed over, naming the file, and the good conversations are still read.
#[test]
fn hostile_cursor_stores_are_refused_by_name_and_hide_nothing_else() {
    let l = ide_world("cursor");
    point_workspaces_at(&l, &l.repo);
    let ws = user_dir(&l).join("workspaceStorage");
    // Not a database, long settled (not one being written): passed over, the rest read.
    std::fs::create_dir_all(ws.join("zzz")).unwrap();
    let junk = ws.join("zzz/state.vscdb");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    set_age(&junk, HOURS_2);
    // A workspace directory that links out of the store, holding a database and folder of its own.
    let outside = l.w.root().join("outside");
    copy_tree(
        &Path::new(FIXTURES)
            .join(STORES)
            .join("cursor-2024/User/workspaceStorage/6ae6eb0531606929850a78b0a04649f1"),
        &outside,
    );
    std::os::unix::fs::symlink(&outside, ws.join("linked")).unwrap();
    // A header that is a string, not an object, in front of the real composer's.
    let c = Connection::open(global_db(&l)).unwrap();
    let mut data = composer(&c, COMPOSER_2025);
    data["fullConversationHeadersOnly"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!("x"));
    set_composer(&c, COMPOSER_2025, &data);
    drop(c);
    // One conversation: not the nine of the linked workspace's database.
    let rows = sessions(&l, "cursor");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = by_id(&rows, COMPOSER_2025);
    assert_eq!(r["userTurns"], 9, "{r}");
    assert_eq!(r["projectDir"], l.repo.to_str().unwrap(), "{r}");
    let d = l.w.dry_run(&["--apps", "cursor", "--quiet", "0m"]);
    // The junk is a workspace store itself: it needs attention, named; the composer is captured.
    let why = items(&d, "needsAttention");
    assert_eq!(why.len(), 1, "{d}");
    assert!(text(&why[0]["detail"]).contains("zzz/state.vscdb"), "{d}");
    assert_eq!(started(&d).len(), 1, "{d}");
    // The linked workspace's database is no store of this user's: not listed, not read.
    assert!(
        !d.to_string().contains("linked"),
        "a linked directory was followed: {d}"
    );

    // A view in the database: refused, naming it; the views of the last read stay listed.
    let c = Connection::open(global_db(&l)).unwrap();
    c.execute_batch("CREATE VIEW evil AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r")
        .unwrap();
    drop(c);
    let global = global_db(&l);
    let about_global = |d: &serde_json::Value| -> Vec<String> {
        items(d, "needsAttention")
            .iter()
            .filter(|i| i["transcriptPath"] == global.to_str().unwrap())
            .map(|i| text(&i["detail"]).to_string())
            .collect()
    };
    let d = l.w.dry_run(&["--apps", "cursor", "--quiet", "0m"]);
    let why = about_global(&d);
    assert_eq!(why.len(), 1, "{d}");
    assert!(why[0].contains("view"), "{why:?}");
    assert_eq!(
        sessions(&l, "cursor").len(),
        1,
        "the last read's views are kept"
    );
    // `capture sessions` says which stores it could not read, too.
    let mut cmd = l.w.almanac();
    cmd.args(["capture", "sessions", "--json", "--apps", "cursor"]);
    let listed = json_ok(&mut cmd);
    crate::polish::validate("sessions.schema.json", &listed);
    let errors = listed["storeErrors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["store"] == global.to_str().unwrap()
            && text(&e["message"]).contains("view")
            && e["readAgainNextSweep"] == false),
        "{listed}"
    );
    // Unchanged, it is not copied again, and still says why.
    let d = l.w.dry_run(&["--apps", "cursor", "--quiet", "0m"]);
    assert_eq!(d["stats"]["storesRead"], 0, "{d}");
    assert_eq!(about_global(&d).len(), 1, "{d}");
}

#[test]
fn a_cursor_query_past_the_deadline_is_stopped_and_the_store_needs_attention() {
    let l = ide_world("cursor");
    let c = Connection::open(global_db(&l)).unwrap();
    // A composer of 400,000 headers whose bubbles are not there: each is looked up, none found.
    let mut data = composer(&c, COMPOSER_2025);
    data["composerId"] = json!("0000aaaa-0000-4000-8000-00000000dead");
    data["fullConversationHeadersOnly"] = (0..400_000)
        .map(|n| json!({"bubbleId": format!("missing-{n}"), "type": 1}))
        .collect();
    set_composer(&c, "0000aaaa-0000-4000-8000-00000000dead", &data);
    drop(c);
    let mut cmd = l.w.almanac();
    cmd.env("ALMANAC_TEST_STORE_DEADLINE_MS", "300").args([
        "capture",
        "sweep",
        "--dry-run",
        "--json",
        "--apps",
        "cursor",
        "--quiet",
        "0m",
    ]);
    let s = json_ok(&mut cmd)["summary"].clone();
    let why = items(&s, "needsAttention");
    assert_eq!(why.len(), 1, "{s}");
    let detail = text(&why[0]["detail"]);
    assert!(detail.contains("took longer than"), "{detail}");
}

/// Cursor's agent-transcript directory is a lossy slug of the project path: `work/my-app` (a known repo)
/// and `work/my_app` (a private project) give the same. A transcript is placed only where its own text
/// confirms it (the real Return-It transcript, its paths made each directory in turn); one that names no
/// path stays unplaced, says which repo it may be and how to confirm it, and is placed once the user
/// vouches for the slug; the case-insensitive match needs the same proof.
#[test]
fn a_slug_is_placed_only_where_the_sessions_own_text_confirms_it() {
    let l = live_world(3);
    let known = l.w.repo("work/my-app");
    let private = l.w.root().join("work/my_app");
    std::fs::create_dir_all(&private).unwrap();
    let mut init = l.w.almanac();
    init.args(["init", known.to_str().unwrap()]);
    stdout_ok(&mut init);
    assert_eq!(slug(&known), slug(&private));
    let dir =
        l.w.home()
            .join(".cursor/projects")
            .join(slug(&known))
            .join("agent-transcripts");
    std::fs::create_dir_all(&dir).unwrap();
    let real = std::fs::read_to_string(Path::new(FIXTURES).join(AGENT).join(format!(
        "projects/home-dev-Desktop-coding-Return-It/agent-transcripts/{TEXT_TRANSCRIPT}.txt"
    )))
    .unwrap();
    let ran_in = |d: &Path| real.replace("/home/dev/Desktop/coding/Return-It", d.to_str().unwrap());
    let (in_private, in_known, bare) = (
        "0000cccc-0000-4000-8000-000000000001",
        "0000cccc-0000-4000-8000-000000000002",
        "0000cccc-0000-4000-8000-000000000003",
    );
    std::fs::write(dir.join(format!("{in_private}.txt")), ran_in(&private)).unwrap();
    std::fs::write(dir.join(format!("{in_known}.txt")), ran_in(&known)).unwrap();
    std::fs::write(
        dir.join(format!("{bare}.txt")),
        "user:\n<user_query>\nwhat is a monad?\n</user_query>\n\nassistant:\nA burrito.\n",
    )
    .unwrap();
    let rows = sessions(&l, "cursor");
    assert_eq!(
        by_id(&rows, in_private)["projectDir"],
        private.to_str().unwrap()
    );
    assert_eq!(
        by_id(&rows, in_known)["projectDir"],
        known.to_str().unwrap()
    );
    assert_eq!(by_id(&rows, bare)["projectDir"], Value::Null);
    let d = l.w.dry_run(&["--apps", "cursor", "--quiet", "0m"]);
    let runs = started(&d);
    assert_eq!(runs.len(), 1, "{d}");
    assert_eq!(runs[0]["sessionId"], in_known, "{d}");
    let why = items(&d, "skipped")
        .into_iter()
        .find(|i| i["sessionId"] == bare)
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(why["reason"], "no-cwd");
    let detail = text(&why["detail"]);
    assert!(
        detail.contains(known.to_str().unwrap())
            && detail.contains("nothing in the session names a path there")
            && detail.contains("[stores.slug_repos]"),
        "{detail}"
    );
    // The user vouches for the slug: placed.
    let config = l.w.almanac_home().join("config.toml");
    let mut conf = std::fs::read_to_string(&config).unwrap();
    conf.push_str(&format!(
        "\n[stores.slug_repos]\n\"{}\" = \"{}\"\n",
        slug(&known),
        known.display()
    ));
    std::fs::write(&config, conf).unwrap();
    let rows = sessions(&l, "cursor");
    assert_eq!(by_id(&rows, bare)["projectDir"], known.to_str().unwrap());

    // Regardless of case (a slug Cursor wrote lower-case), the same proof is asked for.
    let upper = l.w.repo("work/CamelApp");
    let mut init = l.w.almanac();
    init.args(["init", upper.to_str().unwrap()]);
    stdout_ok(&mut init);
    let lower =
        l.w.home()
            .join(".cursor/projects")
            .join(slug(&upper).to_lowercase())
            .join("agent-transcripts");
    std::fs::create_dir_all(&lower).unwrap();
    let (ci_bare, ci_named) = (
        "0000cccc-0000-4000-8000-000000000004",
        "0000cccc-0000-4000-8000-000000000005",
    );
    std::fs::write(
        lower.join(format!("{ci_bare}.txt")),
        "user:\n<user_query>\nhello\n</user_query>\n",
    )
    .unwrap();
    std::fs::write(lower.join(format!("{ci_named}.txt")), ran_in(&upper)).unwrap();
    let rows = sessions(&l, "cursor");
    assert_eq!(by_id(&rows, ci_bare)["projectDir"], Value::Null);
    assert_eq!(
        by_id(&rows, ci_named)["projectDir"],
        upper.to_str().unwrap()
    );
}
