use super::*;
use crate::turns::{Keep, PartSummary};

fn found(path: &std::path::Path, app: &str) -> FoundFile {
    let meta = std::fs::metadata(path).unwrap();
    FoundFile {
        app: app.into(),
        path: path.to_path_buf(),
        rel_offset: 0,
        size: meta.len(),
        mtime: meta.modified().unwrap(),
        file_id: (0, 0),
    }
}

fn settings() -> Settings {
    Settings {
        now: chrono::Utc::now(),
        capture_since: None,
        quiet_flag: None,
        quiet_config: None,
        max_attempts: 3,
    }
}

fn text(s: &[Option<PartSummary>]) -> String {
    format!("{s:?}")
}

/// Counts and measures a part while finding its lines, from a cursor after `lines` lines, cutting it where
/// a chunk's rendering reaches `chunk` bytes, and reads the same part's turns and renderings from the
/// file afterwards: the two agree chunk by chunk, and on whether the part holds a turn.
fn agree(rule: &RuleSet, file: &FoundFile, lines: u64, chunk: u64) -> usize {
    let bytes: u64 = std::fs::read(&file.path)
        .unwrap()
        .split_inclusive(|b| *b == b'\n')
        .take(lines as usize)
        .map(|l| l.len() as u64)
        .sum();
    let copied = (lines > 0).then(|| super::super::overlap::Copied {
        session_id: "s".into(),
        from: 0,
        bytes,
        lines,
        last_id: String::new(),
    });
    let what = format!(
        "{} from line {lines}, chunks of {chunk}",
        file.path.display()
    );
    let mut chunks = 0;
    for keep in [Keep::Counts, Keep::Summary] {
        let opts = counting_options(keep);
        let mut c = Counting::new(rule, &opts).unwrap();
        let shared = super::super::overlap::Shared {
            copied: copied.clone(),
            until: None,
        };
        let out = decide_range(
            rule,
            file,
            None,
            shared,
            &settings(),
            false,
            crate::sweep::measure::Sizing {
                limit: chunk,
                always: true,
            },
            Some(&mut c),
            &mut 0,
        )
        .unwrap();
        let RangeOutcome::Capture(r) = out else {
            return 0;
        };
        let (first, counted) = c.finish(&r).expect(&what);
        let (read, sizes): (Vec<Option<PartSummary>>, Vec<Option<u64>>) = chunks_of(&r)
            .iter()
            .map(|ch| chunk_turns(rule, file, ch, keep, true, &mut 0).unwrap())
            .unzip();
        assert_eq!(text(&counted), text(&read), "{what}");
        // Each chunk's rendering measured with the lines is the one its run's read measures.
        let sizes: Option<Vec<u64>> = sizes.into_iter().collect();
        assert_eq!(r.rendered, sizes, "{what}");
        let whole = new_part_turns(rule, file, &r, r.to_byte, true, &mut 0).unwrap();
        assert_eq!(Some(first), whole.map(|p| p.turns), "{what}");
        chunks = read.len();
    }
    chunks
}

/// Turns counted in the pass that finds a part's lines (a sweep whose budget starts everything) are
/// those read from the file once the budget is spent: on every fixture transcript, cut into chunks of
/// one line up to one chunk, from the start and from a cursor partway.
#[test]
fn turns_counted_with_the_lines_are_those_read_again_on_every_fixture() {
    let catalog = crate::rules::load(&[]).unwrap();
    let mut parts = 0;
    for (path, i) in crate::util::testing::fixture_transcripts(&catalog) {
        let rule = &catalog.sets[i];
        let file = found(&path, &rule.id);
        let n = std::fs::read(&path).unwrap().split(|b| *b == b'\n').count() as u64;
        for chunk in [1, 700, 5000, 1 << 40] {
            for lines in [0, 1, n / 2] {
                parts += agree(rule, &file, lines, chunk);
            }
        }
    }
    assert!(parts > 500, "only {parts} chunks compared");
}

/// A line across the scan's read buffers, CRLF line ends, a BOM, a line over `MAX_LINE_BYTES` (given
/// empty, as the line reader gives it) and a partial last line: counted as read again.
#[test]
fn lines_across_buffers_crlf_a_bom_and_an_oversized_line_count_as_read_again() {
    let catalog = crate::rules::load(&[]).unwrap();
    let rule = catalog.get("claude").unwrap();
    let user =
        |t: &str| format!(r#"{{"type":"user","message":{{"role":"user","content":"{t}"}}}}"#);
    let answer =
        r#"{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"ok"}]}}"#;
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(150_000);
    let huge = "y".repeat(crate::util::lines::MAX_LINE_BYTES);
    let cases = [
        (
            "long",
            format!("{}\n{answer}\n{}\n{answer}\n", user(&long), user("b")),
        ),
        (
            "crlf",
            format!("\u{feff}{}\r\n{answer}\r\n{}\r\n", user("a"), user("b")),
        ),
        ("bom", format!("\u{feff}{}\n{answer}\n", user("a"))),
        (
            "huge",
            format!("{}\n{answer}\n{}\n{answer}\n", user(&huge), user("c")),
        ),
        ("partial", format!("{}\n{answer}\n{}", user("a"), user("b"))),
    ];
    for (name, body) in cases {
        let path = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&path, &body).unwrap();
        let file = found(&path, "claude");
        let chunk_sizes: &[u64] = match name {
            "huge" => &[1 << 40],
            _ => &[1, 100, 1 << 40],
        };
        for chunk in chunk_sizes {
            for lines in [0, 1] {
                agree(rule, &file, lines, *chunk);
            }
        }
    }
}
