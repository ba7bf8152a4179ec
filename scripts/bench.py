#!/usr/bin/env python3
"""Sweep benchmark: one run, one corpus, measurements (a)-(g), ratios and peak RSS (docs/performance.md).

  python3 scripts/bench.py [--sessions 10000] [--corpus DIR] [--big-mib 2048] [--max-turns 24]
                           [--bin target/release/almanac] [--no-build]

(a) a bare stat walk of the stores (find -printf size/mtime)
(b) reading every byte and counting lines (find | xargs wc -l)
(c) cold `capture sweep --dry-run` (no ledger, no discovery cache; every new part is read and checked,
    whatever the run budget then starts)
(d) a live sweep when nothing changed since the last capture (ledgers current: every transcript is
    captured once by a no-op agent first); also in words, as the scheduler runs it (skipped transcripts
    only counted)
(e) a dry run after 1% of the transcripts grew (reads only those: prefix check plus new bytes)
(f) a cold dry run with an unlimited run budget (`--max-runs 1000000`): every eligible part's turns counted
(g) `capture sessions --json`, warm (user turns from the turn index: no transcript byte read when nothing
    changed); after the 1% growth of (e), how much one more `capture sessions` reads
(h) with --sessions 100000: (d) and (g) are the 100k no-change sweep and `capture sessions` (targets under
    1.5 s and 2 s, peak RSS under 64 MiB); the worker's drain rate is `--drain`
Each timing is the best of three with the page cache warm. Peak RSS comes from GNU time when installed
(else wait4(), which also counts the forked Python child before exec).

  python3 scripts/bench.py --drain 2000 [--bin target/release/almanac]

[drain] the worker draining a queue: one repo, that many one-turn sessions queued by one live sweep, a no-op
    agent that takes a preset session id (like claude); the time from the sweep's exit until the worker
    has finished every run, per run, minus what starting the agent itself costs (a shell starting `true`
    as often): the milliseconds of almanac overhead per run (target well under 15).

  python3 scripts/bench.py --long-turn 100000 [--bin target/release/almanac]

[long-turn] `capture turns --json` on one turn of that many assistant blocks (distinct message ids, 40 bytes of
    text each) and on the same blocks as that many short turns (one prompt each); best of three, peak RSS.
"""
import argparse, json, os, random, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where cargo builds: CARGO_TARGET_DIR when set (as .ci/run sets it), else the repo's target/.
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
BIN = TARGET / "release/almanac"
GEN = TARGET / "release/examples/gen-corpus"


GNU_TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None


def run(cmd, env=None, stdout=subprocess.DEVNULL, shell=False):
    """Runs a command; returns (seconds, peak RSS in KiB, stdout bytes).

    Peak RSS comes from GNU time when it is installed: wait4() from this Python process would also count
    the forked child's pages before exec (a copy of this interpreter)."""
    if GNU_TIME and not shell:
        cmd = [GNU_TIME, "-f", "ALMANAC_BENCH_RSS %M", *cmd]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE, shell=shell)
    out = p.stdout.read() if stdout is None else b""
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read()
    if p.returncode not in (0,):
        sys.exit(f"command failed ({p.returncode}): {cmd}\n{err.decode(errors='replace')}")
    rss = ru.ru_maxrss
    for line in err.decode(errors="replace").splitlines():
        if line.startswith("ALMANAC_BENCH_RSS "):
            rss = int(line.split()[1])
    return dt, rss, out


def best(n, fn):
    results = [fn() for _ in range(n)]
    return min(results, key=lambda r: r[0])


