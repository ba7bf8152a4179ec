#!/usr/bin/env python3
"""A seeded fault-injection soak of the sweep, the worker and the ledger (docs/testing.md).

  python3 scripts/soak.py [--seeds 1-3] [--steps 60] [--bin target/debug/almanac] [--shrink] [--keep]
                          [--verbose] [--quiet-within 240]

For each seed, a world: a HOME with Claude Code and Codex sessions in three git repos with `.almanac/`, two
ALMANAC_HOMEs (each its own sweep lock and agent slots; the repos' ledgers are shared), and a fake capture
agent. A schedule of steps, a pure function of the seed, is then played against the real binary: sessions
grow (whole lines and half-written ones), are forked (Claude Code: a new file that copies the records, uuids
and all), rewritten before their cursor or truncated, `capture reset`; live sweeps run alone and several at
once from both homes; workers and agents are killed with SIGKILL; run logs are deleted or truncated; the
agent succeeds, fails, times out, hangs ignoring SIGTERM or leaves a child behind. What the processes do in
between is up to the machine: the schedule is the same, the interleavings are not.

Checked after every step: every ledger parses; no sweep's JSON is invalid or its exit code unexpected; no
alarm that nothing caused (`ledger-overwritten`: nothing in the soak writes a ledger; `agent-wrote-outside-
wiki`: the agent writes only its page); a cursor never goes backwards (unless the soak reset or rewrote
that transcript) nor past the transcript's complete lines; at most one worker and one agent per repo and at
most `max_parallel_agents` agents per home, orphans included (each agent checks at its start who else runs).
At the end, with the agent made to succeed and the files left alone, sweeps run until nothing is left to do;
then: no run lost or stuck (none queued or running, no entry pending), every failed or cancelled run has a
reason, every entry's cursor is the end of a successful run (or a copy's placement), no run started on lines
changed since it was queued, and of sessions the soak never reset or rewrote every record is in exactly one
successful run: of its session, or, for a session and its forks (which copy its records, ids and all), of
one of them.

Each violation is printed with the seed and the step after which it was seen. `--shrink` then looks for a
shorter schedule that still shows it (dropping steps, one half at a time, then one at a time) and prints it.
Exit 1 when a seed showed a violation.
"""
import argparse, json, os, random, shutil, signal, subprocess, sys, tempfile, time, uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
MAX_PARALLEL = 2
TIMEOUT_S = 4

# The fake capture agent: checks who else runs, then does what the behaviour file says.
AGENT = r'''#!/usr/bin/env python3
import json, os, signal, subprocess, sys, time
soak = os.environ["SOAK_DIR"]
run_id = sys.argv[2]
home = os.environ.get("ALMANAC_HOME", "")
repo = os.getcwd()
active = os.path.join(soak, "active")
os.makedirs(active, exist_ok=True)
me = os.path.join(active, str(os.getpid()))
with open(me, "w") as f:
    json.dump({"repo": repo, "home": home, "run": run_id}, f)
def alive(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"soak-agent" in f.read()
    except OSError:
        return False
same_repo, same_home = 0, 0
for name in os.listdir(active):
    if not name.isdigit() or not alive(int(name)):
        continue
    try:
        other = json.load(open(os.path.join(active, name)))
    except (OSError, ValueError):
        continue
    same_repo += other["repo"] == repo
    same_home += other["home"] == home
if same_repo > 1 or same_home > int(os.environ["SOAK_MAX_PARALLEL"]):
    with open(os.path.join(soak, "violations.log"), "a") as f:
        f.write(json.dumps({"kind": "agents-at-once", "run": run_id, "repo": repo, "home": home,
                            "sameRepo": same_repo, "sameHome": same_home}) + "\n")
try:
    mode = json.load(open(os.path.join(soak, "behaviour"))).get("mode", "ok")
except (OSError, ValueError):
    mode = "ok"
if mode == "child":
    subprocess.Popen(["sleep", "30"], start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
if mode == "hang-ignoring-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode.startswith("hang"):
    time.sleep(600)
if mode == "slow":
    time.sleep(1.5)
if mode == "fail":
    sys.exit(3)
os.makedirs(".almanac/pages", exist_ok=True)
with open(".almanac/pages/soak.md", "a") as f:
    f.write(f"- {run_id}\n")
'''

