#!/usr/bin/env python3
"""End-to-end tests of `mha sweep`, driving the real binary: grid and zip expansion, run names,
shards (flag and Slurm), concurrent shards on one out_dir (Popen and GNU parallel), resume after
SIGKILL, SIGINT/SIGTERM handling, validity reports, --jobs, results.jsonl/results.csv contents,
run-time failures and sweep-file errors.

Run by ctest, one TestCase class per test so that they run in parallel:
  /usr/bin/python3 tests/cli/test_sweep.py [Class]   (MHA_BIN = path to mha,
                                                     MHA_SOURCE_DIR = repository root)
Every sweep writes into a temporary directory (always an explicit out_dir), never into the
repository. Processes are waited for by polling with generous deadlines, never fixed sleeps, so
that a loaded 2-core machine only makes the tests slower, not flaky.
"""
import csv
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import zlib

import numpy as np

from test_cli import load_json, read_bytes  # noqa: E402  (same directory)

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.environ.get("MHA_SOURCE_DIR", os.getcwd())
CORES = len(os.sched_getaffinity(0))
DEADLINE = 120  # seconds; only ever reached when something hangs

# Small layers: a run takes a few ms of compute (the sweep polls its children every 50 ms).
SMALL = {"d_model": 16, "batch": 2, "seq_len": 4, "save_attention": True}
# A run of noticeable length (0.3-1 s on 2 cores) with a 128 MiB attention.npy, so that a
# signal can land while it computes and streams attention to its temporary file.
MEDIUM = {"h": 4, "d_model": 512, "batch": 2, "seq_len": 2048, "save_attention": True}
MEDIUM_SHAPES = {"output.npy": (2, 2048, 512), "attention.npy": (2, 4, 2048, 2048)}
# About 1 s: for tests that need a run still in progress after two signals.
LONG = {"h": 4, "d_model": 1024, "batch": 2, "seq_len": 2048, "save_attention": True}
LONG_SHAPES = {"output.npy": (2, 2048, 1024), "attention.npy": (2, 4, 2048, 2048)}


def base_env(**extra):
    """The environment for mha: no Slurm array variables unless a test sets them (the suite may
    itself run inside a Slurm job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(extra)
    return env


def run(args, cwd=ROOT, env=None, timeout=DEADLINE, preexec_fn=None):
    p = subprocess.run([MHA] + args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env=env or base_env(), preexec_fn=preexec_fn)
    return p.returncode, p.stdout, p.stderr


def read_jsonl(path):
    """Rows of a .jsonl file; every line must be one whole JSON object."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            assert line.endswith("\n"), f"{path}:{n}: line not terminated: {line!r}"
            rows.append(json.loads(line))
    return rows


def poll(condition, what, timeout=DEADLINE, interval=0.005):
    """Calls condition() until it returns something truthy, which is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def proc_stat(pid):
    """(state, ppid, pgrp) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def children(pid):
    """Live (not zombie) child processes of pid."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(name)
            if st and st[1] == pid and st[0] != "Z":
                out.append(int(name))
    return out


def child_run_dir(pid):
    """The run directory of a sweep's child: an `mha sweep-worker` writes the run in progress'
    log (DIR/run.log) on its stderr; an `mha run --config DIR/config.json` names it. None when
    the child is between runs."""
    try:
        args = read_bytes(f"/proc/{pid}/cmdline").split(b"\0")
    except OSError:
        return None
    if b"--config" in args:
        return os.path.dirname(args[args.index(b"--config") + 1].decode())
    try:
        log = os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return None
    return os.path.dirname(log) if log.endswith("/run.log") else None


def alive(pid):
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def temporaries(directory):
    return [n for n in os.listdir(directory) if n.startswith(".")] if os.path.isdir(directory) else []


def set_child_subreaper(on):
    """Orphaned grandchildren (the `mha run` of a killed sweep) get re-parented to this process,
    so that their exit status can be read. Returns False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1 if on else 0, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def entropy_per_head(attention):
    """Mean over batches and query rows of -sum a log a (0 log 0 = 0), per head of (B,h,T,S)."""
    a = attention.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(a > 0, -a * np.log(a), 0.0)
    return terms.sum(-1).mean(axis=(0, 2))


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_sweep_")
        self.procs = []

    def tearDown(self):
        for p in self.procs:  # only processes this test started, by their id
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def write_sweep(self, obj_or_text, name="sweep.json"):
        text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text, indent=1)
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def sweep(self, sweep_file, out, *flags, env=None, code=0, preexec_fn=None):
        rc, stdout, stderr = run(["sweep", sweep_file, "--out_dir", out] + list(flags), env=env,
                                 preexec_fn=preexec_fn)
        self.assertEqual(rc, code, f"mha sweep {' '.join(flags)} exited {rc}: {stderr}")
        return stdout, stderr

    def start(self, sweep_file, out, *flags, env=None):
        """Starts a sweep in the background, stderr to a file (self.stderr_of(p))."""
        log = open(self.path(f"stderr.{len(self.procs)}"), "w")
        p = subprocess.Popen([MHA, "sweep", sweep_file, "--out_dir", out] + list(flags), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=log, env=env or base_env())
        log.close()
        p.stderr_path = log.name
        self.procs.append(p)
        return p

    def stderr_of(self, p):
        with open(p.stderr_path) as f:
            return f.read()

    def wait(self, p):
        return p.wait(timeout=DEADLINE)

    def dry_run(self, sweep_file, out, *flags, code=0):
        stdout, stderr = self.sweep(sweep_file, out, "--dry_run", *flags, code=code)
        lines = stdout.splitlines()
        self.assertRegex(lines[0], r": \d+ run\(s\)")
        self.assertEqual(lines[1].split()[:4], ["index", "name", "shard", "status"])
        table = []
        for line in lines[2:]:
            index, name, mine, status = line.split(None, 3)
            table.append((int(index), name, mine, status))
        self.assertEqual([t[0] for t in table], list(range(len(table))))
        self.assertFalse(os.path.exists(out), "--dry_run wrote files")
        return lines[0], table

    def run_dirs(self, out):
        """Run directories under out (everything but results/ and the results files)."""
        if not os.path.isdir(out):
            return []
        return sorted(n for n in os.listdir(out) if os.path.isdir(os.path.join(out, n))
                      and n != "results")

    def check_run_dir(self, run_dir, config, shapes=None, stale=()):
        """A finished run: config.json (the planned config), run.log, outputs and run.json, and
        no temporaries but the `stale` ones (left by a SIGKILLed run before it was redone)."""
        files = sorted(n for n in os.listdir(run_dir) if not n.startswith("."))
        expected = ["config.json", "output.npy", "run.json", "run.log"]
        if config.get("save_attention"):
            expected.append("attention.npy")
        self.assertEqual(files, sorted(expected), run_dir)
        self.assertEqual(sorted(set(temporaries(run_dir)) - set(stale)), [], run_dir)
        written = load_json(os.path.join(run_dir, "config.json"))
        self.assertEqual(written["out_dir"], run_dir)
        for k, v in config.items():
            self.assertEqual(written[k], v, f"{run_dir}/config.json: {k}")
        report = load_json(os.path.join(run_dir, "run.json"))
        self.assertEqual(report["status"], "complete")
        c = report["config"]
        out = np.load(os.path.join(run_dir, "output.npy"), mmap_mode="r")
        self.assertEqual(out.shape, (c["batch"], c["seq_len"], c["d_out"]))
        if config.get("save_attention"):
            a = np.load(os.path.join(run_dir, "attention.npy"), mmap_mode="r")
            self.assertEqual(a.shape, (c["batch"], c["h"], c["seq_len"], c["kv_seq_len"]))
        if shapes:
            for name, shape in shapes.items():
                self.assertEqual(np.load(os.path.join(run_dir, name), mmap_mode="r").shape, shape)
        return report

    def check_results(self, out, names):
        """results.jsonl and results.csv: every run exactly once, in index order, all ok."""
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertEqual([r["index"] for r in rows], list(range(len(names))))
        self.assertEqual([r["name"] for r in rows], names)
        for r in rows:
            self.assertEqual(r["status"], "ok", r)
        with open(os.path.join(out, "results.csv"), newline="") as f:
            self.assertEqual([int(r["index"]) for r in csv.DictReader(f)], list(range(len(names))))
        return rows

    def check_whole_files(self, out, shapes):
        """After a SIGKILL: no run.json without status complete, every output under its final
        name loads with its full shape; leftovers are recognisably temporary."""
        for d in self.run_dirs(out):
            run_dir = os.path.join(out, d)
            for name in os.listdir(run_dir):
                path = os.path.join(run_dir, name)
                if name.startswith("."):  # the unheld lock file, or a temporary
                    self.assertRegex(name, r"^(\.mha\.lock|\.[^/]+\.tmp\.\d+\.\d+)$", path)
                elif name == "run.json":
                    self.assertEqual(load_json(path)["status"], "complete", path)
                elif name.endswith(".npy"):
                    a = np.load(path, mmap_mode="r")
                    self.assertEqual(a.shape, shapes[name], path)
                    self.assertTrue(np.isfinite(a[-1]).all(), path)  # the end was written
                else:
                    self.assertIn(name, ("config.json", "run.log"), path)

    def stop_during_run(self, p, out):
        """SIGSTOPs the sweep while one of its children is computing (its run directory holds
        a temporary); returns (child pid, run directory) with the child still running."""
        while True:
            def busy_child():
                if p.poll() is not None:
                    raise AssertionError(f"sweep exited {p.returncode} early: {self.stderr_of(p)}")
                for c in children(p.pid):
                    d = child_run_dir(c)
                    if d and temporaries(d):
                        return c, d
                return None
            child, run_dir = poll(busy_child, "a run in progress")
            os.kill(p.pid, signal.SIGSTOP)
            poll(lambda: (proc_stat(p.pid) or ("T",))[0] in "Tt", "the sweep to stop")
            if alive(child):
                # With --jobs 1 and a child still running, the sweep is in its wait loop: it
                # cannot be starting another run while stopped.
                return child, run_dir
            os.kill(p.pid, signal.SIGCONT)  # that run just ended; catch the next one


