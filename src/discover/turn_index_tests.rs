//! The turn index's own tests: the prompts read back from the file, the tail hashes.
use super::*;

fn entry(ino: u64, first: Option<&str>, last: Option<&str>) -> IndexEntry {
    IndexEntry {
        dev: 1,
        ino,
        path_hash: 7,
        app: "claude".into(),
        size: 10,
        mtime_ns: 20,
        tail: None,
        checkpoint: Checkpoint {
            user_turns: 2,
            first_prompt: first.map(Into::into),
            last_prompt: last.map(Into::into),
            ..Checkpoint::default()
        },
    }
}

/// Rows read their prompts back from the index file: from where the load found each JSON string
/// (borrowed when it has no escape, searched for when it has), or from the whole line when the two
/// are not where serde_json writes them. Every way gives the prompts the entry holds.
#[test]
fn a_rows_prompts_are_read_back_from_the_index_file_as_the_entry_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("turn-index.jsonl");
    let escaped = "line one\nline \"two\" \\ tab\t é";
    let entries = [
        entry(1, Some("plain first"), Some("plain last")),
        entry(2, Some(escaped), Some("last, with \"quotes\"")),
        entry(3, None, None),
        entry(4, Some("only one"), Some("only one")),
    ];
    let mut text = serde_json::to_string(&Header {
        almanac_turn_index: FORMAT,
        fingerprint: "f".into(),
    })
    .unwrap();
    for e in &entries {
        text.push('\n');
        text.push_str(&serde_json::to_string(e).unwrap());
    }
    // Written by hand, the latest prompt before the first and with spaces: read from the line.
    text.push_str(concat!(
        "\n{\"checkpoint\": {\"lastPrompt\" : \"z last\", \"offset\":0,\"line\":0,\"userTurns\":1,",
        "\"totalTurns\":1, \"firstPrompt\": \"a first\"}, \"dev\":1,\"ino\":5,\"pathHash\":7,",
        "\"app\":\"claude\",\"size\":10,\"mtimeNs\":20,\"tail\":\"\"}\n"
    ));
    std::fs::write(&file, text).unwrap();
    let index = TurnIndex::load(&file, "f", &["claude"]);
    assert_eq!(index.entries.len(), 5);
    let got = |ino: u64| {
        let e = index.entries.iter().find(|e| e.ino == ino).unwrap();
        let p = e.prompts();
        let how = match p {
            Prompts::Indexed { .. } => "indexed",
            Prompts::Line { .. } => "line",
            _ => "other",
        };
        let (a, b) = index.prompts(&p);
        (
            how,
            a.as_deref().map(String::from),
            b.as_deref().map(String::from),
        )
    };
    let s = |t: &str| Some(t.to_string());
    assert_eq!(got(1), ("indexed", s("plain first"), s("plain last")));
    assert_eq!(got(2), ("indexed", s(escaped), s("last, with \"quotes\"")));
    assert_eq!(got(3), ("indexed", None, None));
    assert_eq!(got(4), ("indexed", s("only one"), s("only one")));
    assert_eq!(got(5), ("line", s("a first"), s("z last")));
    // An entry of an app no rule set has is not kept.
    assert!(TurnIndex::load(&file, "f", &["codex"]).entries.is_empty());
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct T {
    #[serde(with = "super::tail_hex")]
    tail: Option<[u8; 32]>,
}

#[test]
fn a_tail_is_written_as_hex_and_only_64_hex_digits_or_nothing_are_read() {
    let some = T {
        tail: Some(std::array::from_fn(|i| (i * 37) as u8)),
    };
    let text = serde_json::to_string(&some).unwrap();
    assert_eq!(
        text,
        format!(
            r#"{{"tail":"{}"}}"#,
            crate::util::ids::hex(&some.tail.unwrap())
        )
    );
    assert_eq!(serde_json::from_str::<T>(&text).unwrap(), some);
    assert_eq!(
        serde_json::to_string(&T { tail: None }).unwrap(),
        r#"{"tail":""}"#
    );
    assert_eq!(
        serde_json::from_str::<T>(r#"{"tail":""}"#).unwrap(),
        T { tail: None }
    );
    for bad in [
        "abc",
        &"g".repeat(64),
        &"a".repeat(66),
        "+".repeat(64).as_str(),
    ] {
        let line = format!(r#"{{"tail":"{bad}"}}"#);
        assert!(serde_json::from_str::<T>(&line).is_err(), "{bad}");
    }
}
