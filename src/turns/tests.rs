//! Turn reading: cuts, merges, skips, resumed reads and what each `Keep` keeps.

use super::*;

#[test]
fn cuts_on_character_boundaries() {
    let s = "é".repeat(2000); // 4000 bytes
    let (c, was) = cut(&s, 2048);
    assert!(was && c.len() <= 2048 && c.len() == 2048);
    let (c, was) = cut(&"aé".repeat(1000), 2048);
    assert!(was && c.len() == 2047 && c.is_char_boundary(c.len()));
    assert_eq!(cut("short", 10), ("short".into(), false));
}

/// A one-app rule set whose `turns` section holds `settings` (YAML lines indented two spaces).
fn rule_set(settings: &str) -> crate::rules::RuleSet {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "id: t\nstores: [ {{ name: s, roots: [ {{ default: [\"/nonexistent\"] }} ], include: [\"*.jsonl\"] }} ]\nfields: {{ session_id: [ {{ value: \"$.id\" }} ], cwd: [ {{ value: \"$.cwd\" }} ] }}\nturns:\n{settings}  user: [ {{ when: {{ equals: {{ path: \"$.t\", value: u }} }}, text: [\"$.text\"] }} ]\n  assistant: [ {{ when: {{ equals: {{ path: \"$.t\", value: a }} }}, text: [\"$.text\"] }} ]\n"
    );
    std::fs::write(dir.path().join("t.yaml"), src).unwrap();
    let mut catalog = crate::rules::load(&[dir.path().to_path_buf()]).unwrap();
    let i = catalog.sets.iter().position(|s| s.id == "t").unwrap();
    catalog.sets.swap_remove(i)
}

fn user_prompts(rule: &crate::rules::RuleSet, transcript: &str) -> Vec<String> {
    let turns = rule.turns.as_ref().unwrap();
    let t = extract(
        rule,
        turns,
        transcript.as_bytes(),
        1,
        0,
        &Options::default(),
    )
    .unwrap();
    t.records.iter().filter_map(|r| r.user.clone()).collect()
}

#[test]
fn merge_repeated_prompts_makes_a_prompt_written_twice_one_turn() {
    let transcript = "{\"t\":\"u\",\"text\":\"hi\"}\n{\"t\":\"u\",\"text\":\"hi\"}\n{\"t\":\"a\",\"text\":\"yo\"}\n{\"t\":\"u\",\"text\":\"hi\"}\n";
    let on = rule_set("  merge_repeated_prompts: true\n");
    // The third "hi" follows an answer: a new turn either way.
    assert_eq!(user_prompts(&on, transcript), ["hi", "hi"]);
    for off in ["  merge_repeated_prompts: false\n", ""] {
        assert_eq!(user_prompts(&rule_set(off), transcript), ["hi", "hi", "hi"]);
    }
}

#[test]
fn a_prompt_resent_after_a_resends_prompt_record_is_the_running_turns() {
    let rule = rule_set("  resends_prompt: { equals: { path: \"$.t\", value: ctx } }\n");
    let lines = |l: &[&str]| l.iter().map(|s| format!("{s}\n")).collect::<String>();
    let (u, a, ctx) = (
        |t: &str| format!("{{\"t\":\"u\",\"text\":\"{t}\"}}"),
        r#"{"t":"a","text":"working"}"#,
        r#"{"t":"ctx"}"#,
    );
    // After tool calls, the context record and the same prompt again: one turn.
    let resent = lines(&[&u("go"), a, a, ctx, &u("go"), a, &u("next")]);
    assert_eq!(user_prompts(&rule, &resent), ["go", "next"]);
    // Without the context record the same text again is a prompt of its own (typed twice).
    let typed_twice = lines(&[&u("go"), a, &u("go")]);
    assert_eq!(user_prompts(&rule, &typed_twice), ["go", "go"]);
    // Only the first prompt record after it decides: another prompt is one, and so is a later "go".
    let other = lines(&[&u("go"), a, ctx, &u("stop"), a, &u("go")]);
    assert_eq!(user_prompts(&rule, &other), ["go", "stop", "go"]);
    // With no open turn, a prompt after it is a prompt.
    assert_eq!(user_prompts(&rule, &lines(&[ctx, &u("go")])), ["go"]);
    // Without `resends_prompt` the resent prompt is a second prompt.
    assert_eq!(user_prompts(&rule_set(""), &resent), ["go", "go", "next"]);
}

