//! A store is a stranger's data: what its schema, its size or its shape could make almanac do. Every
//! store kind is held to the same bounds of one session (200,000 messages, 64 MiB of them); no SQL a
//! database holds runs; a copy is bounded and a failed one is almanac's own fault, tried again. Each
//! test runs the real binary on real stores (Crush 2025 and Continue 1.5.47 from tests/fixtures, Aider's
//! log format) with what an attacker would add, and checks what the user sees: the store or session
//! named with the bound, the rest captured, memory and disk bounded.

use crate::common::*;
use crate::live::{live_world, Live};
use crate::stores::{by_id, sessions};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// The real Crush 2025 database (three sessions) inside this world's repo, the repo known.
fn crush_world() -> (Live, PathBuf) {
    let l = live_world(3);
    let db = l.repo.join(".crush/crush.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    std::fs::copy(
        Path::new(FIXTURES).join("real/stores/crush-real/.crush/crush.db"),
        &db,
    )
    .unwrap();
    let mut init = l.w.almanac();
    init.args(["init", l.repo.to_str().unwrap()]);
    stdout_ok(&mut init);
    (l, db)
}

/// A second repo with a Claude Code session ready to capture: what must go on whatever a store does.
fn other_repo(l: &Live) -> PathBuf {
    let repo = l.w.repo("work/other");
    let sid = "5e551011-aaaa-4bbb-8ccc-0000000000b2";
    let text = crate::live::claude_line(sid, &repo, "document the other repo");
    l.w.write(
        &format!("home/.claude/projects/-work-other/{sid}.jsonl"),
        &text,
        HOURS_2,
    );
    repo
}

