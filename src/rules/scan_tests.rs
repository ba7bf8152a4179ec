//! The scanner against serde_json: the same lines accepted as a whole parse accepts, and the same
//! pruned value as the serde-visitor parse it replaced, on every line of every fixture, on those lines
//! cut and broken, and on the corners of the JSON grammar.

use super::super::needs::Need;
use super::super::pruned::parse_pruned_value as parse_pruned;
use super::super::pruned_serde::parse_pruned_serde;
use crate::util::lines::parse_object;

/// Every need the built-in rules derive (turns and heads), and two simple ones.
fn needs() -> Vec<Need> {
    let catalog = crate::rules::load(&[]).unwrap();
    let mut out = vec![Need::presence()];
    for s in &catalog.sets {
        out.push(s.head_reads.clone());
        out.extend(s.turns.as_ref().map(|t| t.reads.clone()));
    }
    out.dedup();
    out
}

/// `parse_pruned` accepts `line` exactly when a whole parse does, and then gives what the serde
/// visitor gave.
fn agree(line: &[u8], needs: &[Need]) {
    let whole = parse_object(line).is_some();
    for n in needs {
        let got = parse_pruned(line, n);
        assert_eq!(
            got.is_some(),
            whole,
            "accepts differently: {}",
            String::from_utf8_lossy(line)
        );
        if whole {
            assert_eq!(
                got,
                parse_pruned_serde(line, n),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}

fn fixture_lines() -> Vec<Vec<u8>> {
    let catalog = crate::rules::load(&[]).unwrap();
    let mut lines = Vec::new();
    for (f, _) in crate::util::testing::fixture_transcripts(&catalog) {
        let bytes = std::fs::read(&f).unwrap();
        lines.extend(bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec));
    }
    lines
}

#[test]
fn every_fixture_line_scans_to_what_serde_gave() {
    let needs = needs();
    let lines = fixture_lines();
    assert!(lines.len() > 1000, "{} lines", lines.len());
    for l in &lines {
        agree(l, &needs);
    }
}

/// Each line cut short and broken at spread-out places: a string left open, a quote, a backslash, a
/// control character, a byte that is not UTF-8, a stray bracket or comma.
#[test]
fn broken_fixture_lines_are_refused_as_a_whole_parse_refuses_them() {
    let needs = needs();
    let mut tried = 0;
    for l in fixture_lines().iter().filter(|l| l.len() > 2) {
        let step = (l.len() / 3).max(1);
        for at in (1..l.len()).step_by(step) {
            agree(&l[..at], &needs);
            for b in [b'"', b'\\', 0x01, 0xc3, b'}', b','] {
                let mut m = l.clone();
                m[at] = b;
                agree(&m, &needs);
                tried += 1;
            }
        }
    }
    assert!(tried > 5_000, "{tried}");
}

#[test]
fn the_corners_of_the_grammar_are_decided_as_serde_decides_them() {
    let needs = needs();
    let deep = |n: usize, kept: bool| {
        let key = if kept { "message" } else { "zzz" };
        format!(
            "{{\"type\":\"user\",\"{key}\":{}1{}}}",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    let mut cases: Vec<String> = Vec::new();
    for n in 124..=130 {
        cases.push(deep(n, true));
        cases.push(deep(n, false));
        cases.push(format!(
            "{{\"type\":\"user\",\"zzz\":{}{}}}",
            "{\"a\":".repeat(n),
            "}".repeat(n)
        ));
    }
    let values = [
        "1e400",
        "-1e400",
        "1e-400",
        "-0",
        "0",
        "01",
        "1.",
        ".5",
        "-",
        "1E5",
        "1e+5",
        "1e",
        "2.5e-3",
        "18446744073709551616",
        "-9223372036854775809",
        "true",
        "tru",
        "nul",
        "null",
        "falsey",
        "\"\"",
        "\"\\u00e9\"",
        "\"\\ud83d\\ude00\"",
        "\"\\ud800\"",
        "\"\\udc00x\"",
        "\"\\u12\"",
        "\"\\x\"",
        "\"tab\there\"",
        "\"é\"",
        "[]",
        "{}",
        "[1,]",
        "{\"a\":1,}",
        "[,1]",
        "{\"a\" 1}",
        "{1:2}",
        "[1 2]",
        "\"\\/\"",
        "\"a\\\\\"",
    ];
    for v in values {
        for key in ["message", "zzz", "type", "timestamp"] {
            cases.push(format!("{{\"{key}\":{v}}}"));
            cases.push(format!("{{\"{key}\" : {v} , \"type\":\"user\"}}"));
        }
    }
    let long = format!("{{\"zzz\":{}}}", "9".repeat(400));
    cases.push(long);
    cases.extend(
        [
            "{\"ty\\u0070e\":\"user\",\"message\":{\"content\":\"hi\"}}",
            "{\"type\":\"user\",\"type\":\"assistant\"}",
            "{\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},\"message\":1}",
            " \t{\"type\":\"user\"}\r ",
            "\u{c}{\"type\":\"user\"}",
            "{\"type\":\"user\"} x",
            "{\"type\":\"user\"}{}",
            "",
            "   ",
            "[]",
            "\"just a string\"",
            "{\"type\":\"us\u{1}er\"}",
            "{\"zzz\":\"\u{7f}\"}",
        ]
        .map(str::to_string),
    );
    for c in &cases {
        agree(c.as_bytes(), &needs);
    }
    // Bytes that are not UTF-8, inside a skipped and a kept string, and outside any string.
    for raw in [
        &b"{\"zzz\":\"\xff\"}"[..],
        b"{\"type\":\"\xc3\"}",
        b"{\"zzz\":\"\xed\xa0\x80\"}",
        b"{\"zzz\":\"\xf0\x9f\x98\x80\"}",
        b"{\"zzz\":\"abcdefgh\xc3\xa9ijklmnop\"}",
        b"{\"zzz\":1\xc3\xa9}",
    ] {
        agree(raw, &needs);
    }
}

#[test]
fn a_string_ends_where_serde_says_whatever_block_its_stop_falls_in() {
    // The scan reads a string 16 bytes at a time: every kind of byte that stops or marks it, at every
    // place in and around the first three blocks, in a kept and a skipped string.
    let needs = needs();
    let marks: [&[u8]; 9] = [
        b"\"",
        b"\\n",
        b"\\\"",
        b"\\u00e9",
        b"\\x",
        b"\x01",
        b"\x1f",
        "é".as_bytes(),
        b"\xff",
    ];
    let mut tried = 0;
    for len in 0..50 {
        for at in 0..=len {
            for mark in marks {
                let mut text = vec![b'a'; len];
                text.splice(at..at, mark.iter().copied());
                for key in ["type", "zzz"] {
                    let mut line = format!("{{\"{key}\":\"").into_bytes();
                    line.extend(&text);
                    line.extend(b"\",\"message\":{\"content\":\"x\"}}");
                    agree(&line, &needs);
                    tried += 1;
                }
            }
        }
    }
    assert!(tried > 20_000, "{tried}");
}
