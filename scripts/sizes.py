#!/usr/bin/env python3
"""Architecture limits (docs/architecture.md): lists source files in src/ over 600 lines and functions
over 120 lines (#[cfg(test)] modules aside). Exits 1 when any is found.

    python3 scripts/sizes.py [--fn-lines 120] [--file-lines 600]
"""
import argparse
import pathlib
import re
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--fn-lines", type=int, default=120)
ap.add_argument("--file-lines", type=int, default=600)
ap.add_argument("root", nargs="?", default=str(pathlib.Path(__file__).parent.parent / "src"))
args = ap.parse_args()

FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)')


def code_of(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


found = []
for path in sorted(pathlib.Path(args.root).rglob("*.rs")):
    lines = path.read_text().splitlines()
    end = next((i for i, l in enumerate(lines) if l.strip() == "#[cfg(test)]"), len(lines))
    if end > args.file_lines:
        found.append(f"{path}: {end} lines (limit {args.file_lines})")
    for i in range(end):
        m = FN.match(lines[i])
        if not m:
            continue
        depth, opened, j = 0, False, i
        while j < end:
            s = code_of(lines[j])
            depth += s.count("{") - s.count("}")
            opened = opened or "{" in s
            if (opened and depth <= 0) or (not opened and s.rstrip().endswith(";")):
                break
            j += 1
        if j - i + 1 > args.fn_lines:
            found.append(f"{path}:{i + 1}: fn {m.group(5)} is {j - i + 1} lines (limit {args.fn_lines})")
for f in found:
    print(f)
sys.exit(1 if found else 0)
