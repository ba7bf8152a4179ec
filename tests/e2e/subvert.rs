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
