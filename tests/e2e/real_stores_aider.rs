//! The real Aider 0.86.2 (`aider-chat` on PyPI), run offline against the mock model, writes the chat log
//! almanac reads into per-session views (rules/aider.yaml: `<repo>/.aider.chat.history.md`, its
//! prompts from `.aider.input.history`). In a repo of a live world (the fake capture agent of
//! live.rs), as in real_stores.rs:
//! 1. `aider --message <prompt>`: one session, not found until `almanac init` makes the repo known;
//!    then `capture sessions --apps aider` lists it as `<log>#<the time of its "# aider chat started
//!    at" line>`, in the repo, with one user turn whose text is the prompt (the one entry `--message`
//!    wrote to the input history);
//! 2. a live sweep starts one run for it;
//! 3. a second process, `aider --message "/ask <question>"`, is a new session in the same log (the log
//!    echoes both `#### /ask Q` and `#### Q`, the input history holds one entry): its one prompt is the
//!    question, and the next sweep starts exactly one run, for it alone;
//! 4. the same session growing: `--message` is one-shot, and a later process is always a new session
//!    (a new header), so a third process reads its prompts from a stdin pipe the test holds open
//!    (`--no-fancy-input`: plain `input()`). After the first prompt's answer is in the log, a sweep
//!    captures that session; the test then writes a second prompt, and the next sweep starts one run
//!    from the message after the ones captured. Piped input writes no input history, so this
//!    session's prompts are its `#### ` lines.
//!
//! Every run passes `--no-fancy-input`. Without it (the default, terminal or not) Aider 0.86.2 writes
//! a `--message` prompt to `.aider.input.history` twice, microseconds apart (`add_to_input_history`
//! appends through a new `FileHistory` and again through the prompt session's, the same file).
//!
//! Offline: the model is `openai/gpt-4.1` at the mock (OPENAI_API_BASE); the mock answers Aider's
//! streamed requests from its script (Aider offers no tools: `MockModel::turns_without_tools`); a
//! commit message from the weak model (not streamed; none is asked for here, as nothing is edited)
//! would get a short text. Aider fetches litellm's price list from GitHub unless
//! `~/.aider/caches/model_prices_and_context_window.json` is fresh: the test copies litellm's bundled
//! copy there. Update checks, analytics and release notes are off. Nothing leaves 127.0.0.1 (checked
//! once with `strace -f -e trace=connect,sendto,sendmmsg`: loopback connections only, no DNS query).
//!
//! `.ci/run` installs Aider into `$ALMANAC_CI_CACHE/aider-venv` (default `~/.cache/almanac-ci`);
//! ALMANAC_AIDER names another `aider`. Without it the test says why it skips, and fails under
//! ALMANAC_REQUIRE_REAL_CLIENTS=1. Each Aider run is bounded, and its process group is killed once it
//! exits.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::mock_model::{MockModel, Turn};
use crate::real_clients::require;
use crate::real_stores::{message_holding, number_after, one_started, prepare_repo, sessions, Ran};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The first session's prompt and the mock's answer (no word of them names a file of the repo: Aider
/// would offer to add it to the chat, and ask the model again).
const FIRST: &str = "What is in this project?";
const FIRST_ANSWER: &str = "Answer one: a small project with a readme.";
/// The second session's question (sent as `/ask <QUESTION>`) and its answer.
const QUESTION: &str = "How would you describe it in one word?";
const QUESTION_ANSWER: &str = "Answer two: tiny.";
/// The third session's two prompts, piped, and their answers.
const PIPED_ONE: &str = "Is there anything to test here?";
const PIPED_ONE_ANSWER: &str = "Answer three: nothing yet.";
const PIPED_TWO: &str = "Then what should come first?";
const PIPED_TWO_ANSWER: &str = "Answer four: a first test.";
/// The most one Aider run may take (each takes 2 to 9 s here).
const RUN_LIMIT: Duration = Duration::from_secs(90);
/// What starts a session in the log.
const HEADER: &str = "# aider chat started at ";

/// The installed `aider` (ALMANAC_AIDER, then `<ALMANAC_CI_CACHE or ~/.cache/almanac-ci>/aider-venv/
/// bin/aider`), or None with a message; a panic when ALMANAC_REQUIRE_REAL_CLIENTS=1.
fn aider_or_skip() -> Option<PathBuf> {
    let mut tried = Vec::new();
    if let Some(p) = std::env::var_os("ALMANAC_AIDER") {
        tried.push(PathBuf::from(p));
    }
    let cache = std::env::var_os("ALMANAC_CI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/almanac-ci")));
    if let Some(cache) = cache {
        tried.push(cache.join("aider-venv/bin/aider"));
    }
    let found = tried.iter().find(|p| p.is_file()).cloned();
    if found.is_none() {
        let why = format!("no `aider` at {tried:?} (ALMANAC_AIDER, $ALMANAC_CI_CACHE/aider-venv)");
        if require() {
            panic!("ALMANAC_REQUIRE_REAL_CLIENTS=1 but {why}; .ci/run installs it");
        }
        eprintln!("skipping: {why}; .ci/run installs it");
    }
    found
}