fn dry_run_watched(l: &Live, apps: &str, env: &[(&str, &str)]) -> (serde_json::Value, u64) {
    let mut cmd = l.w.almanac_process();
    cmd.args(["capture", "sweep", "--dry-run", "--json", "--quiet", "0m"])
        .args(["--apps", apps]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (out, code, peak) = output_and_peak_rss(cmd);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    (v["summary"].clone(), peak.unwrap_or(0))
}

/// A dry run of `apps` with one test variable set.
fn dry_run_env(l: &Live, apps: &str, (var, value): (&str, &str)) -> serde_json::Value {
    let mut cmd = l.w.almanac();
    cmd.env(var, value).args([
        "capture",
        "sweep",
        "--dry-run",
        "--json",
        "--quiet",
        "0m",
        "--apps",
        apps,
    ]);
    json_ok(&mut cmd)["summary"].clone()
}

fn details(s: &serde_json::Value, list: &str) -> Vec<String> {
    items(s, list)
        .iter()
        .map(|i| {
            format!(
                "{} {}",
                i["transcriptPath"].as_str().unwrap_or(""),
                i["detail"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn started_in(s: &serde_json::Value, repo: &Path) -> usize {
    items(s, "started")
        .iter()
        .filter(|i| i["repoRoot"] == repo.to_str().unwrap())
        .count()
}

/// A generated column is SQL the store would have almanac run (here 33 MB of JSON made per row from a
/// 372 KB database): the database is refused, naming the column, in bounded memory, and every other
/// repo's capture goes on.
#[test]
fn a_generated_column_is_refused_by_name_and_the_sweep_stays_small() {
    let (l, db) = crush_world();
    let other = other_repo(&l);
    let c = Connection::open(&db).unwrap();
    c.execute_batch(
        "ALTER TABLE messages RENAME COLUMN parts TO parts_source;
         ALTER TABLE messages ADD COLUMN parts TEXT
           GENERATED ALWAYS AS (json_array(printf('%.*c', 33000000, 'x'))) VIRTUAL;",
    )
    .unwrap();
    drop(c);
    let (s, peak_kib) = dry_run_watched(&l, "crush,claude", &[]);
    let why = details(&s, "needsAttention");
    assert!(
        why.iter()
            .any(|d| d.contains(db.to_str().unwrap())
                && d.contains("generated column `messages.parts`")),
        "{s}"
    );
    assert_eq!(started_in(&s, &l.repo), 0, "{s}");
    assert_eq!(started_in(&s, &other), 1, "{s}");
    // Four such rows were 1.9 GB; the binary and its rules are about 30 MiB.
    assert!(peak_kib < 200 * 1024, "peak RSS {peak_kib} KiB");
}

/// A view was refused before; a virtual table of a module SQLite does not ship is code the store names
/// too, and a trigger (which real Crush databases define) is left alone: no read fires one.
#[test]
fn a_virtual_table_of_an_unknown_module_is_refused_and_triggers_are_not() {
    let (l, db) = crush_world();
    let c = Connection::open(&db).unwrap();
    let triggers: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(triggers > 0, "the real database defines triggers");
    let rows = sessions(&l, "crush");
    assert_eq!(rows.len(), 3, "{rows:?}");
    // Planted straight into the schema, as a stranger's file can hold anything.
    c.execute_batch(
        "PRAGMA writable_schema = ON;
         INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql)
           VALUES ('table', 'evil', 'evil', 0, 'CREATE VIRTUAL TABLE evil USING evilmod(x)');
         PRAGMA writable_schema = OFF;",
    )
    .unwrap();
    drop(c);
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    let why = details(&s, "needsAttention");
    assert!(
        why.iter()
            .any(|d| d.contains("the virtual table `evil` of the module `evilmod`")),
        "{s}"
    );
    // Remembered: not read again while it stays as it is...
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    assert_eq!(s["stats"]["storesRead"], 0, "{s}");
    // ...until the user says to forget it.
    let mut cmd = l.w.almanac();
    cmd.args([
        "capture",
        "reset",
        "--json",
        "--store",
        db.to_str().unwrap(),
    ]);
    let v = json_ok(&mut cmd);
    crate::polish::validate("capture-reset.schema.json", &v);
    let forgot = v["forgot"].as_array().unwrap();
    assert_eq!(forgot.len(), 1, "{v}");
    assert!(forgot[0].as_str().unwrap().starts_with("crush: "), "{v}");
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    assert_eq!(s["stats"]["storesRead"], 1, "{s}");
    let mut cmd = l.w.almanac();
    cmd.args([
        "capture",
        "reset",
        "--store",
        l.repo.join("nothing.db").to_str().unwrap(),
    ]);
    assert!(stdout_ok(&mut cmd).contains("remembers no read failure"));
}

/// A sparse WAL of 64 GiB beside a small database is not copied (almanac's disk is not filled), a copy
/// a killed sweep left is removed by the next whatever its age, and a store over the copy budget is
/// refused before a byte is copied.
#[test]
fn a_sparse_wal_is_not_copied_and_leftover_copies_are_removed() {
    let (l, db) = crush_world();
    let wal = db.with_file_name("crush.db-wal");
    let f = std::fs::File::create(&wal).unwrap();
    f.set_len(64 << 30).unwrap();
    drop(f);
    // What a killed sweep leaves: a copy whose reader is gone (its lock file is not held), written now.
    let tmp = l.w.almanac_home().join("state/tmp");
    let left = tmp.join("almanac-sqlite-99999-abcdef123456");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("store.db"), vec![1u8; 1 << 20]).unwrap();
    std::fs::write(left.join("reading.lock"), b"{}").unwrap();
    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    let why = details(&s, "needsAttention");
    assert!(
        why.iter()
            .any(|d| d.contains("its WAL is a sparse file") && d.contains("not copied")),
        "{s}"
    );
    assert!(!left.exists(), "a leftover copy was kept");
    let copied: u64 = walkdir::WalkDir::new(&tmp)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert_eq!(copied, 0, "a copy was left in {}", tmp.display());

    // Without the WAL, a budget smaller than the database refuses it before copying, naming both.
    std::fs::remove_file(&wal).unwrap();
    let s = dry_run_env(&l, "crush", ("ALMANAC_TEST_MAX_COPY_BYTES", "100000"));
    assert!(
        details(&s, "needsAttention")
            .iter()
            .any(|d| d.contains("more than almanac copies of one store")),
        "{s}"
    );
}

/// The private copy fails on almanac's own disk (a file size limit: EFBIG, as a full disk gives
/// ENOSPC): that is not the store's fault. The sweep says so, naming the disk's free space, and the next
/// sweep with room reads the store; before, it was "not read again until it changes".
#[test]
fn a_copy_that_fails_on_almanacs_disk_is_read_on_the_next_sweep_with_room() {
    use std::os::unix::process::CommandExt;
    let (l, db) = crush_world();
    // 2 MB more rows in the real database, so its copy passes the limit and nothing else does.
    let c = Connection::open(&db).unwrap();
    c.execute_batch(
        "CREATE TABLE padding (x BLOB); INSERT INTO padding VALUES (zeroblob(2000000));",
    )
    .unwrap();
    drop(c);
    let mut cmd = l.w.almanac_process();
    cmd.args([
        "capture",
        "sweep",
        "--dry-run",
        "--json",
        "--apps",
        "crush",
        "--quiet",
        "0m",
    ]);
    // SAFETY: setrlimit only changes this child's own limit, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            match libc::setrlimit(libc::RLIMIT_FSIZE, &lim) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &s["summary"];
    let skipped: Vec<&serde_json::Value> = items(s, "skipped")
        .into_iter()
        .filter(|i| i["transcriptPath"] == db.to_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 1, "{s}");
    let detail = skipped[0]["detail"].as_str().unwrap();
    assert_eq!(skipped[0]["reason"], "read-failed");
    assert!(
        detail.contains("almanac's own disk")
            && detail.contains("free")
            && detail.contains("read again on the next sweep"),
        "{detail}"
    );
    assert!(items(s, "needsAttention").is_empty(), "{s}");

    let s = l.w.dry_run(&["--apps", "crush", "--quiet", "0m"]);
    assert!(items(&s, "needsAttention").is_empty(), "{s}");
    assert_eq!(started_in(&s, &l.repo), 3, "{s}");
}

/// A Continue document of 300,000 tiny messages (15 MB) is one session past the bound: it needs
/// attention, named with the bound; the other sessions of the store are read; memory stays bounded.
#[test]
fn a_json_document_of_300000_messages_is_refused_by_its_bound_and_the_rest_is_read() {
    let l = live_world(3);
    let dir = l.w.home().join(".continue/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(FIXTURES).join("real/stores/continue/.continue/sessions");
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path())
            .unwrap()
            .replace(REAL_CWD, l.repo.to_str().unwrap());
        std::fs::write(dir.join(e.file_name()), text).unwrap();
    }
    let big = "be78b65e-74dd-4539-bea4-241a55434035";
    let path = dir.join(format!("{big}.json"));
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let tiny = serde_json::json!({"message": {"role": "user", "content": "x"}, "contextItems": []});
    doc["history"] = serde_json::Value::Array(vec![tiny; 300_000]);
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let (s, peak_kib) = dry_run_watched(&l, "continue", &[]);
    let why = details(&s, "needsAttention");
    assert_eq!(why.len(), 1, "{s}");
    assert!(
        why[0].contains(&format!("session {big}"))
            && why[0].contains("more than 200000 messages, almanac's bound for one session"),
        "{why:?}"
    );
    // The two other sessions are captured.
    assert_eq!(started_in(&s, &l.repo), 2, "{s}");
    assert!(peak_kib < 200 * 1024, "peak RSS {peak_kib} KiB");
    // No view of 300,001 lines was written.
    let views = l.w.almanac_home().join("state/views/continue");
    let largest = walkdir::WalkDir::new(&views)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0);
    assert!(largest < 1 << 20, "a view of {largest} bytes");
}

/// One session of an Aider log holds 300,000 blocks: it needs attention, named; the log's other
/// session is read as usual.
#[test]
fn a_markdown_session_of_300000_blocks_is_refused_and_the_logs_other_sessions_are_read() {
    let l = live_world(3);
    let mut log = String::from("\n# aider chat started at 2026-12-01 09:00:00\n\n");
    for i in 0..150_000 {
        log.push_str(&format!("#### q{i}\n\na{i}\n\n"));
    }
    log.push_str("# aider chat started at 2026-12-02 10:00:00\n\n#### Explain the build.\n\nIt uses cargo.\n\n");
    std::fs::write(l.repo.join(".aider.chat.history.md"), &log).unwrap();
    let mut init = l.w.almanac();
    init.args(["init", l.repo.to_str().unwrap()]);
    stdout_ok(&mut init);
    let (s, peak_kib) = dry_run_watched(&l, "aider", &[]);
    let why = details(&s, "needsAttention");
    assert_eq!(why.len(), 1, "{s}");
    assert!(
        why[0].contains("#2026-12-01 09:00:00") && why[0].contains("more than 200000 messages"),
        "{why:?}"
    );
    assert_eq!(started_in(&s, &l.repo), 1, "{s}");
    assert!(peak_kib < 200 * 1024, "peak RSS {peak_kib} KiB");
    let rows = sessions(&l, "aider");
    let log_path = l.repo.join(".aider.chat.history.md");
    let ok = by_id(
        &rows,
        &format!("{}#2026-12-02 10:00:00", log_path.display()),
    );
    assert_eq!(ok["lastPrompt"], "Explain the build.");
}

/// The bound on a session's bytes holds for a database too, per session: the larger sessions need
/// attention, each named, and the small one is read.
#[test]
fn a_database_session_past_the_byte_bound_is_refused_alone() {
    let (l, _db) = crush_world();
    let s = dry_run_env(&l, "crush", ("ALMANAC_TEST_MAX_SESSION_BYTES", "20000"));
    let why = details(&s, "needsAttention");
    assert!(!why.is_empty(), "{s}");
    assert!(
        why.iter()
            .all(|d| d
                .contains("more than 20000 bytes of messages, almanac's bound for one session")),
        "{why:?}"
    );
    // Each named by its id; the one under the bound is read and would be captured.
    assert!(why.iter().all(|d| d.contains(": session ")), "{why:?}");
    assert_eq!(started_in(&s, &l.repo) + why.len(), 3, "{s}");
    assert!(started_in(&s, &l.repo) >= 1, "{s}");
}
