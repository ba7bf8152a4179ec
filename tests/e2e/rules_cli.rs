//! Rule sets as data: user overrides, a third app from YAML alone, and broken rule files reported with
//! file and field (exit 78).

use crate::common::*;

const CODEX_RULES: &str = include_str!("../../rules/codex.yaml");

#[test]
fn user_rule_file_overrides_a_builtin_store_root() {
    let w = World::new();
    let repo = w.repo("r");
    let meta = |id: &str| {
        format!(
            "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":\"{}\"}}}}\n{{\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"hi\"}}}}\n",
            repo.display()
        )
    };
    w.write(
        "home/.codex/sessions/rollout-2026-01-01T00-00-00-builtin.jsonl",
        &meta("builtin-root"),
        HOURS_2,
    );
    w.write(
        "home/elsewhere/sessions/rollout-2026-01-01T00-00-00-user.jsonl",
        &meta("user-root"),
        HOURS_2,
    );
    let user_rules = CODEX_RULES.replace(
        "default: [\"~/.codex\"]\n    include",
        "default: [\"~/elsewhere\"]\n    include",
    );
    assert_ne!(user_rules, CODEX_RULES);
    let rules_file = w.almanac_home().join("rules/codex.yaml");
    write_aged(&rules_file, user_rules.as_bytes(), HOURS_2);
    let s = w.dry_run(&["--apps", "codex"]);
    let ids: Vec<&str> = items(&s, "started")
        .iter()
        .map(|i| i["sessionId"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"user-root") && !ids.contains(&"builtin-root"),
        "{ids:?}"
    );

    let out = w
        .almanac()
        .args(["rules", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let codex = v["ruleSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "codex")
        .unwrap();
    assert_eq!(codex["source"], rules_file.display().to_string());
    let claude = v["ruleSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "claude")
        .unwrap();
    assert_eq!(claude["source"], "rules/claude.yaml (built in)");
}

/// A tweak of claude in place in `$ALMANAC_HOME/rules` and another in a `--rules-dir` (which
/// `automation install --rules-dir` puts into every scheduled sweep): each builds on the set as the
/// directories before it left it; a full replacement in `--rules-dir` wins over the home tweak.
#[test]
fn rule_directories_load_in_order_and_each_tweak_builds_on_the_last() {
    let w = World::new();
    let home_rules = w.almanac_home().join("rules");
    let extra = w.root().join("extra-rules");
    std::fs::create_dir_all(&home_rules).unwrap();
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(
        home_rules.join("claude.yaml"),
        "id: claude\nextends: claude\nname: Claude at home\n",
    )
    .unwrap();
    std::fs::write(
        extra.join("claude.yaml"),
        "id: claude\nextends: claude\nenabled_by_default: false\n",
    )
    .unwrap();
    let claude = |extra: &std::path::Path| {
        let out = w
            .almanac()
            .arg("--rules-dir")
            .arg(extra)
            .args(["rules", "list", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["ruleSets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "claude")
            .cloned()
            .unwrap()
    };
    let c = claude(&extra);
    assert_eq!(c["name"], "Claude at home", "the home tweak: {c}");
    assert_eq!(
        c["enabled"], false,
        "the --rules-dir tweak on top of it: {c}"
    );
    assert_eq!(c["source"], extra.join("claude.yaml").display().to_string());
    assert!(
        c["fields"].as_array().unwrap().len() > 1,
        "still the built-in set: {c}"
    );

    // A full replacement (no `extends`) in --rules-dir: the home tweak is gone with what it changed.
    let replacement = include_str!("../../rules/claude.yaml")
        .replace("name: Claude Code", "name: Claude replaced");
    assert!(replacement.contains("name: Claude replaced"));
    std::fs::write(extra.join("claude.yaml"), replacement).unwrap();
    let c = claude(&extra);
    assert_eq!(c["name"], "Claude replaced", "{c}");
    assert!(c["extends"].is_null(), "{c}");
}

const ACME: &str = r#"# yaml-language-server: $schema=../schemas/rules.schema.json
id: acme
name: Acme Agent
stores:
  - name: logs
    roots:
      - env: ACME_HOME
        join: logs
        default: ["~/.acme"]
    include: ["*.jsonl"]
fields:
  session_id:
    - value: "$.conversation_id"
  cwd:
    - value: "$.workdir"
subagent:
  records:
    - test: { equals: { path: "$.role", value: helper } }
"#;

#[test]
fn a_third_app_works_from_a_yaml_file_alone() {
    let w = World::new();
    let repo = w.repo("r");
    let rules = w.root().join("my-rules");
    write_aged(&rules.join("acme.yaml"), ACME.as_bytes(), HOURS_2);
    let line = |id: &str, role: &str| {
        format!(
            "{{\"conversation_id\":\"{id}\",\"workdir\":\"{}\",\"role\":\"{role}\"}}\n",
            repo.display()
        )
    };
    let main = w.write(
        "home/.acme/logs/c1.jsonl",
        &format!("{}{}", line("c1", "user"), line("c1", "assistant")),
        HOURS_2,
    );
    w.write("home/.acme/logs/h1.jsonl", &line("h1", "helper"), HOURS_2);
    let rules_dir = rules.to_str().unwrap();
    let s = w.dry_run(&["--rules-dir", rules_dir, "--apps", "acme"]);
    assert_eq!(s["scanned"], 1);
    assert_eq!(s["counts"]["subagent"], 1);
    let started = items(&s, "started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["app"], "acme");
    assert_eq!(started[0]["sessionId"], "c1");
    assert_eq!(started[0]["transcriptPath"], main.display().to_string());
    assert_eq!(started[0]["repoRoot"], repo.display().to_string());
    assert_eq!(started[0]["toLine"], 2);

    // The new app is listed, explained, and selectable; without --rules-dir it does not exist.
    let out = w
        .almanac()
        .args(["--rules-dir", rules_dir, "rules", "explain"])
        .arg(&main)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("rule set:   acme"), "{text}");
    assert!(text.contains("session_id = c1"), "{text}");
    assert!(text.contains("decision:   eligible"), "{text}");
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run", "--apps", "acme"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn broken_rule_files_are_all_reported_with_file_and_field() {
    let w = World::new();
    let dir = w.root().join("broken");
    let schema_error = ACME
        .replace("id: acme", "id: acme-typo")
        .replace("    include:", "    inclde:");
    let bad_glob = ACME
        .replace("id: acme", "id: acme-glob")
        .replace("include: [\"*.jsonl\"]", "include: [\"*.jsonl\", \"**[\"]");
    let bad_path = ACME
        .replace("id: acme", "id: acme-path")
        .replace("$.workdir", "$.[[workdir");
    let bad_regex = ACME.replace("id: acme", "id: acme-regex").replace(
        "    - value: \"$.conversation_id\"",
        "    - filename: '(unclosed'",
    );
    for (name, body) in [
        ("a-schema.yaml", &schema_error),
        ("b-glob.yaml", &bad_glob),
        ("c-path.yaml", &bad_path),
        ("d-regex.yaml", &bad_regex),
    ] {
        write_aged(&dir.join(name), body.as_bytes(), HOURS_2);
    }
    write_aged(&dir.join("e-yaml.yml"), b"id: [unclosed\n", HOURS_2);
    let out = w
        .almanac()
        .args(["capture", "sweep", "--dry-run", "--rules-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    let expect = [
        ("a-schema.yaml", "stores[0]", "inclde"),
        (
            "b-glob.yaml",
            "stores[0].include[1]",
            "invalid glob \"**[\"",
        ),
        (
            "c-path.yaml",
            "fields.cwd[0].value",
            "invalid JSONPath \"$.[[workdir\"",
        ),
        (
            "d-regex.yaml",
            "fields.session_id[0].filename",
            "invalid regex \"(unclosed\"",
        ),
        ("e-yaml.yml", "", "not valid YAML"),
    ];
    for (file, field, what) in expect {
        let line = err
            .lines()
            .find(|l| l.contains(file) && l.contains(what))
            .unwrap_or_else(|| panic!("no diagnostic for {file} {what}:\n{err}"));
        assert!(
            line.starts_with(&format!("almanac: rule file {}", dir.join(file).display())),
            "{line}"
        );
        assert!(
            line.contains(&format!(": {field}: ")) || field.is_empty(),
            "{line}"
        );
    }
    assert!(err.contains("help:"), "{err}");

    // The same through `rules validate`, file by file, in JSON.
    let out = w
        .almanac()
        .args(["rules", "validate", "--json"])
        .arg(dir.join("b-glob.yaml"))
        .arg(dir.join("c-path.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["field"], "stores[0].include[1]");
    assert_eq!(errors[1]["field"], "fields.cwd[0].value");
}

#[test]
fn unknown_keys_and_bad_policies_are_rejected() {
    let w = World::new();
    let dir = w.root().join("r");
    // A typo in a predicate operator and in a source key must not silently disable a rule.
    let typo = ACME
        .replace("- test: { equals:", "- test: { equal:")
        .replace("- value: \"$.workdir\"", "- valeu: \"$.workdir\"");
    write_aged(&dir.join("acme.yaml"), typo.as_bytes(), HOURS_2);
    write_aged(
        &dir.join("policy.yaml"),
        b"checks:\n  - check: no-session-id\n  - check: no-cwd\n  - check: no-almanac-repo\n    enabled: false\n  - check: quiet-window\n    quiet: 5x\n  - check: sometimes\n",
        HOURS_2,
    );
    let out = w
        .almanac()
        .args(["rules", "validate"])
        .arg(dir.join("acme.yaml"))
        .arg(dir.join("policy.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("'equal' was unexpected") || err.contains("equal"),
        "{err}"
    );
    assert!(err.contains("valeu"), "{err}");
    assert!(err.contains("sometimes"), "{err}");
    // The schema stops a file before compilation, so fix the unknown check and see the rest.
    write_aged(
        &dir.join("policy.yaml"),
        b"checks:\n  - check: no-session-id\n  - check: no-cwd\n  - check: no-almanac-repo\n    enabled: false\n  - check: quiet-window\n    quiet: 5x\n",
        HOURS_2,
    );
    let out = w
        .almanac()
        .args(["rules", "validate"])
        .arg(dir.join("policy.yaml"))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("checks[2].enabled") && err.contains("cannot be disabled"),
        "{err}"
    );
    assert!(
        err.contains("checks[3].quiet") && err.contains("\"5x\""),
        "{err}"
    );
}

#[test]
fn yaml_booleans_stay_strings_in_rules() {
    // YAML 1.1 would read `no` as false; a value compared against the string "no" must stay a string.
    let w = World::new();
    let repo = w.repo("r");
    let rules = w.root().join("rr");
    let body = ACME.replace("value: helper", "value: no");
    write_aged(&rules.join("acme.yaml"), body.as_bytes(), HOURS_2);
    w.write(
        "home/.acme/logs/n.jsonl",
        &format!(
            "{{\"conversation_id\":\"n\",\"workdir\":\"{}\",\"role\":\"no\"}}\n",
            repo.display()
        ),
        HOURS_2,
    );
    let s = w.dry_run(&["--rules-dir", rules.to_str().unwrap(), "--apps", "acme"]);
    assert_eq!(
        s["counts"]["subagent"], 1,
        "role \"no\" matched the string no"
    );
}

#[test]
fn shipped_rule_files_validate_and_point_editors_at_the_schema() {
    let w = World::new();
    let root = env!("CARGO_MANIFEST_DIR");
    for f in ["rules/claude.yaml", "rules/codex.yaml", "rules/policy.yaml"] {
        let text = std::fs::read_to_string(format!("{root}/{f}")).unwrap();
        assert!(
            text.starts_with("# yaml-language-server: $schema=../schemas/"),
            "{f}"
        );
    }
    let out = w
        .almanac()
        .args(["rules", "validate"])
        .arg(format!("{root}/rules/claude.yaml"))
        .arg(format!("{root}/rules/codex.yaml"))
        .arg(format!("{root}/rules/policy.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().filter(|l| l.starts_with("ok ")).count(), 3);
}

#[test]
fn init_creates_the_wiki_at_the_git_root_and_is_idempotent() {
    let w = World::new();
    let repo = w.root().join("proj");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    let out = w
        .almanac()
        .current_dir(repo.join("src/deep"))
        .arg("init")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(repo.join(".almanac/runs").is_dir());
    let ignore = std::fs::read_to_string(repo.join(".almanac/.gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "runs/"));
    let out = w.almanac().current_dir(&repo).arg("init").output().unwrap();
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("already initialised"));
    assert_eq!(
        std::fs::read_to_string(repo.join(".almanac/.gitignore")).unwrap(),
        ignore
    );
    // A transcript in that repo is now mapped to it.
    w.write(
        "home/.claude/projects/-p/s.jsonl",
        &format!(
            "{{\"type\":\"user\",\"sessionId\":\"s\",\"cwd\":\"{}\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n",
            repo.join("src").display()
        ),
        HOURS_2,
    );
    let s = w.dry_run(&[]);
    assert_eq!(
        items(&s, "started")[0]["repoRoot"],
        repo.display().to_string()
    );
}

/// The head of a Claude transcript is read only as far as it takes to know its session id, cwd,
/// whether it is a subagent and whether it is an almanac capture run: the first user record carries
/// all of them. Before, a root session was read for 50 records looking for an `agentId` that only
/// subagents' records carry (on a real session: megabytes of tool output per new transcript).
#[test]
fn a_claude_head_ends_at_the_first_user_record_and_still_names_a_subagents_agent_id() {
    let w = World::new();
    let mut checked = (0, 0);
    let files = walkdir::WalkDir::new(FIXTURES)
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter(|p| p.components().any(|c| c.as_os_str() == "claude"));
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let records: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| r.is_object())
            .collect();
        // The first user record, as a person reading the file would find it.
        let Some(first_user) = records.iter().position(|r| {
            r["type"] == "user" && r["isSidechain"].is_boolean() && r["cwd"].is_string()
        }) else {
            continue;
        };
        let ex = json_ok(
            w.almanac()
                .args(["rules", "explain", "--json", "--app", "claude"])
                .arg(&path),
        );
        let read = ex["head"]["records"].as_u64().unwrap();
        assert!(
            read <= first_user as u64 + 1,
            "{}: head read {read} records, the first user record is record {}",
            path.display(),
            first_user + 1
        );
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let expected = records[first_user]["agentId"]
            .as_str()
            .map(str::to_string)
            .or_else(|| {
                name.strip_prefix("agent-")
                    .and_then(|n| n.strip_suffix(".jsonl"))
                    .map(str::to_string)
            });
        let agent_id = ex["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "agent_id")
            .unwrap()["value"]
            .as_str()
            .map(str::to_string);
        assert_eq!(agent_id, expected, "{}: {ex}", path.display());
        match expected {
            Some(_) => checked.1 += 1,
            None => checked.0 += 1,
        }
    }
    assert!(
        checked.0 >= 20 && checked.1 >= 3,
        "root, subagent files checked: {checked:?}"
    );
}