#[test]
fn a_skip_starts_no_earlier_than_its_earliest_line() {
    let skip = |extra: &str| {
        format!("  skip:\n    - from: {{ equals: {{ path: \"$.t\", value: meta }} }}\n      until: {{ equals: {{ path: \"$.t\", value: own }} }}\n{extra}")
    };
    // Line 1 is the file's own meta record; lines 4-6 are a copied region.
    let transcript = "{\"t\":\"meta\"}\n{\"t\":\"u\",\"text\":\"first\"}\n{\"t\":\"own\"}\n{\"t\":\"meta\"}\n{\"t\":\"u\",\"text\":\"copied\"}\n{\"t\":\"own\"}\n{\"t\":\"u\",\"text\":\"last\"}\n";
    let from_two = rule_set(&skip("      earliest_line: 2\n"));
    assert_eq!(user_prompts(&from_two, transcript), ["first", "last"]);
    for anywhere in [skip("      earliest_line: 1\n"), skip("")] {
        assert_eq!(user_prompts(&rule_set(&anywhere), transcript), ["last"]);
    }
}

/// Every fixture transcript read in two parts, cut after each of its lines in turn (a file of over 100
/// lines after 100 of them, spread evenly, and its first and last 20: each cut reads the whole file),
/// the second part going on from the first one's checkpoint: the same counts as one read of the whole
/// file.
#[test]
fn a_read_resumed_from_a_checkpoint_counts_what_one_whole_read_counts() {
    let catalog = crate::rules::load(&[]).unwrap();
    let files = crate::util::testing::fixture_transcripts(&catalog);
    assert!(files.len() >= 50, "{} fixtures", files.len());
    for (f, i) in files {
        let rule = &catalog.sets[i];
        let turns = rule.turns.as_ref().unwrap();
        let bytes = std::fs::read(&f).unwrap();
        let read = |from: usize, to: usize, line: u64, resume: Option<Checkpoint>| {
            let opts = Options {
                resume,
                ..Options::default()
            };
            extract(rule, turns, &bytes[from..to], line + 1, 0, &opts).unwrap()
        };
        let whole = read(0, bytes.len(), 0, None);
        let ends: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        let step = ends.len().div_ceil(100).max(1);
        let cuts = ends
            .iter()
            .enumerate()
            .filter(|(n, _)| n % step == 0 || *n < 20 || n + 20 >= ends.len());
        for (n, end) in cuts {
            let first = read(0, *end, 0, None);
            let c = first.checkpoint.clone();
            assert_eq!(
                (c.offset, c.line),
                (*end as u64, n as u64 + 1),
                "{}",
                f.display()
            );
            let rest = read(*end, bytes.len(), c.line, Some(c));
            let key = |t: &Turns| {
                let c = &t.checkpoint;
                let prompts = (c.first_prompt.clone(), c.last_prompt.clone());
                (t.user_turns, t.total_turns, c.offset, prompts)
            };
            let (got, want) = (key(&rest), key(&whole));
            assert_eq!(got, want, "{} cut after line {}", f.display(), n + 1);
        }
    }
}

/// Keeping fewer records changes no count, no tool and (below the 500-turn bound) no summary.
#[test]
fn summary_and_counts_reads_agree_with_a_full_read_on_every_fixture() {
    let catalog = crate::rules::load(&[]).unwrap();
    for (f, i) in crate::util::testing::fixture_transcripts(&catalog) {
        let rule = &catalog.sets[i];
        let turns = rule.turns.as_ref().unwrap();
        let bytes = std::fs::read(&f).unwrap();
        let read = |keep: Keep| {
            let opts = Options {
                keep,
                ..Options::default()
            };
            extract(rule, turns, &bytes[..], 1, 0, &opts).unwrap()
        };
        let all = read(Keep::All);
        let key = |t: &Turns| {
            let s = summarize(t);
            (s.user_turns, s.turns, s.first_user, s.last_user, s.tools)
        };
        assert!(all.records.len() < MAX_TURNS);
        let summary = read(Keep::Summary);
        assert!(summary.records.len() <= 2);
        assert_eq!(key(&summary), key(&all), "{}", f.display());
        assert_eq!(summary.checkpoint, all.checkpoint, "{}", f.display());
        // The checkpoint's prompts are the first and the last turn record's, cut.
        let prompts: Vec<String> = all
            .records
            .iter()
            .filter_map(|r| r.user.as_deref())
            .map(|u| cut(u, CHECKPOINT_PROMPT_BYTES).0)
            .collect();
        let c = &all.checkpoint;
        let first = prompts.first().map(String::as_str);
        assert_eq!(c.first_prompt.as_deref(), first, "{}", f.display());
        let last = prompts.last().map(String::as_str);
        assert_eq!(c.last_prompt.as_deref(), last, "{}", f.display());
        let counts = read(Keep::Counts);
        assert!(counts.records.is_empty() && counts.tools.is_empty());
        assert_eq!(
            (counts.user_turns, counts.total_turns),
            (all.user_turns, all.total_turns),
            "{}",
            f.display()
        );
        assert_eq!(counts.checkpoint, all.checkpoint, "{}", f.display());
    }
}
