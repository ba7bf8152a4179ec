//! `almanac capture sweep --dry-run` over whole homes: what it finds, maps, skips and would start.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CLAUDE_555: &str =
    "real/claude/projects/-home-dev-proj-my-repo-x/11111111-2222-4333-8444-555555555555.jsonl";
const CLAUDE_666: &str =
    "real/claude/projects/-home-dev-proj-my-repo-x/11111111-2222-4333-8444-666666666666.jsonl";
const CODEX_A: &str = "real/codex/sessions/2026/11/29/rollout-2026-11-29T16-30-04-01a22824-67fc-72a0-8696-7ffb0d4410c0.jsonl";
const CODEX_B: &str = "real/codex/sessions/2026/11/29/rollout-2026-11-29T16-33-54-01a22827-ec08-78d3-b4ae-0efb69f48d7e.jsonl";

fn real_with_cwd(rel: &str, cwd: &Path) -> String {
    fixture(rel).replace(REAL_CWD, cwd.to_str().unwrap())
}

fn file_name(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap()
}

/// The scenario most tests share: two repos (one nested in the other), one directory without a wiki,
/// real Claude and Codex transcripts pointing at each, subagents, and an active session.
struct Mixed {
    w: World,
    app: PathBuf,
    nested: PathBuf,
    claude_app: PathBuf,
    claude_nested: PathBuf,
    codex_unmapped: PathBuf,
    codex_app_active: PathBuf,
}

fn mixed() -> Mixed {
    let w = World::new();
    let app = w.repo("work/app");
    let nested = w.repo("work/app/vendor/lib");
    let other = w.root().join("work/other");
    std::fs::create_dir_all(&other).unwrap();
    let projects = ".claude/projects/-work";
    let claude_app = w.write(
        &format!("home/{projects}/{}", file_name(CLAUDE_555)),
        &real_with_cwd(CLAUDE_555, &app),
        HOURS_2,
    );
    // A cwd below the nested repo maps to the nested repo, not its parent.
    let claude_nested = w.write(
        &format!("home/{projects}/{}", file_name(CLAUDE_666)),
        &real_with_cwd(CLAUDE_666, &nested.join("src")),
        HOURS_2,
    );
    let codex_unmapped = w.write(
        &format!("home/.codex/sessions/2026/11/29/{}", file_name(CODEX_A)),
        &real_with_cwd(CODEX_A, &other),
        HOURS_2,
    );
    let codex_app_active = w.write(
        &format!("home/.codex/sessions/2026/11/29/{}", file_name(CODEX_B)),
        &real_with_cwd(CODEX_B, &app),
        Duration::from_secs(60),
    );
    // Subagents in both Claude layouts and a Codex child: counted, never candidates.
    let sub = fixture("synthetic/claude/projects/-home-dev-src-acme-api/7c1e2a90-3b4d-4f6a-9e21-5a8d0c3f1b77/subagents/agent-a3f9c2d17b8e4051.jsonl")
        .replace("/home/dev/src/acme.api", app.to_str().unwrap());
    w.write(&format!("home/{projects}/11111111-2222-4333-8444-555555555555/subagents/agent-a3f9c2d17b8e4051.jsonl"), &sub, HOURS_2);
    let legacy = fixture("synthetic/claude/projects/-home-dev-legacy-app/agent-4e7b19c2.jsonl")
        .replace("/home/dev/legacy-app", app.to_str().unwrap());
    w.write(
        &format!("home/{projects}/agent-4e7b19c2.jsonl"),
        &legacy,
        HOURS_2,
    );
    let child = fixture("synthetic/codex/sessions/2026/07/13/rollout-2026-07-13T22-21-37-019f624a-cc95-7c50-b9fa-1db381270b73.jsonl")
        .replace("/home/dev/src/acme.api", app.to_str().unwrap());
    w.write("home/.codex/sessions/2026/07/13/rollout-2026-07-13T22-21-37-019f624a-cc95-7c50-b9fa-1db381270b73.jsonl", &child, HOURS_2);
    // Files the store rules exclude.
    w.write(
        &format!(
            "home/{projects}/11111111-2222-4333-8444-555555555555/subagents/agent-acompact-1.jsonl"
        ),
        &sub,
        HOURS_2,
    );
    w.write(
        &format!("home/{projects}/11111111-2222-4333-8444-555555555555/tool-results/out.jsonl"),
        "{}\n",
        HOURS_2,
    );
    Mixed {
        w,
        app,
        nested,
        claude_app,
        claude_nested,
        codex_unmapped,
        codex_app_active,
    }
}