def worker_done(repo):
    """True once no worker holds the repo's lock and its ledger has no pending entry."""
    import fcntl
    runs = repo / ".almanac/runs"
    try:
        fd = os.open(runs / "worker.lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        entries = json.loads((runs / "capture-ledger.json").read_text())["entries"].values()
        return all(e["status"] != "pending" for e in entries)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def drain(n, binary):
    """[drain]: ms per run the worker spends beyond the agent's own start, draining n queued runs."""
    root = Path(f"/tmp/almanac-bench-drain-{n}")
    shutil.rmtree(root, ignore_errors=True)
    home, ah, repo = root / "home", root / "almanac-home", root / "repo"
    (repo / ".almanac/runs").mkdir(parents=True)
    ah.mkdir(parents=True)
    (ah / "config.toml").write_text(
        '[capture]\nagent = "noop"\n[capture.agents.noop]\ncommand = ["true", "{session_id}", "{prompt_file}"]\n')
    store = home / ".claude/projects/-repo"
    store.mkdir(parents=True)
    old = time.time() - 7200
    for i in range(n):
        sid = f"5e551011-aaaa-4bbb-8ccc-{i:012d}"
        line = json.dumps({"type": "user", "sessionId": sid, "cwd": str(repo), "timestamp": "2026-11-29T00:00:00.000Z",
                           "message": {"role": "user", "content": f"turn {i}"}}) + "\n"
        f = store / f"{sid}.jsonl"
        f.write_text(line)
        os.utime(f, (old, old))
    env = dict(os.environ, HOME=str(home), ALMANAC_HOME=str(ah))
    subprocess.run([binary, "capture", "sweep", "--quiet", "0m", "--max-runs", str(n * 2)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    t0 = time.perf_counter()
    while not worker_done(repo):
        time.sleep(0.005)
    total = time.perf_counter() - t0
    done = sum(1 for p in (repo / ".almanac/runs").glob("run_*.json") if json.loads(p.read_text())["status"] == "done")
    t1 = time.perf_counter()
    subprocess.run(["sh", "-c", f"i=0; while [ $i -lt {n} ]; do /bin/true a b; i=$((i+1)); done"], check=True)
    agent = time.perf_counter() - t1
    print(f"[drain] worker drain: {n} runs ({done} done) in {total:.2f} s = {total / n * 1000:.1f} ms per run; "
          f"starting the agent alone {agent / n * 1000:.1f} ms; almanac overhead {(total - agent) / n * 1000:.1f} ms per run "
          f"(target well under 15)")
    shutil.rmtree(root, ignore_errors=True)


def long_turn(n, binary):
    """[long-turn]: turn reading, one long turn against many short ones of the same blocks."""
    root = Path(f"/tmp/almanac-bench-long-turn-{n}")
    shutil.rmtree(root, ignore_errors=True)
    home, ah, repo = root / "home", root / "almanac-home", root / "repo"
    (repo / ".almanac").mkdir(parents=True)
    ah.mkdir(parents=True)
    store = home / ".claude/projects/-repo"
    store.mkdir(parents=True)
    env = dict(os.environ, HOME=str(home), ALMANAC_HOME=str(ah))
    for shape, sid in (("one turn", "5e551011-aaaa-4bbb-8ccc-000000000001"),
                       ("short turns", "5e551011-aaaa-4bbb-8ccc-000000000002")):
        f = store / f"{sid}.jsonl"
        with open(f, "w") as out:
            user = lambda i: json.dumps({"type": "user", "sessionId": sid, "cwd": str(repo),
                                         "message": {"role": "user", "content": f"prompt {i}"}}) + "\n"
            out.write(user(0))
            for i in range(n):
                if shape == "short turns" and i:
                    out.write(user(i))
                out.write(json.dumps({"type": "assistant", "sessionId": sid, "message": {
                    "id": f"msg_{i}", "role": "assistant",
                    "content": [{"type": "text", "text": f"block {i:08d} " + "y" * 25}]}}) + "\n")
        cmd = [binary, "capture", "turns", "--json", str(f)]
        dt, rss, _ = best(3, lambda: run(cmd, env=env))
        print(f"[long-turn] capture turns, {n} assistant blocks as {shape}: {dt:.3f} s, peak RSS {rss / 1024:.1f} MiB")
    shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10000)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--big-mib", type=int, default=0, help="also measure one transcript of this size alone")
    ap.add_argument("--max-turns", type=int, default=24, help="passed to gen-corpus (smaller sessions for 100k)")
    ap.add_argument("--drain", type=int, default=0, help="only [drain]: the worker draining this many queued runs")
    ap.add_argument("--bin", default=str(BIN), help="the almanac binary to measure")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo (the binaries are built)")
    ap.add_argument("--long-turn", type=int, default=0, help="only [long-turn]: turn reading, one turn of this many blocks")
    a = ap.parse_args()
    if a.long_turn:
        if a.bin == str(BIN):
            subprocess.run(["cargo", "build", "--release", "-q", "--bin", "almanac"], cwd=ROOT, check=True)
        long_turn(a.long_turn, a.bin)
        return
    if a.drain:
        if a.bin == str(BIN):
            subprocess.run(["cargo", "build", "--release", "-q", "--bin", "almanac"], cwd=ROOT, check=True)
        drain(a.drain, a.bin)
        return
    corpus = Path(a.corpus or f"/tmp/almanac-bench-{a.sessions}")
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q", "--bin", "almanac", "--example", "gen-corpus"], cwd=ROOT, check=True)
    if not (corpus / "home").is_dir():
        subprocess.run([str(GEN), "--out", str(corpus), "--sessions", str(a.sessions), "--max-turns", str(a.max_turns)], check=True)
    home, ah = corpus / "home", corpus / "almanac-home"
    shutil.rmtree(ah, ignore_errors=True)
    ah.mkdir(parents=True)
    # A capture agent that does nothing and succeeds: the benchmark measures the sweep, not an agent.
    (ah / "config.toml").write_text('[capture]\nagent = "noop"\n[capture.agents.noop]\ncommand = ["true"]\n')
    for runs in corpus.glob("repos/*/.almanac/runs"):
        shutil.rmtree(runs)
        runs.mkdir()
    env = dict(os.environ, HOME=str(home), ALMANAC_HOME=str(ah))
    stores = [str(home / ".claude"), str(home / ".codex")]
    files = subprocess.run(["find", *stores, "-name", "*.jsonl"], capture_output=True, text=True).stdout.split()
    total = sum(os.path.getsize(f) for f in files)
    sweep = [a.bin, "capture", "sweep", "--json", "--quiet", "0m"]

    run(["find", *stores, "-name", "*.jsonl", "-printf", "%s %T@\\n"])  # warm the page cache
    run(f"find {' '.join(stores)} -name '*.jsonl' -print0 | xargs -0 cat > /dev/null", shell=True)
    ta = best(3, lambda: run(["find", *stores, "-name", "*.jsonl", "-printf", "%s %T@\\n"]))
    tb = best(3, lambda: run(f"find {' '.join(stores)} -name '*.jsonl' -print0 | xargs -0 wc -l > /dev/null", shell=True))

    def cold():
        shutil.rmtree(ah / "state", ignore_errors=True)
        return run(sweep + ["--dry-run"], env=env, stdout=None)
    tc = best(3, cold)
    c_stats = json.loads(tc[2])["summary"]["stats"]

    def cold_unlimited():
        shutil.rmtree(ah / "state", ignore_errors=True)
        return run(sweep + ["--dry-run", "--max-runs", "1000000"], env=env, stdout=None)
    tf = best(3, cold_unlimited)
    f_sum = json.loads(tf[2])["summary"]
    sessions_cmd = [a.bin, "capture", "sessions", "--json"]
    run(sessions_cmd, env=env)
    tg = best(3, lambda: run(sessions_cmd, env=env, stdout=None))
    g_out = json.loads(tg[2])
    g_rows, g_read = len(g_out["sessions"]), g_out["stats"]["bytesRead"]
    # Kept on stderr as measured: the drain below takes long at 100k, and a failure there would lose them.
    for name, r in [("a", ta), ("b", tb), ("c", tc), ("f", tf), ("g", tg)]:
        print(f"bench: ({name}) {r[0]:.3f} s, peak RSS {r[1] / 1024:.1f} MiB", file=sys.stderr, flush=True)

    # Capture everything once (workers run the no-op agent), then wait until every ledger is current.
    run(sweep + ["--max-runs", "100000000"], env=env, stdout=None)
    # A no-op run costs the worker 12-30 ms (fsync-bound): 100k sessions drain in about 45 minutes.
    deadline = time.time() + max(1800, 0.06 * a.sessions)
    while True:
        pending = 0
        for lp in corpus.glob("repos/*/.almanac/runs/capture-ledger.json"):
            try:
                pending += sum(1 for e in json.loads(lp.read_text())["entries"].values() if e["status"] == "pending")
            except (ValueError, KeyError):
                pending += 1
        if pending == 0:
            break
        if time.time() > deadline:
            # Measuring (d) while workers still run would time the sweep against them.
            sys.exit(f"{pending} runs still pending after the drain's deadline; (d) not measured")
        time.sleep(1)
    run(sweep + ["--max-runs", "100000000"], env=env, stdout=None)  # records anything the first pass left
    td = best(3, lambda: run(sweep, env=env, stdout=None))
    d = json.loads(td[2])["summary"]
    # The same sweep in words, as the scheduler runs it: skipped transcripts are counted, not listed.
    tdw = best(3, lambda: run(sweep[:3] + sweep[4:], env=env))
    assert d["eligible"] == 0, f"(d) expected nothing to capture, got {d['eligible']}"

    # 1% of root transcripts grow by one user turn.
    rng = random.Random(7)
    roots = [f for f in files if "/subagents/" not in f]
    grown = rng.sample(roots, max(1, len(roots) // 100))
    for f in grown:
        # A copy of the file's first user prompt: a new turn with the file's own ids and cwd.
        line = next(l for l in open(f, "rb") if (b'"type":"user"' in l and b'tool_result' not in l) or b'"user_message"' in l)
        with open(f, "ab") as out:
            out.write(line)
        st = os.stat(f)
        os.utime(f, (st.st_atime, st.st_mtime))
    te = best(3, lambda: run(sweep + ["--dry-run"], env=env, stdout=None))
    e = json.loads(te[2])["summary"]
    grown_bytes = sum(os.path.getsize(f) for f in grown)
    added_bytes = sum(len(next(l for l in open(f, "rb") if (b'"type":"user"' in l and b'tool_result' not in l) or b'"user_message"' in l)) for f in grown)
    tg2 = run(sessions_cmd, env=env, stdout=None)
    g2 = json.loads(tg2[2])["stats"]

    mib = lambda kib: kib / 1024
    print(f"corpus: {len(files)} transcripts ({len(roots)} root sessions), {total / 2**20:.0f} MiB, {os.cpu_count()} cores")
    print(f"{'measurement':<44} {'seconds':>8} {'peak RSS':>10} {'bytesRead':>14}")
    rows = [
        ("(a) stat walk: find -printf", ta, None),
        ("(b) read every byte: find | xargs wc -l", tb, None),
        ("(c) cold capture sweep --dry-run", tc, c_stats["bytesRead"]),
        ("(d) live sweep, nothing changed", td, d["stats"]["bytesRead"]),
        ("(d) the same in words (what cron runs)", tdw, 0),
        (f"(e) dry run, {len(grown)} transcripts (1%) grew", te, e["stats"]["bytesRead"]),
        ("(f) cold dry run, --max-runs 1000000", tf, f_sum["stats"]["bytesRead"]),
        (f"(g) capture sessions --json ({g_rows} rows)", tg, ""),
    ]
    for name, r, br in rows:
        rss = f"{mib(r[1]):.1f} MiB" if br is not None else ""
        br = None if br == "" else br
        print(f"{name:<44} {r[0]:>8.3f} {rss:>10} {'' if br is None else br:>14}")
    print(f"(c)/(b) = {tc[0] / tb[0]:.2f}   (target <= 1.5); (c) peak RSS {mib(tc[1]):.1f} MiB (target < 32 MiB)")
    print(f"(d)/(a) = {td[0] / ta[0]:.2f}   (target <= 3); (d) bytesRead = {d['stats']['bytesRead']} (target 0)")
    print(f"(f)/(b) = {tf[0] / tb[0]:.2f}   (target <= 1.5); (f)/(a) = {tf[0] / ta[0]:.1f}; eligible {f_sum['eligible']}")
    print(f"(g)/(a) = {tg[0] / ta[0]:.2f}   (target <= 2); (g) bytesRead = {g_read} (target 0); (g)/(b) = {tg[0] / tb[0]:.2f}")
    print(f"(g) after 1% grew: {tg2[0]:.3f} s, bytesRead = {g2['bytesRead']} for {added_bytes} bytes appended to {len(grown)} files "
          f"({grown_bytes} bytes in them); {g2['turnsResumed']} resumed, {g2['turnsReadWhole']} read whole, {g2['turnsUnchanged']} unchanged")
    if a.sessions >= 100000:
        mib = lambda kib: kib / 1024
        print(f"(h) 100k: no-change sweep {td[0]:.3f} s (target < 1.5), {mib(td[1]):.1f} MiB ({tdw[0]:.3f} s, {mib(tdw[1]):.1f} MiB "
              f"in words); capture sessions {tg[0]:.3f} s (target < 2), {mib(tg[1]):.1f} MiB (target < 64 MiB each)")
    print(f"(e) bytesRead = {e['stats']['bytesRead']} for {grown_bytes} bytes in the grown files; eligible {e['eligible']} of {len(grown)}")
    if a.big_mib:
        big = corpus / "big"
        shutil.rmtree(big, ignore_errors=True)
        subprocess.run([str(GEN), "--out", str(big), "--sessions", "0", "--repos", "1", "--big-mib", str(a.big_mib)], check=True)
        benv = dict(os.environ, HOME=str(big / "home"), ALMANAC_HOME=str(big / "ah"))
        tbig = run(sweep + ["--dry-run"], env=benv, stdout=None)
        print(f"single {a.big_mib} MiB transcript, cold dry run: {tbig[0]:.2f} s, peak RSS {mib(tbig[1]):.1f} MiB")
        shutil.rmtree(big, ignore_errors=True)


if __name__ == "__main__":
    main()
