//! A record parsed into only what the rules read (`rules::needs`; the turn reader and the head reader): members no rule reads are skipped
//! by the parser without being built (`rules::scan`), so a 50 KB tool result costs a scan, not a tree.

use super::doc::{Doc, Pruned};
use super::needs::Need;
use super::scan::{scan, Scan};

/// The line as a JSON object pruned to `need`, or None when it is not one (as `parse_object`): the
/// line must be valid UTF-8 and valid JSON throughout, skipped members included. Its text without
/// escapes is borrowed from the line (`rules::doc`).
pub fn parse_pruned<'a>(bytes: &'a [u8], need: &Need) -> Option<Pruned<'a>> {
    let whole = || crate::util::lines::parse_object(bytes).map(Pruned::from_value);
    if matches!(need, Need::All) {
        return whole();
    }
    match scan(bytes, need) {
        Ok(v) => v.is_object().then_some(v),
        Err(Scan::Invalid) => None,
        // A `\uD800`-`\uDFFF` escape: rare, and serde_json decides it.
        Err(Scan::Unsure) => whole(),
    }
}

/// `parse_pruned` as a `serde_json::Value`, for comparing with serde_json's parse.
#[cfg(test)]
pub fn parse_pruned_value(bytes: &[u8], need: &Need) -> Option<serde_json::Value> {
    parse_pruned(bytes, need).map(|p| p.to_value())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every fixture transcript of an app with turn rules (real ones of many client versions, the
    /// synthetic edge cases): its turns read through the pruned parse equal those read by parsing every
    /// record whole.
    #[test]
    fn pruned_records_give_the_turns_whole_ones_give_on_every_fixture() {
        let pruned = crate::rules::load(&[]).unwrap();
        let mut whole = crate::rules::load(&[]).unwrap();
        for s in &mut whole.sets {
            if let Some(t) = s.turns.as_mut() {
                t.reads = Need::All;
            }
        }
        let mut compared = 0;
        for (f, i) in crate::util::testing::fixture_transcripts(&pruned) {
            let text = f.display().to_string();
            let read = |c: &crate::rules::Catalog| {
                let rule = &c.sets[i];
                let t = crate::turns::extract(
                    rule,
                    rule.turns.as_ref().unwrap(),
                    std::fs::File::open(&f).unwrap(),
                    1,
                    0,
                    &crate::turns::Options::default(),
                )
                .unwrap();
                (t.records, t.user_turns, t.total_turns, t.tools)
            };
            let (a, b) = (read(&pruned), read(&whole));
            assert_eq!(a, b, "{text}");
            assert!(matches!(
                pruned.sets[i].turns.as_ref().unwrap().reads,
                Need::Node { .. }
            ));
            compared += 1;
        }
        assert!(compared >= 50, "only {compared} fixtures compared");
    }

    /// A value read only as text (a prompt, a regex match) keeps an array's elements only as far as
    /// other paths read them: a tool call's input (but an ExitPlanMode call's plan, an answer) and a tool
    /// result's output are never built.
    #[test]
    fn a_tool_calls_input_and_a_tool_results_output_are_not_built() {
        let catalog = crate::rules::load(&[]).unwrap();
        let claude = catalog.get("claude").unwrap();
        let need = &claude.turns.as_ref().unwrap().reads;
        // (`toolUseResult` is read only for whether it holds `answers`, an AskUserQuestion's.)
        let call = br#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/src/main.rs"}}]},"toolUseResult":{"stdout":"x"}}"#;
        assert_eq!(
            parse_pruned_value(call, need),
            Some(
                serde_json::json!({"type": "assistant", "message": {"id": "m1", "content": [
                {"type": "text", "text": "Reading it."}, {"type": "tool_use", "name": "Read", "input": {}}]},
                "toolUseResult": {}})
            )
        );
        // A result's output is read as text only (the words a user typed when rejecting a call come
        // back in one); its blocks and other members are not built.
        let result = br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}"}]}}"#;
        assert_eq!(
            parse_pruned_value(result, need),
            Some(
                serde_json::json!({"type": "user", "message": {"content": [{"type": "tool_result", "content": "fn main() {}"}]}})
            )
        );
        let blocks = br#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"x"},{"type":"image","source":{"data":"iVBOR"}}]}]}}"#;
        let pruned = parse_pruned_value(blocks, need).unwrap();
        assert!(pruned["message"]["content"][0]["content"][1]
            .get("source")
            .is_none());
        // A prompt written as a string is kept whole.
        let prompt = br#"{"type":"user","message":{"content":"Fix the build"}}"#;
        assert_eq!(
            parse_pruned_value(prompt, need),
            crate::util::lines::parse_object(prompt)
        );
    }

    #[test]
    fn what_makes_a_whole_parse_refuse_a_line_refuses_it_pruned_too() {
        let need = Need::presence().merge(Need::Node {
            keys: [("type".to_string(), Need::All)].into(),
            elems: None,
        });
        let ok = br#"{"type":"user","big":{"x":[1,2,"three"]}}"#;
        assert_eq!(
            parse_pruned_value(ok, &need),
            Some(serde_json::json!({"type": "user"}))
        );
        // A lone surrogate (Node writes one for a string cut inside a pair) is read as U+FFFD, by
        // both.
        let lone = br#"{"type":"user","big":"\ud800"}"#;
        assert_eq!(parse_pruned_value(lone, &need).unwrap()["type"], "user");
        assert_eq!(
            crate::util::lines::parse_object(lone).unwrap()["big"],
            "\u{FFFD}"
        );
        for bad in [
            &br#"{"type":"user","big":"\q"}"#[..],
            br#"{"type":"user","big":[1,}"#,
            br#"{"type":"user"} trailing"#,
            b"{\"type\":\"user\",\"big\":\"\xff\"}",
            br#"["type"]"#,
            b"   ",
        ] {
            assert_eq!(
                parse_pruned_value(bad, &need),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(crate::util::lines::parse_object(bad), None);
        }
    }

    /// The head of every fixture (any app) read through pruned records says what the whole records say.
    #[test]
    fn pruned_records_give_the_heads_whole_ones_give_on_every_fixture() {
        let pruned = crate::rules::load(&[]).unwrap();
        let mut whole = crate::rules::load(&[]).unwrap();
        for s in &mut whole.sets {
            s.head_reads = Need::All;
        }
        let mut compared = 0;
        for (f, _) in crate::util::testing::fixture_transcripts(&pruned) {
            for i in 0..pruned.sets.len() {
                assert!(matches!(pruned.sets[i].head_reads, Need::Node { .. }));
                let scan = |c: &crate::rules::Catalog| {
                    let file = std::fs::File::open(&f).unwrap();
                    let name = f.file_name().unwrap().to_string_lossy().into_owned();
                    let h = crate::discover::head::scan_head(
                        &c.sets[i],
                        &name,
                        Some((std::path::Path::new(&name), &name)),
                        file,
                    );
                    serde_json::to_value(h.unwrap()).unwrap()
                };
                assert_eq!(
                    scan(&pruned),
                    scan(&whole),
                    "{} as {}",
                    f.display(),
                    pruned.sets[i].id
                );
                compared += 1;
            }
        }
        assert!(compared >= 100, "{compared}");
    }
}