#[test]
fn mixed_stores_nested_repos_and_unmapped_cwds() {
    let m = mixed();
    let s = m.w.dry_run(&[]);
    assert_eq!(s["dryRun"], true);
    assert_eq!(
        s["scanned"], 4,
        "four root sessions; subagents and excluded files are not candidates"
    );
    assert_eq!(s["eligible"], 2);
    assert_eq!(s["counts"]["subagent"], 3);
    assert_eq!(s["counts"]["no-almanac-repo"], 1);
    assert_eq!(s["counts"]["quiet-window"], 1);
    assert!(s["captureSince"].is_null());

    let started = items(&s, "started");
    assert_eq!(started.len(), 2);
    // Sorted by app, then path.
    assert_eq!(
        started[0]["transcriptPath"],
        m.claude_app.display().to_string()
    );
    assert_eq!(
        started[1]["transcriptPath"],
        m.claude_nested.display().to_string()
    );
    assert_eq!(started[0]["repoRoot"], m.app.display().to_string());
    assert_eq!(
        started[1]["repoRoot"],
        m.nested.display().to_string(),
        "nested repo wins over its parent"
    );
    assert_eq!(
        started[0]["sessionId"],
        "11111111-2222-4333-8444-555555555555"
    );
    assert_eq!(started[0]["runId"], "dry-run");
    for (item, path) in [(started[0], &m.claude_app), (started[1], &m.claude_nested)] {
        let (lines, end) = complete_range(&std::fs::read_to_string(path).unwrap());
        assert_eq!(item["fromLine"], 1);
        assert_eq!(item["toLine"], lines);
        assert_eq!(item["fromByte"], 0);
        assert_eq!(item["toByte"], end);
    }

    let unmapped =
        find_by_path(&s, "skipped", &m.codex_unmapped).expect("unmapped transcript is reported");
    assert_eq!(unmapped["reason"], "no-almanac-repo");
    assert_eq!(
        unmapped["sessionId"],
        "01a22824-67fc-72a0-8696-7ffb0d4410c0"
    );
    assert!(unmapped["repoRoot"].is_null());
    let active = find_by_path(&s, "skipped", &m.codex_app_active).unwrap();
    assert_eq!(active["reason"], "quiet-window");
    assert_eq!(active["repoRoot"], m.app.display().to_string());

    assert!(s["stats"]["filesVisited"].as_u64().unwrap() >= 7);
    assert!(s["stats"]["bytesRead"].as_u64().unwrap() > 0);
    assert!(s["stats"]["elapsedMs"].is_u64());
}

#[test]
fn a_dry_run_writes_nothing_anywhere() {
    let m = mixed();
    let before = tree(m.w.root());
    m.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(
        tree(m.w.root()),
        before,
        "no file created, removed or renamed"
    );
}

#[test]
fn quiet_flag_and_apps_selection() {
    let m = mixed();
    let s = m.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(
        s["eligible"], 3,
        "with no quiet window the active session is eligible too"
    );
    let s = m.w.dry_run(&["--apps", " codex , codex", "--quiet", "30s"]);
    assert_eq!(s["scanned"], 2);
    assert!(items(&s, "started").iter().all(|i| i["app"] == "codex"));
    assert_eq!(s["eligible"], 1);
}

