//! Capture agents: what almanac runs and how it learns the agent's own session id. The built-in profiles
//! are data (`agents/*.yaml`, checked against `schemas/agent.schema.json`), embedded in the binary;
//! `config.toml` `[capture.agents.<name>]` adds agents or replaces one by name (see `parse.rs`).

use serde::Deserialize;
use std::sync::OnceLock;

/// An agent that captures: an argv run without a shell in the repo root.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    pub name: String,
    pub command: Vec<String>,
    /// What the agent reads on stdin: the prompt (so it is in no process's argv), or nothing.
    pub stdin: AgentStdin,
    /// How almanac learns the agent's own session id, so its transcripts are known as almanac's own.
    pub session_id: SessionIdSource,
    /// Variables set for the agent on top of the environment the worker inherited from the sweep
    /// (`[capture.agents.<name>] env`), in the order written.
    pub env: Vec<(String, String)>,
}

/// What a capture agent is given on standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AgentStdin {
    /// /dev/null.
    #[serde(rename = "none")]
    Null,
    /// The prompt's text, then end of file. Unlike an argument, stdin is not readable by other local
    /// users (`/proc/<pid>/cmdline` is).
    #[serde(rename = "prompt")]
    Prompt,
}

impl AgentStdin {
    /// Unless a profile says: the prompt on stdin, except for a command that passes `{prompt}` itself.
    pub fn default_for(command: &[String]) -> AgentStdin {
        if command.iter().any(|a| a.contains("{prompt}")) {
            AgentStdin::Null
        } else {
            AgentStdin::Prompt
        }
    }
}

/// How almanac learns a capture agent's own session id. Both ways may be set; with neither, almanac
/// does not learn it (the shipped rules still exclude its transcripts by the prompt's marker line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionIdSource {
    /// almanac generates a UUID before the run, records it, and passes it as `{session_id}`.
    pub preset: bool,
    /// The agent names it on stdout: the `field` of the first JSON line whose `type` is `event`.
    pub from_stdout: Option<StdoutEvent>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutEvent {
    pub event: String,
    pub field: String,
}

pub const PLACEHOLDERS: &[&str] = &[
    "prompt",
    "prompt_file",
    "session_id",
    "transcript",
    "conversation",
    "repo",
    "wiki",
    "key_dir",
    "run_id",
];

/// A placeholder at the start of `text` (just after a `{`): a name of lower-case letters and `_`,
/// optionally followed by `:toml` (the value as a TOML basic string, quotes included, for `-c key=...`
/// overrides), then `}`. Returns (name, toml, bytes up to and including the `}`). Anything else after a
/// `{` is not a placeholder: the brace is text (a TOML inline table, JSON).
pub fn placeholder_at(text: &str) -> Option<(&str, bool, usize)> {
    let name_len = text
        .bytes()
        .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
        .count();
    if name_len == 0 {
        return None;
    }
    let rest = &text[name_len..];
    if rest.starts_with('}') {
        return Some((&text[..name_len], false, name_len + 1));
    }
    rest.starts_with(":toml}")
        .then_some((&text[..name_len], true, name_len + ":toml}".len()))
}