KINDS = ["new", "append", "append", "append", "half", "fork", "rewrite", "truncate", "reset", "sweep",
         "sweep", "sweep", "sweeps", "kill-worker", "kill-agent", "damage-log", "behave", "wait"]
MODES = ["ok", "ok", "ok", "slow", "fail", "hang", "hang-ignoring-term", "child"]


def schedule(seed, steps):
    """The steps of a seed: (kind, arguments), a pure function of the seed."""
    r = random.Random(seed)

    def args():
        return {"pick": r.random(), "n": r.randint(1, 4), "home": r.randint(0, 1),
                "app": r.choice(["claude", "codex"]), "repo": r.randint(0, 2), "mode": r.choice(MODES),
                "ms": r.choice([50, 200, 800, 2500]), "count": r.randint(2, 3),
                "how": r.choice(["delete", "truncate"])}

    out = [("new", {**args(), "app": "claude", "repo": 0}), ("new", {**args(), "app": "codex", "repo": 1})]
    while len(out) < steps:
        out.append((r.choice(KINDS), args()))
    return out


def epoch(iso):
    """Seconds since the epoch of an RFC 3339 time as almanac writes it."""
    import datetime
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def age(pid):
    """Seconds since process `pid` started (0 when it is gone)."""
    try:
        ticks = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0


class Session:
    def __init__(self, app, repo, path, sid):
        self.app, self.repo, self.path, self.sid = app, repo, path, sid
        self.lines = []        # complete lines written, as bytes
        self.uuids = []        # each line's record id (Claude)
        self.half = b""        # an unterminated tail
        self.touched = False   # reset, rewritten or truncated: no exactly-once check
        self.parent = None     # a fork's parent session
        self.n = 0
        # (when, complete lines after, the first line changed or None): every write of the file.
        self.history = []

    def note(self, changed=None):
        self.history.append((time.time(), len(self.lines), changed))

    def changes(self, since, until):
        """The writes between two times that changed or removed a line already there: (first line, lines)."""
        return [(c, n) for t, n, c in self.history if since < t <= until and c is not None]