#[test]
fn quiet_window_from_config_and_per_app_policy() {
    let m = mixed();
    std::fs::create_dir_all(m.w.almanac_home()).unwrap();
    std::fs::write(
        m.w.almanac_home().join("config.toml"),
        "[automation.capture]\nquiet = \"30s\"\n",
    )
    .unwrap();
    assert_eq!(
        m.w.dry_run(&[])["eligible"],
        3,
        "config quiet 30s lets the 1-minute-old session through"
    );
    // A per-app window in a user policy wins over the general config value.
    let policy = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/policy.yaml"))
        .unwrap()
        .replace("# apps: { codex: 30m }", "apps: { codex: 30m }");
    std::fs::create_dir_all(m.w.almanac_home().join("rules")).unwrap();
    std::fs::write(m.w.almanac_home().join("rules/policy.yaml"), policy).unwrap();
    let s = m.w.dry_run(&[]);
    assert_eq!(s["eligible"], 2);
    assert_eq!(
        find_by_path(&s, "skipped", &m.codex_app_active).unwrap()["reason"],
        "quiet-window"
    );
}

#[test]
fn transcripts_before_capture_since_are_not_backfilled() {
    let m = mixed();
    std::fs::create_dir_all(m.w.almanac_home()).unwrap();
    let since = chrono::Utc::now() - chrono::Duration::minutes(30);
    let iso = since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    std::fs::write(
        m.w.almanac_home().join("config.toml"),
        format!("# activation\n[automation]\ncapture_since = \"{iso}\"\n"),
    )
    .unwrap();
    // The active Codex session began before activation (its records are older) and continued after it.
    let old = std::fs::read_to_string(&m.codex_app_active).unwrap();
    let (old_lines, old_end) = complete_range(&old);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let new_line = format!("{{\"timestamp\":\"{now}\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"and now?\"}}}}\n");
    write_aged(
        &m.codex_app_active,
        format!("{old}{new_line}").as_bytes(),
        Duration::from_secs(60),
    );
    let s = m.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(s["captureSince"], iso.as_str());
    assert_eq!(
        s["eligible"], 1,
        "only the session modified after activation"
    );
    let item = items(&s, "started")[0];
    assert_eq!(
        item["transcriptPath"],
        m.codex_app_active.display().to_string()
    );
    // It starts at the first record at or after capture_since, not at line 1.
    assert_eq!(item["fromLine"], old_lines + 1);
    assert_eq!(item["toLine"], old_lines + 1);
    assert_eq!(item["fromByte"], old_end);
    assert_eq!(
        find_by_path(&s, "skipped", &m.claude_app).unwrap()["reason"],
        "before-automation-activation"
    );

    // Without records after activation (or without timestamps) nothing is backfilled.
    write_aged(&m.codex_app_active, old.as_bytes(), Duration::from_secs(60));
    let s = m.w.dry_run(&["--quiet", "0m"]);
    assert_eq!(s["eligible"], 0);
    assert_eq!(
        find_by_path(&s, "skipped", &m.codex_app_active).unwrap()["reason"],
        "unchanged"
    );
}

#[test]
fn unterminated_last_line_is_not_in_the_range() {
    let w = World::new();
    let repo = w.repo("r");
    let content = fixture("synthetic/edge/claude-partial-tail.jsonl")
        .replace("/home/dev/my_tool", repo.to_str().unwrap());
    assert!(!content.ends_with('\n'));
    let p = w.write(
        "home/.claude/projects/-r/e5b0d3c8-6f12-4a9e-b7d4-0c8a2f6e1d93.jsonl",
        &content,
        HOURS_2,
    );
    let s = w.dry_run(&[]);
    let item = items(&s, "started")[0];
    let (lines, end) = complete_range(&content);
    assert_eq!(item["toLine"], lines);
    assert_eq!(item["toByte"], end);
    assert!(end < std::fs::metadata(&p).unwrap().len());
}

