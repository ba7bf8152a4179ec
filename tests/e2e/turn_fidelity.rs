//! Prompts of real sessions that are not JSONL transcripts of Claude Code or Codex (those are in the
//! corpus, `corpus.rs`): a Cline task whose last message merges four sends, a 2025 Gemini CLI chat
//! whose tool result is a user message, a 2025 Cursor CLI store whose prompts carry no <user_query>,
//! Cursor agent transcripts of 2026 with background-task notices and a prompt resent mid-turn
//! (tests/fixtures/real/PROVENANCE.md). For each, `capture sessions`, `capture turns` and the sweep
//! agree: the same prompts, the latest the last of them, one run over the whole conversation and none
//! once nothing changed. And the sweep decides on real JSONL parts as `capture turns` reads them: a
//! part of only /compact commands (Claude Code 2.1.232) or only droid's notices starts no run, a
//! prompt queued into the running turn is captured once, and Codex Desktop turns after a repeated
//! session_meta are captured. Expectations come from reading the files.

use crate::common::*;
use crate::cursor::copy_tree;
use crate::live::{live_world, Live};
use crate::stores::{by_id, sessions, started};
use std::path::{Path, PathBuf};

/// The session `id` of `app`, as `capture sessions` lists it, and the prompt lines and texts
/// `capture turns` reads in its transcript (a view's lines: its header is line 1, message i is i + 2).
pub(crate) fn listed_and_read(
    l: &Live,
    app: &str,
    id: &str,
) -> (serde_json::Value, Vec<(u64, String)>) {
    let rows = sessions(l, app);
    let row = by_id(&rows, id).clone();
    let path = row["transcriptPath"].as_str().unwrap().to_string();
    let turns = json_ok(
        l.w.almanac()
            .args(["capture", "turns", "--json", "--app", app])
            .arg(&path),
    );
    let prompts = crate::prompts::prompts(&turns);
    (row, prompts)
}

/// `capture sessions` says what `capture turns` reads: as many prompts, the latest the last of them
/// (cut as the turn index keeps it, 120 bytes); then a sweep starts one run for the session, over
/// everything up to its last line, and a second sweep starts none. The conversation that run read.
pub(crate) fn agree_and_capture(
    l: &Live,
    app: &str,
    id: &str,
    prompts: &[(u64, String)],
) -> String {
    let (row, read) = listed_and_read(l, app, id);
    assert_eq!(read, prompts, "{row}");
    assert_eq!(row["userTurns"], prompts.len(), "{row}");
    let latest = &prompts.last().unwrap().1;
    let mut end = latest.len().min(120);
    while !latest.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &latest[..end];
    assert_eq!(row["lastPrompt"], cut, "{row}");
    assert_eq!(
        row["projectDir"],
        l.repo.to_str().unwrap(),
        "placed in the repo: {row}"
    );
    let s = l.sweep_args(&["--apps", app]);
    l.wait_idle();
    let runs: Vec<_> = started(&s)
        .into_iter()
        .filter(|r| r["sessionId"] == id)
        .collect();
    assert_eq!(runs.len(), 1, "{s}");
    let view = std::fs::read_to_string(row["transcriptPath"].as_str().unwrap()).unwrap();
    assert_eq!(runs[0]["toLine"], view.lines().count(), "{s}");
    // The conversation the capture agent reads holds each prompt.
    let run_id = runs[0]["runId"].as_str().unwrap();
    let conversation = crate::common::unindented(&l.conversation(run_id));
    for (_, p) in prompts {
        let head: String = p.chars().take(60).collect();
        assert!(conversation.contains(&head), "{head:?} in {conversation}");
    }
    let s = l.sweep_args(&["--apps", app]);
    assert!(
        started(&s).iter().all(|r| r["sessionId"] != id),
        "nothing new: {s}"
    );
    conversation
}

pub(crate) fn fixture_dir(rel: &str) -> PathBuf {
    Path::new(FIXTURES).join("real/stores").join(rel)
}

