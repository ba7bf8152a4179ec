#!/usr/bin/env python3
"""Benchmark of a store that is not JSONL (docs/stores.md): one opencode database of N sessions.

  python3 scripts/bench_stores.py [--sessions 1000] [--messages 12] [--bin target/release/almanac] [--no-build]

(a) a cold `capture sweep --dry-run`: the database is copied and every session's messages queried
(b) the same when nothing changed: no copy, no query (the sweep's stats.storesRead and sessionsRead)
(c) after one session grew: the database copied again, one session's messages queried
Each timing is the best of three; printed with the counts and the ratios to (a).
"""
import argparse, json, os, shutil, sqlite3, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
FIXTURE = ROOT / "tests/fixtures/real/stores/opencode/opencode.db"


def make_db(path, repo, sessions, messages):
    src = sqlite3.connect(f"file:{FIXTURE}?immutable=1", uri=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    for (sql,) in src.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"):
        db.execute(sql)
    t = 1_800_000_000_000
    for s in range(sessions):
        sid = f"ses_bench{s:06d}"
        db.execute(
            "INSERT INTO session (id, project_id, slug, directory, title, version, time_created, time_updated)"
            " VALUES (?, 'p', 'slug', ?, 'title', '1.18.33', ?, ?)", (sid, str(repo), t, t + messages))
        for m in range(messages):
            mid = f"msg_{s:06d}_{m:04d}"
            role = "user" if m % 2 == 0 else "assistant"
            db.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
                       (mid, sid, t + m, t + m, json.dumps({"role": role, "time": {"created": t + m}})))
            for p in range(2):
                text = f"{role} text {m}.{p} " + "lorem ipsum " * 20
                db.execute("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?, ?)",
                           (f"prt_{s:06d}_{m:04d}_{p}", mid, sid, t + m, t + m, json.dumps({"type": "text", "text": text})))
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def sweep(bin_, env, cwd):
    best, stats = None, None
    for _ in range(3):
        t0 = time.perf_counter()
        out = subprocess.run([bin_, "capture", "sweep", "--dry-run", "--json", "--apps", "opencode", "--quiet", "0m"],
                             env=env, cwd=cwd, capture_output=True, check=True).stdout
        dt = time.perf_counter() - t0
        s = json.loads(out)["summary"]["stats"]
        if best is None or dt < best:
            best = dt
        # The counts of the first of the three: the later ones find the views made.
        stats = stats or (s["storesRead"], s["sessionsRead"])
    return best, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=12)
    ap.add_argument("--bin", default=str(TARGET / "release/almanac"))
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "almanac"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        home, repo = d / "home", d / "repo"
        (repo / ".almanac/runs").mkdir(parents=True)
        store = home / ".local/share/opencode"
        store.mkdir(parents=True)
        db = store / "opencode.db"
        make_db(db, repo, a.sessions, a.messages)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "ALMANAC_HOME": str(home / ".codealmanac")}
        print(f"opencode database: {a.sessions} sessions x {a.messages} messages (2 parts each), {db.stat().st_size >> 10} KiB")
        cold = []
        for _ in range(3):
            shutil.rmtree(home / ".codealmanac", ignore_errors=True)
            t0 = time.perf_counter()
            out = subprocess.run([a.bin, "capture", "sweep", "--dry-run", "--json", "--apps", "opencode", "--quiet", "0m"],
                                 env=env, cwd=d, capture_output=True, check=True).stdout
            cold.append(time.perf_counter() - t0)
            s = json.loads(out)["summary"]["stats"]
        cold_t = min(cold)
        print(f"(a) cold dry run:            {cold_t:7.3f} s   storesRead {s['storesRead']}, sessionsRead {s['sessionsRead']}")
        t, (r, q) = sweep(a.bin, env, d)
        print(f"(b) nothing changed:         {t:7.3f} s   storesRead {r}, sessionsRead {q}   ratio to (a) {t / cold_t:.3f}")
        c = sqlite3.connect(db)
        c.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES ('msg_new', 'ses_bench000007', 1900000000000, 1900000000000, '{\"role\":\"user\"}')")
        c.execute("UPDATE session SET time_updated = 1900000000001 WHERE id = 'ses_bench000007'")
        c.commit()
        c.close()
        t0 = time.perf_counter()
        out = subprocess.run([a.bin, "capture", "sweep", "--dry-run", "--json", "--apps", "opencode", "--quiet", "0m"],
                             env=env, cwd=d, capture_output=True, check=True).stdout
        t = time.perf_counter() - t0
        s = json.loads(out)["summary"]["stats"]
        print(f"(c) one session grew:        {t:7.3f} s   storesRead {s['storesRead']}, sessionsRead {s['sessionsRead']}   ratio to (a) {t / cold_t:.3f}")


if __name__ == "__main__":
    sys.exit(main())
