#!/usr/bin/env python3
"""Capture-recall benchmark: what the conversation a capture run reads keeps, per kind of fact.

  python3 scripts/bench_capture_recall.py [--bin target/debug/almanac] [--min-bytes 50000] [--files F ...]
                                          [--jobs 2] [--json] [--verbose] [--check]

On real Claude Code, Codex, GitHub Copilot CLI and pi sessions (every transcript of those apps under
tests/fixtures/corpus/, and those in tests/fixtures/capture-input/sessions.tar.xz and sessions2.tar.xz when
present; subagent transcripts left out; 50 KB or more by default), this script reads each JSONL itself,
independently of almanac, and lists the facts a wiki-writing agent needs from it. Then it renders the session
with `almanac capture turns FILE --app APP --conversation --json` (the conversation a first capture of the
whole session reads) and looks each fact up in that rendering. The kinds of fact (one extractor per app,
`claude_facts`, `codex_facts`, `copilot_facts`, `pi_facts`, each saying which record shapes it reads):

- prompts: what the user typed (not the client's injected context, local commands or notices);
- answers: every assistant text;
- last answers: the last assistant text of each turn (before the next prompt);
- files changed: every path an edit or write names (Codex: every path in an apply_patch patch, a top-level
  call or one inside a code-mode `exec` script);
- commands: every shell command run (Codex code mode: each `tools.exec_command({cmd: ...})` in a script);
- error lines: for each failing tool result, its first meaningful error line (`error_line`);
- user's words: what the user typed inside a tool result (an answer to a question tool, the words given when
  rejecting a call, text typed beside tool results);
- earlier answer: for a session of 3 prompts or more, split at a middle prompt's line S: the last 200
  characters of the latest answer before S, looked up in the rendering of a second capture whose new part
  starts at line S (`--since-line S-1`).

A fact is kept when its first 160 characters (whitespace runs made one space, in both; a rendering line's
leading `[L123] ` citation removed first) appear in the rendering; a fact under 8 characters is not counted,
and a fact found twice in a session (same kind, same text) is counted once. Printed: kept/total per kind and
app, all kinds together (each fact once), Codex code-mode sessions (a rollout holding a custom_tool_call named
`exec`), and sizes over all sessions: rendering bytes / facts bytes (the facts the rendering carries: each
prompt, answer and user's words once, up to the 64 KiB a rendering shows of one; each command, file and error
line at every occurrence, up to 2 KiB) and raw bytes (the session's complete lines) / rendering bytes. Targets (`--check` exits 1 naming each
one missed): every kind >= 95%, all kinds together >= 97%, Codex code mode >= 95%, rendering <= 1.5x facts,
raw >= 15x rendering. `--verbose` lists every missed fact. Uses only the built binary (never builds it).
"""
import argparse, hashlib, json, lzma, os, re, shutil, subprocess, sys, tarfile, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
APPS = ("claude", "codex", "copilot", "pi")
KINDS = ("prompts", "answers", "last answers", "files changed", "commands", "error lines", "user's words",
         "reports", "earlier answer")
NEEDLE, MIN_FACT, FACT_CAP, PROSE_CAP, TAIL = 160, 8, 2048, 64 * 1024, 200
PROSE_KINDS = ("prompts", "answers", "user's words")
TARGETS = {"kind": 95.0, "all": 97.0, "code mode": 95.0, "rendering/facts": 1.5, "raw/rendering": 15.0}


# ---------------------------------------------------------------------------------------------------------
# Reading


def complete_lines(path):
    """The file's complete lines (a last line without its newline is not part of any capture)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(keepends=True)


def records(lines):
    """(line number, record) of every line that is a JSON object."""
    out = []
    for n, l in enumerate(lines, 1):
        try:
            v = json.loads(l)
        except ValueError:
            continue
        if isinstance(v, dict):
            out.append((n, v))
    return out


def blocks_text(content, types=("text", "input_text", "output_text")):
    """A message's text: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text") or "" for b in content if isinstance(b, dict) and b.get("type") in types)
    return ""


def dict_of(v):
    return v if isinstance(v, dict) else {}