#[test]
fn a_cline_message_that_merges_interrupted_sends_holds_each_of_them() {
    // The VS Code extension (2026): messages 430-442 of a task; the last user message merges four sends
    // made while requests were interrupted, each its own <user_message> (the second and third the same
    // words, sent twice), among resumption notices and environment details.
    let l = live_world(3);
    let tasks =
        l.w.home()
            .join(".config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks");
    copy_tree(
        &fixture_dir("cline-vscode/.config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks"),
        &tasks,
    );
    // Its working directory, named in the environment details, is this repo.
    let file = tasks.join("1777073160794/api_conversation_history.json");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("c:/Apps/MRA04242026", l.repo.to_str().unwrap()),
    )
    .unwrap();
    let resend = "my image didn't come through. help me get rid of the following prompts after typing terraform plan....\n\nc:\\Apps\\MRA04242026\\terraform>terraform plan -out=tfplan\nvar.firebase_admin_private_key\n  Enter a value:\n\nvar.firebase_api_key\n  Enter a value:";
    let expected: Vec<(u64, String)> = vec![
        (2, "Let's try Cloud Shell instead".into()),
        (6, "Good news. My Google Admin just granted my personal user account elevated permissions".into()),
        (14, "The following two questions were requested after running terraform plan -out=tfplan. How do I get rid of these remnants of firebase?".into()),
        (14, resend.into()),
        (14, resend.into()),
        (14, "What model are you operating at?".into()),
    ];
    // The second prompt is long: compared by its start.
    let (_, read) = listed_and_read(&l, "cline", "1777073160794");
    assert!(read[1].1.starts_with(&expected[1].1), "{read:?}");
    let mut expected = expected;
    expected[1].1 = read[1].1.clone();
    agree_and_capture(&l, "cline", "1777073160794", &expected);
}

#[test]
fn a_gemini_tool_result_written_as_a_user_message_is_no_prompt() {
    // Gemini CLI, October 2025, a JSON chat: message 3 is read_many_files' result as a user message
    // ("[Function Response: read_many_files]--- <path> ---..."); message 8 is typed, followed by the
    // files its @src/** reference pulled in ("--- Content from referenced files ---").
    let l = live_world(3);
    let hash = "2b4ddbded2c4ad5e5e71b0680e506522d8eaa6362289d1d447bbc2da0d51bdf3";
    let tmp = l.w.home().join(".gemini/tmp");
    copy_tree(&fixture_dir("gemini-2025/.gemini/tmp"), &tmp);
    std::fs::write(
        tmp.join(hash).join(".project_root"),
        l.repo.to_str().unwrap(),
    )
    .unwrap();
    agree_and_capture(
        &l,
        "gemini",
        "4b128230-f39a-4b1b-8b75-d25e021d8336",
        &[
            (
                2,
                "please generate the requirement.txt fot this repository".into(),
            ),
            (10, "read whole @src/** for it please re check".into()),
        ],
    );
}

