//! Stores inside projects are a repository's content, and a repository may be a stranger's: a store file
//! git tracks is someone's committed conversation, and a store reached through a link a repository
//! commits may be another project's. Real Aider 0.86.2 and Crush 2025 stores (tests/fixtures) in real git
//! repositories, checked as a user would: what `capture sessions`, a sweep and `doctor` say.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::stores::sessions;
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `almanac init` named relative to the world's root, as a user in a terminal would.
fn init(l: &Live, repo: &Path) {
    let mut cmd = l.w.almanac();
    cmd.args([
        "init",
        repo.strip_prefix(l.w.root()).unwrap().to_str().unwrap(),
    ]);
    stdout_ok(&mut cmd);
}

/// Aider's real log and input history in `repo`.
fn aider_files(repo: &Path) {
    for f in [".aider.chat.history.md", ".aider.input.history"] {
        std::fs::copy(
            Path::new(FIXTURES).join("real/stores/aider").join(f),
            repo.join(f),
        )
        .unwrap();
    }
}

/// The real Crush 2025 database at `<dir>/crush.db`.
fn crush_db(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let db = dir.join("crush.db");
    std::fs::copy(
        Path::new(FIXTURES).join("real/stores/crush-real/.crush/crush.db"),
        &db,
    )
    .unwrap();
    db
}

fn skipped_for<'a>(s: &'a serde_json::Value, reason: &str) -> Vec<&'a serde_json::Value> {
    items(s, "skipped")
        .into_iter()
        .filter(|i| i["reason"] == reason)
        .collect()
}

fn in_repo(rows: &[serde_json::Value], repo: &Path) -> usize {
    rows.iter()
        .filter(|r| r["projectDir"] == repo.to_str().unwrap())
        .count()
}

/// A cloned repository that commits its author's Aider history and Crush database: nothing of it is
/// read as the user's (the sweep, `capture sessions` and `doctor` say why), while the same stores
/// untracked in the user's own repo are read, and a repo the user vouches for is read too.
#[test]
fn a_store_a_clone_commits_is_not_the_users_session() {
    let l = live_world(3);
    let clone = l.w.repo("work/clone");
    git(&clone, &["init", "-q"]);
    aider_files(&clone);
    let db = crush_db(&clone.join(".crush"));
    git(
        &clone,
        &[
            "add",
            ".aider.chat.history.md",
            ".aider.input.history",
            ".crush/crush.db",
        ],
    );
    git(&clone, &["commit", "-qm", "the author's sessions"]);
    init(&l, &clone);
    // The user's own repo: the same stores, not committed (Aider adds `.aider*` to .gitignore).
    let own = &l.repo;
    git(own, &["init", "-q"]);
    std::fs::write(own.join(".gitignore"), ".aider*\n.crush/\n").unwrap();
    aider_files(own);
    crush_db(&own.join(".crush"));
    init(&l, own);

    for app in ["aider", "crush"] {
        let rows = sessions(&l, app);
        assert_eq!(in_repo(&rows, &clone), 0, "{app}: {rows:?}");
        assert!(in_repo(&rows, own) > 0, "{app}: {rows:?}");
    }
    let s = l.w.dry_run(&["--apps", "aider,crush", "--quiet", "0m"]);
    let tracked = skipped_for(&s, "store-tracked-by-git");
    assert_eq!(tracked.len(), 2, "{s}");
    for (t, file) in tracked
        .iter()
        .zip([clone.join(".aider.chat.history.md"), db.clone()])
    {
        assert_eq!(t["transcriptPath"], file.to_str().unwrap(), "{s}");
        assert!(
            t["detail"].as_str().unwrap().contains("read_tracked_in"),
            "{t}"
        );
    }
    assert!(
        items(&s, "started")
            .iter()
            .all(|i| i["repoRoot"] != clone.to_str().unwrap()),
        "{s}"
    );
    // `capture sessions --json` and `doctor` say so too.
    let mut cmd = l.w.almanac();
    cmd.args(["capture", "sessions", "--json", "--apps", "crush"]);
    let listed = json_ok(&mut cmd);
    crate::polish::validate("sessions.schema.json", &listed);
    assert!(
        listed["storeErrors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "store-tracked-by-git" && e["store"] == db.to_str().unwrap()),
        "{listed}"
    );
    let config = l.w.almanac_home().join("config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[automation.capture]\napps = [\"aider\", \"crush\"]\n");
    std::fs::write(&config, &text).unwrap();
    let mut cmd = l.w.almanac();
    cmd.args(["doctor", "--json"]);
    let out = cmd.output().unwrap();
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = d["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "store not read: store-tracked-by-git"
                && c["status"] == "warn"
                && c["detail"]
                    .as_str()
                    .unwrap()
                    .contains(".aider.chat.history.md")),
        "{d}"
    );

    // A repo the user vouches for is read as theirs.
    text.push_str(&format!(
        "\n[stores]\nread_tracked_in = [\"{}\"]\n",
        clone.display()
    ));
    std::fs::write(&config, &text).unwrap();
    let rows = sessions(&l, "aider");
    assert_eq!(in_repo(&rows, &clone), 6, "{rows:?}");
    let s = l.w.dry_run(&["--apps", "aider,crush", "--quiet", "0m"]);
    assert!(skipped_for(&s, "store-tracked-by-git").is_empty(), "{s}");
}