def decode_args(args):
    """Call arguments: a dict, or a JSON string decoded (else {})."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}
    return dict_of(args)


def strings_in(v):
    """Every string inside a JSON value."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from strings_in(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings_in(x)


PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): *(.+?)\s*$", re.M)


def patch_paths(text):
    """Every path an apply_patch patch adds, updates, deletes or moves to."""
    return [m.group(1) for m in PATCH_PATH.finditer(text)]


PREAMBLE = ("Chunk ID:", "Wall time", "Original token count:", "Output:", "Process exited with code",
            "Script completed", "Script running with cell ID", "Process running with session ID")
EXIT_LINE = re.compile(r"^Exit code:? *-?\d+\s*$")
ERROR_WORD = re.compile(r"error|fatal:|FAILED|panicked|Traceback", re.I)
PY_FINAL = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b(?::|$)")


def error_line(text):
    """A failing result's first meaningful error line: past the tool's preamble lines; for a Python traceback its
    final `...Error:` line; else the first line naming an error; else the first non-empty line."""
    all_lines = [l.strip() for l in text.splitlines() if l.strip()]
    lines = [l for l in all_lines if not l.startswith(PREAMBLE) and not EXIT_LINE.match(l)]
    for i, l in enumerate(lines):
        if l.startswith("Traceback (most recent call last)"):
            finals = [x for x in lines[i + 1:] if PY_FINAL.match(x)]
            if finals:
                return finals[-1]
            break
    for l in lines:
        if ERROR_WORD.search(l):
            return l
    # Only the tool's own lines (a command that failed without a word): no error line to keep.
    return (lines or [""])[0]


# ---------------------------------------------------------------------------------------------------------
# Extractors. Each returns a list of (kind, line, text) in file order; "prompt" and "answer" entries also
# drive the turns (last answers, the second capture's split).


CLAUDE_NOISE = ("<command-name>", "<command-message>", "<command-args>", "<local-command-", "<task-notification>",
                "[Request interrupted", "<teammate-message", "<bash-stdout>", "<bash-stderr>", "<ci-monitor-event>",
                "<ide_opened_file>", "<ide_selection>", "<system-reminder>")
CLAUDE_EDITS = ("Edit", "Write", "MultiEdit", "NotebookEdit")


def claude_facts(recs):
    """Claude Code: `type: user` / `type: assistant` records, `message.content` a string or blocks; a subagent's
    records in the session file (`isSidechain`) are not the session's.
    - prompts: a user record (not isMeta, isCompactSummary) whose content is a string or text blocks without
      tool_result blocks; text blocks starting with a local command's, a notification's or an IDE's tag, or
      "[Request interrupted", are not typed;
    - answers: each `text` block of an assistant record;
    - files: tool_use Edit/Write/MultiEdit/NotebookEdit `input.file_path` (`notebook_path`);
    - commands: tool_use Bash `input.command`;
    - error lines: a tool_result block with `is_error: true`, its content (string or text blocks);
    - user's words: the tool_result of an AskUserQuestion call (`"question"="answer"`: each answer), the words after
      "the user said:" in a rejected call's result, a `text` block beside tool_result blocks;
    - reports: the result of a Task/Agent call whose subagent finished (`toolUseResult.totalToolUseCount`), its
      text without the `agentId: …` block Claude Code adds for the parent model."""
    out, asks = [], set()
    for n, r in recs:
        if r.get("isSidechain"):
            continue
        t, content = r.get("type"), dict_of(r.get("message")).get("content")
        if t == "assistant" and isinstance(content, list):
            for b in content:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "text" and (b.get("text") or "").strip():
                    out.append(("answer", n, b["text"]))
                elif b.get("type") == "tool_use":
                    name, inp = b.get("name"), dict_of(b.get("input"))
                    if name in CLAUDE_EDITS:
                        path = inp.get("file_path") or inp.get("notebook_path")
                        if isinstance(path, str):
                            out.append(("file", n, path))
                    elif name == "Bash" and isinstance(inp.get("command"), str):
                        out.append(("command", n, inp["command"]))
                    elif name == "AskUserQuestion":
                        asks.add(b.get("id"))
        elif t == "user" and not r.get("isMeta") and not r.get("isCompactSummary"):
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            blocks = [b for b in blocks if isinstance(b, dict)]
            results = [b for b in blocks if b.get("type") == "tool_result"]
            texts = [b.get("text") or "" for b in blocks if b.get("type") == "text"]
            if not results:
                typed = [x for x in texts if x.strip() and not x.lstrip().startswith(CLAUDE_NOISE)]
                if typed:
                    out.append(("prompt", n, "\n".join(typed)))
                continue
            for x in texts:
                if x.strip():
                    out.append(("words", n, x))
            finished = "totalToolUseCount" in dict_of(r.get("toolUseResult"))
            for b in results:
                text = blocks_text(b.get("content"))
                if finished:
                    report = re.split(r"\n*agentId: \w+ \(", text, maxsplit=1)[0].strip()
                    if report:
                        out.append(("report", n, report))
                if b.get("tool_use_id") in asks:
                    for m in re.finditer(r'"=\s*"(.*?)"(?=\s*,\s*"|\.\s*You can now|\s*\.?\s*$)', text, re.S):
                        out.append(("words", n, m.group(1)))
                if "the user said:" in text:
                    out.append(("words", n, text.split("the user said:", 1)[1].strip()))
                if b.get("is_error") is True:
                    out.append(("error", n, error_line(text)))
    return out


