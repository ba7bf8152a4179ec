#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 600), one at a time, and records the outcome.
set -u
cd "$(dirname "$0")"
secs="${1:-600}"
for t in head rules ledger config; do
  start=$(date -u +%FT%TZ)
  RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=1048576 > "logs-$t.txt" 2>&1
  echo "$t start=$start rc=$? $(grep -E '^(Done|#[0-9]+ *DONE)' logs-$t.txt | tail -1) $(ls artifacts/$t 2>/dev/null | wc -l) artifacts" >> results.txt
done