/// A clone that commits `.crush -> ../private/.crush`: the link is not followed, so the private
/// project's conversations are not captured into the clone's wiki (they are the private repo's own,
/// read from there once it is known); a store file that is itself a link is refused as well.
#[test]
fn a_store_behind_a_link_in_a_repo_is_not_followed() {
    let l = live_world(3);
    let private = l.w.root().join("work/private");
    crush_db(&private.join(".crush"));
    let clone = l.w.repo("work/clone");
    std::os::unix::fs::symlink("../private/.crush", clone.join(".crush")).unwrap();
    init(&l, &clone);
    assert!(sessions(&l, "crush").is_empty(), "a linked store was read");
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    let linked = skipped_for(&s, "store-behind-link");
    assert_eq!(linked.len(), 1, "{s}");
    assert_eq!(
        linked[0]["transcriptPath"],
        clone.join(".crush").to_str().unwrap()
    );
    assert!(
        linked[0]["detail"]
            .as_str()
            .unwrap()
            .contains("symbolic link"),
        "{s}"
    );

    // Known in its own right, the private repo's sessions are its own, never the clone's.
    std::fs::create_dir_all(private.join(".almanac/runs")).unwrap();
    init(&l, &private);
    let rows = sessions(&l, "crush");
    assert_eq!(in_repo(&rows, &private), 3, "{rows:?}");
    assert_eq!(in_repo(&rows, &clone), 0, "{rows:?}");

    // A store file that is a link out of its repo is not read either.
    let other = l.w.repo("work/other");
    std::fs::create_dir_all(other.join(".crush")).unwrap();
    std::os::unix::fs::symlink(
        private.join(".crush/crush.db"),
        other.join(".crush/crush.db"),
    )
    .unwrap();
    init(&l, &other);
    let rows = sessions(&l, "crush");
    assert_eq!(in_repo(&rows, &other), 0, "{rows:?}");
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    assert!(
        skipped_for(&s, "store-behind-link")
            .iter()
            .any(|i| i["transcriptPath"] == other.join(".crush/crush.db").to_str().unwrap()),
        "{s}"
    );
}

