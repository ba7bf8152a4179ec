#!/usr/bin/env python3
"""Capture-input benchmark: what a capture run's agent reads, against the conversation it holds.

  python3 scripts/bench_capture_input.py [--bin target/release/almanac] [--no-build] [--repeat 3]

On real Claude Code and Codex sessions of 100 KB or more (tests/fixtures/capture-input/sessions.tar.xz and
those in tests/fixtures/corpus/, provenance beside them), for each session and overall:

- raw: the complete lines of the new part, in bytes (what a run read before: the JSONL itself);
- conversation: the conversation's own text in that part, counted here from the JSONL by this script, not by
  almanac: prompts and answers in full, each tool call's name and main argument, the first 200 characters of
  each tool result (see `conversation_of`);
- rendering: what almanac gives the agent to read, `capture turns --conversation` (the same renderer a run
  uses): the part's entries, the header and, for a later capture, the earlier prompts.

Two captures per session: a first one of the whole session, and a second one after it grew (its first 60% of
lines captured, the rest new), whose rendering includes the earlier prompts. Printed ratios: rendering /
conversation (target: at most 1.5 overall and 2.5 for any session on a first capture, at most 2 overall on a
second), raw / rendering (target: at least 6 overall). Then the cost of rendering beside the read floor: the
time of rendering every session against reading every byte (`wc -l`, as
scripts/bench.py's (b)), rendering in one process (examples/render-conversation, best of three a file)
so that almanac's fixed start (loading its rule sets) is not counted.
"""
import argparse, json, lzma, os, shutil, subprocess, sys, tarfile, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
HEAD = 200


def complete_lines(path):
    """The file's complete lines (a last line without its newline is not part of any capture)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(keepends=True)


def text_of(content):
    """A message's text: a string, or its text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") in ("text", "input_text", "output_text"))
    return ""


ARG_KEYS = ("file_path", "notebook_path", "path", "command", "cmd", "pattern", "url", "query", "skill",
            "description", "prompt", "subject", "plan", "question", "chars")


def main_argument(args):
    """A call's main argument: the first of the usual keys, decoded when the arguments are a JSON string."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args.split("\n", 2)[1] if args.startswith("*** Begin Patch") else args[:300]
    if not isinstance(args, dict):
        return ""
    for k in ARG_KEYS:
        v = args.get(k)
        if isinstance(v, list):
            v = " ".join(x for x in v if isinstance(x, str))
        if isinstance(v, str) and v:
            return v
    return ""


def head(text):
    return len(text[:HEAD].encode())


def claude_conversation(records):
    n = 0
    for r in records:
        t, m = r.get("type"), r.get("message") if isinstance(r.get("message"), dict) else {}
        content = m.get("content")
        if t == "user" and not r.get("isMeta") and not r.get("isCompactSummary"):
            if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
                for b in content:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        n += head(text_of(b.get("content")))
            else:
                n += len(text_of(content).encode())
        elif t == "assistant" and isinstance(content, list):
            for b in content:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "text":
                    n += len(b.get("text", "").encode())
                elif b.get("type") == "tool_use":
                    n += len(b.get("name", "").encode()) + len(main_argument(b.get("input")).encode())
    return n


CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions instructions>",
           "<user_shell_command>", "<turn_aborted>", "<skill", "<collaboration_mode>", "<INSTRUCTIONS>")


def codex_conversation(records):
    n = 0
    last = {"user": None, "assistant": None}

    def said(who, text):
        nonlocal n
        # Codex writes a prompt and an answer both as an event and as a response item: once each.
        if text and text != last[who]:
            n += len(text.encode())
        last[who] = text

    for r in records:
        p = r.get("payload") if isinstance(r.get("payload"), dict) else r
        kind = p.get("type")
        if r.get("type") == "event_msg" and kind == "user_message":
            said("user", p.get("message") or "")
        elif r.get("type") == "event_msg" and kind == "agent_message":
            said("assistant", p.get("message") or "")
        elif kind == "message" and p.get("role") == "user":
            text = text_of(p.get("content"))
            if not text.lstrip().startswith(CONTEXT):
                said("user", text)
        elif kind == "message" and p.get("role") == "assistant":
            said("assistant", text_of(p.get("content")))
        elif kind in ("function_call", "custom_tool_call"):
            n += len((p.get("name") or "").encode()) + len(main_argument(p.get("arguments") or p.get("input")).encode())
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out = p.get("output")
            if isinstance(out, str):
                try:
                    d = json.loads(out)
                    out = d.get("output", out) if isinstance(d, dict) else out
                except ValueError:
                    pass
            n += head(out if isinstance(out, str) else json.dumps(out))
    return n


def conversation_of(app, lines):
    """The conversation's own text in `lines`, in bytes, as a reader of the JSONL counts it."""
    records = []
    for l in lines:
        try:
            v = json.loads(l)
        except ValueError:
            continue
        if isinstance(v, dict):
            records.append(v)
    return (claude_conversation if app == "claude" else codex_conversation)(records)