#[test]
fn awkward_lines_and_empty_files_are_tolerated() {
    let w = World::new();
    let repo = w.repo("r");
    let cwd = repo.to_str().unwrap();
    // BOM, CRLF, blank lines, invalid UTF-8, non-object lines before the record with the fields.
    let mut bytes = b"\xEF\xBB\xBF{\"type\":\"file-history-snapshot\"}\r\n\n[1,2]\n\"str\"\n42\n{\"bad\": \"\xff\xfe\"}\n".to_vec();
    bytes.extend(
        format!("{{\"type\":\"user\",\"sessionId\":\"s-crlf\",\"cwd\":\"{cwd}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\r\n").as_bytes(),
    );
    let odd = w.root().join("home/.claude/projects/-r/s-crlf.jsonl");
    write_aged(&odd, &bytes, HOURS_2);
    let empty = w.write("home/.claude/projects/-r/empty.jsonl", "", HOURS_2);
    let blank = w.write("home/.claude/projects/-r/blank.jsonl", "  \n\n", HOURS_2);
    let s = w.dry_run(&[]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["sessionId"], "s-crlf");
    assert_eq!(started[0]["toLine"], 7);
    assert_eq!(started[0]["toByte"], bytes.len() as u64);
    // Empty and whitespace-only files have no cwd: skipped with a reason, not dropped silently.
    assert_eq!(
        find_by_path(&s, "skipped", &empty).unwrap()["reason"],
        "no-cwd"
    );
    assert_eq!(
        find_by_path(&s, "skipped", &blank).unwrap()["reason"],
        "no-cwd"
    );
}