CODEX_CONTEXT = ("<environment_context>", "# AGENTS.md instructions", "<permissions instructions>",
                 "<user_instructions>", "<turn_aborted>", "<skill", "<user_shell_command>", "<collaboration_mode>",
                 "<INSTRUCTIONS>", "<recommended_plugins>", "<user_action>", "<subagent_notification>")
JS_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`(?:[^`\\]|\\.)*`', re.S)
JS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0"}


def js_string(lit):
    """A JavaScript string literal's value (JSON-style double quotes; single quotes and template literals too)."""
    if lit.startswith('"'):
        try:
            return json.loads(lit)
        except ValueError:
            pass
    return re.sub(r"\\(.)", lambda m: JS_ESCAPES.get(m.group(1), m.group(1)), lit[1:-1], flags=re.S)


def js_object(s, i):
    """The object literal starting at s[i] == '{', by its balanced braces (strings skipped)."""
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c in "\"'`":
            m = JS_STRING.match(s, j)
            if m:
                j = m.end()
                continue
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return s[i:j + 1]
        j += 1
    return s[i:]


JS_CMD = re.compile(r"""(?:^|[{,\s])["']?cmd["']?\s*:\s*""")


def code_mode_commands(script):
    """Each literal `cmd` of a `tools.exec_command({...})` call in a code-mode script."""
    cmds = []
    for m in re.finditer(r"tools\.exec_command\(\s*(?=\{)", script):
        obj = js_object(script, m.end())
        k = JS_CMD.search(obj)
        v = JS_STRING.match(obj, k.end()) if k else None
        if v:
            cmds.append(js_string(v.group(0)))
    return cmds


def code_mode_patch_paths(script):
    """Every patch path in a code-mode script that calls tools.apply_patch (its patch is a string literal)."""
    if "apply_patch" not in script:
        return []
    paths = patch_paths(script)
    for m in JS_STRING.finditer(script):
        paths += patch_paths(js_string(m.group(0)))
    return list(dict.fromkeys(paths))


def codex_output(out):
    """(text, exit code or None) of a function_call_output / custom_tool_call_output `output`: a string, a JSON
    envelope string {"output", "metadata": {"exit_code"}}, or input_text blocks (code mode)."""
    if isinstance(out, list):
        return blocks_text(out), None
    if isinstance(out, dict):
        out = json.dumps(out)
    if not isinstance(out, str):
        return "", None
    if out.startswith("{"):
        try:
            env = json.loads(out)
        except ValueError:
            env = None
        if isinstance(env, dict) and isinstance(env.get("output"), str):
            code = dict_of(env.get("metadata")).get("exit_code")
            return env["output"], code if isinstance(code, int) else None
    m = re.search(r"^(?:Process exited with code|Exit code:) *(-?\d+)\s*$", out, re.M)
    return out, int(m.group(1)) if m else None