/// litellm's bundled price list in Aider's venv (`<venv>/lib/python3.*/site-packages/litellm/`).
fn bundled_price_list(aider: &Path) -> PathBuf {
    let venv = aider.parent().and_then(Path::parent).unwrap();
    let lib = venv.join("lib");
    std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            e.path()
                .join("site-packages/litellm/model_prices_and_context_window_backup.json")
        })
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no litellm/model_prices_and_context_window_backup.json under {}: without it Aider \
                 fetches the price list from GitHub",
                lib.display()
            )
        })
}

/// The environment that points Aider at the mock, in the world's home, with its price list cached
/// (fresh: Aider keeps it 24 hours) so it fetches nothing.
fn aider_env(l: &Live, mock: &MockModel, aider: &Path) -> Vec<(String, String)> {
    let home = l.w.home();
    let caches = home.join(".aider/caches");
    std::fs::create_dir_all(&caches).unwrap();
    std::fs::copy(
        bundled_price_list(aider),
        caches.join("model_prices_and_context_window.json"),
    )
    .unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Test\n\temail = test@example.com\n",
    )
    .unwrap();
    let at = |rel: &str| home.join(rel).display().to_string();
    [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.display().to_string()),
        ("XDG_CONFIG_HOME", at(".config")),
        ("XDG_DATA_HOME", at(".local/share")),
        ("XDG_CACHE_HOME", at(".cache")),
        ("XDG_STATE_HOME", at(".local/state")),
        ("LANG", "C.UTF-8".into()),
        ("NO_COLOR", "1".into()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("OPENAI_API_BASE", format!("{}/v1", mock.url())),
        ("OPENAI_API_KEY", "dummy-for-tests".into()),
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Aider's arguments before a run's own: the mock's model, every question answered yes, nothing
/// fetched or reported, plain output and input.
fn aider_args() -> Vec<&'static str> {
    vec![
        "--model",
        "openai/gpt-4.1",
        "--yes-always",
        "--no-analytics",
        "--no-check-update",
        "--no-show-release-notes",
        "--no-show-model-warnings",
        "--no-pretty",
        "--no-fancy-input",
    ]
}

/// Starts Aider in `cwd` with `args` after the common ones, stdin piped (held by the caller) or
/// /dev/null; output goes to files in `out`, and the process leads its own group.
fn spawn(
    aider: &Path,
    cwd: &Path,
    env: &[(String, String)],
    args: &[&str],
    piped: bool,
    out: &Path,
) -> Child {
    std::process::Command::new(aider)
        .args(aider_args())
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if piped { Stdio::piped() } else { Stdio::null() })
        .stdout(std::fs::File::create(out.join("stdout")).unwrap())
        .stderr(std::fs::File::create(out.join("stderr")).unwrap())
        .process_group(0)
        .spawn()
        .expect("start aider")
}