class World:
    def __init__(self, seed, binary, keep):
        self.seed, self.bin, self.keep = seed, binary, keep
        self.dir = Path(tempfile.mkdtemp(prefix=f"almanac-soak-{seed}-"))
        self.home = self.dir / "home"
        self.homes = [self.home / ".codealmanac", self.home / ".almanac-b"]
        self.soak = self.dir / "soak"
        self.soak.mkdir(parents=True)
        (self.soak / "behaviour").write_text('{"mode": "ok"}')
        agent = self.soak / "soak-agent"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        self.repos = []
        for i in range(3):
            r = self.dir / "repos" / f"r{i}"
            r.mkdir(parents=True)
            subprocess.run(["git", "init", "-q", str(r)], check=True)
            self.repos.append(r)
        for h in self.homes:
            h.mkdir(parents=True)
            (h / "config.toml").write_text(
                f'[capture]\nagent = "soak"\nmax_attempts = 3\ntimeout = "{TIMEOUT_S}s"\n'
                f'max_parallel_agents = {MAX_PARALLEL}\n\n[capture.agents.soak]\n'
                f'command = ["{agent}", "{{prompt_file}}", "{{run_id}}"]\n')
        for r in self.repos:
            self.almanac(["init", str(r)], 0)
        self.sessions = []
        self.violations = []
        self.cursors = {}

    def env(self, home=0):
        e = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.home), "ALMANAC_HOME": str(self.homes[home]),
             "SOAK_DIR": str(self.soak), "SOAK_MAX_PARALLEL": str(MAX_PARALLEL)}
        return e

    def almanac(self, args, home=0):
        return subprocess.run([self.bin, *args], env=self.env(home), capture_output=True, timeout=120)

    # -- sessions --------------------------------------------------------------------------------------

    def new(self, app, repo):
        sid = str(uuid.UUID(int=random.Random(f"{self.seed}-{len(self.sessions)}").getrandbits(128)))
        if app == "claude":
            path = self.home / ".claude/projects" / f"-repos-r{repo}" / f"{sid}.jsonl"
        else:
            path = self.home / ".codex/sessions/2026/12/04" / f"rollout-2026-12-04T10-00-00-{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        s = Session(app, repo, path, sid)
        self.sessions.append(s)
        if app == "codex":
            meta = {"type": "session_meta", "payload": {"id": sid, "cwd": str(self.repos[repo]),
                                                        "source": "cli", "originator": "codex_cli_rs"}}
            self.add(s, [json.dumps(meta)], [None])
        return s

    def record(self, s, role):
        s.n += 1
        text = f"{role} {s.n} of {s.sid[:8]}"
        rid = str(uuid.UUID(int=random.Random(f"{s.sid}-{s.n}").getrandbits(128)))
        cwd = str(self.repos[s.repo])
        if s.app == "claude":
            msg = {"role": role, "content": text if role == "user" else [{"type": "text", "text": text}]}
            rec = {"type": role, "sessionId": s.sid, "cwd": cwd, "uuid": rid, "message": msg,
                   "timestamp": "2026-12-04T10:00:00.000Z"}
            return json.dumps(rec), rid
        kind = "user_message" if role == "user" else "agent_message"
        return json.dumps({"type": "event_msg", "timestamp": "2026-12-04T10:00:00.000Z",
                           "payload": {"type": kind, "message": text}}), None

    def add(self, s, lines, ids):
        data = b"".join(l.encode() + b"\n" for l in lines)
        if s.half:
            # The half-written line is finished first.
            data = s.half_rest + data
            s.lines.append(s.half_full)
            s.uuids.append(s.half_id)
            s.half = b""
        with open(s.path, "ab") as f:
            f.write(data)
        for l, i in zip(lines, ids):
            s.lines.append(l.encode() + b"\n")
            s.uuids.append(i)
        s.note()

    def append(self, s, n):
        lines, ids = [], []
        for _ in range(n):
            for role in ("user", "assistant"):
                l, i = self.record(s, role)
                lines.append(l)
                ids.append(i)
        self.add(s, lines, ids)

    def half_line(self, s):
        if s.half:
            return
        l, i = self.record(s, "user")
        full = l.encode() + b"\n"
        cut = len(full) // 2
        with open(s.path, "ab") as f:
            f.write(full[:cut])
        s.half, s.half_full, s.half_rest, s.half_id = full[:cut], full, full[cut:], i

    def fork(self, parent):
        f = self.new("claude", parent.repo)
        f.parent = parent
        copied = [l for l in parent.lines]
        data = b"".join(copied)
        # A fork copies the records, uuids and all, under its own session id.
        data = data.replace(parent.sid.encode(), f.sid.encode())
        with open(f.path, "wb") as out:
            out.write(data)
        f.lines = [l.replace(parent.sid.encode(), f.sid.encode()) for l in copied]
        f.uuids = list(parent.uuids)
        f.n = parent.n + 1000
        f.note()
        return f

    def rewrite(self, s):
        """An edit before the cursor: the first record with text gets other text of the same length."""
        i = next((i for i, l in enumerate(s.lines) if b" of " in l), None)
        if i is None:
            return
        s.lines[i] = s.lines[i].replace(b" of ", b" OF ", 1)
        self.flush(s, i + 1)
        s.touched = True

    def truncate(self, s, keep):
        s.lines = s.lines[:keep]
        s.uuids = s.uuids[:keep]
        s.half = b""
        self.flush(s, keep + 1)
        s.touched = True

    def flush(self, s, changed):
        tmp = s.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(s.lines) + s.half)
        os.replace(tmp, s.path)
        s.note(changed)

    # -- processes -------------------------------------------------------------------------------------

    def procs(self, needle):
        """(pid, args) of this world's processes whose args hold `needle`."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                args = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
                env = open(f"/proc/{d}/environ", "rb").read()
            except OSError:
                continue
            if str(self.soak).encode() in env and any(needle.encode() in a for a in args):
                out.append((int(d), [a.decode(errors="replace") for a in args if a]))
        return out

    def kill_all(self):
        for pid, _ in self.procs(""):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    # -- steps -----------------------------------------------------------------------------------------

    def pick(self, a, pred=lambda s: True):
        cands = [s for s in self.sessions if pred(s)]
        return cands[int(a["pick"] * len(cands))] if cands else None

    def sweep(self, home, wait=True):
        p = subprocess.Popen([self.bin, "capture", "sweep", "--json", "--quiet", "0m", "--max-runs", "50"],
                             env=self.env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return p

    def check_sweep(self, step, p):
        out, err = p.communicate(timeout=300)
        # 75 (EX_TEMPFAIL): another sweep of the same home holds the sweep lock, and this one did nothing.
        if p.returncode == 75 and b"another capture sweep holds" in err:
            return
        if p.returncode not in (0, 1):
            self.violate(step, "sweep-exit", f"exit {p.returncode}: {err.decode()[-500:]}")
            return
        try:
            v = json.loads(out)
        except ValueError:
            self.violate(step, "sweep-json", out.decode()[-500:])
            return
        for item in v.get("summary", {}).get("needsAttention", []):
            if item.get("reason") in ("ledger-overwritten", "agent-wrote-outside-wiki", "ledger-unsealed"):
                self.violate(step, "false-alarm", f"{item.get('reason')}: {item.get('detail')}")

    def play(self, step, kind, a):
        if kind == "new":
            s = self.new(a["app"], a["repo"])
            self.append(s, a["n"])
        elif kind == "append" and (s := self.pick(a)):
            self.append(s, a["n"])
        elif kind == "half" and (s := self.pick(a)):
            self.half_line(s)
        elif kind == "fork" and (s := self.pick(a, lambda s: s.app == "claude" and s.lines and not s.half)):
            self.append(self.fork(s), 1)
        elif kind == "rewrite" and (s := self.pick(a, lambda s: len(s.lines) > 2)):
            self.rewrite(s)
        elif kind == "truncate" and (s := self.pick(a, lambda s: len(s.lines) > 4)):
            self.truncate(s, len(s.lines) // 2)
        elif kind == "reset" and (s := self.pick(a)):
            if self.almanac(["capture", "reset", str(s.path)]).returncode == 0:
                s.touched = True
        elif kind == "sweep":
            self.check_sweep(step, self.sweep(a["home"]))
        elif kind == "sweeps":
            ps = [self.sweep((a["home"] + i) % 2) for i in range(a["count"])]
            for p in ps:
                self.check_sweep(step, p)
        elif kind == "kill-worker":
            ws = self.procs("worker")
            if ws:
                os.kill(ws[int(a["pick"] * len(ws))][0], signal.SIGKILL)
        elif kind == "kill-agent":
            ags = self.procs("soak-agent")
            if ags:
                os.kill(ags[int(a["pick"] * len(ags))][0], signal.SIGKILL)
        elif kind == "damage-log":
            logs = sorted(p for r in self.repos for p in (r / ".almanac/runs").glob("run_*.log"))
            if logs:
                log = logs[int(a["pick"] * len(logs))]
                try:
                    log.unlink() if a["how"] == "delete" else open(log, "w").close()
                except OSError:
                    pass
        elif kind == "behave":
            (self.soak / "behaviour").write_text(json.dumps({"mode": a["mode"]}))
        elif kind == "wait":
            time.sleep(a["ms"] / 1000)

    # -- invariants ------------------------------------------------------------------------------------

    def violate(self, step, kind, detail):
        self.violations.append((step, kind, detail))

    def ledgers(self, step):
        out = {}
        for r in self.repos:
            p = r / ".almanac/runs/capture-ledger.json"
            try:
                text = p.read_bytes()
            except FileNotFoundError:
                continue
            try:
                out[r] = json.loads(text)
            except ValueError:
                self.violate(step, "ledger-unparseable", f"{p}: {text[:200]!r}")
        return out

    def check(self, step):
        v = self.soak / "violations.log"
        if v.exists():
            for line in v.read_text().splitlines():
                self.violate(step, "agents-at-once", line)
            v.unlink()
        by_path = {str(s.path): s for s in self.sessions}
        for repo, ledger in self.ledgers(step).items():
            for k, e in ledger.get("entries", {}).items():
                line = e.get("lastCapturedLine", 0)
                s = by_path.get(e.get("path"))
                before = self.cursors.get(k)
                # A transcript the soak reset or rewrote may be captured again from an earlier line.
                if before is not None and line < before and (s is None or not s.touched):
                    self.violate(step, "cursor-backwards", f"{k}: line {before} -> {line}")
                if s is not None and not s.touched and line > len(s.lines):
                    self.violate(step, "cursor-past-end", f"{k}: line {line} of {len(s.lines)} complete lines")
                self.cursors[k] = line
        # A second worker of a repo waits a moment for the first one's lock, then leaves: two workers of
        # one repo both past that wait are two workers at work.
        workers = {}
        for pid, args in self.procs("worker"):
            if "--repo" in args and age(pid) > 8:
                repo = args[args.index("--repo") + 1]
                workers.setdefault(repo, []).append(pid)
        for repo, pids in workers.items():
            if len(pids) > 1:
                self.violate(step, "two-workers", f"{repo}: {pids}")

    def runs(self):
        out = []
        for r in self.repos:
            for p in (r / ".almanac/runs").glob("run_*.json"):
                try:
                    out.append(json.loads(p.read_text()))
                except ValueError:
                    pass
        return out

    def quiesce(self, step):
        (self.soak / "behaviour").write_text('{"mode": "ok"}')
        for s in self.sessions:
            if s.half:
                self.add(s, [], [])
        deadline = time.time() + QUIET_WITHIN
        quiet_rounds = 0
        last = []
        while time.time() < deadline:
            p = self.sweep(0)
            out, _ = p.communicate(timeout=300)
            started = 0
            try:
                summary = json.loads(out)["summary"]
                started = len(summary["started"])
                last = [f'{i.get("sessionId")} lines {i.get("fromLine")}-{i.get("toLine")}'
                        for i in summary["started"]]
                # Failures the soak caused (a failing agent, a killed worker) spend a transcript's
                # attempts: given back, as a user would, so every line is captured in the end.
                for item in summary.get("needsAttention", []):
                    if item.get("reason") == "retry-budget-exhausted":
                        self.almanac(["capture", "reset", "--retries", item["transcriptPath"]])
                        started += 1
            except (ValueError, KeyError):
                pass
            self.wait_idle(deadline)
            busy = any(r.get("status") in ("queued", "running") for r in self.runs())
            pending = any(e.get("status") == "pending" for l in self.ledgers(step).values()
                          for e in l.get("entries", {}).values())
            if started == 0 and not busy and not pending:
                quiet_rounds += 1
                if quiet_rounds >= 2:
                    return True
            else:
                quiet_rounds = 0
        cancelled = sorted((r for r in self.runs() if r.get("status") == "cancelled"),
                           key=lambda r: r.get("runId", ""))[-3:]
        why = "; ".join(f'{r.get("sessionId")} {r.get("fromLine")}-{r.get("toLine")}: {r.get("error")}'
                        for r in cancelled)
        self.violate(step, "never-quiet", f"runs still queued or started after {QUIET_WITHIN} s of sweeps; "
                     f"the last sweep started {last}; the last cancelled: {why}")
        return False

    def wait_idle(self, deadline):
        while time.time() < deadline:
            if not self.procs("worker") and not self.procs("soak-agent"):
                return
            time.sleep(0.1)

    def final(self, step):
        self.check(step)
        runs = self.runs()
        for r in runs:
            if r.get("status") in ("queued", "running"):
                self.violate(step, "run-stuck", f"{r['runId']}: {r['status']}")
            if r.get("status") in ("failed", "cancelled") and not r.get("error"):
                self.violate(step, "failure-without-reason", r["runId"])
        done = [r for r in runs if r.get("status") == "done"]
        by_path = {}
        for r in done:
            by_path.setdefault(r["transcriptPath"], []).append(r)
        for repo, ledger in self.ledgers(step).items():
            for k, e in ledger.get("entries", {}).items():
                if e.get("status") == "pending":
                    self.violate(step, "entry-stuck", k)
                line = e.get("lastCapturedLine", 0)
                ends = {r["toLine"] for r in by_path.get(e.get("path"), [])}
                s = next((s for s in self.sessions if str(s.path) == e.get("path")), None)
                # A session of a family may have its cursor placed past records another one captured.
                forked = s is not None and (s.parent is not None or any(o.parent is s for o in self.sessions))
                if line and line not in ends and s is not None and not s.touched and not forked:
                    self.violate(step, "cursor-not-a-run-end", f"{k}: line {line}, runs end at {sorted(ends)}")
        for s in self.sessions:
            # A run captures the lines it was queued for, as they were: none of them was changed or
            # removed between its queuing and its start.
            for r in by_path.get(str(s.path), []):
                changed = s.changes(epoch(r["createdAt"]), epoch(r.get("startedAt") or r["createdAt"]))
                gone = [(c, n) for c, n in changed if c <= r["toLine"] or n < r["toLine"]]
                if gone:
                    self.violate(step, "captured-lines-that-were-gone",
                                 f"{s.path.name}: run {r['runId']} (lines {r['fromLine']}-{r['toLine']}) started "
                                 f"after line {gone[0][0]} was changed (the file then held {gone[0][1]} lines)")
        for family in self.families():
            if any(s.touched for s in family):
                continue
            # Every record of a session family (a session and its forks, which copy its records, uuids
            # and all) in exactly one successful run of one of them; a line without an id in one of its
            # own session's.
            count = {}
            for s in family:
                for n, uid in enumerate(s.uuids, 1):
                    count.setdefault(uid or (s.sid, n), 0)
                for r in by_path.get(str(s.path), []):
                    for n in range(r["fromLine"], r["toLine"] + 1):
                        if n <= len(s.uuids):
                            uid = s.uuids[n - 1] or (s.sid, n)
                            count[uid] = count.get(uid, 0) + 1
            names = ", ".join(s.path.name[:8] for s in family)
            twice = [k for k, c in count.items() if c > 1]
            never = [k for k, c in count.items() if c == 0]
            if twice:
                self.violate(step, "captured-twice", f"{names}: {len(twice)} records, e.g. {twice[:3]}")
            if never:
                self.violate(step, "never-captured", f"{names}: {len(never)} records, e.g. {never[:3]}")

    def families(self):
        """The sessions grouped by the fork relation."""
        root = {}
        for s in self.sessions:
            r = s
            while r.parent is not None:
                r = r.parent
            root.setdefault(id(r), []).append(s)
        return list(root.values())


QUIET_WITHIN = 240


def play(seed, plan, binary, keep, verbose):
    w = World(seed, binary, keep)
    try:
        for i, (kind, a) in enumerate(plan):
            w.play(i, kind, a)
            w.check(i)
            if verbose:
                print(f"  seed {seed} step {i}: {kind}", flush=True)
        if w.quiesce(len(plan)):
            w.final(len(plan))
        return w.violations, w
    finally:
        w.kill_all()
        if not keep:
            shutil.rmtree(w.dir, ignore_errors=True)


def shrink(seed, plan, binary, kinds):
    """A shorter schedule that still shows a violation of one of `kinds`."""
    def fails(p):
        v, _ = play(seed, p, binary, False, False)
        return any(k in kinds for _, k, _ in v)
    chunk = len(plan) // 2
    while chunk >= 1:
        i = 2  # the first two steps make the first sessions
        while i < len(plan):
            trial = plan[:i] + plan[i + chunk:]
            if fails(trial):
                plan = trial
            else:
                i += chunk
        chunk //= 2
    return plan


def seeds_of(text):
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--bin", default=str(TARGET / "debug/almanac"))
    ap.add_argument("--shrink", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep each world's directory")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--quiet-within", type=int, default=240,
                    help="seconds of sweeps after the schedule for every run to settle")
    a = ap.parse_args()
    global QUIET_WITHIN
    QUIET_WITHIN = a.quiet_within
    bad = 0
    t0 = time.time()
    for seed in seeds_of(a.seeds):
        plan = schedule(seed, a.steps)
        violations, w = play(seed, plan, a.bin, a.keep, a.verbose)
        runs = len(w.runs()) if a.keep else "?"
        print(f"seed {seed}: {len(plan)} steps, {len(w.sessions)} sessions, "
              f"{sum(len(s.lines) for s in w.sessions)} lines: {len(violations)} violations"
              + (f" (kept in {w.dir})" if a.keep else ""), flush=True)
        for step, kind, detail in violations:
            print(f"  VIOLATION seed {seed} step {step} ({plan[step][0] if step < len(plan) else 'end'}): "
                  f"{kind}: {detail}", flush=True)
        if violations:
            bad += 1
            if a.shrink:
                kinds = {k for _, k, _ in violations}
                small = shrink(seed, plan, a.bin, kinds)
                print(f"  shrunk to {len(small)} steps: " + json.dumps(small))
    print(f"{len(seeds_of(a.seeds))} seeds, {bad} with violations, {time.time() - t0:.0f} s")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