def codex_facts(recs):
    """Codex: rollout records {type, payload} (`response_item`, `event_msg`), or the 2025 bare format whose records
    are the payloads themselves.
    - prompts: event_msg `user_message` `message`; a response_item `message` of role user (input_text blocks)
      unless it is injected context (`<environment_context>`, `# AGENTS.md instructions`, ...);
    - answers: event_msg `agent_message` `message`; a response_item `message` of role assistant (output_text);
    - files: every `*** Add File:` / `Update File:` / `Delete File:` / `Move to:` path of a patch in an
      `apply_patch` custom_tool_call (`input`) or function_call (`arguments`), a shell call running apply_patch,
      or a code-mode `exec` custom_tool_call whose script calls tools.apply_patch;
    - commands: function_call exec_command `cmd`, shell `command` (an argv joined by spaces), shell_command
      `command`; each `tools.exec_command({cmd: ...})` of an `exec` custom_tool_call's `input` script;
    - error lines: a function_call_output / custom_tool_call_output whose text says "Process exited with code N"
      (or "Exit code: N") with N != 0, or whose JSON envelope's metadata.exit_code is not 0;
    - user's words: the function_call_output of a `request_user_input` call (the answers in its JSON)."""
    out, names = [], {}
    for n, r in recs:
        p = r.get("payload") if isinstance(r.get("payload"), dict) else r
        kind = p.get("type")
        if r.get("type") == "event_msg":
            if kind == "user_message" and (p.get("message") or "").strip():
                out.append(("prompt", n, p["message"]))
            elif kind == "agent_message" and (p.get("message") or "").strip():
                out.append(("answer", n, p["message"]))
            continue
        if kind == "message" and p.get("role") == "user":
            text = blocks_text(p.get("content"))
            if text.strip() and not text.lstrip().startswith(CODEX_CONTEXT):
                out.append(("prompt", n, text))
        elif kind == "message" and p.get("role") == "assistant":
            text = blocks_text(p.get("content"))
            if text.strip():
                out.append(("answer", n, text))
        elif kind in ("function_call", "custom_tool_call"):
            name = p.get("name")
            names[p.get("call_id")] = name
            raw = p.get("input") if kind == "custom_tool_call" else p.get("arguments")
            args = decode_args(raw)
            if name == "apply_patch":
                texts = [raw] if isinstance(raw, str) and not args else list(strings_in(args))
                for t in texts:
                    out += [("file", n, x) for x in patch_paths(t)]
            elif name == "exec" and kind == "custom_tool_call" and isinstance(raw, str):
                out += [("command", n, c) for c in code_mode_commands(raw)]
                out += [("file", n, x) for x in code_mode_patch_paths(raw)]
            elif name in ("exec_command", "shell", "shell_command"):
                cmd = args.get("cmd") if name == "exec_command" else args.get("command")
                if isinstance(cmd, list):
                    cmd = " ".join(x for x in cmd if isinstance(x, str))
                if isinstance(cmd, str) and cmd.strip():
                    out.append(("command", n, cmd))
                    if "*** Begin Patch" in cmd:
                        out += [("file", n, x) for x in patch_paths(cmd)]
        elif kind in ("function_call_output", "custom_tool_call_output"):
            text, code = codex_output(p.get("output"))
            if names.get(p.get("call_id")) == "request_user_input":
                try:
                    answers = [s for s in strings_in(json.loads(text))]
                except ValueError:
                    answers = [text]
                out += [("words", n, a) for a in answers if a.strip()]
            if code not in (None, 0):
                out.append(("error", n, error_line(text)))
    return out