/// A home directory that is itself a known repo (dotfiles) with `~/.claude` a link elsewhere (as stow
/// makes it): the user's own configuration. Its transcripts are read through the link as always; only one
/// that git tracks there is refused.
#[test]
fn a_store_root_that_only_happens_to_lie_in_a_repo_keeps_its_links() {
    let l = live_world(3);
    let home = l.w.home();
    std::fs::create_dir_all(home.join(".almanac/runs")).unwrap();
    git(&home, &["init", "-q"]);
    let real = l.w.root().join("dotfiles/claude");
    std::fs::create_dir_all(real.join("projects/-home")).unwrap();
    std::os::unix::fs::symlink(&real, home.join(".claude")).unwrap();
    let sid = "5e551011-aaaa-4bbb-8ccc-0000000000d1";
    let t = real.join(format!("projects/-home/{sid}.jsonl"));
    write_aged(
        &t,
        crate::live::claude_line(sid, &home, "tidy my dotfiles").as_bytes(),
        HOURS_2,
    );
    init(&l, &home);
    let s = l.w.dry_run(&["--quiet", "0m"]);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1, "{s}");
    assert_eq!(started[0]["sessionId"], sid, "{s}");
    // A transcript the home's repo tracks is someone's commit: refused; the linked store is still read.
    let tracked_sid = "5e551011-aaaa-4bbb-8ccc-0000000000d2";
    let inside = home.join(".claude-local/projects/-home");
    std::fs::create_dir_all(&inside).unwrap();
    let tracked = inside.join(format!("{tracked_sid}.jsonl"));
    write_aged(
        &tracked,
        crate::live::claude_line(tracked_sid, &home, "a committed session").as_bytes(),
        HOURS_2,
    );
    git(&home, &["add", "-f", tracked.to_str().unwrap()]);
    let mut cmd = l.w.almanac();
    cmd.env(
        "CLAUDE_CONFIG_DIR",
        format!(
            "{},{}",
            home.join(".claude").display(),
            home.join(".claude-local").display()
        ),
    )
    .args(["capture", "sweep", "--dry-run", "--json", "--quiet", "0m"]);
    let s = json_ok(&mut cmd)["summary"].clone();
    let refused = skipped_for(&s, "store-tracked-by-git");
    assert_eq!(refused.len(), 1, "{s}");
    assert_eq!(
        refused[0]["transcriptPath"],
        tracked.to_str().unwrap(),
        "{s}"
    );
    let started: Vec<_> = items(&s, "started")
        .iter()
        .map(|i| i["sessionId"].clone())
        .collect();
    assert_eq!(started, [serde_json::json!(sid)], "{s}");
}

/// In a git work tree whose index git cannot read (an unpacked archive's `.git/` can hold anything), git
/// cannot say whether it tracks a store: it is refused as a tracked one is, saying why.
#[test]
fn a_store_git_cannot_vouch_for_in_a_work_tree_is_not_read() {
    let l = live_world(3);
    let repo = l.w.repo("work/unpacked");
    git(&repo, &["init", "-q"]);
    let db = crush_db(&repo.join(".crush"));
    git(&repo, &["add", ".crush/crush.db"]);
    git(&repo, &["commit", "-qm", "sessions"]);
    std::fs::write(repo.join(".git/index"), b"not an index").unwrap();
    init(&l, &repo);
    assert_eq!(in_repo(&sessions(&l, "crush"), &repo), 0);
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    let refused = skipped_for(&s, "store-tracked-by-git");
    assert_eq!(refused.len(), 1, "{s}");
    assert_eq!(refused[0]["transcriptPath"], db.to_str().unwrap());
    assert!(
        refused[0]["detail"]
            .as_str()
            .unwrap()
            .contains("git could not say whether it tracks it"),
        "{s}"
    );
}

/// A stranger commits only what is read beside the user's own store: Aider's input history (its entries
/// become the user's prompts) or a database's WAL (its frames rewrite the database). The store is not
/// read, the file named.
#[test]
fn a_committed_file_read_with_an_untracked_store_keeps_the_store_unread() {
    let l = live_world(3);
    let repo = l.w.repo("work/clone");
    git(&repo, &["init", "-q"]);
    aider_files(&repo);
    let db = crush_db(&repo.join(".crush"));
    let wal = repo.join(".crush/crush.db-wal");
    std::fs::write(&wal, b"").unwrap();
    std::fs::write(
        repo.join(".gitignore"),
        ".aider.chat.history.md\n.crush/crush.db\n",
    )
    .unwrap();
    git(
        &repo,
        &[
            "add",
            ".gitignore",
            ".aider.input.history",
            ".crush/crush.db-wal",
        ],
    );
    git(&repo, &["commit", "-qm", "planted"]);
    init(&l, &repo);
    let s = l.w.dry_run(&["--apps", "aider,crush", "--quiet", "0m"]);
    let refused = skipped_for(&s, "store-tracked-by-git");
    assert_eq!(refused.len(), 2, "{s}");
    let detail = |i: usize| refused[i]["detail"].as_str().unwrap().to_string();
    assert_eq!(
        refused[0]["transcriptPath"],
        repo.join(".aider.chat.history.md").to_str().unwrap()
    );
    assert!(
        detail(0).contains(".aider.input.history is tracked")
            && detail(0).contains("read with the store"),
        "{s}"
    );
    assert_eq!(refused[1]["transcriptPath"], db.to_str().unwrap());
    assert!(detail(1).contains("crush.db-wal is tracked"), "{s}");
    assert!(items(&s, "started").is_empty(), "{s}");
}