#[test]
fn a_2025_cursor_cli_store_reads_prompts_without_user_query() {
    // cursor-agent, August 2025: the root blob lists 89 messages; the three prompts are user messages of
    // text parts with the typed text as it is (no <user_query>), the rest tool calls and results.
    let l = live_world(3);
    let md5 = {
        use md5::Digest;
        let d = md5::Md5::digest(l.repo.to_string_lossy().as_bytes());
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let agent = "b4941fa7-f8f4-4021-9a9b-6545c7f641c4";
    let from = fixture_dir("cursor-cli-2025/.cursor/chats/a20f84e58b4db77f643ebcc5fd136c04");
    copy_tree(&from, &l.w.home().join(".cursor/chats").join(&md5));
    // The directory is the md5 of the project path: placed on a repo almanac knows (`init`).
    stdout_ok(l.w.almanac().args(["init", l.repo.to_str().unwrap()]));
    let expected = vec![
        (3, "create advance prompet to create clone of https://play.google.com/store/apps/details?id=com.chatmini.app in quasar vuejs, and tailwindcss".to_string()),
        (5, "here is screen shots of this app: /home/laxu/Documents/swftea/images u can inhance ui  but flow should be same".to_string()),
        (7, "yes continue".to_string()),
    ];
    agree_and_capture(&l, "cursor", agent, &expected);
}

#[test]
fn a_new_part_of_only_compact_commands_starts_no_run_and_counts_no_prompt() {
    // Claude Code 2.1.232: two prompts (3, 18); after the second's answer (19), /compact with
    // instructions, a bare /compact killed while compacting (31-32) and one that finished (34-44).
    let l = live_world(3);
    let rel = "corpus/claude/2.1.232/33333333-3333-4333-8444-cccccccccccc.jsonl";
    let fixture = fixture(rel).replace("/home/dev/proj/compact", l.repo.to_str().unwrap());
    let path =
        l.w.home()
            .join(".claude/projects/-work-app/33333333-3333-4333-8444-cccccccccccc.jsonl");
    let head: String = fixture.split_inclusive('\n').take(19).collect();
    write_aged(&path, head.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(
        find_by_path(&s, "started", &path).unwrap()["toLine"],
        19,
        "{s}"
    );
    l.wait_idle();
    // Up to the killed /compact (the file as the kill left it), then the whole file: no prompt, no run.
    for upto in [32, 44] {
        let part: String = fixture.split_inclusive('\n').take(upto).collect();
        write_aged(&path, part.as_bytes(), HOURS_2);
        let s = l.summary();
        let skipped = find_by_path(&s, "skipped", &path).unwrap_or_else(|| panic!("{s}"));
        assert_eq!(skipped["reason"], "no-new-content", "{upto}: {s}");
        let (row, read) = listed_and_read(&l, "claude", "33333333-3333-4333-8444-cccccccccccc");
        assert_eq!(row["userTurns"], 2, "{row}");
        assert_eq!(row["lastPrompt"], "Say hello again", "{row}");
        assert_eq!(read.len(), 2, "{read:?}");
    }
    assert_eq!(l.calls().len(), 1, "one agent run, for the prompts");
}

/// Writes Cursor agent transcript `id` of July 2026 (tests/fixtures/real/PROVENANCE.md; the first
/// `upto` lines, or all) under its own project slug, two hours old, the user vouching that the slug is
/// the live repo (`[stores.slug_repos]`: the session ran in `d:\Elay_Backend-master`); its path. Read
/// as a view, message n is line n + 1.
fn cursor_2026(l: &Live, id: &str, upto: Option<usize>) -> PathBuf {
    let from = fixture_dir(&format!(
        "cursor/agent-2026/.cursor/projects/d-Elay-Backend-master/agent-transcripts/{id}/{id}.jsonl"
    ));
    let text = std::fs::read_to_string(from).unwrap();
    let part: String = text
        .split_inclusive('\n')
        .take(upto.unwrap_or(usize::MAX))
        .collect();
    let path =
        l.w.home()
            .join(".cursor/projects/d-Elay-Backend-master")
            .join(format!("agent-transcripts/{id}/{id}.jsonl"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_aged(&path, part.as_bytes(), HOURS_2);
    let config = l.w.almanac_home().join("config.toml");
    let mut conf = std::fs::read_to_string(&config).unwrap_or_default();
    if !conf.contains("[stores.slug_repos]") {
        let repo = l.repo.display();
        conf.push_str(&format!(
            "\n[stores.slug_repos]\n\"d-Elay-Backend-master\" = \"{repo}\"\n"
        ));
        std::fs::write(&config, conf).unwrap();
    }
    path
}

#[test]
fn cursor_background_task_notices_are_no_prompts() {
    // One prompt (message 1); after the turn ends (11) Cursor writes its notice five times (12-16), one
    // per background task that ended, and the agent reports on them (17-19): no prompt among them, but
    // the agent's work, which the next run captures as a turn without a prompt.
    let l = live_world(3);
    let id = "a738cede-7729-4899-be30-793898dfca7e";
    // Its view (message n is line n + 1) is what the sweep reports.
    let of = |s: &serde_json::Value, list: &str| {
        let found = s[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["sessionId"] == id);
        found.cloned().unwrap_or_else(|| panic!("{s}"))
    };
    cursor_2026(&l, id, Some(11));
    let s = l.sweep_args(&["--apps", "cursor"]);
    l.wait_idle();
    assert_eq!(of(&s, "started")["toLine"], 12, "{s}");
    cursor_2026(&l, id, None);
    let s = l.sweep_args(&["--apps", "cursor"]);
    l.wait_idle();
    let run = of(&s, "started");
    assert_eq!(
        (&run["fromLine"], &run["newTurns"]),
        (&13.into(), &0.into()),
        "{s}"
    );
    let conversation = l.conversation(run["runId"].as_str().unwrap());
    let notice = "Briefly inform the user about the task result";
    // Five notices in a row, the same text: shown once, then counted.
    assert_eq!(
        conversation
            .matches(&format!("not a prompt: {notice}"))
            .count(),
        1,
        "{conversation}"
    );
    assert!(
        conversation.contains("[M16] the same again, ×4"),
        "{conversation}"
    );
    assert!(
        !conversation.contains(&format!("user:\n  {notice}")),
        "{conversation}"
    );
    assert!(
        conversation.contains("The indexing run finished successfully."),
        "{conversation}"
    );
    let (row, read) = listed_and_read(&l, "cursor", id);
    assert_eq!(read, [(2, "index this project".to_string())], "{row}");
    assert_eq!(row["userTurns"], 1, "{row}");
    assert_eq!(row["lastPrompt"], "index this project", "{row}");
    assert_eq!(l.calls().len(), 2, "two agent runs");
}

#[test]
fn cursor_prompt_resent_after_subagent_context_is_one_prompt() {
    // Lines 91-115, 158-159 and 196-212 of a session. The prompt at message 4 is answered by tool calls
    // (5-20); then Cursor writes its <available_subagent_types> context (21) and the same prompt again
    // (22), and the agent goes on with the task. Two notices (29, 30) after the turn at 27 ends.
    let l = live_world(3);
    let id = "428031b4-ee27-4ebc-aa88-7c3c24704831";
    cursor_2026(&l, id, None);
    let commit = "همه رو کامیت رو کن بعد شروع کن";
    let prompts = [
        (
            1,
            "/phase-cycle\n/orchestrator use this in all phases you implement  \nStart: next\nMode: all-remaining\nFeature: Mobile Forms Hub",
        ),
        (4, commit),
        (27, "شروع کن stage 2 رو و تا وقتی  همه تست ها موفق نبودن توقف نکن"),
        (35, "یه گزارش بهم بده از اینکه چه تست هایی بود و پیاده شد"),
        (
            39,
            "خب اگه از پاس بودن تست های خودت مطمعنی بیا اول پوش کن  و با dev مرج کن این برنچ رو .",
        ),
    ]
    .map(|(n, p)| (n + 1, p.to_string()));
    let conversation = agree_and_capture(&l, "cursor", id, &prompts);
    // The conversation the capture agent read shows the resent prompt once, and no notice as a prompt.
    assert_eq!(conversation.matches(commit).count(), 1, "{conversation}");
    assert!(
        !conversation.contains("user:\n  Briefly inform"),
        "{conversation}"
    );
    assert_eq!(l.calls().len(), 1, "one agent run");
}

/// Writes the first `upto` lines of corpus file `rel` (its cwd made the live repo) at `path`, two
/// hours old, and sweeps `app`.
fn sweep_part(
    l: &Live,
    app: &str,
    rel: &str,
    cwd: &str,
    path: &Path,
    upto: usize,
) -> serde_json::Value {
    let text = fixture(rel).replace(cwd, l.repo.to_str().unwrap());
    let part: String = text.split_inclusive('\n').take(upto).collect();
    write_aged(path, part.as_bytes(), HOURS_2);
    let s = l.sweep_args(&["--apps", app]);
    l.wait_idle();
    s
}

#[test]
fn a_part_holding_only_droid_notices_starts_no_run() {
    // Droid 0.225.2: three prompts (3, 6, 9); the answer to the third (10) is followed by droid's notice
    // that the limit cleared (11, user_only) and the turn's outcome (12): nothing a capture needs.
    let l = live_world(3);
    let rel = "corpus/droid/0.225.2/a46310e3-dfbd-485f-b111-4cff95594084.jsonl";
    let id = "a46310e3-dfbd-485f-b111-4cff95594084";
    let path =
        l.w.home()
            .join(".factory/sessions/-work-app")
            .join(format!("{id}.jsonl"));
    let cwd = "/home/dev/proj/my_repo.x";
    let s = sweep_part(&l, "droid", rel, cwd, &path, 10);
    assert_eq!(
        find_by_path(&s, "started", &path).unwrap()["toLine"],
        10,
        "{s}"
    );
    let s = sweep_part(&l, "droid", rel, cwd, &path, 12);
    let skipped = find_by_path(&s, "skipped", &path).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(skipped["reason"], "no-new-content", "{s}");
    let (row, read) = listed_and_read(&l, "droid", id);
    assert_eq!(row["userTurns"], 3, "{row}");
    assert_eq!(row["lastPrompt"], "Try again please", "{row}");
    assert_eq!(read.last().unwrap(), &(9, "Try again please".to_string()));
    assert_eq!(l.calls().len(), 1, "one agent run");
}

#[test]
fn a_prompt_queued_into_the_running_turn_is_captured_once() {
    // Claude Code 2.1.218: 31 was queued while the agent worked, taken into the running turn (`remove`,
    // 32) and written again as a queued_command attachment (38). Captured through 30, the new part is
    // one prompt; the conversation the capture agent reads shows it once, as a prompt.
    let l = live_world(3);
    let rel = "corpus/claude/2.1.218/0f469ab8-bece-40b3-b3b8-c37e9ea7bc4b.jsonl";
    let path =
        l.w.home()
            .join(".claude/projects/-work-app/0f469ab8-bece-40b3-b3b8-c37e9ea7bc4b.jsonl");
    let cwd = "/Users/thomi/Projects/entire-graph";
    let s = sweep_part(&l, "claude", rel, cwd, &path, 30);
    assert_eq!(
        find_by_path(&s, "started", &path).unwrap()["toLine"],
        30,
        "{s}"
    );
    let s = sweep_part(&l, "claude", rel, cwd, &path, 40);
    let run = find_by_path(&s, "started", &path).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(run["fromLine"], 31, "{s}");
    let run_id = run["runId"].as_str().unwrap();
    let conversation = l.conversation(run_id);
    let prompt = "Note that entiredb is checked out in ~/Project, but needs a pull";
    let (row, read) = listed_and_read(&l, "claude", "0f469ab8-bece-40b3-b3b8-c37e9ea7bc4b");
    assert_eq!(row["userTurns"], 2, "{row}");
    assert_eq!(read.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [13, 31]);
    assert!(read[1].1.starts_with(prompt), "{read:?}");
    // Its text once, where it was queued; the attachment that carries it again says so.
    assert_eq!(conversation.matches(prompt).count(), 1, "{conversation}");
    assert!(
        conversation.contains("[L31] user (queued):")
            && conversation.contains("[L38] user: the queued prompt of [L31], sent"),
        "{conversation}"
    );
}

#[test]
fn codex_desktop_turns_after_a_repeated_session_meta_are_captured() {
    // Codex Desktop 0.145.0-alpha.30 writes the session's own session_meta again before the prompts at
    // 271, 490 and 500 (270, 489, 499). Captured through 269, the new part holds those three prompts.
    let l = live_world(3);
    let rel = "corpus/codex/0.145.0-alpha.30/rollout-2026-07-22T22-49-22-019f8c04-f40a-75a1-80a3-75c564780b42.jsonl";
    let path = l.w.home().join(
        ".codex/sessions/2026/07/22/rollout-2026-07-22T22-49-22-019f8c04-f40a-75a1-80a3-75c564780b42.jsonl",
    );
    let cwd = "/Users/thomi/Projects/entire-graph";
    let s = sweep_part(&l, "codex", rel, cwd, &path, 269);
    assert_eq!(
        find_by_path(&s, "started", &path).unwrap()["toLine"],
        269,
        "{s}"
    );
    let s = sweep_part(&l, "codex", rel, cwd, &path, 541);
    let run = find_by_path(&s, "started", &path).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(run["fromLine"], 270, "{s}");
    let run_id = run["runId"].as_str().unwrap();
    let conversation = l.conversation(run_id);
    for (line, prompt) in [
        (271, "Fix them all"),
        (490, "Did you push them?"),
        (500, "Well then, you know what to do"),
    ] {
        assert!(
            conversation.contains(&format!("[L{line}] user:\n  {prompt}")),
            "{line}: {conversation}"
        );
    }
    let (row, _) = listed_and_read(&l, "codex", "019f8c04-f40a-75a1-80a3-75c564780b42");
    assert_eq!(row["userTurns"], 4, "{row}");
    // The Desktop app keeps the newline the prompt was sent with.
    assert_eq!(
        row["lastPrompt"], "Well then, you know what to do\n",
        "{row}"
    );
}