#[test]
fn claude_config_dir_replaces_the_defaults() {
    let w = World::new();
    let repo = w.repo("r");
    let body = |id: &str| {
        format!(
            "{{\"type\":\"user\",\"sessionId\":\"{id}\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n",
            repo.display()
        )
    };
    w.write(
        "home/.claude/projects/-r/default.jsonl",
        &body("default"),
        HOURS_2,
    );
    // One entry is a config dir, the other its projects/ dir itself.
    w.write("cfg-a/projects/-r/a.jsonl", &body("a"), HOURS_2);
    w.write("cfg-b/projects/-r/b.jsonl", &body("b"), HOURS_2);
    let list = format!(
        "{},{}",
        w.root().join("cfg-a").display(),
        w.root().join("cfg-b/projects").display()
    );
    let out = w
        .almanac()
        .env("CLAUDE_CONFIG_DIR", list)
        .args([
            "capture",
            "sweep",
            "--dry-run",
            "--json",
            "--apps",
            "claude",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = items(&v["summary"], "started")
        .iter()
        .map(|i| i["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec!["a", "b"],
        "the defaults are not scanned when CLAUDE_CONFIG_DIR is set"
    );
    // Unset (or empty) falls back to the defaults.
    let s = w.dry_run(&["--apps", "claude"]);
    assert_eq!(items(&s, "started")[0]["sessionId"], "default");
}

#[test]
fn codex_home_with_sessions_and_archived_sessions() {
    let w = World::new();
    let repo = w.repo("r");
    let meta = |id: &str| {
        format!(
            "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":\"{}\"}}}}\n{{\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"hi\"}}}}\n",
            repo.display()
        )
    };
    w.write(
        "home/.codex/sessions/rollout-2026-01-01T00-00-00-default.jsonl",
        &meta("default"),
        HOURS_2,
    );
    w.write(
        "ch/sessions/2026/01/02/rollout-2026-01-02T00-00-00-live.jsonl",
        &meta("live"),
        HOURS_2,
    );
    w.write(
        "ch/archived_sessions/rollout-2026-01-01T00-00-00-old.jsonl",
        &meta("old"),
        HOURS_2,
    );
    w.write(
        "ch/sessions/2026/01/02/notes.jsonl",
        &meta("any-name"),
        HOURS_2,
    );
    let out = w
        .almanac()
        .env("CODEX_HOME", w.root().join("ch"))
        .args(["capture", "sweep", "--dry-run", "--json", "--apps", "codex"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<&str> = items(&v["summary"], "started")
        .iter()
        .map(|i| i["sessionId"].as_str().unwrap())
        .collect();
    ids.sort();
    // Every .jsonl under sessions/ is a transcript, whatever its name.
    assert_eq!(ids, vec!["any-name", "live", "old"]);
}

#[test]
fn same_file_reached_twice_is_one_candidate() {
    let w = World::new();
    let repo = w.repo("r");
    w.write(
        "home/.claude/projects/-r/s1.jsonl",
        &format!(
            "{{\"type\":\"user\",\"sessionId\":\"s1\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n",
            repo.display()
        ),
        HOURS_2,
    );
    // ~/.config/claude/projects is a symlink to ~/.claude/projects, and a symlink loop sits inside.
    std::fs::create_dir_all(w.home().join(".config/claude")).unwrap();
    std::os::unix::fs::symlink(
        w.home().join(".claude/projects"),
        w.home().join(".config/claude/projects"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        w.home().join(".claude/projects"),
        w.home().join(".claude/projects/-r/loop"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        w.root().join("nowhere.jsonl"),
        w.home().join(".claude/projects/-r/dangling.jsonl"),
    )
    .unwrap();
    let s = w.dry_run(&[]);
    assert_eq!(s["scanned"], 1);
    assert_eq!(s["eligible"], 1);
    assert!(
        s["stats"]["unreadable"].as_u64().unwrap() >= 1,
        "the loop and the dangling link are counted"
    );
}

#[test]
fn the_global_almanac_home_is_not_a_repo() {
    let w = World::new();
    // ALMANAC_HOME is ~/.almanac here: a session whose cwd is under $HOME must not map to $HOME.
    std::fs::create_dir_all(w.home().join(".almanac")).unwrap();
    let p = w.write(
        "home/.claude/projects/-h/s.jsonl",
        &format!(
            "{{\"type\":\"user\",\"sessionId\":\"s\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n",
            w.home().join("code").display()
        ),
        HOURS_2,
    );
    let out = w
        .almanac()
        .env("ALMANAC_HOME", w.home().join(".almanac"))
        .args(["capture", "sweep", "--dry-run", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        find_by_path(&v["summary"], "skipped", &p).unwrap()["reason"],
        "no-almanac-repo"
    );
}

#[test]
fn human_summary_names_counts_and_sessions() {
    let m = mixed();
    let out =
        m.w.almanac()
            .args(["capture", "sweep", "--dry-run"])
            .output()
            .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("capture sweep (dry run):"), "{text}");
    assert!(text.contains("  scanned: 4 sessions"), "{text}");
    assert!(text.contains("  eligible: 2"), "{text}");
    assert!(text.contains("  would start: 2"), "{text}");
    assert!(text.contains("    no-almanac-repo: 1"), "{text}");
    assert!(text.contains("    quiet-window: 1"), "{text}");
    // Words only count skipped transcripts (they are not held for a list no one prints): the counts
    // are the JSON list's, reason by reason.
    let json = m.w.dry_run(&[]);
    let listed = items(&json, "skipped");
    assert!(
        text.contains(&format!("  skipped: {}\n", listed.len())),
        "{text}"
    );
    let mut by_reason: std::collections::BTreeMap<&str, usize> = Default::default();
    for i in &listed {
        *by_reason.entry(i["reason"].as_str().unwrap()).or_default() += 1;
    }
    assert_eq!(by_reason.len(), 2, "{json}");
    for (reason, n) in by_reason {
        assert!(text.contains(&format!("    {reason}: {n}\n")), "{text}");
    }
    assert!(
        text.contains("subagent transcripts (not captured): 3"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "would start claude 11111111-2222-4333-8444-555555555555 in {}: lines 1-",
            m.app.display()
        )),
        "{text}"
    );
}

#[test]
fn bad_flags_get_one_line_errors_naming_the_value() {
    let w = World::new();
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run", "--apps", "claude,foo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("\"foo\"") && err.contains("claude, codex"),
        "{err}"
    );
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run", "--quiet", "5x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("\"5x\"") && err.contains("45m"), "{err}");
}

#[test]
fn a_config_that_does_not_parse_stops_the_sweep() {
    let w = World::new();
    std::fs::create_dir_all(w.almanac_home()).unwrap();
    std::fs::write(
        w.almanac_home().join("config.toml"),
        "[automation\ncapture_since = 1\n",
    )
    .unwrap();
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("config.toml") && err.contains("not valid TOML"),
        "{err}"
    );
}