/// Rejects `{unknown}` placeholders so a typo fails loudly instead of reaching the agent.
pub(super) fn check_placeholders(arg: &str) -> Result<(), String> {
    let mut rest = arg;
    while let Some(start) = rest.find('{') {
        rest = &rest[start + 1..];
        let Some((name, _, len)) = placeholder_at(rest) else {
            continue;
        };
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "unknown placeholder {{{name}}} in \"{arg}\" (known: {})",
                PLACEHOLDERS
                    .iter()
                    .map(|p| format!("{{{p}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        rest = &rest[len..];
    }
    Ok(())
}

/// The shipped agent profiles, embedded so the binary works with no files on disk.
pub const BUILTIN_AGENTS: &[(&str, &str)] = &[
    (
        "agents/claude.yaml",
        include_str!("../../agents/claude.yaml"),
    ),
    ("agents/codex.yaml", include_str!("../../agents/codex.yaml")),
];
pub const AGENT_SCHEMA: &str = include_str!("../../schemas/agent.schema.json");

/// A profile as written; mirrors `schemas/agent.schema.json` (a test keeps them equal).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: String,
    command: Vec<String>,
    stdin: Option<AgentStdin>,
    session_id: RawSessionId,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessionId {
    #[serde(default)]
    preset: bool,
    from_stdout: Option<StdoutEvent>,
}

/// The built-in agents, from `agents/*.yaml`. A bad shipped profile is a programming error: this panics
/// naming the file, and the unit tests load every profile.
pub fn builtin_agents() -> Vec<AgentDef> {
    static CELL: OnceLock<Vec<AgentDef>> = OnceLock::new();
    CELL.get_or_init(|| {
        BUILTIN_AGENTS
            .iter()
            .map(|(file, src)| {
                profile(src).unwrap_or_else(|e| panic!("shipped agent profile {file}: {e}"))
            })
            .collect()
    })
    .clone()
}

fn validator() -> &'static jsonschema::Validator {
    static CELL: OnceLock<jsonschema::Validator> = OnceLock::new();
    CELL.get_or_init(|| {
        let schema: serde_json::Value =
            serde_json::from_str(AGENT_SCHEMA).expect("embedded agent schema is JSON");
        jsonschema::draft202012::new(&schema).expect("embedded agent schema is valid")
    })
}

/// YAML -> JSON value -> schema check -> typed profile -> placeholder and session-id checks.
fn profile(src: &str) -> Result<AgentDef, String> {
    let value: serde_json::Value =
        serde_yaml::from_str(src).map_err(|e| format!("not valid YAML: {e}"))?;
    let errors: Vec<String> = validator()
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let raw: RawAgent = serde_json::from_value(value).map_err(|e| e.to_string())?;
    for arg in &raw.command {
        check_placeholders(arg)?;
    }
    let uses_placeholder = raw.command.iter().any(|a| a.contains("{session_id}"));
    if raw.session_id.preset != uses_placeholder {
        return Err(if uses_placeholder {
            "the command passes {session_id} but session_id.preset is not true".into()
        } else {
            "session_id.preset is true but the command never passes {session_id}".into()
        });
    }
    if !raw.session_id.preset && raw.session_id.from_stdout.is_none() {
        return Err("session_id: set preset: true or from_stdout".into());
    }
    Ok(AgentDef {
        stdin: raw
            .stdin
            .unwrap_or_else(|| AgentStdin::default_for(&raw.command)),
        name: raw.name,
        command: raw.command,
        session_id: SessionIdSource {
            preset: raw.session_id.preset,
            from_stdout: raw.session_id.from_stdout,
        },
        env: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_load() {
        let agents = builtin_agents();
        let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["claude", "codex"]);
        // File names and profile names agree.
        for ((file, _), a) in BUILTIN_AGENTS.iter().zip(&agents) {
            assert_eq!(*file, format!("agents/{}.yaml", a.name));
        }
        let claude = &agents[0];
        assert_eq!(claude.command[0], "claude");
        assert!(claude.session_id.preset && claude.session_id.from_stdout.is_none());
        // The prompt goes on stdin, never in argv, where every local user could read it.
        for a in &agents {
            assert_eq!(a.stdin, AgentStdin::Prompt, "{}", a.name);
            assert!(
                !a.command.iter().any(|c| c.contains("{prompt}")),
                "{}",
                a.name
            );
        }
        let codex = &agents[1];
        assert_eq!(codex.command[..2], ["codex", "exec"]);
        assert!(!codex.session_id.preset);
        assert!(codex.session_id.from_stdout.is_some());
    }

    #[test]
    fn placeholders_are_checked_and_other_braces_are_text() {
        assert_eq!(check_placeholders("{repo}/x {wiki:toml} {key_dir}"), Ok(()));
        assert_eq!(
            check_placeholders(r#"projects={{repo:toml}={trust_level="untrusted"}} {"a": 1}"#),
            Ok(())
        );
        let e = check_placeholders("{repoo}").unwrap_err();
        assert!(e.contains("unknown placeholder {repoo}"), "{e}");
        let e = check_placeholders("x={{repo_dir:toml}=1}").unwrap_err();
        assert!(e.contains("{repo_dir}"), "{e}");
        assert_eq!(placeholder_at("repo:toml}rest"), Some(("repo", true, 10)));
        assert_eq!(placeholder_at("repo:yaml}"), None);
    }

    /// Uses every key the schema defines.
    const KITCHEN_SINK: &str = "name: sink\ncommand: [sink, \"{prompt}\", \"{session_id}\"]\nstdin: none\nsession_id:\n  preset: true\n  from_stdout: { event: started, field: id }\n";

    use crate::util::testing::schema_keys;

    #[test]
    fn schema_and_structs_accept_the_same_keys() {
        let a = profile(KITCHEN_SINK).unwrap();
        assert!(a.session_id.preset);
        assert_eq!(
            a.session_id.from_stdout,
            Some(StdoutEvent {
                event: "started".into(),
                field: "id".into()
            })
        );
        let mut keys = std::collections::BTreeSet::new();
        schema_keys(&serde_json::from_str(AGENT_SCHEMA).unwrap(), &mut keys);
        for k in keys {
            assert!(
                KITCHEN_SINK.contains(&format!("{k}:")),
                "schema key `{k}` is not exercised"
            );
        }
        // An extra key, at each level, is refused by the schema and would be refused by the structs.
        for extra in [
            KITCHEN_SINK.replace("name: sink", "name: sink\nflags: []"),
            KITCHEN_SINK.replace("preset: true", "preset: true\n  guess: true"),
            KITCHEN_SINK.replace("field: id", "field: id, at: 1"),
        ] {
            let e = profile(&extra).unwrap_err();
            assert!(e.contains("Additional properties"), "{e}");
            let v: serde_json::Value = serde_yaml::from_str(&extra).unwrap();
            assert!(serde_json::from_value::<RawAgent>(v).is_err(), "{extra}");
        }
    }

    #[test]
    fn bad_profiles_are_refused() {
        for (src, why) in [
            ("name: x\ncommand: [x, \"{promt}\"]\nsession_id: { preset: false, from_stdout: { event: e, field: f } }\n", "{promt}"),
            ("name: x\ncommand: [x, \"{session_id}\"]\nsession_id: { from_stdout: { event: e, field: f } }\n", "preset is not true"),
            ("name: x\ncommand: [x]\nsession_id: { preset: true }\n", "never passes"),
            ("name: x\ncommand: [x]\nsession_id: { preset: false }\n", "set preset"),
            ("name: x\ncommand: [x]\n", "session_id"),
            ("name: x\ncommand: []\nsession_id: { preset: false }\n", "command"),
        ] {
            let e = profile(src).unwrap_err();
            assert!(e.contains(why), "{src}: {e}");
        }
    }
}