def copilot_facts(recs):
    """GitHub Copilot CLI: events.jsonl records {type, data}; a subagent's events carry a top-level `agentId` (and
    its messages data.parentToolCallId): not the session's.
    - prompts: `user.message` `data.content`, without `data.source` (or source user);
    - answers: `assistant.message` `data.content`;
    - files: `data.toolRequests[*]` of an assistant.message named edit/create (`arguments.path`, `file_path`);
    - commands: toolRequests named bash/shell/powershell (`arguments.command`);
    - error lines: `tool.execution_complete` with `success: false` (`data.error.message`, else the result);
    - user's words: the `tool.execution_complete` result of an `ask_user` call (past "User responded:")."""
    out, names = [], {}
    for n, r in recs:
        d = dict_of(r.get("data"))
        if "agentId" in r or d.get("parentToolCallId"):
            continue
        t = r.get("type")
        if t == "user.message" and d.get("source") in (None, "user"):
            if isinstance(d.get("content"), str) and d["content"].strip():
                out.append(("prompt", n, d["content"]))
        elif t == "assistant.message":
            if isinstance(d.get("content"), str) and d["content"].strip():
                out.append(("answer", n, d["content"]))
            for q in d.get("toolRequests") or []:
                q = dict_of(q)
                name, args = q.get("name"), decode_args(q.get("arguments"))
                names[q.get("toolCallId")] = name
                if name in ("edit", "create", "str_replace_editor", "write"):
                    path = args.get("path") or args.get("file_path")
                    if isinstance(path, str):
                        out.append(("file", n, path))
                elif name in ("bash", "shell", "powershell") and isinstance(args.get("command"), str):
                    out.append(("command", n, args["command"]))
        elif t == "tool.execution_complete":
            result = dict_of(d.get("result"))
            text = result.get("content") if isinstance(result.get("content"), str) else ""
            if names.get(d.get("toolCallId")) == "ask_user" and text.strip():
                # 1.0.64: "User responded: <typed text>" or "User selected: <choice>".
                out.append(("words", n, re.sub(r"^User (?:responded|selected):\s*", "", text)))
            if d.get("success") is False:
                err = dict_of(d.get("error")).get("message")
                out.append(("error", n, error_line(err if isinstance(err, str) and err.strip() else text)))
    return out


def pi_facts(recs):
    """pi: `type: message` records, `message.role` user / assistant / toolResult, `message.content` a string or
    blocks (text, toolCall {name, arguments}).
    - prompts: role user, its text; answers: role assistant, each text block;
    - files: toolCall edit/write `arguments.path` (`file_path`); commands: toolCall bash `arguments.command`;
    - error lines: role toolResult with `isError: true`, its text."""
    out = []
    for n, r in recs:
        if r.get("type") != "message":
            continue
        m = dict_of(r.get("message"))
        role, content = m.get("role"), m.get("content")
        if role == "user":
            text = blocks_text(content, ("text",))
            if text.strip():
                out.append(("prompt", n, text))
        elif role == "assistant" and isinstance(content, list):
            for b in content:
                b = dict_of(b)
                if b.get("type") == "text" and (b.get("text") or "").strip():
                    out.append(("answer", n, b["text"]))
                elif b.get("type") == "toolCall":
                    name, args = b.get("name"), decode_args(b.get("arguments"))
                    if name in ("edit", "write"):
                        path = args.get("path") or args.get("file_path")
                        if isinstance(path, str):
                            out.append(("file", n, path))
                    elif name == "bash" and isinstance(args.get("command"), str):
                        out.append(("command", n, args["command"]))
        elif role == "toolResult" and m.get("isError") is True:
            out.append(("error", n, error_line(blocks_text(content, ("text",)))))
    return out


EXTRACTORS = {"claude": claude_facts, "codex": codex_facts, "copilot": copilot_facts, "pi": pi_facts}
KIND_OF = {"prompt": "prompts", "answer": "answers", "file": "files changed", "command": "commands",
           "error": "error lines", "words": "user's words", "report": "reports"}


def turns(entries):
    """(prompts, answers): the prompts (a prompt written twice in a row, as Codex does, once, at its first line) and
    the answers, each (line, text)."""
    prompts, answers, last = [], [], None
    for kind, n, text in entries:
        if kind == "prompt":
            if last is not None and last[0] == "prompt" and last[1] == text:
                continue
            prompts.append((n, text))
            last = ("prompt", text)
        elif kind == "answer":
            answers.append((n, text))
            last = ("answer", text)
    return prompts, answers