# ---------------------------------------------------------------------------------------------
class Expansion(Case):
    """Grid product order, zip groups, run names, and the run directories of a real sweep."""

    def test_grid_product_order_and_default_names(self):
        s = self.write_sweep({"base": {"d_model": 64, "batch": 1},
                              "grid": {"h": [8, 4], "seq_len": [512, 128, 16], "seed": [0]}})
        header, table = self.dry_run(s, self.path("out"))
        self.assertIn(f"{s}: 6 run(s) (2 x 3 x 1), out_dir {self.path('out')}, shard 0/1", header)
        # The last grid key varies fastest; keys in file order.
        self.assertEqual([t[1] for t in table],
                         ["h=8_seq_len=512_seed=0", "h=8_seq_len=128_seed=0",
                          "h=8_seq_len=16_seed=0", "h=4_seq_len=512_seed=0",
                          "h=4_seq_len=128_seed=0", "h=4_seq_len=16_seed=0"])
        self.assertEqual({(t[2], t[3]) for t in table}, {("yes", "valid")})
        # File order, not alphabetical order, decides the axes.
        s = self.write_sweep('{"base": {"d_model": 8, "seq_len": 2},\n'
                             ' "grid": {"seed": [1, 2], "h": [1, 2]}}')
        _, table = self.dry_run(s, self.path("out"))
        self.assertEqual([t[1] for t in table], ["seed=1_h=1", "seed=1_h=2", "seed=2_h=1",
                                                 "seed=2_h=2"])

    def test_zip_and_zip_groups(self):
        # One zip group: the lists advance together, after the grid axes.
        s = self.write_sweep({"base": {"d_model": 8, "seq_len": 4},
                              "grid": {"h": [1, 2]},
                              "zip": {"seed": [0, 1, 2], "batch": [1, 2, 3]}})
        header, table = self.dry_run(s, self.path("out"))
        self.assertIn("6 run(s) (2 x 3)", header)
        self.assertEqual([t[1] for t in table],
                         ["h=1_seed=0_batch=1", "h=1_seed=1_batch=2", "h=1_seed=2_batch=3",
                          "h=2_seed=0_batch=1", "h=2_seed=1_batch=2", "h=2_seed=2_batch=3"])
        # An array of zip groups: each group is one axis; the last varies fastest.
        s = self.write_sweep({"base": {"d_model": 8, "seq_len": 4, "h": 2},
                              "zip": [{"seed": [0, 1]},
                                      {"causal": [False, True], "masked_rows": ["zero", "nan"]}]})
        header, table = self.dry_run(s, self.path("out"))
        self.assertIn("4 run(s) (2 x 2)", header)
        self.assertEqual([t[1] for t in table],
                         ["seed=0_causal=false_masked_rows=zero",
                          "seed=0_causal=true_masked_rows=nan",
                          "seed=1_causal=false_masked_rows=zero",
                          "seed=1_causal=true_masked_rows=nan"])
        # Without grid and zip: one run named "run".
        s = self.write_sweep({"base": {"d_model": 8, "seq_len": 4, "h": 2}})
        header, table = self.dry_run(s, self.path("out"))
        self.assertEqual([t[1] for t in table], ["run"])

    def test_name_templates(self):
        s = self.write_sweep({"base": {"d_model": 64, "batch": 1},
                              "grid": {"h": [8, 4], "seq_len": [512, 128]},
                              "name": "h{h}_T{seq_len}"})
        _, table = self.dry_run(s, self.path("out"))
        self.assertEqual([t[1] for t in table], ["h8_T512", "h8_T128", "h4_T512", "h4_T128"])
        # {index}, a base key, and characters that cannot be in a directory name.
        s = self.write_sweep({"base": {"d_model": 64, "batch": 1, "seq_len": 8},
                              "grid": {"h": [8, 4]}, "name": "run{index}/d{d_model} h{h}"})
        _, table = self.dry_run(s, self.path("out"))
        self.assertEqual([t[1] for t in table], ["run0-d64-h8", "run1-d64-h4"])
        # List values are joined with ','.
        s = self.write_sweep({"base": {"d_model": 8, "batch": 2, "seq_len": 4, "h": 2},
                              "grid": {"key_lengths": [[4, 4], [2, 3]]}})
        _, table = self.dry_run(s, self.path("out"))
        self.assertEqual([t[1] for t in table], ["key_lengths=4,4", "key_lengths=2,3"])

    def test_out_dir_precedence(self):
        body = {"base": {"d_model": 8, "seq_len": 2, "h": 1, "out_dir": self.path("from_base")},
                "grid": {"seed": [0]}}
        s = self.write_sweep(body, "stem.json")
        header, _ = self.dry_run(s, self.path("flag"))
        self.assertIn(f"out_dir {self.path('flag')},", header)
        rc, stdout, err = run(["sweep", s, "--dry_run"])
        self.assertEqual(rc, 0, err)
        self.assertIn(f"out_dir {self.path('from_base')},", stdout)
        body["out_dir"] = self.path("from_file")
        s = self.write_sweep(body, "stem.json")
        rc, stdout, err = run(["sweep", s, "--dry_run"])
        self.assertIn(f"out_dir {self.path('from_file')},", stdout)
        # With none of them: out/sweeps/STEM, relative to the working directory.
        del body["out_dir"], body["base"]["out_dir"]
        s = self.write_sweep(body, "stem.json")
        rc, stdout, err = run(["sweep", s, "--dry_run"], cwd=self.tmp)
        self.assertIn("out_dir out/sweeps/stem,", stdout)
        self.assertFalse(os.path.exists(self.path("out")))
        # A real run honours the file's out_dir.
        body["out_dir"] = self.path("from_file")
        s = self.write_sweep(body, "stem.json")
        rc, _, err = run(["sweep", s, "-q"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.run_dirs(self.path("from_file")), ["seed=0"])

    def test_real_run_directories(self):
        base = dict(SMALL)
        base["seed"] = 5  # overridden where swept
        s = self.write_sweep({"base": base, "grid": {"h": [1, 2], "seq_len": [4, 6]},
                              "zip": {"seed": [0, 1], "kv_seq_len": [4, 7]},
                              "name": "h{h}_T{seq_len}_s{seed}_S{kv_seq_len}"})
        out = self.path("out")
        _, err = self.sweep(s, out)
        names = []
        for h in (1, 2):
            for t in (4, 6):
                for seed, kv in ((0, 4), (1, 7)):
                    names.append(f"h{h}_T{t}_s{seed}_S{kv}")
        self.assertEqual(self.run_dirs(out), sorted(names))
        for i, name in enumerate(names):
            h, t, seed, kv = (int(x) for x in re.findall(r"\d+", name))
            planned = dict(base, h=h, seq_len=t, seed=seed, kv_seq_len=kv)
            report = self.check_run_dir(os.path.join(out, name), planned)
            c = report["config"]
            self.assertEqual((c["h"], c["seq_len"], c["seed"], c["kv_seq_len"], c["d_k"]),
                             (h, t, seed, kv, 16 // h))
            self.assertEqual(report["attention"], "self" if kv == t else "cross")
        rows = self.check_results(out, names)
        for r, name in zip(rows, names):
            self.assertEqual(r["run_dir"], os.path.join(out, name))
            self.assertEqual(r["shard"], "0/1")
        self.assertEqual(os.listdir(os.path.join(out, "results")), ["shard-0-of-1.jsonl"])
        self.assertIn(f"wrote {out}/results.jsonl and {out}/results.csv (8 ok, 0 failed", err)

    def test_bundled_sweeps_run(self):
        sweeps = os.path.join(ROOT, "configs", "sweeps")
        for name in sorted(os.listdir(sweeps)):
            out = self.path(name)
            self.dry_run(os.path.join(sweeps, name), out)
            self.sweep(os.path.join(sweeps, name), out, "--jobs", str(min(CORES, 2)), "-q")
            rows = read_jsonl(os.path.join(out, "results.jsonl"))
            self.assertGreater(len(rows), 1, name)
            self.assertEqual({r["status"] for r in rows}, {"ok"}, name)


# ---------------------------------------------------------------------------------------------
class Shards(Case):
    """--shard I/N and Slurm array tasks partition the runs; --collect merges them."""

    def make(self, n=8):
        return self.write_sweep({"base": SMALL, "grid": {"h": [1, 2], "seed": list(range(n // 2))}})

    def test_three_shards_partition_and_collect(self):
        s, out = self.make(8), self.path("out")
        _, table = self.dry_run(s, out, "--shard", "1/3")
        self.assertEqual([t[2] for t in table], ["yes" if i % 3 == 1 else "-" for i in range(8)])
        names = [t[1] for t in table]
        seen = []
        for i in range(3):
            _, err = self.sweep(s, out, "--shard", f"{i}/3")
            self.assertIn(f"shard {i}/3 finished", err)
            self.assertIn("--collect", err)
            rows = read_jsonl(os.path.join(out, "results", f"shard-{i}-of-3.jsonl"))
            self.assertEqual([r["index"] for r in rows], list(range(i, 8, 3)))
            self.assertEqual({r["shard"] for r in rows}, {f"{i}/3"})
            seen += [r["index"] for r in rows]
            # A shard other than 0/1 does not write results.jsonl itself.
            self.assertFalse(os.path.exists(os.path.join(out, "results.jsonl")))
        self.assertEqual(sorted(seen), list(range(8)))
        self.assertEqual(self.run_dirs(out), sorted(names))
        _, err = self.sweep(s, out, "--collect")
        self.assertIn("8 ok, 0 failed, 0 invalid, 0 without a result", err)
        rows = self.check_results(out, names)
        self.assertEqual([r["shard"] for r in rows], [f"{i % 3}/3" for i in range(8)])

    def test_collect_counts_missing_runs(self):
        s, out = self.make(8), self.path("out")
        self.sweep(s, out, "--shard", "0/2", "-q")
        # Half the grid missing is an error that names the runs, not a quiet partial table.
        _, err = self.sweep(s, out, "--collect", code=1)
        self.assertIn("4 ok, 0 failed, 0 invalid, 4 without a result", err)
        self.assertIn("4 run(s) have no result: h=1_seed=1, h=1_seed=3, h=2_seed=1, h=2_seed=3;", err)
        self.assertEqual([r["index"] for r in read_jsonl(os.path.join(out, "results.jsonl"))],
                         [0, 2, 4, 6])

    def test_slurm_array_task(self):
        s = self.make(6)
        out = self.path("out")
        _, err = self.sweep(s, out, env=base_env(SLURM_ARRAY_TASK_ID="1",
                                                 SLURM_ARRAY_TASK_COUNT="2"))
        self.assertIn("shard 1/2 from the Slurm array task", err)
        rows = read_jsonl(os.path.join(out, "results", "shard-1-of-2.jsonl"))
        self.assertEqual([r["index"] for r in rows], [1, 3, 5])
        self.assertEqual(len(self.run_dirs(out)), 3)
        # --array=1-2: task 2 of a 2-task array starting at 1 is shard 1/2.
        out2 = self.path("out2")
        self.sweep(s, out2, env=base_env(SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_TASK_MIN="1",
                                         SLURM_ARRAY_TASK_COUNT="2"))
        rows = read_jsonl(os.path.join(out2, "results", "shard-1-of-2.jsonl"))
        self.assertEqual([r["index"] for r in rows], [1, 3, 5])
        # --shard beats the Slurm variables.
        out3 = self.path("out3")
        self.sweep(s, out3, "--shard", "0/3",
                   env=base_env(SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_TASK_COUNT="2"))
        self.assertEqual([r["index"] for r in
                          read_jsonl(os.path.join(out3, "results", "shard-0-of-3.jsonl"))], [0, 3])
        # A task id outside the array is an error.
        out4 = self.path("out4")
        rc, _, err = run(["sweep", s, "--out_dir", out4],
                         env=base_env(SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_TASK_COUNT="2"))
        self.assertEqual(rc, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("SLURM_ARRAY_TASK", err)
        self.assertFalse(os.path.exists(out4))

    def test_invalid_shard_values(self):
        s, out = self.make(4), self.path("out")
        for value in ("3/3", "x/2", "1/0", "1", "/2", "2/", "1/2/3", "-1/2", "1/2x", " 1/2"):
            rc, _, err = run(["sweep", s, "--out_dir", out, "--shard", value])
            self.assertEqual(rc, 2, f"--shard {value!r}: {err}")
            lines = err.strip().splitlines()
            self.assertEqual(len(lines), 1, f"--shard {value!r}: {err!r}")
            self.assertIn("--shard", lines[0])
            self.assertFalse(os.path.exists(out), f"--shard {value!r} wrote files")


# ---------------------------------------------------------------------------------------------
class Concurrency(Case):
    """Several shard processes at once on one sweep and one out_dir."""

    def make(self):
        return self.write_sweep({"base": SMALL, "grid": {"h": [1, 2, 4], "seed": [0, 1, 2, 3]}})

    def check_collected(self, s, out, n_shards):
        names = [t[1] for t in self.dry_run(s, self.path("dry"))[1]]
        shard_files = sorted(os.listdir(os.path.join(out, "results")))
        self.assertEqual(shard_files, [f"shard-{i}-of-{n_shards}.jsonl" for i in range(n_shards)])
        indices = []
        for f in shard_files:
            indices += [r["index"] for r in read_jsonl(os.path.join(out, "results", f))]
        self.assertEqual(sorted(indices), list(range(len(names))))
        _, err = self.sweep(s, out, "--collect")
        self.assertIn(f"{len(names)} ok, 0 failed, 0 invalid, 0 without a result", err)
        self.check_results(out, names)
        for name in names:
            self.check_run_dir(os.path.join(out, name), SMALL)

    def test_three_shard_processes_at_once(self):
        s = self.make()
        out = self.path("deep", "er", "out")  # created by all three at once
        procs = [self.start(s, out, "--shard", f"{i}/3") for i in range(3)]
        for i, p in enumerate(procs):
            self.assertEqual(self.wait(p), 0, self.stderr_of(p))
            self.assertIn(f"shard {i}/3 finished", self.stderr_of(p))
        self.check_collected(s, out, 3)

    def test_gnu_parallel(self):
        parallel = shutil.which("parallel")
        self.assertIsNotNone(parallel, "GNU parallel is missing: scripts/setup.sh --test installs it")
        version = subprocess.run([parallel, "--version"], capture_output=True, text=True,
                                 env=base_env(HOME=self.tmp))
        self.assertIn("GNU parallel", version.stdout, "/usr/bin/parallel is not GNU parallel")
        s, out = self.make(), self.path("out")
        # The script docs/cluster.md shows: a shard per core at a time, each pinned to its core,
        # then --collect. HOME in the temporary directory: parallel keeps state in ~/.parallel.
        script = os.path.join(ROOT, "scripts", "parallel_sweep.sh")
        p = subprocess.run(["bash", script, s, "4", "--out_dir", out],
                           capture_output=True, text=True, timeout=DEADLINE,
                           env=base_env(HOME=self.tmp, MHA=MHA))
        self.assertEqual(p.returncode, 0, p.stderr)
        for i in range(4):
            self.assertIn(f"shard {i}/4 finished", p.stderr)
        self.assertIn("12 run(s): 12 ok, 0 failed, 0 invalid, 0 without a result yet", p.stderr)
        self.check_collected(s, out, 4)
        # jobs x threads = cores: each shard had one core, so each run one thread.
        for d in self.run_dirs(out):
            self.assertEqual(load_json(os.path.join(out, d, "run.json"))["config"]["threads"], 1)


# ---------------------------------------------------------------------------------------------
class Resume(Case):
    """Power loss (SIGKILL of the sweep and its run) and --resume."""

    def test_sigkill_sweep_and_run_then_resume(self):
        s = self.write_sweep({"base": MEDIUM, "grid": {"seed": [0, 1, 2, 3]}})
        out = self.path("out")
        names = [f"seed={i}" for i in range(4)]
        p = self.start(s, out)
        # Wait for a complete run and a later one in progress.
        while True:
            child, run_dir = self.stop_during_run(p, out)
            if os.path.basename(run_dir) != names[0]:
                break
            os.kill(p.pid, signal.SIGCONT)
            poll(lambda: os.path.exists(os.path.join(out, names[0], "run.json"))
                 or p.poll() is not None, "the first run to finish")
        # Power loss: the run first (the stopped sweep cannot notice), then the sweep.
        os.kill(child, signal.SIGKILL)
        os.kill(p.pid, signal.SIGKILL)
        self.wait(p)
        poll(lambda: not alive(child), "the killed run to die")
        killed = os.path.basename(run_dir)
        self.check_whole_files(out, MEDIUM_SHAPES)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "run.json")))
        complete = [n for n in names if os.path.exists(os.path.join(out, n, "run.json"))]
        self.assertIn(names[0], complete)
        self.assertNotIn(killed, complete)
        self.assertEqual(complete, names[:len(complete)])  # runs go in index order
        # SIGKILL cannot be caught: the killed run's temporaries stay (--resume keeps them).
        stale = temporaries(run_dir)
        before = {n: (os.stat(os.path.join(out, n, "run.json")).st_mtime_ns,
                      read_bytes(os.path.join(out, n, "run.json"))) for n in complete}
        # The shard file holds only whole lines, one per completed run.
        rows = read_jsonl(os.path.join(out, "results", "shard-0-of-1.jsonl"))
        self.assertEqual([r["name"] for r in rows], complete)

        # --dry_run tells which runs --resume will skip.
        for index, name, _, status in self.dry_run_table(s, out):
            self.assertEqual(status, "valid, done (--resume skips it)" if name in complete
                             else "valid", name)

        _, err = self.sweep(s, out, "--resume")
        self.assertIn(f"4 run(s) in shard 0/1, {4 - len(complete)} to do "
                      f"({len(complete)} already complete)", err)
        for n in complete:
            self.assertNotIn(f"] {n}: ok", err)
            self.assertEqual((os.stat(os.path.join(out, n, "run.json")).st_mtime_ns,
                              read_bytes(os.path.join(out, n, "run.json"))), before[n],
                             f"--resume redid the complete run {n}")
        self.assertIn(f"] {killed}: ok", err)
        for n in names:
            self.check_run_dir(os.path.join(out, n), dict(MEDIUM, seed=int(n[5:])), MEDIUM_SHAPES,
                               stale=stale if n == killed else ())
        self.check_results(out, names)

    def test_killed_run_costs_only_that_run(self):
        """A run whose process dies (a crash, the OOM killer: SIGKILL here) fails alone; the
        worker that ran it is replaced and the other runs complete with their results."""
        s = self.write_sweep({"base": MEDIUM, "grid": {"seed": [0, 1, 2, 3]}})
        out = self.path("out")
        p = self.start(s, out)
        child, run_dir = self.stop_during_run(p, out)
        killed = os.path.basename(run_dir)
        os.kill(child, signal.SIGKILL)
        os.kill(p.pid, signal.SIGCONT)
        self.assertEqual(self.wait(p), 1, self.stderr_of(p))
        err = self.stderr_of(p)
        self.assertIn(f"{killed}: failed (exit 137): killed by signal 9", err)
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertEqual(len(rows), 4)
        for r in rows:
            if r["name"] == killed:
                self.assertEqual(r["status"], "failed", r)
                self.assertIn("killed by signal 9", r["error"])
            else:
                self.assertEqual(r["status"], "ok", r)
                self.check_run_dir(os.path.join(out, r["name"]),
                                   dict(MEDIUM, seed=int(r["name"][5:])), MEDIUM_SHAPES)
        # --resume redoes only the killed run.
        _, err = self.sweep(s, out, "--resume")
        self.assertIn("4 run(s) in shard 0/1, 1 to do (3 already complete)", err)
        self.assertIn(f"] {killed}: ok", err)

    def dry_run_table(self, s, out):
        """The dry-run table for an out_dir that already exists."""
        rc, stdout, err = run(["sweep", s, "--out_dir", out, "--dry_run"])
        self.assertEqual(rc, 0, err)
        return [tuple(line.split(None, 3)) for line in stdout.splitlines()[2:]]

    def test_sigkill_sweep_only_terminates_its_run(self):
        s = self.write_sweep({"base": LONG, "grid": {"seed": [0, 1]}})
        out = self.path("out")
        reaper = set_child_subreaper(True)
        try:
            p = self.start(s, out)
            child, run_dir = self.stop_during_run(p, out)
            os.kill(p.pid, signal.SIGKILL)  # PR_SET_PDEATHSIG sends the run SIGTERM
            self.wait(p)
            if reaper:  # the orphaned run is now our child: read how it ended
                _, status = os.waitpid(child, 0)
                self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM,
                                f"the run ended with status {status:#x}, expected SIGTERM")
            else:
                poll(lambda: not alive(child), "the orphaned run to die")
        finally:
            set_child_subreaper(False)
        self.assertEqual(temporaries(run_dir), [], "the terminated run left temporaries")
        self.assertFalse(os.path.exists(os.path.join(run_dir, "run.json")))
        self.sweep(s, out, "--resume")
        self.check_results(out, ["seed=0", "seed=1"])

    def test_resume_reruns_runs_whose_config_changed(self):
        body = {"base": dict(SMALL, seed=0), "grid": {"h": [1, 2, 4]}}
        s, out = self.write_sweep(body), self.path("out")
        names = ["h=1", "h=2", "h=4"]
        self.sweep(s, out)
        crc = {r["name"]: r["output_crc32"] for r in read_jsonl(os.path.join(out, "results.jsonl"))}
        _, err = self.sweep(s, out, "--resume")
        self.assertIn("0 to do (3 already complete)", err)
        # threads, max_memory and out_dir do not change results: still complete.
        body["base"].update(threads=1, max_memory="4GiB")
        s = self.write_sweep(body)
        _, err = self.sweep(s, out, "--resume")
        self.assertIn("0 to do (3 already complete)", err)
        # Another seed does: every run is redone, with the new seed.
        body["base"]["seed"] = 1
        s = self.write_sweep(body)
        # Until they are, --collect reports no stale results for them (and fails: runs missing).
        _, err = self.sweep(s, out, "--collect", code=1)
        self.assertIn("0 ok, 0 failed, 0 invalid, 3 without a result", err)
        self.assertEqual(read_jsonl(os.path.join(out, "results.jsonl")), [])
        _, err = self.sweep(s, out, "--resume")
        self.assertIn("3 to do", err)
        self.assertNotIn("already complete", err)
        rows = self.check_results(out, names)
        for r in rows:
            self.assertEqual(r["seed"], 1)
            self.assertNotEqual(r["output_crc32"], crc[r["name"]])
            self.assertEqual(load_json(os.path.join(out, r["name"], "run.json"))["config"]["seed"], 1)
        # A run whose run.json is gone (or not complete) is redone, the others are not.
        os.remove(os.path.join(out, "h=2", "run.json"))
        with open(os.path.join(out, "h=4", "run.json"), "w") as f:
            f.write('{"status": "compl')
        _, err = self.sweep(s, out, "--resume")
        self.assertIn("2 to do (1 already complete)", err)
        self.assertNotIn("] h=1: ok", err)
        self.check_results(out, names)
        # Without --resume every run is done again.
        _, err = self.sweep(s, out)
        self.assertIn("3 to do", err)


# ---------------------------------------------------------------------------------------------
class Signals(Case):
    """SIGINT finishes the running runs and starts no more; a second SIGINT, SIGTERM or SIGHUP
    stops them at once."""

    def test_sigint_finishes_running_run_then_resume(self):
        s = self.write_sweep({"base": MEDIUM, "grid": {"seed": [0, 1, 2, 3]}})
        out = self.path("out")
        names = [f"seed={i}" for i in range(4)]
        p = self.start(s, out)
        child, run_dir = self.stop_during_run(p, out)
        started = self.run_dirs(out)  # the stopped sweep starts nothing
        os.kill(p.pid, signal.SIGINT)
        os.kill(p.pid, signal.SIGCONT)
        self.assertEqual(self.wait(p), 130, self.stderr_of(p))
        err = self.stderr_of(p)
        self.assertIn("--resume", err.strip().splitlines()[-1])
        self.assertIn("interrupted", err)
        # The running run finished; no run started after the signal.
        self.assertIn(os.path.basename(run_dir), started)
        self.assertEqual(self.run_dirs(out), started)
        self.assertLess(len(started), 4)
        for n in started:
            self.check_run_dir(os.path.join(out, n), dict(MEDIUM, seed=int(n[5:])), MEDIUM_SHAPES)
        self.assertEqual(children(p.pid), [])
        _, err = self.sweep(s, out, "--resume")
        self.assertIn(f"({len(started)} already complete)", err)
        self.check_results(out, names)

    def stop_at_once(self, sig, code, second_sigint=False):
        s = self.write_sweep({"base": LONG, "grid": {"seed": [0, 1, 2]}})
        out = self.path(f"out_{sig}")
        p = self.start(s, out)
        child, run_dir = self.stop_during_run(p, out)
        started = self.run_dirs(out)
        if second_sigint:
            os.kill(p.pid, signal.SIGINT)
            os.kill(p.pid, signal.SIGCONT)
            poll(lambda: "interrupted" in self.stderr_of(p) or p.poll() is not None,
                 "the sweep to report the first SIGINT")
        else:
            os.kill(p.pid, signal.SIGCONT)
        self.assertTrue(alive(child), "test inconclusive: the run ended before the signal")
        os.kill(p.pid, sig)
        self.assertEqual(self.wait(p), code, self.stderr_of(p))
        self.assertFalse(alive(child), "the sweep exited before its run")
        self.assertIn("stopping", self.stderr_of(p))
        # The running run was stopped: no run.json, no temporaries; nothing else started.
        self.assertFalse(os.path.exists(os.path.join(run_dir, "run.json")),
                         "the run was not stopped")
        self.assertEqual(temporaries(run_dir), [])
        self.assertEqual(self.run_dirs(out), started)
        return s, out

    def test_second_sigint_stops_running_run(self):
        s, out = self.stop_at_once(signal.SIGINT, 130, second_sigint=True)
        self.sweep(s, out, "--resume", "-q")
        self.check_results(out, ["seed=0", "seed=1", "seed=2"])

    def test_sigterm_and_sighup_stop_running_run(self):
        self.stop_at_once(signal.SIGTERM, 143)
        self.stop_at_once(signal.SIGHUP, 129)


# ---------------------------------------------------------------------------------------------
class Validity(Case):
    """Every run is checked before anything runs."""

    def test_indivisible_heads(self):
        s = self.write_sweep({"base": {"d_model": 64, "seq_len": 4},
                              "grid": {"h": [3, 4], "seed": [0, 1]}})
        out = self.path("out")
        _, table = self.dry_run(s, out, code=2)
        for index, name, mine, status in table:
            if name.startswith("h=3"):
                self.assertTrue(status.startswith("invalid: "), status)
                self.assertIn("divisible", status)
            else:
                self.assertEqual(status, "valid")
        _, table = self.dry_run(s, out, "--skip_invalid", code=0)
        # Without --skip_invalid: every invalid run on stderr, nothing written.
        rc, _, err = run(["sweep", s, "--out_dir", out])
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 3, err)
        self.assertIn("run 0 (h=3_seed=0)", lines[0])
        self.assertIn("run 1 (h=3_seed=1)", lines[1])
        self.assertIn("divisible", lines[0])
        self.assertIn("--skip_invalid", lines[2])
        self.assertFalse(os.path.exists(out), "an invalid sweep wrote files")
        # With it: the valid runs run, the invalid are listed and left out of the results.
        _, err = self.sweep(s, out, "--skip_invalid")
        self.assertIn("skipping invalid run 0 (h=3_seed=0)", err)
        self.assertEqual(self.run_dirs(out), ["h=4_seed=0", "h=4_seed=1"])
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertEqual([r["index"] for r in rows], [2, 3])
        self.assertIn("2 ok, 0 failed, 2 invalid", err)

    def test_invalid_by_file_contents(self):
        q = self.path("q.npy")
        np.save(q, np.random.default_rng(0).random((2, 5, 16), dtype=np.float32))
        s = self.write_sweep({"base": {"h": 2, "query": q}, "grid": {"d_model": [16, 32]}})
        out = self.path("out")
        _, table = self.dry_run(s, out, code=2)
        self.assertEqual(table[0][3], "valid")
        self.assertTrue(table[1][3].startswith("invalid: "), table[1])
        self.assertIn("q.npy", table[1][3])
        self.assertIn("d_model", table[1][3])
        rc, _, err = run(["sweep", s, "--out_dir", out])
        self.assertEqual(rc, 2, err)
        self.assertFalse(os.path.exists(out))
        # A missing input file and a mask of the wrong shape, only in some runs.
        m = self.path("m.npy")
        np.save(m, np.ones((5, 4), bool))
        s = self.write_sweep({"base": {"h": 2, "d_model": 16, "seq_len": 5},
                              "grid": {"query": [q, self.path("nope.npy")], "mask": [None, m]}})
        _, table = self.dry_run(s, out, code=2)
        self.assertEqual([t[3] for t in table][0], "valid")
        self.assertIn("m.npy", table[1][3])
        self.assertIn("nope.npy", table[2][3])
        self.assertIn("nope.npy", table[3][3])
        # More memory than max_memory allows.
        s = self.write_sweep({"base": {"h": 1, "d_model": 8, "max_memory": "1MiB",
                                       "save_attention": True},
                              "grid": {"seq_len": [8, 4096]}})
        _, table = self.dry_run(s, out, code=2)
        self.assertEqual(table[0][3], "valid")
        self.assertIn("max_memory", table[1][3])

    def test_shard_only_reports_its_own_invalid_runs(self):
        s = self.write_sweep({"base": {"d_model": 64, "seq_len": 4}, "grid": {"h": [3, 4]}})
        out = self.path("out")
        _, err = self.sweep(s, out, "--shard", "1/2")  # only h=4
        self.assertEqual(self.run_dirs(out), ["h=4"])


# ---------------------------------------------------------------------------------------------
class Jobs(Case):
    """--jobs N shares the cores: threads = cores / N per run."""

    def test_jobs_share_the_cores(self):
        # As many runs at once as --jobs says, each with its share of the cores: two on a machine
        # with 2 cores or more, one (with every core) on a single core, where --jobs 2 is refused.
        jobs = min(CORES, 2)
        threads = CORES // jobs
        s = self.write_sweep({"base": dict(MEDIUM, seq_len=1024), "grid": {"seed": [0, 1, 2, 3]}})
        out = self.path("out")
        p = self.start(s, out, "--jobs", str(jobs))
        self.assertEqual(p.wait(timeout=DEADLINE), 0, self.stderr_of(p))
        # How many ran at once, from the rows: each run's [started_at, finished_at), recorded by
        # the sweep as it hands a run to a worker and before that worker takes the next.
        rows = self.check_results(out, [f"seed={i}" for i in range(4)])
        events = sorted([(r["started_at"], 1) for r in rows] + [(r["finished_at"], -1) for r in rows],
                        key=lambda e: (e[0], e[1]))  # an end before a start at the same ms
        running = most = 0
        for _, step in events:
            running += step
            most = max(most, running)
        self.assertEqual(most, jobs, f"--jobs {jobs} should run {jobs} run(s) at once")
        self.assertIn(f"{jobs} at a time with {threads} thread(s) each", self.stderr_of(p))
        for i in range(4):
            report = load_json(os.path.join(out, f"seed={i}", "run.json"))
            self.assertEqual(report["status"], "complete")
            self.assertEqual(report["config"]["threads"], threads)
            self.assertEqual(load_json(os.path.join(out, f"seed={i}", "config.json"))["threads"],
                             threads)
        self.assertEqual({r["threads"] for r in rows}, {threads})

    def test_one_core_is_shared_by_one_job(self):
        # SLURM_CPUS_PER_TASK=1 makes any machine a 1-core one for mha: --jobs 2 is refused
        # there, and --jobs 1 runs one run at a time with 1 thread.
        s = self.write_sweep({"base": dict(SMALL, h=2), "grid": {"seed": [0, 1]}})
        env = dict(os.environ, SLURM_CPUS_PER_TASK="1")
        refused = subprocess.run([MHA, "sweep", s, "--jobs", "2", "--out_dir", self.path("two")],
                                 capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn("--jobs 2: this machine has 1 core(s) for this process", refused.stderr)
        self.assertFalse(os.path.exists(self.path("two")))
        ok = subprocess.run([MHA, "sweep", s, "--jobs", "1", "--out_dir", self.path("one")],
                            capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("1 at a time with 1 thread(s) each", ok.stderr)
        for i in range(2):
            self.assertEqual(load_json(self.path("one", f"seed={i}", "run.json"))["config"]
                             ["threads"], 1)

    def expect_refused(self, sweep_file, *flags, fragment):
        out = self.path("out")
        rc, _, err = run(["sweep", sweep_file, "--out_dir", out] + list(flags))
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn(fragment, lines[0])
        self.assertFalse(os.path.exists(out))

    def test_too_many_jobs_or_threads(self):
        s = self.write_sweep({"base": SMALL, "grid": {"h": [1, 2]}})
        self.expect_refused(s, "--jobs", str(CORES + 1), fragment=f"--jobs {CORES + 1}")
        self.expect_refused(s, "--jobs", "0", fragment="--jobs")
        # Explicit threads that do not fit beside the other jobs (jobs x threads > cores); on a
        # single core, 2 threads with --jobs 1.
        jobs = min(CORES, 2)
        threads = CORES // jobs + 1
        t = self.write_sweep({"base": dict(SMALL, threads=threads), "grid": {"h": [1, 2]}},
                             "t.json")
        self.expect_refused(t, "--jobs", str(jobs),
                            fragment=f"threads = {threads} with --jobs {jobs}")
        # Every core for one run alone fits.
        u = self.write_sweep({"base": dict(SMALL, threads=CORES), "grid": {"h": [1, 2]}}, "u.json")
        self.sweep(u, self.path("ok"), "-q")
        self.assertEqual(load_json(self.path("ok", "h=1", "run.json"))["config"]["threads"], CORES)


# ---------------------------------------------------------------------------------------------
class Results(Case):
    """What results.jsonl and results.csv hold, for runs that succeed and runs that fail."""

    def csv_rows(self, out):
        with open(os.path.join(out, "results.csv"), newline="") as f:
            return list(csv.DictReader(f))

    def check_csv_matches(self, out, rows):
        table = self.csv_rows(out)
        self.assertEqual(len(table), len(rows))
        keys = []
        for r in rows:
            keys += [k for k in r if k not in keys]
        with open(os.path.join(out, "results.csv"), newline="") as f:
            self.assertEqual(sorted(next(csv.reader(f))), sorted(keys))
        for r, c in zip(rows, table):
            for k in keys:
                v, cell = r.get(k), c[k]
                if v is None:
                    self.assertEqual(cell, "", k)
                elif isinstance(v, bool):
                    self.assertEqual(cell, "true" if v else "false", k)
                elif isinstance(v, (int, float)):
                    self.assertEqual(float(cell), v, k)
                elif isinstance(v, str):
                    self.assertEqual(cell, v, k)
                else:
                    self.assertEqual(json.loads(cell), v, k)

    def test_rows_with_attention(self):
        s = self.write_sweep({"base": dict(SMALL, d_model=24),
                              "grid": {"h": [1, 2, 3], "seq_len": [4, 7]},
                              "zip": {"causal": [False, True]}})
        out = self.path("out")
        self.sweep(s, out)
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertEqual(len(rows), 12)
        i = 0
        for h in (1, 2, 3):
            for t in (4, 7):
                for causal in (False, True):
                    r = rows[i]
                    run_dir = os.path.join(out, r["name"])
                    report = load_json(os.path.join(run_dir, "run.json"))
                    self.assertEqual((r["index"], r["status"], r["h"], r["seq_len"]),
                                     (i, "ok", h, t))
                    self.assertEqual(bool(r["causal"]), causal)
                    B, d, dk = 2, 24, 24 // h
                    self.assertEqual((r["d_model"], r["d_k"], r["d_v"], r["batch"],
                                      r["kv_seq_len"], r["d_out"]), (d, dk, dk, B, t, d))
                    flops = 2 * B * (t * d * h * dk * 3 + h * t * t * 2 * dk + t * h * dk * d)
                    self.assertEqual(r["flops"], flops)
                    self.assertEqual(r["flops"], report["flops"])
                    self.assertEqual(r["compute_ms"], report["timings_ms"]["compute"])
                    self.assertAlmostEqual(r["gflops_per_s"], flops / (r["compute_ms"] * 1e6),
                                           delta=1e-9 * r["gflops_per_s"])
                    self.assertGreater(r["wall_ms"], 0)
                    self.assertEqual(r["output_crc32"], format(
                        zlib.crc32(read_bytes(os.path.join(run_dir, "output.npy"))), "08x"))
                    o = np.load(os.path.join(run_dir, "output.npy"))
                    self.assertAlmostEqual(r["output_mean"], float(o.astype(np.float64).mean()),
                                           delta=1e-12)
                    self.assertEqual(r["output_max"], float(o.max()))
                    a = np.load(os.path.join(run_dir, "attention.npy"))
                    per_head = entropy_per_head(a)
                    np.testing.assert_allclose(r["attention_entropy_per_head"], per_head,
                                               rtol=1e-9)
                    self.assertAlmostEqual(r["attention_entropy"], float(per_head.mean()),
                                           delta=1e-9 * abs(per_head.mean()) + 1e-12)
                    self.assertEqual(r["attention_causal"], causal)
                    i += 1
        self.check_csv_matches(out, rows)

    def test_rows_without_attention(self):
        s = self.write_sweep({"base": dict(SMALL, save_attention=False), "grid": {"h": [1, 2]}})
        out = self.path("out")
        self.sweep(s, out)
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        for r in rows:
            self.assertFalse([k for k in r if k.startswith("attention_")], r)
            self.assertIn("output_crc32", r)
            self.assertFalse(os.path.exists(os.path.join(out, r["name"], "attention.npy")))
        self.check_csv_matches(out, rows)

    def test_run_failing_at_run_time(self):
        # A file size limit (ulimit -f) lets every run pass validation, but the run whose
        # attention.npy is larger cannot reserve its file when it runs.
        s = self.write_sweep({"base": {"h": 2, "d_model": 8, "save_attention": True},
                              "grid": {"seq_len": [8, 1024, 16]}})
        out = self.path("out")
        limit = 1 << 20

        def small_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        _, table = self.dry_run(s, out)
        self.assertEqual({t[3] for t in table}, {"valid"})
        _, err = self.sweep(s, out, code=1, preexec_fn=small_files)
        self.assertIn("1 of 3 run(s) failed", err)
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertEqual([(r["index"], r["status"]) for r in rows],
                         [(0, "ok"), (1, "failed"), (2, "ok")])  # the sweep went on
        failed = rows[1]
        self.assertEqual(failed["name"], "seq_len=1024")
        self.assertEqual(failed["seq_len"], 1024)
        self.assertEqual(failed["exit_code"], 1)
        self.assertIn("attention.npy", failed["error"])
        self.assertIn("File too large", failed["error"])
        self.assertNotIn("output_crc32", failed)
        self.assertEqual(temporaries(os.path.join(out, "seq_len=1024")), [])
        self.assertIn(failed["error"], read_bytes(os.path.join(out, "seq_len=1024", "run.log"))
                      .decode())
        self.check_csv_matches(out, rows)
        csv_failed = self.csv_rows(out)[1]
        self.assertEqual((csv_failed["status"], csv_failed["exit_code"], csv_failed["output_crc32"]),
                         ("failed", "1", ""))
        # --resume retries only the failed run.
        _, err = self.sweep(s, out, "--resume")
        self.assertIn("1 to do (2 already complete)", err)
        self.check_results(out, ["seq_len=8", "seq_len=1024", "seq_len=16"])

    def test_run_directory_that_cannot_be_created(self):
        # BUG (app/sweep_command.cpp, Runner::start): when out_dir/NAME exists as a regular file,
        # `OutputSet staged(run.dir)` throws in the sweep process itself; the exception leaves
        # do_sweep, so the whole sweep stops with "mha: error: ...: output directory exists but
        # is not a directory" (exit 1): no failed row for that run, the later runs never run,
        # results.jsonl/results.csv are not written, and with --jobs > 1 the runs in progress
        # are killed (PR_SET_PDEATHSIG) without a row. Expected, as for any run that fails:
        # a "failed" row with exit_code and error, the other runs done, exit 1.
        s = self.write_sweep({"base": SMALL, "grid": {"h": [1, 2, 4]}})
        out = self.path("out")
        os.makedirs(out)
        with open(os.path.join(out, "h=2"), "w") as f:
            f.write("in the way\n")
        _, err = self.sweep(s, out, code=1)
        self.assertTrue(os.path.exists(os.path.join(out, "results.jsonl")),
                        "the sweep stopped at the run that could not start: " + err)
        rows = read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertEqual([(r["index"], r["status"]) for r in rows],
                         [(0, "ok"), (1, "failed"), (2, "ok")])
        self.assertNotEqual(rows[1]["exit_code"], 0)
        self.assertIn("h=2", rows[1]["error"])
        self.assertIn("not a directory", rows[1]["error"])


# ---------------------------------------------------------------------------------------------
class SweepFileErrors(Case):
    """A bad sweep file: exit 2, one stderr line naming the file and the problem, no files."""

    def expect_error(self, text, *fragments, flags=()):
        s = self.write_sweep(text, "bad.json")
        out = self.path("out")
        for extra in ([], ["--dry_run"], ["--collect"]):
            rc, stdout, err = run(["sweep", s, "--out_dir", out] + extra + list(flags))
            self.assertEqual(rc, 2, f"{text}: {err}")
            lines = err.strip().splitlines()
            self.assertEqual(len(lines), 1, f"expected one line on stderr, got {err!r}")
            self.assertIn(s, lines[0])
            for fragment in fragments:
                self.assertIn(fragment, lines[0])
            self.assertEqual(stdout, "")
            self.assertFalse(os.path.exists(out), f"{text}: wrote files")
        return lines[0]

    def test_errors(self):
        base = '"base": {"d_model": 8, "seq_len": 2}'
        self.expect_error('{%s, "grid": {"h": [1]}, "bogus": 1}' % base, "unknown key 'bogus'")
        self.expect_error('{%s, "grid": {"h": [1]}, "seed": 1}' % base, "unknown key 'seed'",
                          '"base"')
        self.expect_error('{%s, "grid": {"dmodel": [8, 16], "h": [1]}}' % base,
                          "unknown config key 'dmodel'", "did you mean 'd_model'")
        self.expect_error('{"base": {"d_model": 8, "seq_len": 2, "hh": 1}, "grid": {"h": [1]}}',
                          "'hh'", "did you mean 'h'")
        self.expect_error('{%s, "grid": {"h": []}}' % base, "'h'", "non-empty list")
        self.expect_error('{%s, "grid": {"h": 2}}' % base, "'h'", "non-empty list")
        self.expect_error('{%s, "grid": {"h": [1]}, "zip": {"seed": [0, 1], "batch": [1]}}' % base,
                          "zip", "'batch' has 1 values but 'seed' has 2")
        self.expect_error('{%s, "grid": {"h": [1]}, "zip": [{"seed": [0]}, {"seed": [1]}]}' % base,
                          "'seed' is swept more than once")
        self.expect_error('{%s, "grid": {"h": [1, 2]}, "zip": {"h": [1, 2]}}' % base,
                          "'h' is swept more than once")
        self.expect_error('{%s, "grid": {"h": [1], "out_dir": ["a", "b"]}}' % base,
                          "'out_dir' cannot be swept")
        self.expect_error('{%s, "grid": {"h": [1, 2]}, "name": "h{hh}"}' % base,
                          "unknown placeholder {hh}")
        self.expect_error('{%s, "grid": {"h": [1, 2]}, "name": "h{h"}' % base, "'{' without '}'")
        self.expect_error('{%s, "grid": {"h": [1, 2], "seed": [0, 1]}, "name": "h{h}"}' % base,
                          "runs 0 and 1 both get the name 'h1'")
        # Distinct values that become the same directory name.
        self.expect_error('{%s, "grid": {"h": [1], "query": ["a/x.npy", "a-x.npy"]}}' % base,
                          "both get the name 'h=1_query=a-x.npy'")
        line = self.expect_error('{\n  %s,\n  "grid": {"h": [1, 2] oops}\n}\n' % base,
                                 "invalid JSON")
        self.assertIn("bad.json:3:", line)
        self.expect_error('{%s, "grid": {"h": [1]}, "grid": {"h": [2]}}' % base,
                          'duplicate key "grid"')
        self.expect_error("[1, 2]", "expected a JSON object")
        self.expect_error('{"base": [], "grid": {"h": [1]}}', '"base" must be an object')
        self.expect_error('{%s, "grid": [["h", 1]]}' % base, '"grid" must be an object')
        self.expect_error('{%s, "grid": {"h": [1]}, "name": ""}' % base, '"name" must be')
        self.expect_error('{%s, "grid": {"seed": %s, "batch": %s}}'
                          % (base, list(range(1001)), list(range(1, 1001))),
                          "the grid makes 1001000 runs (1001 x 1000), more than 100000")
        self.expect_error('{%s, "grid": {"seed": %s}, "zip": {"batch": %s, "seq_len": %s}}'
                          % (base, list(range(400)), list(range(1, 501)), list(range(1, 501))),
                          "the grid makes 200000 runs (400 x 500), more than 100000")

    def test_missing_file(self):
        out = self.path("out")
        rc, _, err = run(["sweep", self.path("nope.json"), "--out_dir", out])
        self.assertEqual(rc, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("nope.json", err)
        self.assertFalse(os.path.exists(out))

    def test_comments_and_description_are_accepted(self):
        s = self.write_sweep('// a comment\n{"description": "x", /* inline */\n'
                             ' "base": {"d_model": 8, "seq_len": 2, "h": 1},\n'
                             ' "grid": {"seed": [0, 1]}}\n')
        _, table = self.dry_run(s, self.path("out"))
        self.assertEqual([t[1] for t in table], ["seed=0", "seed=1"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
