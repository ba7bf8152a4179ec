use super::*;

fn shipped(id: &str) -> crate::rules::RuleSet {
    let mut catalog = crate::rules::load(&[]).unwrap();
    let i = catalog.sets.iter().position(|s| s.id == id).unwrap();
    catalog.sets.swap_remove(i)
}

fn pair(key: &str, value: &str) -> Need {
    Need::Pair {
        key: key.into(),
        value: Some(value.into()),
    }
}

/// What a line must hold for a user, assistant or tool rule, or a queue record, of the set to hold on it.
fn content_need(t: &TurnsRule) -> Need {
    any(t
        .user
        .iter()
        .chain(&t.assistant)
        .map(|x| need_of(x.when.as_ref()))
        .chain(t.tools.iter().map(|x| need_of(x.when.as_ref())))
        .chain(t.queue.iter().flat_map(|q| q.predicates()).map(need))
        .collect())
}

#[test]
fn derives_the_shipped_claude_requirements() {
    let rule = shipped("claude");
    let t = rule.turns.as_ref().unwrap();
    // user: type user (the tool_result test is `missing`: nothing); queued: queue-operation enqueue;
    // a queued_command attachment; the user's words in a tool's result: type user with
    // `toolUseResult.answers` (an `exists`: the key alone), type user (a regex over the result adds
    // nothing), type user (`exists` of a filtered path adds nothing); assistant and tools: type
    // assistant; the queue's dequeue, remove and popAll.
    let queue_op = |op: &str| {
        Need::All(vec![
            pair("type", "\"queue-operation\""),
            pair("operation", &format!("\"{op}\"")),
        ])
    };
    let attachment = Need::All(vec![
        pair("type", "\"attachment\""),
        pair("type", "\"queued_command\""),
    ]);
    let assistant = pair("type", "\"assistant\"");
    assert_eq!(
        content_need(t),
        Need::Any(vec![
            pair("type", "\"user\""),
            queue_op("enqueue"),
            attachment,
            Need::All(vec![
                pair("type", "\"user\""),
                Need::Pair {
                    key: "answers".into(),
                    value: None,
                },
            ]),
            pair("type", "\"user\""),
            pair("type", "\"user\""),
            assistant.clone(),
            assistant,
            queue_op("dequeue"),
            queue_op("remove"),
            queue_op("popAll"),
        ])
    );
    // The sidechain skip: from/until/after test isSidechain true/false.
    assert_eq!(need(&t.skip[0].from), pair("isSidechain", "true"));
    assert_eq!(need(&t.skip[0].until), pair("isSidechain", "false"));
}

#[test]
fn derives_the_shipped_codex_requirements() {
    let rule = shipped("codex");
    let t = rule.turns.as_ref().unwrap();
    let Need::Any(parts) = content_need(t) else {
        panic!("codex: an `any` of rules");
    };
    // event_msg user_message: both pairs; the response_item user message: the `not matches` adds nothing.
    assert_eq!(
        parts[0],
        Need::All(vec![
            pair("type", "\"event_msg\""),
            pair("type", "\"user_message\"")
        ])
    );
    assert_eq!(
        parts[1],
        Need::All(vec![
            pair("type", "\"response_item\""),
            pair("type", "\"message\""),
            pair("role", "\"user\"")
        ])
    );
    // Tools (after four user and three assistant rules): code mode's `exec` first, then an `in`, an
    // `any` of its values (the `not` adds nothing).
    assert_eq!(
        parts[7],
        Need::All(vec![
            pair("type", "\"response_item\""),
            pair("type", "\"custom_tool_call\""),
            pair("name", "\"exec\"")
        ])
    );
    assert_eq!(
        parts[8],
        Need::All(vec![
            pair("type", "\"response_item\""),
            Need::Any(vec![
                pair("type", "\"function_call\""),
                pair("type", "\"custom_tool_call\"")
            ])
        ])
    );
    // The copied history ends at a task_started or turn_context after the copied prompt.
    assert_eq!(
        need(&t.skip[0].until),
        Need::Any(vec![
            Need::All(vec![
                pair("type", "\"event_msg\""),
                pair("type", "\"task_started\"")
            ]),
            pair("type", "\"turn_context\"")
        ])
    );
    assert_eq!(need(&t.skip[0].from), pair("type", "\"session_meta\""));
}