def last_answers(entries):
    """The last answer of each turn (a turn ends at the next prompt)."""
    out, current = [], None
    for kind, n, text in entries:
        if kind == "prompt":
            if current:
                out.append(current)
            current = None
        elif kind == "answer":
            current = (n, text)
    if current:
        out.append(current)
    return out


# ---------------------------------------------------------------------------------------------------------
# Sessions


def norm(text):
    return " ".join(text.split())


CITATION = re.compile(r"^\[[LM]\d+\] ?", re.M)


def rendering_text(conversation):
    return norm(CITATION.sub("", conversation))


def is_subagent(app, path):
    """A subagent's own transcript: Claude's under subagents/ or agent-*.jsonl; a Codex rollout whose first
    session_meta says source.subagent or thread_source "subagent"."""
    if app == "claude":
        return "subagents" in path.parts or path.name.startswith("agent-")
    if app == "codex":
        with open(path, "rb") as f:
            for _, raw in zip(range(20), f):
                try:
                    r = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(r, dict) and r.get("type") == "session_meta":
                    p = dict_of(r.get("payload"))
                    return "subagent" in dict_of(p.get("source")) or p.get("thread_source") == "subagent"
    return False


def sniff_app(path):
    """The app of a named file: a path component naming it, else its first records."""
    for part in reversed(path.parts[:-1]):
        if part in APPS:
            return part
    for _, r in records(complete_lines(path)[:5]):
        t = r.get("type")
        if t == "session.start":
            return "copilot"
        if t == "session" and "cwd" in r:
            return "pi"
        if t in ("session_meta", "response_item", "event_msg") or "instructions" in r:
            return "codex"
        if t in ("user", "assistant", "summary", "file-history-snapshot"):
            return "claude"
    sys.exit(f"{path}: cannot tell its app (name it under a claude/codex/copilot/pi directory)")


def sessions(scratch, min_bytes):
    """(app, label, path) of every root session of min_bytes or more, each content once."""
    bases = [(ROOT / "tests/fixtures/corpus", "corpus/")]
    for tar_name in ("sessions.tar.xz", "sessions2.tar.xz"):
        tar_path = ROOT / "tests/fixtures/capture-input" / tar_name
        if tar_path.exists():
            dest = Path(scratch) / tar_name
            dest.mkdir()
            with lzma.open(tar_path) as xz, tarfile.open(fileobj=xz) as tar:
                tar.extractall(dest, filter="data")
            bases.append((dest, tar_name + ":"))
    found, seen = [], set()
    for base, prefix in bases:
        for app in APPS:
            for f in sorted((base / app).rglob("*.jsonl")):
                if f.stat().st_size < min_bytes or is_subagent(app, f):
                    continue
                digest = hashlib.sha256(f.read_bytes()).digest()
                if digest not in seen:
                    seen.add(digest)
                    found.append((app, prefix + str(f.relative_to(base)), f))
    return found


def render(binary, app, path, since):
    """`capture turns --conversation --json` of the lines after `since` (retried a while: the binary may be being
    rebuilt)."""
    cmd = [binary, "capture", "turns", "--app", app, "--conversation", "--json", "--since-line", str(since), str(path)]
    for attempt in range(30):
        try:
            out = subprocess.run(cmd, capture_output=True)
            if out.returncode == 0:
                return json.loads(out.stdout)
            err = out.stderr.decode(errors="replace")[:500]
        except (OSError, ValueError) as e:
            err = str(e)
        if attempt >= 2 and Path(binary).exists():
            break
        time.sleep(2)
    raise RuntimeError(f"almanac failed on {path} (since {since}): {err}")