/// Waits for `child` (at most RUN_LIMIT from `start`), kills its process group, and returns the run.
fn finish(mut child: Child, start: Instant, out: &Path) -> Ran {
    let status = crate::real_stores::wait_then_kill_group(&mut child, start, RUN_LIMIT);
    let ran = Ran {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(out.join("stdout")).unwrap_or_default(),
        stderr: std::fs::read_to_string(out.join("stderr")).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "aider did not finish within {RUN_LIMIT:?}: {}",
        ran.stderr
    );
    ran
}

/// One `aider --message <message>` run.
fn run_message(aider: &Path, cwd: &Path, env: &[(String, String)], message: &str) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let child = spawn(aider, cwd, env, &["--message", message], false, dir.path());
    finish(child, Instant::now(), dir.path())
}

/// What a failed run said, with the requests the mock got.
fn describe(ran: &Ran, mock: &MockModel) -> String {
    let requests: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| {
            format!(
                "{} {} model={} stream={}",
                r.method, r.path, r.body["model"], r.body["stream"]
            )
        })
        .collect();
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}\nrequests: {requests:#?}",
        ran.code, ran.stdout, ran.stderr
    )
}

/// The start times of the log's sessions, in order.
fn session_times(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(HEADER))
        .map(|t| t.trim_end().to_string())
        .collect()
}

/// The input history's entries, as their text.
fn input_entries(repo: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(repo.join(".aider.input.history")).unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# ") {
            out.push(String::new());
        } else if let (Some(l), Some(e)) = (line.strip_prefix('+'), out.last_mut()) {
            if !e.is_empty() {
                e.push('\n');
            }
            e.push_str(l);
        }
    }
    out
}

