//! Regenerates `tests/fixtures/real/mock/{copilot,qwen,pi,droid}/`: one session of each CLI against the
//! mock model (`chat_clients.rs`: the prompt, a tool call, a subagent where the CLI runs one offline, the
//! answer), in `$HOME/proj/my_repo.x` with the scratch home rewritten to `/home/dev`, and their entries
//! in `manifest.json` (other apps' entries are kept). Ignored; run it on purpose:
//! `ALMANAC_CLIENTS_BIN=... cargo test --test e2e make_chat_fixtures -- --ignored`
//! (or `scripts/make_fixtures.sh`).

use crate::chat_clients::{Chat, Installed, PROMPT, SUB_PROMPT};
use crate::common::*;
use crate::make_fixtures::{rewrite_tree, MOCK_DIR};
use serde_json::{json, Value};
use std::path::Path;

#[test]
#[ignore = "regenerates tests/fixtures/real/mock/<copilot|qwen|pi|droid> with the real CLIs"]
fn make_chat_fixtures() {
    let installed: Vec<Installed> = Chat::ALL
        .iter()
        .filter_map(|c| c.installed_or_skip())
        .collect();
    if installed.len() < Chat::ALL.len() {
        return;
    }
    let mock_dir = Path::new(FIXTURES).join(MOCK_DIR);
    let manifest_path = mock_dir.join("manifest.json");
    let ids: Vec<&str> = Chat::ALL.iter().map(|c| c.id()).collect();
    let mut manifest: Vec<Value> =
        serde_json::from_str::<Vec<Value>>(&std::fs::read_to_string(&manifest_path).unwrap())
            .unwrap()
            .into_iter()
            .filter(|m| !ids.contains(&m["app"].as_str().unwrap_or("")))
            .collect();
    for inst in &installed {
        let w = World::new();
        let repo = w.home().join("proj/my_repo.x");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::create_dir_all(repo.join(".almanac/pages")).unwrap();
        std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").unwrap();
        let (ran, _mock) = inst.run(&w, &repo, PROMPT);
        let cli = inst.cli;
        let store = Path::new(cli.store());
        let out = mock_dir.join(cli.id());
        let _ = std::fs::remove_dir_all(&out);
        let dest = out.join(store.file_name().unwrap());
        rewrite_tree(&w.home().join(store), &dest, &w.home());
        let rel = |p: &Path| p.strip_prefix(&mock_dir).unwrap().display().to_string();
        let files = crate::chat_clients::jsonl_files(&dest);
        let session = files
            .iter()
            .find(|p| {
                let s = p.display().to_string();
                s.contains(&ran.session_id) && !s.contains("/subagents/")
            })
            .unwrap_or_else(|| panic!("{} wrote {files:?}", ran.session_id));
        let mut entry = json!({"app": cli.id(), "version": inst.version(&w.home()),
            "command": cli.command(PROMPT), "file": rel(session), "sessionId": ran.session_id,
            "prompts": [PROMPT]});
        match cli {
            // Copilot writes its subagent into the session's own file (events with agentId).
            Chat::Copilot => entry["subagentPrompt"] = json!(SUB_PROMPT),
            Chat::Qwen => {
                entry["subagentPrompt"] = json!(SUB_PROMPT);
                let sub = files
                    .iter()
                    .find(|p| p.display().to_string().contains("/subagents/"))
                    .expect("qwen's subagent file");
                entry["subagentFile"] = json!(rel(sub));
            }
            Chat::Pi | Chat::Droid => {}
        }
        manifest.push(entry);
    }
    std::fs::write(
        &manifest_path,
        serde_json::to_string_pretty(&manifest).unwrap() + "\n",
    )
    .unwrap();
}