def measure(binary, app, label, path):
    """One session: its facts, each looked up in its rendering(s)."""
    lines = complete_lines(path)
    recs = records(lines)
    entries = EXTRACTORS[app](recs)
    code_mode = app == "codex" and any(
        dict_of(r.get("payload")).get("type") == "custom_tool_call" and dict_of(r.get("payload")).get("name") == "exec"
        for _, r in recs)
    first = render(binary, app, path, 0)
    rendered = rendering_text(first["conversation"])
    facts = []  # (kind, line, text, kept, capture)
    seen = set()

    def add(kind, n, text, hay, capture):
        t = norm(text)
        if len(t) < MIN_FACT or (kind, t) in seen:
            return
        seen.add((kind, t))
        facts.append({"kind": kind, "line": n, "text": text, "kept": t[:NEEDLE] in hay, "capture": capture})

    # The bytes of the facts the first rendering carries: a prompt, an answer or the user's words once
    # (Codex writes each twice), up to the 64 KiB a rendering shows of one; a command, a file or an
    # error line at every occurrence (a command run ten times is shown ten times), up to 2 KiB.
    carried, prose = 0, set()
    for kind, n, text in entries:
        add(KIND_OF[kind], n, text, rendered, "first")
        t = norm(text)
        if len(t) < MIN_FACT or (KIND_OF[kind] in PROSE_KINDS and (kind, t) in prose):
            continue
        prose.add((kind, t))
        cap = PROSE_CAP if KIND_OF[kind] in PROSE_KINDS else FACT_CAP
        carried += min(len(text.encode()), cap)
    for n, text in last_answers(entries):
        add("last answers", n, text, rendered, "first")
    prompts, answers = turns(entries)
    second = None
    if len(prompts) >= 3:
        s = prompts[len(prompts) // 2][0]
        before = [a for a in answers if a[0] < s]
        if before:
            second = render(binary, app, path, s - 1)
            n, text = before[-1]
            add("earlier answer", n, text[-TAIL:], rendering_text(second["conversation"]), f"second (new from line {s})")
    return {"app": app, "label": label, "codeMode": code_mode, "facts": facts, "carried": carried,
            "raw": sum(len(l) for l in lines), "rendering": len(first["conversation"].encode())}


# ---------------------------------------------------------------------------------------------------------
# Report


def pct(k, t):
    return 100.0 * k / t if t else None


def summarize(results):
    per_kind = {k: {a: [0, 0] for a in APPS + ("overall",)} for k in KINDS}
    all_facts, code_mode = {a: [0, 0] for a in APPS + ("overall",)}, [0, 0]
    facts_bytes = raw = rendering = 0
    for s in results:
        raw += s["raw"]
        rendering += s["rendering"]
        facts_bytes += s["carried"]
        unique = {}
        for f in s["facts"]:
            for col in (s["app"], "overall"):
                c = per_kind[f["kind"]][col]
                c[0] += f["kept"]
                c[1] += 1
            # A fact of two kinds (an answer that is also a turn's last) counts once together.
            key = (f["capture"] != "first", f["line"], norm(f["text"])[:NEEDLE])
            unique.setdefault(key, f)
        for (second, _, _), f in unique.items():
            for col in (s["app"], "overall"):
                all_facts[col][0] += f["kept"]
                all_facts[col][1] += 1
            if s["codeMode"]:
                code_mode[0] += f["kept"]
                code_mode[1] += 1

    table = {k: {a: {"kept": c[0], "total": c[1], "percent": pct(*c)} for a, c in cols.items()}
             for k, cols in per_kind.items()}
    return {
        "sessions": {a: sum(1 for s in results if s["app"] == a) for a in APPS},
        "codeModeSessions": sum(1 for s in results if s["codeMode"]),
        "kinds": table,
        "all": {a: {"kept": c[0], "total": c[1], "percent": pct(*c)} for a, c in all_facts.items()},
        "codeMode": {"kept": code_mode[0], "total": code_mode[1], "percent": pct(*code_mode)},
        "sizes": {"rawBytes": raw, "renderingBytes": rendering, "factsBytes": facts_bytes,
                  "renderingPerFacts": rendering / facts_bytes if facts_bytes else None,
                  "rawPerRendering": raw / rendering if rendering else None},
    }


def missed_targets(summary):
    missed = []
    for k, cols in summary["kinds"].items():
        p = cols["overall"]["percent"]
        if p is not None and p < TARGETS["kind"]:
            missed.append(f"{k}: {p:.1f}% kept (target >= {TARGETS['kind']:.0f}%)")
    p = summary["all"]["overall"]["percent"]
    if p is not None and p < TARGETS["all"]:
        missed.append(f"all kinds together: {p:.1f}% kept (target >= {TARGETS['all']:.0f}%)")
    p = summary["codeMode"]["percent"]
    if p is not None and p < TARGETS["code mode"]:
        missed.append(f"Codex code mode: {p:.1f}% kept (target >= {TARGETS['code mode']:.0f}%)")
    z = summary["sizes"]
    if z["renderingPerFacts"] is not None and z["renderingPerFacts"] > TARGETS["rendering/facts"]:
        missed.append(f"rendering / facts: {z['renderingPerFacts']:.2f} (target <= {TARGETS['rendering/facts']})")
    if z["rawPerRendering"] is not None and z["rawPerRendering"] < TARGETS["raw/rendering"]:
        missed.append(f"raw / rendering: {z['rawPerRendering']:.1f} (target >= {TARGETS['raw/rendering']:.0f})")
    return missed


def cell(c):
    if not c["total"]:
        return "-"
    return f"{c['kept']}/{c['total']} {c['percent']:.1f}%"


def print_report(summary, results, missed, verbose):
    n = summary["sessions"]
    print(f"{sum(n.values())} sessions ({', '.join(f'{a} {n[a]}' for a in APPS)}), "
          f"{summary['codeModeSessions']} of them Codex code mode; facts kept in the rendering, per kind and app:\n")
    cols = APPS + ("overall",)
    print(f"{'kind':<16}" + "".join(f" {c:>20}" for c in cols))
    for k in KINDS:
        print(f"{k:<16}" + "".join(f" {cell(summary['kinds'][k][c]):>20}" for c in cols))
    print(f"{'all kinds':<16}" + "".join(f" {cell(summary['all'][c]):>20}" for c in cols))
    print(f"\nCodex code-mode sessions, all kinds: {cell(summary['codeMode'])}")
    z = summary["sizes"]
    rpf = f"{z['renderingPerFacts']:.2f}" if z["renderingPerFacts"] else "-"
    rpr = f"{z['rawPerRendering']:.1f}" if z["rawPerRendering"] else "-"
    print(f"sizes, first capture of every session: raw {z['rawBytes']}, rendering {z['renderingBytes']}, facts "
          f"{z['factsBytes']}: rendering / facts {rpf} (target <= {TARGETS['rendering/facts']}), raw / rendering "
          f"{rpr} (target >= {TARGETS['raw/rendering']:.0f})")
    print("\ntargets missed: " + ("; ".join(missed) if missed else "none"))
    if verbose:
        print("\nmissed facts (file:line, kind, capture, first 100 characters):")
        for s in results:
            for f in s["facts"]:
                if not f["kept"]:
                    print(f"{s['label']}:{f['line']}  [{f['kind']}] ({f['capture']}) {norm(f['text'])[:100]!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(TARGET / "debug/almanac"))
    ap.add_argument("--min-bytes", type=int, default=50_000)
    ap.add_argument("--files", nargs="+", type=Path, help="measure these transcripts instead (any size)")
    ap.add_argument("--jobs", type=int, default=2, help="almanac processes run at once")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="list every missed fact")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="almanac-capture-recall-")
    try:
        if a.files:
            todo = [(sniff_app(f.resolve()), str(f), f.resolve()) for f in a.files]
        else:
            todo = sessions(scratch, a.min_bytes)
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            results = list(pool.map(lambda s: measure(a.bin, *s), todo))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarize(results)
    missed = missed_targets(summary)
    if a.json:
        summary["targetsMissed"] = missed
        if a.verbose:
            summary["missed"] = [{"file": s["label"], "line": f["line"], "kind": f["kind"], "capture": f["capture"],
                                  "text": norm(f["text"])[:100]} for s in results for f in s["facts"] if not f["kept"]]
        print(json.dumps(summary, indent=2))
    else:
        print_report(summary, results, missed, a.verbose)
    if a.check and missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
