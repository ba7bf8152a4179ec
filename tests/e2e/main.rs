//! End-to-end tests: each builds a user home with transcripts and repos, runs the real `almanac` binary,
//! and checks what a user would check. They run on Unix (CI runs them on Linux); Windows builds are
//! checked by the smoke suite under wine (`scripts/windows_smoke.py`).
#![cfg(unix)]

mod agent_env;
mod agent_process;
mod agents_real;
mod apps_off;
mod automation;
mod budget;
mod capture_now;
mod chat_clients;
mod claude_capture;
mod codex_capture;
mod common;
mod conversation;
mod corpus;
mod cursor;
mod fidelity;
mod first_run;
mod fixtures;
mod fixtures_real_mock;
mod forks;
mod fuzz_regressions;
mod hostile;
mod hostile_repo;
mod in_project;
mod installed;
mod ledger_format;
mod live;
mod live_amp_auggie;
mod locks;
mod make_chat_fixtures;
mod make_fixtures;
mod mock_model;
mod more_apps;
mod perf;
mod polish;
mod prompts;
mod races;
mod real_clients;
mod real_stores;
mod real_stores_aider;
mod real_stores_b;
mod resources;
mod rules_cli;
mod schedulers;
mod schtasks;
mod store_bounds;
mod stores;
mod subvert;
mod sweep;
mod turn_fidelity;
mod turns;
mod wiki_only;
mod worker_process;
mod worker_rules;