#[test]
fn whitespace_and_escapes_are_never_rejected() {
    let rule = shipped("claude");
    let f = Prefilter::new(rule.turns.as_ref().unwrap());
    let armed = [true];
    let wanted = |l: &str| f.wanted(l.as_bytes(), 5, (None, &armed), false);
    for line in [
        r#"{"type":"user","message":{"content":"hi"}}"#,
        r#"{"type" : "user","message":{"content":"hi"}}"#,
        "{\"type\"\t:\n \"assistant\",\"message\":{}}",
        r#"{ "type": "queue-operation", "operation" :"enqueue", "content": "x" }"#,
        // \u escapes can spell any key or value: always parsed.
        r#"{"type":"\u0075ser","message":{"content":"hi"}}"#,
        r#"{"\u0074ype":"user"}"#,
    ] {
        assert!(wanted(line), "rejected {line}");
    }
    for line in [
        r#"{"type":"progress","data":{"type":"hook_progress"}}"#,
        r#"{"type":"file-history-snapshot","snapshot":{}}"#,
        r#"{"type":"users"}"#,
        r#"{"kind":"user","text":"\"type\":\"user\" only inside a string"}"#,
        r#"{"type":"queue-operation","operation":"clear"}"#,
    ] {
        assert!(!wanted(line), "kept {line}");
    }
    // The queue's own records change which prompts count.
    assert!(wanted(
        r#"{"type":"queue-operation","operation":"dequeue"}"#
    ));
    // An open sidechain region reads only the line that may close it.
    assert!(f.wanted(br#"{"isSidechain": false}"#, 5, (Some(0), &armed), false));
    let sidechain = br#"{"isSidechain":true,"type":"user"}"#;
    assert!(!f.wanted(sidechain, 5, (Some(0), &armed), false));
    assert!(f.wanted(sidechain, 5, (None, &armed), false));
    // Until a main-thread record armed the skip, a sidechain record opens no region.
    assert!(!f.wanted(br#"{"isSidechain":true}"#, 5, (None, &[false]), false));
    // A count whose turn is answered reads only what can start a turn (and change a skip region).
    let answered = |l: &str| f.wanted(l.as_bytes(), 5, (None, &armed), true);
    let text = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#;
    assert!(wanted(text) && !answered(text));
    assert!(answered(r#"{"type":"user","message":{"content":"hi"}}"#));
    assert!(answered(
        r#"{"type":"queue-operation","operation":"enqueue","content":"x"}"#
    ));
    assert!(
        answered(r#"{"type":"assistant","isSidechain":true}"#),
        "may open a region"
    );
    assert!(
        answered(r#"{"type":"\u0061ssistant"}"#),
        "an escape is always read"
    );
    // Until armed, a main-thread record may arm the skip.
    assert!(f.may_arm(br#"{"isSidechain" :false}"#, &[false]));
    assert!(!f.may_arm(br#"{"isSidechain":false}"#, &[true]));
}

#[test]
fn unsafe_literals_give_no_requirement() {
    let path = |t: &str| crate::rules::JsonPath::parse(t).unwrap();
    let eq = |p: &str, v: serde_json::Value| need(&Predicate::Equals(path(p), v));
    assert_eq!(eq("$.a", serde_json::json!("x/y")), Need::Always);
    assert_eq!(eq("$.a", serde_json::json!("tab\there")), Need::Always);
    assert_eq!(eq("$.a", serde_json::json!(1)), Need::Always);
    assert_eq!(eq("$.a[0]", serde_json::json!("x")), Need::Always);
    assert_eq!(eq("$['a']", serde_json::json!("x")), Need::Always);
    assert_eq!(eq("$.a.b", serde_json::json!("x")), pair("b", "\"x\""));
    assert_eq!(
        need(&Predicate::Missing(path("$.a"))),
        Need::Always,
        "missing cannot be searched for"
    );
    let not = Predicate::Not(Box::new(Predicate::Exists(path("$.a"))));
    assert_eq!(need(&not), Need::Always);
    // An `any` with one unsearchable branch is unsearchable.
    let any_of = Predicate::Any(vec![
        Predicate::Exists(path("$.a")),
        Predicate::Missing(path("$.b")),
    ]);
    assert_eq!(need(&any_of), Need::Always);
}

/// Whether `rest` (the bytes after a key) starts with JSON whitespace, `:`, JSON whitespace and `value`.
fn follows(rest: &[u8], value: Option<&[u8]>) -> bool {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let rest = &rest[rest.iter().take_while(|b| ws(b)).count()..];
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    let rest = &rest[rest.iter().take_while(|b| ws(b)).count()..];
    value.is_none_or(|v| rest.starts_with(v))
}

/// `need` read the plain way: every pair's own search of the line.
fn naive(n: &Need, line: &[u8]) -> bool {
    match n {
        Need::Always => true,
        Need::Pair { key, value } => {
            let k = format!("\"{key}\"");
            memchr::memmem::find_iter(line, k.as_bytes())
                .any(|at| follows(&line[at + k.len()..], value.as_ref().map(|v| v.as_bytes())))
        }
        Need::All(ns) => ns.iter().all(|n| naive(n, line)),
        Need::Any(ns) => ns.iter().any(|n| naive(n, line)),
    }
}

/// `f` asked about `line` (transcript line `at`) in every state says what each pair's own search says.
fn check(t: &TurnsRule, f: &Prefilter, line: &[u8], at: u64, what: &str) {
    let escape = |l: &[u8]| memchr::memmem::find(l, b"\\u").is_some();
    let prompts = any(t
        .user
        .iter()
        .map(|x| need_of(x.when.as_ref()))
        .chain(t.queue.iter().flat_map(|q| q.predicates()).map(need))
        .collect());
    for armed in [true, false] {
        let armed = vec![armed; t.skip.len()];
        let arms = t
            .skip
            .iter()
            .zip(&armed)
            .any(|(s, a)| !*a && naive(&need_of(s.after.as_ref()), line));
        let opens = t
            .skip
            .iter()
            .zip(&armed)
            .any(|(s, a)| *a && at >= s.earliest_line && naive(&need(&s.from), line));
        for (prompts_only, content) in [(false, content_need(t)), (true, prompts.clone())] {
            let expect = naive(&content, line) || opens || arms || escape(line);
            let got = f.wanted(line, at, (None, &armed), prompts_only);
            assert_eq!(got, expect, "{what}: {}", String::from_utf8_lossy(line));
        }
        assert_eq!(f.may_arm(line, &armed), arms || escape(line), "{what}");
        for (i, s) in t.skip.iter().enumerate() {
            let expect = naive(&need(&s.until), line)
                || s.until_after
                    .as_ref()
                    .is_some_and(|a| naive(&need(a), line))
                || escape(line);
            assert_eq!(
                f.wanted(line, at, (Some(i), &armed), false),
                expect,
                "{what}"
            );
        }
    }
}

/// A key searched for once for all its atoms gives what each pair's own search gives: on every line
/// of every fixture transcript, and on lines where one key carries several rules' values, spaced
/// around its colon, or in a place a rule does not read.
#[test]
fn one_search_per_key_gives_what_each_pairs_own_search_gives() {
    let catalog = crate::rules::load(&[]).unwrap();
    let mut lines = 0;
    for (path, i) in crate::util::testing::fixture_transcripts(&catalog) {
        let t = catalog.sets[i].turns.as_ref().unwrap();
        let f = t.filter.as_ref().unwrap();
        for (n, line) in std::fs::read(&path)
            .unwrap()
            .split(|b| *b == b'\n')
            .enumerate()
        {
            check(t, f, line, n as u64 + 1, &path.display().to_string());
            lines += 1;
        }
    }
    assert!(lines > 1000, "only {lines} lines");
    let codex = shipped("codex");
    let t = codex.turns.as_ref().unwrap();
    let f = Prefilter::new(t);
    for line in [
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[]}}"#,
        r#"{"payload":{"role":"user","type":"message"},"type":"response_item"}"#,
        r#"{"type":"response_item","payload":{"type":"function_call","name":"x"}}"#,
        r#"{"type":"event_msg","payload":{"type":"agent_message","message":"m"}}"#,
        r#"{"type":"event_msg","payload":{"type":"user_message","message":"m"}}"#,
        r#"{"type":"event_msg","payload":{"type":"token_count"}}"#,
        r#"{"type":"session_meta","payload":{"type":"message"}}"#,
        r#"{"type":"session_meta","payload":{"id":"x"}}"#,
        r#"{"type":"message","role":"assistant"}"#,
        // A key and colon spaced; a value without its key before it.
        "{\"type\" :\t\"response_item\",\"payload\":{\"type\"\n:\"message\",\"role\": \"user\"}}",
        r#"{"type":"event_msg","payload":{"kind":"user_message","type":"x"}}"#,
        r#"["user_message",{"type":"event_msg"},"type":"user_message"]"#,
        r#"{"payload":{"type":"user_message"}}"#,
        r#"{"type":"user_message","payload":"event_msg"}"#,
    ] {
        for at in [1, 2, 9] {
            check(t, &f, line.as_bytes(), at, "codex");
        }
    }
    // A rollout's first line (its `session_meta`) opens no skip region: not parsed for one. A copied
    // parent's `session_meta` later in a subagent's rollout does.
    let meta = br#"{"type":"session_meta","payload":{"id":"x","base_instructions":"long"}}"#;
    assert!(!f.wanted(meta, 1, (None, &[true]), true));
    assert!(f.wanted(meta, 2, (None, &[true]), true));
}

/// A `turns` section of one user rule, `when`, and its prefilter.
fn one_user_rule(when: Predicate) -> TurnsRule {
    let mut t = TurnsRule {
        ignore: vec![],
        merge_repeated_prompts: false,
        resends_prompt: None,
        skip: vec![],
        user: vec![crate::rules::compiled::TurnText {
            when: Some(when),
            text: vec![crate::rules::compiled::JsonPath::parse("$.text").unwrap()],
            group: None,
            queued: false,
            placeholder: None,
            extract: None,
            each_match: false,
            label: None,
        }],
        queue: None,
        assistant: vec![],
        tools: vec![],
        results: vec![],
        thinking: vec![],
        reports: vec![],
        compaction: vec![],
        reads: crate::rules::needs::Need::All,
        render_reads: crate::rules::needs::Need::All,
        filter: None,
    };
    t.filter = Some(Prefilter::new(&t));
    t
}

/// A key, its value, a repeated or cut key and a `\u` at every place of short lines, for the shipped
/// sets and for one whose keys begin with ten different letters: what each pair's own search says.
#[test]
fn a_key_is_found_wherever_it_falls_in_a_line() {
    use crate::rules::compiled::{JsonPath, Predicate};
    let claude = shipped("claude");
    let codex = shipped("codex");
    let names = [
        "alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet",
    ];
    let when = Predicate::Any(
        names
            .iter()
            .map(|n| {
                Predicate::Equals(
                    JsonPath::parse(&format!("$.{n}")).unwrap(),
                    serde_json::json!("x"),
                )
            })
            .collect(),
    );
    let many = one_user_rule(when);
    let sets = [
        (claude.turns.as_ref().unwrap(), "claude"),
        (codex.turns.as_ref().unwrap(), "codex"),
        (&many, "many"),
    ];
    let pieces: [&str; 10] = [
        r#"\u"#,
        r#""type":"user""#,
        r#""type" : "user_message""#,
        r#""isSidechain":true"#,
        r#""role":"user""#,
        r#""type"type":"user""#,
        r#""typ"#,
        r#"\u0074"#,
        r#""juliet":"x""#,
        r#""india""india":"x""#,
    ];
    let mut tried = 0;
    for (t, what) in sets {
        let f = t.filter.as_ref().unwrap();
        for len in [0, 1, 15, 16, 17, 31, 33, 40] {
            for at in 0..=len {
                for piece in pieces {
                    let mut line = "a".repeat(len);
                    line.insert_str(at, piece);
                    for line in [line.clone(), format!("{{{line}}}"), format!("{line}\"")] {
                        check(t, f, line.as_bytes(), 2, what);
                        tried += 1;
                    }
                }
            }
        }
    }
    assert!(tried > 3_000, "{tried}");
}

/// Formulas the shipped sets do not have, each line checked against every pair's own search: an `Any`
/// inside an `All` (its terms multiplied out), an `All` of so many `Any`s that it has more terms than
/// are kept (every line is then parsed), and values matched other than as a plain string (a string
/// with an escaped quote, `true`, `null`, a key that must only exist, a string that must only open).
#[test]
fn nested_and_wide_formulas_give_what_each_pairs_own_search_gives() {
    use crate::rules::compiled::{JsonPath, Predicate};
    let path = |p: &str| JsonPath::parse(p).unwrap();
    let eq = |p: &str, v: serde_json::Value| Predicate::Equals(path(p), v);
    let nested = Predicate::All(vec![
        Predicate::Any(vec![eq("$.a", "x".into()), eq("$.b", true.into())]),
        Predicate::Any(vec![
            eq("$.c", "q\"r".into()),
            eq("$.a", serde_json::Value::Null),
            Predicate::Exists(path("$.d")),
        ]),
        Predicate::Matches(path("$.e"), regex::Regex::new("^z").unwrap()),
    ]);
    // Seven `Any`s of two: 128 terms.
    let wide = Predicate::All(
        (0..7)
            .map(|i| {
                Predicate::Any(vec![
                    eq(&format!("$.k{i}"), "x".into()),
                    eq(&format!("$.k{i}"), "y".into()),
                ])
            })
            .collect(),
    );
    for (when, what) in [(nested, "nested"), (wide, "wide")] {
        let t = one_user_rule(when);
        let f = t.filter.as_ref().unwrap();
        let parts = [
            r#""a":"x""#,
            r#""a":"xy""#,
            r#""a":null"#,
            r#""b":true"#,
            r#""b":"true""#,
            r#""c":"q\"r""#,
            r#""c":"q\"s""#,
            r#""d":1"#,
            r#""e":"w""#,
            r#""e":5"#,
            r#""k0":"x""#,
        ];
        let mut tried = 0;
        // Every line of up to three parts: which atoms a line holds decides it.
        for i in 0..parts.len() {
            for j in 0..parts.len() {
                for k in 0..parts.len() {
                    let line = format!("{{{},{},{}}}", parts[i], parts[j], parts[k]);
                    match what {
                        "wide" => assert!(f.wanted(line.as_bytes(), 2, (None, &[]), false)),
                        _ => check(&t, f, line.as_bytes(), 2, what),
                    }
                    tried += 1;
                }
            }
        }
        assert_eq!(tried, 1331);
        // The wide formula has too many terms to keep: it asks for every line (above), even one a
        // search would reject.
        if what == "wide" {
            assert!(!naive(&content_need(&t), b"{}"));
            assert!(f.wanted(b"{}", 2, (None, &[]), false));
        } else {
            assert!(!f.wanted(br#"{"a":"x","e":"w"}"#, 2, (None, &[]), false));
            assert!(f.wanted(br#"{"a":"x","d":0,"e":"w"}"#, 2, (None, &[]), false));
        }
    }
}