/// Waits until the log holds `answer` followed by Aider's `> Tokens:` line: the prompt is done and
/// Aider waits for the next line of input.
fn wait_for_answer(log: &Path, answer: &str, child: &mut Child, out: &Path) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text
            .find(answer)
            .is_some_and(|at| text[at..].contains("\n> Tokens:") && text.ends_with('\n'))
        {
            return;
        }
        let exited = child.try_wait().unwrap();
        if exited.is_some() || start.elapsed() > RUN_LIMIT {
            let stderr = std::fs::read_to_string(out.join("stderr")).unwrap_or_default();
            panic!("no `{answer}` in the log ({exited:?}): {stderr}\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The readable copy of a run.
fn copy(l: &Live, run: &str) -> String {
    l.conversation(run)
}

#[test]
fn real_aider_sessions_are_found_in_a_known_repo_and_each_new_or_grown_one_is_captured_alone() {
    let Some(aider) = aider_or_skip() else {
        return;
    };
    let l: Live = live_world(3);
    prepare_repo(&l.repo);
    let repo = l.repo.display().to_string();
    let log = l.repo.join(".aider.chat.history.md");
    let id = |time: &str| format!("{}#{time}", log.display());
    let mock = MockModel::start(vec![Turn::Text(FIRST_ANSWER.into())]);
    mock.turns_without_tools();
    let env = aider_env(&l, &mock, &aider);

    // 1. One prompt: one session, its prompt the one entry `--message` wrote to the input history.
    let ran = run_message(&aider, &l.repo, &env, FIRST);
    let said = describe(&ran, &mock);
    assert_eq!(ran.code, Some(0), "aider failed: {said}");
    assert_eq!(mock.remaining(), 0, "every scripted turn was taken: {said}");
    assert!(ran.stdout.contains(FIRST_ANSWER), "{said}");
    let times = session_times(&log);
    assert_eq!(times.len(), 1, "{said}");
    assert_eq!(input_entries(&l.repo), vec![FIRST.to_string()]);
    assert!(
        sessions(&l, "aider").is_empty(),
        "found before the repo is known"
    );
    let mut init = l.w.almanac();
    init.args(["init", &repo]);
    stdout_ok(&mut init);
    let first = id(&times[0]);
    let rows = sessions(&l, "aider");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["sessionId"], first.as_str(), "{row}");
    assert_eq!(row["projectDir"], repo.as_str(), "{row}");
    assert_eq!(row["userTurns"], 1, "{row}");
    assert_eq!(row["firstPrompt"], FIRST, "{row}");
    assert_eq!(row["lastPrompt"], FIRST, "{row}");

    // 2. A live capture: one run, through the end of the session.
    let s = l.sweep_args(&["--apps", "aider"]);
    l.wait_idle();
    let run1 = one_started(&s, &first)["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let copy1 = copy(&l, &run1);
    let asked = message_holding(&copy1, FIRST).unwrap_or_else(|| panic!("{copy1}"));
    let answered = message_holding(&copy1, FIRST_ANSWER).unwrap_or_else(|| panic!("{copy1}"));
    assert!(asked < answered, "{copy1}");
    // The user turn is the input history's entry; the log's `#### ` line is its echo.
    assert_eq!(copy1.matches("] user:\n").count(), 1, "{copy1}");
    assert!(copy1.contains(&format!("] user:\n  {FIRST}\n")), "{copy1}");
    assert!(
        l.prompt(&run1).contains("Capture messages 1 to "),
        "{}",
        l.prompt(&run1)
    );
    assert_eq!(l.runs().len(), 1);
    assert_eq!(
        l.ledger()["entries"][format!("aider:{first}")]["status"],
        "done"
    );

    // 3. A second process asks a question: a new session in the same log, captured alone.
    mock.queue(vec![Turn::Text(QUESTION_ANSWER.into())]);
    let ran = run_message(&aider, &l.repo, &env, &format!("/ask {QUESTION}"));
    let said = describe(&ran, &mock);
    assert_eq!(ran.code, Some(0), "aider /ask failed: {said}");
    assert_eq!(mock.remaining(), 0, "{said}");
    let times = session_times(&log);
    assert_eq!(times.len(), 2, "{said}");
    assert_ne!(times[0], times[1]);
    let second = id(&times[1]);
    let text = std::fs::read_to_string(&log).unwrap();
    let tail = &text[text.rfind(HEADER).unwrap()..];
    assert!(
        tail.contains(&format!("\n#### /ask {QUESTION}  \n"))
            && tail.contains(&format!("\n#### {QUESTION}  \n")),
        "the log echoes the command and the question: {tail}"
    );
    assert_eq!(
        input_entries(&l.repo),
        vec![FIRST.to_string(), format!("/ask {QUESTION}")]
    );
    let rows = sessions(&l, "aider");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let row = rows
        .iter()
        .find(|r| r["sessionId"] == second.as_str())
        .unwrap_or_else(|| panic!("{second}: {rows:?}"));
    assert_eq!(row["projectDir"], repo.as_str(), "{row}");
    assert_eq!(row["userTurns"], 1, "{row}");
    assert_eq!(row["firstPrompt"], QUESTION, "{row}");
    let s = l.sweep_args(&["--apps", "aider"]);
    l.wait_idle();
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    let run2 = one_started(&s, &second)["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let copy2 = copy(&l, &run2);
    assert!(copy2.contains(QUESTION_ANSWER), "{copy2}");
    assert_eq!(copy2.matches("] user:\n").count(), 1, "{copy2}");
    assert!(
        copy2.contains(&format!("] user:\n  {QUESTION}\n")),
        "{copy2}"
    );
    assert!(!copy2.contains(FIRST_ANSWER), "one session only: {copy2}");
    assert_eq!(l.runs().len(), 2);

    // 4. One session growing: a third process reads prompts from a pipe held open.
    mock.queue(vec![Turn::Text(PIPED_ONE_ANSWER.into())]);
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut child = spawn(&aider, &l.repo, &env, &[], true, out.path());
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{PIPED_ONE}").unwrap();
    wait_for_answer(&log, PIPED_ONE_ANSWER, &mut child, out.path());
    let times = session_times(&log);
    assert_eq!(times.len(), 3);
    let third = id(&times[2]);
    let rows = sessions(&l, "aider");
    let row = rows
        .iter()
        .find(|r| r["sessionId"] == third.as_str())
        .unwrap_or_else(|| panic!("{third}: {rows:?}"));
    assert_eq!(row["userTurns"], 1, "{row}");
    assert_eq!(row["firstPrompt"], PIPED_ONE, "{row}");
    let s = l.sweep_args(&["--apps", "aider"]);
    l.wait_idle();
    let started3 = one_started(&s, &third);
    let run3 = started3["runId"].as_str().unwrap().to_string();
    let captured = started3["toLine"].as_u64().unwrap() - 1;
    let p3 = l.prompt(&run3);
    assert!(
        p3.contains(&format!("Capture messages 1 to {captured}.")),
        "{p3}"
    );
    let copy3 = copy(&l, &run3);
    assert!(
        message_holding(&copy3, PIPED_ONE_ANSWER).is_some_and(|m| m <= captured),
        "{copy3}"
    );

    // ... the second prompt, in the same process: the same session, captured from message K+1.
    mock.queue(vec![Turn::Text(PIPED_TWO_ANSWER.into())]);
    writeln!(stdin, "{PIPED_TWO}").unwrap();
    wait_for_answer(&log, PIPED_TWO_ANSWER, &mut child, out.path());
    drop(stdin);
    let ran = finish(child, started, out.path());
    let said = describe(&ran, &mock);
    assert_eq!(ran.code, Some(0), "piped aider failed: {said}");
    assert_eq!(mock.remaining(), 0, "{said}");
    assert_eq!(session_times(&log).len(), 3, "still three sessions");
    assert_eq!(input_entries(&l.repo).len(), 2, "piped input is not kept");
    let rows = sessions(&l, "aider");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let row = rows
        .iter()
        .find(|r| r["sessionId"] == third.as_str())
        .unwrap_or_else(|| panic!("{third}: {rows:?}"));
    assert_eq!(row["userTurns"], 2, "{row}");
    assert_eq!(row["firstPrompt"], PIPED_ONE, "{row}");
    assert_eq!(row["lastPrompt"], PIPED_TWO, "{row}");
    let s = l.sweep_args(&["--apps", "aider"]);
    l.wait_idle();
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    let started4 = one_started(&s, &third);
    let run4 = started4["runId"].as_str().unwrap().to_string();
    let last = started4["toLine"].as_u64().unwrap() - 1;
    let p4 = l.prompt(&run4);
    let through =
        number_after(&p4, "previously captured through message ").unwrap_or_else(|| panic!("{p4}"));
    assert_eq!(through, captured, "{p4}");
    assert!(
        p4.contains(&format!("Focus on messages {} to {last}.", through + 1)),
        "{p4}"
    );
    let copy4 = copy(&l, &run4);
    let asked = message_holding(&copy4, PIPED_TWO).unwrap_or_else(|| panic!("{copy4}"));
    assert!(asked > through && asked <= last, "{p4}\n{copy4}");
    let answered = message_holding(&copy4, PIPED_TWO_ANSWER).unwrap_or_else(|| panic!("{copy4}"));
    assert!(answered > asked && answered <= last, "{copy4}");
    // The earlier prompt and the answer to it, captured before, are listed for context, once, before
    // the new part.
    assert!(
        message_holding(&copy4, PIPED_ONE).is_some_and(|m| m <= through),
        "{copy4}"
    );
    let new_part = copy4
        .find("\n## The new part")
        .unwrap_or_else(|| panic!("{copy4}"));
    assert!(
        copy4.find(PIPED_ONE_ANSWER).is_some_and(|at| at < new_part)
            && copy4.matches(PIPED_ONE_ANSWER).count() == 1,
        "{copy4}"
    );
    let entry = &l.ledger()["entries"][format!("aider:{third}")];
    assert_eq!(entry["status"], "done", "{entry}");
    assert_eq!(entry["lastRunId"], run4.as_str(), "{entry}");
    assert_eq!(l.runs().len(), 4);
}
