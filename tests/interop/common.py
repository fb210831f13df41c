"""Shared helpers of the interop cross-checks (torch_crosscheck.py, keras_crosscheck.py).

Runs the `mha` binary, compares arrays with `mha compare` (and, as a second
opinion, numpy.allclose with the same formula), collects failures per case.
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np


class Failure(Exception):
    """A check failed; the message says what and shows the evidence."""


def fmt_cmd(cmd):
    return " ".join(shlex.quote(str(c)) for c in cmd)


class Harness:
    def __init__(self, binary, keep=False, verbose=False, prefix="mha_interop_",
                 numpy_compare=False):
        self.binary = os.path.abspath(binary)
        if not (os.path.isfile(self.binary) and os.access(self.binary, os.X_OK)):
            sys.exit(f"error: {binary} is not an executable file")
        self.keep = keep
        self.numpy_compare = numpy_compare  # diagnostic: skip `mha compare`
        self.verbose = verbose
        self.root = tempfile.mkdtemp(prefix=prefix)
        self.failures = []   # (case name, message)
        self.passed = []

    # ------------------------------------------------------------- processes

    def mha(self, args, expect=0, what="mha"):
        """Runs the binary with `args`; raises Failure unless the exit code is `expect`
        (None: any). Returns the CompletedProcess."""
        cmd = [self.binary] + [str(a) for a in args]
        if self.verbose:
            print("  $ " + fmt_cmd(cmd), flush=True)
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=120)
        except subprocess.TimeoutExpired:
            raise Failure(f"{what} timed out after 120 s:\n  $ {fmt_cmd(cmd)}")
        if expect is not None and p.returncode != expect:
            raise Failure(f"{what} exited {p.returncode}, expected {expect}:\n"
                          f"  $ {fmt_cmd(cmd)}\n"
                          f"  stdout: {p.stdout.strip()}\n  stderr: {p.stderr.strip()}")
        return p

    def compare(self, got, expected, rtol, atol, what):
        """Holds `got` against `expected` (.npy paths) with `mha compare` and with
        numpy.allclose(equal_nan=True); raises Failure when either says they differ
        or when the two disagree."""
        cmd = ["compare", got, expected, "--rtol", repr(rtol), "--atol", repr(atol), "--equal_nan"]
        a, b = np.load(got), np.load(expected)
        if self.numpy_compare:
            if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                raise Failure(f"{what}: differs beyond rtol={rtol} atol={atol}\n  numpy: "
                              + (describe_diff(a, b, rtol, atol) if a.shape == b.shape
                                 else f"shapes differ: {a.shape} vs {b.shape}"))
            return
        p = self.mha(cmd, expect=None, what="mha compare")
        if a.shape != b.shape:
            np_close = False
            np_note = f"shapes differ: {a.shape} vs {b.shape}"
        else:
            np_close = bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
            np_note = describe_diff(a, b, rtol, atol)
        said = p.stdout.strip() + ("\n" + p.stderr.strip() if p.stderr.strip() else "")
        evidence = (f"  $ {fmt_cmd([self.binary] + cmd)}\n"
                    f"  mha compare exit {p.returncode}:\n" + indent(said)
                    + f"\n  numpy: {np_note}")
        if p.returncode not in (0, 1):
            raise Failure(f"{what}: mha compare failed (exit {p.returncode})\n{evidence}")
        if (p.returncode == 0) != np_close:
            verdict = "close" if p.returncode == 0 else "not close"
            raise Failure(f"{what}: mha compare says {verdict} but numpy.allclose says "
                          f"{np_close}\n{evidence}")
        if not np_close:
            raise Failure(f"{what}: differs beyond rtol={rtol} atol={atol}\n{evidence}")

    # ------------------------------------------------------------- bookkeeping

    def case_dir(self, name):
        d = os.path.join(self.root, name)
        os.makedirs(d, exist_ok=True)
        return d

    def run_case(self, name, fn, describe=""):
        try:
            fn()
        except Failure as e:
            self.failures.append((name, f"{describe}\n{e}" if describe else str(e)))
            print(f"FAIL {name}" + (f" [{describe}]" if describe else ""), flush=True)
            print(indent(str(e)), flush=True)
            return False
        except Exception as e:  # a harness error is a failure too, with its case named
            import traceback
            msg = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
            self.failures.append((name, msg))
            print(f"FAIL {name} (harness error)\n" + indent(msg), flush=True)
            return False
        self.passed.append(name)
        if self.verbose:
            print(f"ok   {name}", flush=True)
        return True

    def finish(self, label, elapsed):
        if self.keep:
            print(f"{label}: files kept in {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        if self.failures:
            print(f"{label}: {len(self.failures)} of {len(self.failures) + len(self.passed)} "
                  f"checks FAILED: {', '.join(n for n, _ in self.failures)}"
                  + ("" if self.keep else " (rerun with --keep --only NAME to keep the files)"))
            return 1
        print(f"{label}: all {len(self.passed)} checks passed in {elapsed:.1f} s")
        return 0


def case_filter(args, names):
    """--list and --only of a cross-check: prints the names and returns None for
    --list; exits on an unknown --only name; else returns want(name)."""
    if args.list:
        print("\n".join(names))
        return None
    if args.only:
        unknown = [n for n in args.only if n not in names]
        if unknown:
            sys.exit(f"error: unknown case(s) {unknown}; --list shows them")
    return lambda n: not args.only or n in args.only


def save_inputs(mode, d, query, key, value):
    """Saves the inputs a case's mode uses into d and returns the mha flags:
    "q" query only (self-attention), "kv" query and value (key = value),
    "qkv" all three."""
    p = lambda f: os.path.join(d, f)  # noqa: E731
    np.save(p("query.npy"), query)
    args = ["--query", p("query.npy")]
    if mode == "kv":
        np.save(p("value.npy"), value)
        args += ["--value", p("value.npy")]
    elif mode == "qkv":
        np.save(p("key.npy"), key)
        np.save(p("value.npy"), value)
        args += ["--key", p("key.npy"), "--value", p("value.npy")]
    return args


def indent(text, pad="    "):
    return "\n".join(pad + line for line in str(text).splitlines())


def describe_diff(a, b, rtol, atol):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    both = ~nan_a & ~nan_b
    diff = np.where(both, np.abs(a - b), 0.0)
    excess = np.where(both, diff - (atol + rtol * np.abs(b)), 0.0)
    excess = np.where(nan_a != nan_b, np.inf, excess)
    bad = int(np.count_nonzero(excess > 0))
    text = (f"max |a-b| = {diff.max() if diff.size else 0:.3g}, {bad} of {a.size} outside, "
            f"NaN {int(nan_a.sum())}/{int(nan_b.sum())}, "
            f"NaN mismatches {int((nan_a != nan_b).sum())}")
    if bad:
        idx = np.unravel_index(int(np.argmax(excess)), a.shape)
        text += f", worst at {tuple(int(i) for i in idx)}: {a[idx]!r} vs {b[idx]!r}"
    return text


def save_npz(path, arrays):
    """numpy.savez with arbitrary names ('/' and '.' included)."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_npz(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def check_same_arrays(got, want, what, check_dtype=True):
    """Exact equality of two name -> array dicts (names, shapes, values, dtypes)."""
    if set(got) != set(want):
        raise Failure(f"{what}: names differ: got {sorted(got)}, expected {sorted(want)}")
    for k in sorted(want):
        g, w = got[k], want[k]
        if g.shape != w.shape:
            raise Failure(f"{what}: {k} has shape {g.shape}, expected {w.shape}")
        if not np.array_equal(g, w):
            raise Failure(f"{what}: {k} differs (max |diff| "
                          f"{np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))):.3g})")
        if check_dtype and g.dtype != w.dtype:
            raise Failure(f"{what}: {k} has dtype {g.dtype}, expected {w.dtype} (values equal)")
