#!/usr/bin/python3
"""No function longer than 150 lines in lib/src/run, lib/src/analysis or python/ (issue 51): a
long function is where a feature was added by hand as another branch. A function is counted from
its signature's first line to the line that closes its body (see functions()). Prints each one over the limit and exits 1 if any.

    /usr/bin/python3 tests/function_length_check.py [REPOSITORY_ROOT] [--limit N] [--show K]
"""
import os
import re
import sys

FOLDERS = ("lib/src/run", "lib/src/analysis", "python")
NOT_A_FUNCTION = re.compile(r"^\s*(namespace|class|struct|enum|union|extern|return|if|for|while|switch)\b")


def functions(path):
    """(signature, first line, length) of each function in a C++ file: a line at indentation 0
    or 2 (free functions, class members) with a "(" whose signature ends, within a few lines, in
    "{", up to the "}" at the same indentation."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^( {0,2})[A-Za-z_~]", lines[i])
        if not m or NOT_A_FUNCTION.search(lines[i]) or "(" not in lines[i]:
            i += 1
            continue
        indent = m.group(1)
        j = i
        while j < len(lines) and j < i + 8 and not lines[j].rstrip().endswith("{") \
                and ";" not in lines[j]:
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or ";" in lines[j]:
            i += 1
            continue
        end = j + 1
        while end < len(lines) and not re.match("^" + indent + r"\}", lines[end]):
            end += 1
        out.append((lines[i].strip()[:70], i + 1, end - i + 1))
        i = end + 1
    return out


def main():
    args = sys.argv[1:]
    limit, show = 150, 0
    if "--limit" in args:
        k = args.index("--limit")
        limit = int(args[k + 1])
        del args[k:k + 2]
    if "--show" in args:
        k = args.index("--show")
        show = int(args[k + 1])
        del args[k:k + 2]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    found, bad = [], 0
    for folder in FOLDERS:
        for d, _, names in os.walk(os.path.join(root, folder)):
            for n in sorted(names):
                if n.endswith((".cpp", ".hpp")):
                    p = os.path.join(d, n)
                    for name, first, length in functions(p):
                        found.append((length, os.path.relpath(p, root), first, name))
    found.sort(reverse=True)
    for length, path, first, name in found:
        if length > limit:
            bad += 1
            print(f"FAIL {path}:{first}: {length} lines: {name}")
    for length, path, first, name in found[:show]:
        print(f"{length:4d} {path}:{first}: {name}")
    print(f"{len(found)} functions, {bad} longer than {limit} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
