//! Neither the repository nor the capture agent can subvert capture: what a stranger's commit or an
//! injected agent can write (under `.almanac/`, in `.git/`, in a transcript) is checked, escaped or
//! refused, and almanac's own state survives it.

use crate::common::*;
use crate::live::live_world;

/// Bytes that act on a terminal: OSC 52 (write the clipboard), clear the screen, a C1 CSI, a
/// right-to-left override.
const EVIL: &str = "\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J\u{9b}31m\u{202e}";

fn assert_no_terminal_controls(what: &str, out: &[u8]) {
    let text = String::from_utf8_lossy(out);
    for bad in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
        assert!(!text.contains(bad), "{what} printed {:?} raw:\n{text}", bad);
    }
}

#[test]
fn transcript_and_ledger_text_reaches_the_terminal_escaped() {
    let l = live_world(3);
    let sid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    let prompt = format!("look at this {EVIL} please");
    let line = serde_json::json!({
        "type": "user", "sessionId": sid, "cwd": l.repo, "timestamp": "2026-11-29T10:00:00.000Z",
        "message": {"role": "user", "content": prompt}
    });
    write_aged(&l.transcript, format!("{line}\n").as_bytes(), HOURS_2);
    // A ledger planted in the repo whose entry's error holds escapes too.
    std::fs::write(
        l.repo.join(".almanac/runs/capture-ledger.json"),
        serde_json::to_vec_pretty(&serde_json::json!({
            "version": 1, "updatedAt": "2026-11-29T00:00:00.000Z",
            "entries": {format!("claude:{sid}"): {
                "path": l.transcript, "app": "claude", "sessionId": sid, "status": "needs_attention",
                "lastCapturedSize": 0, "lastCapturedLine": 0, "lastCapturedPrefixHash": "sha256:x",
                "attempts": 0, "attention": "prefix-mismatch", "lastError": format!("planted {EVIL}")
            }}
        }))
        .unwrap(),
    )
    .unwrap();
    let path = l.transcript.display().to_string();
    let repo = l.repo.display().to_string();
    for args in [
        vec!["capture", "turns", path.as_str()],
        vec!["capture", "sessions", "--apps", "claude"],
        vec!["capture", "status", "--repo", repo.as_str()],
    ] {
        let out =
            l.w.almanac()
                .current_dir(&l.repo)
                .args(&args)
                .output()
                .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_no_terminal_controls(&format!("{args:?} stdout"), &out.stdout);
        assert_no_terminal_controls(&format!("{args:?} stderr"), &out.stderr);
        let text = String::from_utf8_lossy(&out.stdout);
        if args[1] != "sessions" {
            assert!(
                text.contains("\\x1b]52;c;ZXZpbA==\\x07"),
                "{args:?} shows it escaped:\n{text}"
            );
        }
    }
    // JSON output carries the text itself, escaped by JSON.
    let v = json_ok(
        l.w.almanac()
            .args(["capture", "turns", path.as_str(), "--json"]),
    );
    assert!(v.to_string().contains("ZXZpbA=="), "{v}");
    assert!(v.to_string().contains("\\u001b]52"), "{v}");
}

#[test]
fn only_a_prompt_ending_with_the_marker_line_is_almanacs_own() {
    let w = World::new();
    let repo = w.repo("work/app");
    let write = |sid: &str, text: &str| {
        let line = serde_json::json!({
            "type": "user", "sessionId": sid, "cwd": repo, "timestamp": "2026-11-29T10:00:00.000Z",
            "message": {"role": "user", "content": text}
        });
        w.write(
            &format!("home/.claude/projects/-work-app/{sid}.jsonl"),
            &format!("{line}\n"),
            HOURS_2,
        )
    };
    // Quoting the marker (a user asking about it, a pasted log) does not make a session almanac's.
    let quoted = write(
        "5e551011-aaaa-4bbb-8ccc-000000000011",
        "why do my logs show `almanac-capture-run: run_20261129T000000000Z_abcd1234` lines?\nexplain",
    );
    let inline = write(
        "5e551011-aaaa-4bbb-8ccc-000000000012",
        "grep says: almanac-capture-run: run_20261129T000000000Z_abcd1234",
    );
    // The prompt almanac writes ends with the marker line: excluded even with no run record naming it.
    let ours = write(
        "5e551011-aaaa-4bbb-8ccc-000000000013",
        "Update the wiki.\n\nThe repository is /x.\n\nalmanac-capture-run: run_20261129T000000000Z_abcd1234\n",
    );
    let s = w.dry_run(&["--quiet", "0m"]);
    for p in [&quoted, &inline] {
        assert!(
            find_by_path(&s, "started", p).is_some(),
            "{}: {s}",
            p.display()
        );
    }
    assert_eq!(
        find_by_path(&s, "skipped", &ours).unwrap_or_else(|| panic!("{s}"))["reason"],
        "excluded-by-rule"
    );
}

#[test]
fn a_same_size_rewrite_with_a_newer_mtime_is_examined() {
    let l = live_world(3);
    let first = l.lines(0..3);
    write_aged(&l.transcript, first.as_bytes(), HOURS_2);
    let s = l.summary();
    assert_eq!(items(&s, "started").len(), 1, "{s}");
    // Only touched: the content is the same, so it is still unchanged (verified once, then remembered).
    set_age(&l.transcript, std::time::Duration::from_secs(3600));
    let s = l.summary();
    assert_eq!(
        find_by_path(&s, "skipped", &l.transcript).unwrap_or_else(|| panic!("{s}"))["reason"],
        "unchanged"
    );
    // The last captured line replaced by a new one of the same length: the file's size is the captured
    // size, but it is not unchanged.
    let rewritten = first.replace("message 2", "message X");
    assert_eq!(rewritten.len(), first.len());
    write_aged(
        &l.transcript,
        rewritten.as_bytes(),
        std::time::Duration::from_secs(1800),
    );
    let s = l.summary();
    assert!(
        find_by_path(&s, "skipped", &l.transcript).is_none(),
        "not skipped as unchanged: {s}"
    );
    let item = find_by_path(&s, "needsAttention", &l.transcript).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(item["reason"], "prefix-mismatch", "{s}");
    assert_eq!(l.calls().len(), 1, "nothing captured twice");
}
