//! A first run says what to do next: a sweep that found no transcript names the store directories it
//! looked in and points at `almanac doctor`; one whose sessions belong to no repo points at
//! `almanac init`.

use crate::common::*;
use crate::live::claude_line;

#[test]
fn a_sweep_that_found_nothing_names_the_stores_and_doctor() {
    let w = World::new();
    let s = w.dry_run(&[]);
    assert_eq!(s["scanned"], 0);
    let hints = s["hints"].as_array().unwrap_or_else(|| panic!("{s}"));
    assert_eq!(hints.len(), 1, "{s}");
    let h = hints[0].as_str().unwrap();
    for store in [".claude/projects", ".codex/sessions"] {
        let root = w.home().join(store).display().to_string();
        assert!(h.contains(&format!("{root} (missing)")), "{h}");
    }
    assert!(h.contains("almanac doctor"), "{h}");
    // In words too, after the counts.
    let text = stdout_ok(w.almanac().args(["capture", "sweep", "--dry-run"]));
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("next: no transcripts found")),
        "{text}"
    );
}

#[test]
fn sessions_in_no_repo_point_at_init() {
    let w = World::new();
    let project = w.root().join("work/plain");
    std::fs::create_dir_all(&project).unwrap();
    let sid = "5e551011-aaaa-4bbb-8ccc-0000000000e1";
    w.write(
        &format!("home/.claude/projects/-work-plain/{sid}.jsonl"),
        &claude_line(sid, &project, "hello"),
        HOURS_2,
    );
    let s = w.dry_run(&["--quiet", "0m"]);
    assert_eq!(s["scanned"], 1, "{s}");
    let hints = s["hints"].as_array().unwrap_or_else(|| panic!("{s}"));
    assert!(hints[0].as_str().unwrap().contains("`almanac init`"), "{s}");
    // Once a repo exists, nothing more to say.
    std::fs::create_dir_all(project.join(".almanac")).unwrap();
    let s = w.dry_run(&["--quiet", "0m"]);
    assert!(s.get("hints").is_none(), "{s}");
}
