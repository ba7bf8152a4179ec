#!/bin/sh
# Regenerates tests/fixtures/real/mock/ with the real Claude Code and Codex CLIs, then the GitHub Copilot
# CLI, Qwen Code, pi and Factory Droid ones, against the tests' mock model server (loopback only). Uses
# the CLIs in ALMANAC_CLIENTS_BIN (as .ci/run installs them) or PATH.
# Then review `git diff tests/fixtures/real/mock` and update tests/fixtures/README.md if versions changed.
# Older Codex releases for the real-transcript corpus (tests/fixtures/corpus/codex/<v>/) use the other ignored test:
#   ALMANAC_CODEX_BIN=<prefix>/node_modules/.bin/codex ALMANAC_CODEX_VERSION=<v> \
#     cargo test -q --test e2e make_corpus_codex -- --ignored --nocapture
set -eu
cd "$(dirname "$0")/.."
export ALMANAC_REQUIRE_REAL_CLIENTS=1
cargo test -q --test e2e make_real_fixtures -- --ignored --exact make_fixtures::make_real_fixtures
# After the first: it keeps the manifest's claude and codex entries and replaces its own apps'.
exec cargo test -q --test e2e make_chat_fixtures -- --ignored --exact make_chat_fixtures::make_chat_fixtures
