#!/usr/bin/python3
"""Runs the bad-input corpus (cases.json) through the real `mha` binary.

    /usr/bin/python3 tests/bad_inputs/run_corpus.py build/bin/mha [-k SUBSTRING] [-v] [--list]

(The binary may also come from $MHA_BIN.) Every case runs in tests/bad_inputs/
(so paths in cases read files/...) with a fresh temporary out_dir, and is held to:

- its exit code;
- a failure (exit != 0 with "stderr" given): exactly one line on stderr, starting
  "mha: error: ", holding every expected fragment, with no control characters;
- a failure leaves out_dir as it found it: no new file (not even a temporary
  .NAME.tmp.*), and pre-existing outputs byte-for-byte untouched;
- a success: no temporaries left, run.json says "status": "complete" (for
  `run`), and the case's post-checks on the outputs hold;
- optional limits on wall time and peak resident memory (to show that a zip
  bomb or a huge header claim is refused without allocating).

A case marked "xfail" documents a known bug: it is run and reported, but only
fails the corpus if it unexpectedly passes (then drop the mark). Prints one
summary line; exits 1 listing the failures.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases.json")
DEFAULT_TIMEOUT = 60.0
KNOWN_FIELDS = {"name", "category", "files", "args", "exit", "stderr", "stdout", "out_dir",
                "stderr_lacks", "preexisting", "post", "same_output_as", "xfail", "max_seconds",
                "max_rss_mib", "note"}
CATEGORIES = {"npy", "npz", "config", "flags", "shapes", "numerics", "filesystem", "layers", "safetensors",
              "tokenizer"}


class CaseFailure(Exception):
    pass


def load_cases():
    with open(CASES) as f:
        cases = json.load(f)["cases"]
    names = set()
    for c in cases:
        unknown = set(c) - KNOWN_FIELDS
        if unknown:
            raise SystemExit("cases.json: case %s: unknown fields %s" % (c.get("name"), unknown))
        for field in ("name", "category", "args", "exit"):
            if field not in c:
                raise SystemExit("cases.json: case %s lacks %r" % (c.get("name"), field))
        if c["name"] in names:
            raise SystemExit("cases.json: duplicate case name %s" % c["name"])
        names.add(c["name"])
        if c["category"] not in CATEGORIES:
            raise SystemExit("cases.json: case %s: unknown category %s" % (c["name"], c["category"]))
        if c["exit"] != 0 and "stderr" not in c:
            raise SystemExit("cases.json: failing case %s needs a stderr fragment" % c["name"])
        listed = set(c.get("files", []))
        for f in listed:
            if not os.path.lexists(os.path.join(HERE, "files", f)):
                raise SystemExit("cases.json: case %s: files/%s does not exist (run make_corpus.py)"
                                 % (c["name"], f))
        for a in c["args"]:
            # A path that does not exist is a case about a missing file.
            if (a.startswith("files/") and a[len("files/"):] not in listed
                    and os.path.lexists(os.path.join(HERE, a))):
                raise SystemExit("cases.json: case %s uses %s without listing it in 'files'"
                                 % (c["name"], a))
        used = list(c.get("preexisting", {}).values())
        used += [p["npy"] for p in c.get("post", []) if "npy" in p]
        for a in used:
            if a[len("files/"):] not in listed:
                raise SystemExit("cases.json: case %s uses %s without listing it in 'files'"
                                 % (c["name"], a))
        ref = c.get("same_output_as")
        if ref and ref not in names:
            raise SystemExit("cases.json: case %s: same_output_as %s must name an earlier case"
                             % (c["name"], ref))
    return cases


def snapshot(path):
    """What is at `path`: None, a file's bytes, or a dict of a directory's files."""
    if not os.path.lexists(path):
        return None
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    out = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, path)
            if os.path.isdir(p):
                out[rel + "/"] = None
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


def run_binary(argv, timeout):
    """Runs argv; returns (exit code, stdout, stderr, seconds, peak RSS in MiB)."""
    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    chunks = {"out": b"", "err": b""}

    def drain(stream, key):
        chunks[key] = stream.read()

    readers = [threading.Thread(target=drain, args=(p.stdout, "out")),
               threading.Thread(target=drain, args=(p.stderr, "err"))]
    for t in readers:
        t.start()
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        # wait4 gives this child's own peak RSS (ru_maxrss, KiB on Linux).
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join()
    p.stdout.close()
    p.stderr.close()
    seconds = time.monotonic() - start
    if seconds >= timeout:
        raise CaseFailure("killed after %.0f s" % timeout)
    return p.returncode, chunks["out"], chunks["err"], seconds, usage.ru_maxrss / 1024.0


def check_post(case, out_dir, outputs):
    for check in case.get("post", []):
        kind = check["type"]
        if kind == "run_json":
            with open(os.path.join(out_dir, "run.json")) as f:
                value = json.load(f)
            for k in check["key"]:
                value = value[k]
            if value != check["equals"]:
                raise CaseFailure("run.json %s is %r, expected %r"
                                  % ("/".join(map(str, check["key"])), value, check["equals"]))
            continue
        a = np.load(os.path.join(out_dir, check["file"]))
        what = check["file"]
        if kind == "shape":
            if list(a.shape) != check["shape"]:
                raise CaseFailure("%s has shape %s, expected %s" % (what, a.shape, check["shape"]))
        elif kind == "finite":
            if not np.isfinite(a).all():
                bad = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
                raise CaseFailure("%s holds %r at %s, expected finite values" % (what, a[bad], bad))
        elif kind == "nan_rows":
            # Each listed leading index is NaN throughout; everything else is finite.
            listed = np.zeros(a.shape, dtype=bool)
            for row in check["rows"]:
                listed[tuple(row)] = True
                if not np.isnan(a[tuple(row)]).all():
                    raise CaseFailure("%s%s is not all NaN: %s" % (what, row, a[tuple(row)].tolist()))
            outside = ~listed & ~np.isfinite(a)
            if outside.any():
                bad = tuple(int(i) for i in np.argwhere(outside)[0])
                raise CaseFailure("%s holds %r at %s, outside the rows expected NaN"
                                  % (what, a[bad], bad))
        elif kind == "value":
            part = a[tuple(check["index"])]
            if not np.allclose(part, check["equals"], rtol=0, atol=check.get("atol", 1e-6)):
                raise CaseFailure("%s%s is %s, expected %r everywhere"
                                  % (what, check["index"], part.tolist(), check["equals"]))
        elif kind == "equals_npy":
            ref = np.load(os.path.join(HERE, check["npy"]))
            ref = ref.reshape(a.shape) if ref.size == a.size else ref
            if a.shape != ref.shape or not np.allclose(a, ref, rtol=check.get("rtol", 1e-6),
                                                        atol=check.get("atol", 0)):
                raise CaseFailure("%s differs from %s" % (what, check["npy"]))
        else:
            raise CaseFailure("unknown post-check type %r" % kind)
    ref = case.get("same_output_as")
    if ref:
        mine = outputs[case["name"]]
        theirs = outputs.get(ref)
        if theirs is None:
            raise CaseFailure("reference case %s produced no output" % ref)
        if mine != theirs:
            raise CaseFailure("output.npy differs from that of case %s" % ref)


def run_case(binary, case, outputs, verbose):
    tmp = tempfile.mkdtemp(prefix="mha_bad_")
    try:
        out_dir = os.path.join(tmp, "out")
        kind = case.get("out_dir", "absent")
        if kind == "file":
            with open(out_dir, "wb") as f:
                f.write(b"a file where out_dir should be\n")
        elif kind == "empty" or case.get("preexisting"):
            os.mkdir(out_dir)
        elif kind != "absent":
            raise CaseFailure("unknown out_dir kind %r" % kind)
        for name, src in case.get("preexisting", {}).items():
            shutil.copyfile(os.path.join(HERE, src), os.path.join(out_dir, name))
        before = snapshot(out_dir)

        args = [a.replace("{out_dir}", out_dir).replace("{tmp}", tmp) for a in case["args"]]
        if args and args[0] == "run" and not any(a.startswith("--out_dir") or
                                                 a.startswith("--out-dir") for a in args):
            args += ["--out_dir", out_dir]
        # max_seconds is a safety net, not a measure: a case that hangs is killed and fails on
        # its exit code; what a case costs is held by max_rss_mib and its message, not a clock.
        timeout = max(DEFAULT_TIMEOUT, 2 * case.get("max_seconds", 0))
        here_before = set(os.listdir(HERE))
        code, out, err, seconds, rss = run_binary([binary] + args, timeout)
        strays = set(os.listdir(HERE)) - here_before
        if verbose:
            print("  %s: exit %d in %.2f s, %.0f MiB\n    stderr: %s"
                  % (case["name"], code, seconds, rss, err.decode("utf-8", "replace").rstrip()))

        problems = []
        if code != case["exit"]:
            problems.append("exit code %d, expected %d" % (code, case["exit"]))
        text = err.decode("utf-8", "replace")
        fragments = case.get("stderr")
        if fragments == "":
            # A result rather than an error (mha compare: not close): stderr stays empty.
            if err:
                problems.append("stderr is not empty")
        elif fragments is not None and case["exit"] != 0:
            fragments = [fragments] if isinstance(fragments, str) else fragments
            lines = err.split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            if len(lines) != 1:
                problems.append("%d lines on stderr, expected 1" % len(lines))
            elif not lines[0].startswith(b"mha: error: "):
                problems.append("stderr does not start with 'mha: error: '")
            if any(b < 0x20 and b != 0x0A or b == 0x7F for b in err):
                problems.append("control characters on stderr")
            for frag in fragments:
                if frag not in text:
                    problems.append("stderr lacks %r" % frag)
        elif fragments is not None:
            fragments = [fragments] if isinstance(fragments, str) else fragments
            for frag in fragments:
                if frag not in text:
                    problems.append("stderr lacks %r" % frag)
        for frag in case.get("stderr_lacks", []):
            if frag in text:
                problems.append("stderr holds %r" % frag)
        for frag in ([case["stdout"]] if isinstance(case.get("stdout"), str)
                     else case.get("stdout", [])):
            if frag not in out.decode("utf-8", "replace"):
                problems.append("stdout lacks %r" % frag)
        if problems:
            problems.append("stderr was %r" % text)

        after = snapshot(out_dir)
        if case["exit"] != 0:
            # A failed run leaves out_dir as it was (an absent one may now be empty).
            if not (after == before or (before is None and after == {})):
                problems.append("out_dir changed: before %s, after %s"
                                % (describe(before), describe(after)))
        elif isinstance(after, dict):
            temps = [n for n in after if os.path.basename(n.rstrip("/")).startswith(".")]
            if temps:
                problems.append("temporaries left in out_dir: %s" % temps)
        if strays:
            problems.append("wrote %s into tests/bad_inputs/ (the working directory)"
                            % sorted(strays))
        if "max_rss_mib" in case and rss > case["max_rss_mib"]:
            problems.append("peak RSS %.0f MiB, limit %d MiB" % (rss, case["max_rss_mib"]))

        if code == 0 and not problems:
            if args[0] == "run":
                with open(os.path.join(out_dir, "run.json")) as f:
                    if json.load(f).get("status") != "complete":
                        problems.append("run.json does not say status complete")
                with open(os.path.join(out_dir, "output.npy"), "rb") as f:
                    outputs[case["name"]] = f.read()
            try:
                check_post(case, out_dir, outputs)
            except (CaseFailure, OSError, KeyError, ValueError) as e:
                problems.append(str(e))
        if problems:
            raise CaseFailure("; ".join(problems))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def describe(snap):
    if snap is None:
        return "absent"
    if isinstance(snap, bytes):
        return "a file of %d bytes" % len(snap)
    return sorted(snap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default=os.environ.get("MHA_BIN"),
                    help="path to mha (default: $MHA_BIN)")
    ap.add_argument("-k", dest="only", help="run only cases whose name contains this")
    ap.add_argument("-v", dest="verbose", action="store_true", help="show every case's stderr")
    ap.add_argument("--list", action="store_true", help="list the cases by category and stop")
    opts = ap.parse_args()
    cases = load_cases()
    if opts.list:
        for cat in sorted(CATEGORIES):
            mine = [c for c in cases if c["category"] == cat]
            print("%s (%d): %s" % (cat, len(mine), ", ".join(c["name"] for c in mine)))
        print("total: %d cases" % len(cases))
        return 0
    if not opts.binary:
        ap.error("give the path to the mha binary (or set MHA_BIN)")
    binary = os.path.abspath(opts.binary)
    if not os.access(binary, os.X_OK):
        ap.error("%s is not an executable" % binary)
    if opts.only:
        selected = {c["name"] for c in cases if opts.only in c["name"]}
        # Keep the references that selected cases compare against.
        selected |= {c["same_output_as"] for c in cases
                     if c["name"] in selected and c.get("same_output_as")}
        cases = [c for c in cases if c["name"] in selected]

    outputs = {}
    failures, xfails, xpasses = [], [], []
    for case in cases:
        try:
            run_case(binary, case, outputs, opts.verbose)
            if case.get("xfail"):
                xpasses.append(case["name"])
        except Exception as e:  # a broken case or a runner bug fails that case only
            if not isinstance(e, CaseFailure):
                e = CaseFailure("%s: %s" % (type(e).__name__, e))
            if case.get("xfail"):
                xfails.append((case["name"], case["xfail"], str(e)))
            else:
                failures.append((case["name"], str(e)))
    for name, why in failures:
        print("FAIL %s: %s" % (name, why))
    for name in xpasses:
        print("XPASS %s: marked xfail but passes now; remove its xfail mark" % name)
    if opts.verbose:
        for name, reason, why in xfails:
            print("xfail %s (%s): %s" % (name, reason, why))
    passed = len(cases) - len(failures) - len(xfails) - len(xpasses)
    print("bad_inputs: %d cases: %d passed, %d failed, %d known bugs (xfail)%s"
          % (len(cases), passed, len(failures), len(xfails),
             ", %d unexpectedly passed" % len(xpasses) if xpasses else ""))
    return 1 if failures or xpasses else 0


if __name__ == "__main__":
    sys.exit(main())