def sessions(scratch):
    """(app, version, path) of every session of 100 KB or more."""
    with lzma.open(ROOT / "tests/fixtures/capture-input/sessions.tar.xz") as xz, tarfile.open(fileobj=xz) as tar:
        tar.extractall(scratch, filter="data")
    found = []
    for base in (scratch, ROOT / "tests/fixtures/corpus"):
        for app in ("claude", "codex"):
            for f in sorted((Path(base) / app).glob("*/*.jsonl")):
                if f.stat().st_size >= 100_000:
                    found.append((app, f.parent.name, f))
    seen, unique = set(), []
    for app, version, f in found:
        if f.read_bytes() not in seen:
            seen.add(f.read_bytes())
            unique.append((app, version, f))
    return unique


def render(binary, app, path, since):
    out = subprocess.run([binary, "capture", "turns", "--app", app, "--conversation", "--json",
                          "--since-line", str(since), str(path)], capture_output=True, check=True)
    return json.loads(out.stdout)


def best(cmds, repeat):
    """Best of `repeat` runs of the whole list of commands, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for c in cmds:
            subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(TARGET / "release/almanac"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "almanac", "--example", "render-conversation"],
                       cwd=ROOT, check=True)
    scratch = tempfile.mkdtemp(prefix="almanac-capture-input-")
    try:
        run(a, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(a, scratch):
    rows, totals = [], {"first": [0, 0, 0], "second": [0, 0, 0]}
    worst = (0, "")
    tiny = []
    for app, version, path in sessions(scratch):
        lines = complete_lines(path)
        # A session that holds almost no conversation (a client run offline that never got an answer)
        # measures the rendering's fixed header, not the conversation.
        if conversation_of(app, lines) < 1000:
            tiny.append(f"{app} {version} {path.name}")
            continue
        cut = int(len(lines) * 0.6)
        row = [f"{app} {version}", path.name[:24]]
        for kind, since in (("first", 0), ("second", cut)):
            new = lines[since:]
            raw = sum(len(l) for l in new)
            conv = conversation_of(app, new)
            r = render(a.bin, app, path, since)
            t = totals[kind]
            t[0], t[1], t[2] = t[0] + raw, t[1] + conv, t[2] + r["bytes"]
            ratio = r["bytes"] / max(conv, 1)
            if kind == "first" and ratio > worst[0]:
                worst = (ratio, f"{app} {version} {path.name}")
            row += [raw, conv, r["bytes"], ratio, raw / max(r["bytes"], 1)]
        rows.append(row)
    print(f"{len(rows)} real sessions of 100 KB or more; bytes of the new part: raw JSONL, conversation (counted by "
          "this script), rendering (what the agent reads: the file a run gets, header and earlier prompts included)")
    if tiny:
        print(f"left out, under 1 KB of conversation: {', '.join(tiny)}")
    print()
    print(f"{'session':<18} {'file':<25} | {'first capture: raw':>18} {'conv':>8} {'render':>8} {'r/c':>5} {'raw/r':>6}"
          f" | {'second: raw':>11} {'conv':>8} {'render':>8} {'r/c':>5} {'raw/r':>6}")
    for r in rows:
        print(f"{r[0]:<18} {r[1]:<25} | {r[2]:>18} {r[3]:>8} {r[4]:>8} {r[5]:>5.2f} {r[6]:>6.1f}"
              f" | {r[7]:>11} {r[8]:>8} {r[9]:>8} {r[10]:>5.2f} {r[11]:>6.1f}")
    f, s = totals["first"], totals["second"]
    print(f"\noverall, first capture:  raw {f[0]}, conversation {f[1]}, rendering {f[2]}: rendering/conversation "
          f"{f[2] / f[1]:.2f} (target <= 1.5), raw/rendering {f[0] / f[2]:.1f} (target >= 6), raw/conversation "
          f"{f[0] / f[1]:.1f}")
    print(f"worst session, first capture: rendering/conversation {worst[0]:.2f} (target <= 2.5): {worst[1]}")
    print(f"overall, second capture: raw {s[0]}, conversation {s[1]}, rendering with the earlier prompts {s[2]}: "
          f"rendering/conversation {s[2] / s[1]:.2f} (target <= 2), raw/rendering {s[0] / s[2]:.1f}")
    paths = [(app, p) for app, v, p in sessions(scratch) if f"{app} {v} {p.name}" not in tiny]
    # Rendering alone, in one process (a call of almanac also loads and checks its rule sets first), against
    # reading every byte (one wc -l over the same files, scripts/bench.py's (b)).
    example = TARGET / "release/examples/render-conversation"
    rendered, render_s = 0, 0.0
    for app in ("claude", "codex"):
        files = [str(p) for ap, p in paths if ap == app]
        out = subprocess.run([str(example), app, *files], capture_output=True, text=True, check=True).stdout
        total = out.strip().splitlines()[-1].split()
        rendered += int(total[1])
        render_s += float(total[-2])
    floor = best([["wc", "-l", *[str(p) for _, p in paths]]], a.repeat)
    print(f"\ntime over all {len(paths)} sessions ({rendered / 1e6:.1f} MB), best of 3 each: read every byte (one wc -l) "
          f"{floor:.3f} s; render them (examples/render-conversation) {render_s:.3f} s: render / read floor "
          f"{render_s / floor:.2f}")

if __name__ == "__main__":
    main()
