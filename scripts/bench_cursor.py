#!/usr/bin/env python3
"""Benchmark of Cursor's IDE store (docs/cursor.md): a global state.vscdb of N composers of M bubbles each,
listed by one workspace database whose folder is the repo (the 2025 layout: the project is a lookup).

  python3 scripts/bench_cursor.py [--composers 1000] [--bubbles 40] [--bin target/release/almanac] [--no-build]

(a) a cold `capture sweep --dry-run`: the databases are copied and every composer's bubbles queried
(b) nothing changed: no copy, no query (the sweep's stats.storesRead and sessionsRead)
(c) Cursor saved UI state (an ItemTable row) and no composer changed: one copy, the composer list
    queried, no composer's bubbles
(d) one composer grew by an exchange: one copy, one composer's bubbles queried
Each of (a) and (b) is the best of three; printed with the counts and the ratios to (a).
"""
import argparse, json, os, shutil, sqlite3, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
SCHEMA = "CREATE TABLE {} (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)"


def make_stores(user, repo, composers, bubbles):
    (user / "globalStorage").mkdir(parents=True)
    ws = user / "workspaceStorage/0123456789abcdef0123456789abcdef"
    ws.mkdir(parents=True)
    (ws / "workspace.json").write_text(json.dumps({"folder": f"file://{repo}"}))
    g = sqlite3.connect(user / "globalStorage/state.vscdb")
    g.execute("PRAGMA journal_mode=WAL")
    for t in ("ItemTable", "cursorDiskKV"):
        g.execute(SCHEMA.format(t))
    t0 = 1_780_000_000_000
    ids = []
    for c in range(composers):
        cid = f"00000000-0000-4000-8000-{c:012d}"
        ids.append(cid)
        headers = []
        for b in range(bubbles):
            bid = f"{c:08d}-0000-4000-8000-{b:012d}"
            kind = 1 if b % 2 == 0 else 2
            headers.append({"bubbleId": bid, "type": kind})
            text = ("prompt " if kind == 1 else "answer ") + f"{c}.{b} " + "lorem ipsum " * 30
            g.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (f"bubbleId:{cid}:{bid}",
                      json.dumps({"_v": 3, "bubbleId": bid, "type": kind, "text": text, "richText": "{}"})))
        g.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (f"composerData:{cid}", json.dumps({
            "_v": 3, "composerId": cid, "name": f"composer {c}", "createdAt": t0, "lastUpdatedAt": t0 + c,
            "status": "completed", "fullConversationHeadersOnly": headers, "text": "", "context": {}})))
    g.execute("INSERT INTO ItemTable VALUES ('workbench.state', '{\"n\":0}')")
    g.commit()
    g.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    g.close()
    w = sqlite3.connect(ws / "state.vscdb")
    w.execute(SCHEMA.format("ItemTable"))
    w.execute("INSERT INTO ItemTable VALUES ('composer.composerData', ?)", (json.dumps(
        {"allComposers": [{"type": "head", "composerId": i} for i in ids]}),))
    w.commit()
    w.close()
    return ids


def run(bin_, env, cwd):
    t0 = time.perf_counter()
    out = subprocess.run([bin_, "capture", "sweep", "--dry-run", "--json", "--apps", "cursor", "--quiet", "0m"],
                         env=env, cwd=cwd, capture_output=True, check=True).stdout
    dt = time.perf_counter() - t0
    s = json.loads(out)["summary"]
    return dt, s["stats"]["storesRead"], s["stats"]["sessionsRead"], len(s["started"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--composers", type=int, default=1000)
    ap.add_argument("--bubbles", type=int, default=40)
    ap.add_argument("--bin", default=str(TARGET / "release/almanac"))
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "almanac"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        home, repo = d / "home", d / "repo"
        (repo / ".almanac/runs").mkdir(parents=True)
        user = home / ".config/Cursor/User"
        ids = make_stores(user, repo, a.composers, a.bubbles)
        db = user / "globalStorage/state.vscdb"
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "ALMANAC_HOME": str(home / ".codealmanac")}
        print(f"Cursor global database: {a.composers} composers x {a.bubbles} bubbles, {db.stat().st_size >> 20} MiB")
        cold = []
        for _ in range(3):
            shutil.rmtree(home / ".codealmanac", ignore_errors=True)
            cold.append(run(a.bin, env, d))
        t_a, r, q, n = min(cold)
        print(f"(a) cold dry run:           {t_a:7.3f} s   storesRead {r}, sessionsRead {q}, would start {n}")
        t, r, q, n = min(run(a.bin, env, d) for _ in range(3))
        print(f"(b) nothing changed:        {t:7.3f} s   storesRead {r}, sessionsRead {q}   ratio to (a) {t / t_a:.3f}")
        c = sqlite3.connect(db)
        c.execute("UPDATE ItemTable SET value = '{\"n\":1}' WHERE key = 'workbench.state'")
        c.commit()
        t, r, q, n = run(a.bin, env, d)
        print(f"(c) UI state saved:         {t:7.3f} s   storesRead {r}, sessionsRead {q}   ratio to (a) {t / t_a:.3f}")
        cid = ids[7]
        v = json.loads(c.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (f"composerData:{cid}",)).fetchone()[0])
        bid = "ffffffff-0000-4000-8000-000000000001"
        c.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (f"bubbleId:{cid}:{bid}",
                  json.dumps({"_v": 3, "bubbleId": bid, "type": 1, "text": "one more"})))
        v["fullConversationHeadersOnly"].append({"bubbleId": bid, "type": 1})
        v["lastUpdatedAt"] += 10_000
        c.execute("UPDATE cursorDiskKV SET value = ? WHERE key = ?", (json.dumps(v), f"composerData:{cid}"))
        c.commit()
        c.close()
        t, r, q, n = run(a.bin, env, d)
        print(f"(d) one composer grew:      {t:7.3f} s   storesRead {r}, sessionsRead {q}   ratio to (a) {t / t_a:.3f}")


if __name__ == "__main__":
    sys.exit(main())
