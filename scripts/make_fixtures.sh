#!/bin/sh
# Regenerates tests/fixtures/real/mock/ with the real Claude Code and Codex CLIs against the tests' mock
# model server (loopback only). Uses the CLIs in ALMANAC_CLIENTS_BIN (as .ci/run installs them) or PATH.
# Then review `git diff tests/fixtures/real/mock` and update tests/fixtures/README.md if versions changed.
set -eu
cd "$(dirname "$0")/.."
export ALMANAC_REQUIRE_REAL_CLIENTS=1
exec cargo test -q --test e2e make_real_fixtures -- --ignored --exact make_fixtures::make_real_fixtures
