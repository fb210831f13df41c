#!/usr/bin/python3
"""An out_dir belongs to one run (docs/outputs.md, "One run per out_dir"):

- StaleOutputs: a run removes an earlier run's outputs it does not write, in its own commit;
  the files a run reads stay.
- Checksums: `mha view`, `inspect` and `plot` given a run's directory or file read only the
  outputs its run.json lists, unchanged since (size and crc32).
- Locks: `mha run` and `mha sweep` (per shard) hold a lock on their out_dir; a second process
  exits 2 at once naming the holder's pid; a lock left by a killed process never blocks.
- Links: every file a command writes is created without following a link planted at its name:
  the link's target is never touched.

  /usr/bin/python3 tests/cli/test_out_dir.py [Class]   (MHA_BIN = path to mha)
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import zlib

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
SMALL = ["--h", "2", "--d_model", "16", "--batch", "2", "--seed", "1"]
# A run that computes for a few seconds on 2 cores: long enough to be caught holding its lock.
SLOW = ["--h", "8", "--d_model", "512", "--batch", "32", "--seq_len", "2048", "-q"]


def mha(*args, code=0, timeout=120, cwd=None):
    p = subprocess.run([MHA, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if code is not None and p.returncode != code:
        raise AssertionError(f"mha {' '.join(args)}: exit {p.returncode}, expected {code}\n"
                             f"{p.stderr}")
    return p


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def load_json(path):
    with open(path) as f:
        return json.load(f)


def error_line(p):
    lines = [l for l in p.stderr.splitlines() if l.startswith("mha: error:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


class Case(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_out_dir_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def listing(self, d):
        return sorted(os.listdir(d))


class StaleOutputs(Case):
    def test_second_run_removes_what_it_does_not_write(self):
        out = self.path("out")
        mha("run", *SMALL, "--seq_len", "3", "--save_attention", "--plot", "--save_weights",
            "--out_dir", out)
        self.assertEqual(self.listing(out),
                         ["attention.npy", "attention.png", "output.npy", "run.json",
                          "weights.npz"])
        mha("run", *SMALL, "--seq_len", "4", "--save_attention", "false", "--out_dir", out)
        self.assertEqual(self.listing(out), ["output.npy", "run.json"])
        self.assertEqual(np.load(os.path.join(out, "output.npy")).shape, (2, 4, 16))
        listed = load_json(os.path.join(out, "run.json"))["outputs"]
        self.assertEqual(sorted(listed), ["output.npy"])
        # a file the run does not own stays
        with open(os.path.join(out, "notes.txt"), "w") as f:
            f.write("mine")
        mha("run", *SMALL, "--seq_len", "4", "--out_dir", out)
        self.assertIn("notes.txt", self.listing(out))

    def test_inputs_in_out_dir_stay(self):
        out = self.path("out")
        mha("run", *SMALL, "--seq_len", "3", "--save_weights", "--out_dir", out)
        # The next run reads weights.npz from its own out_dir and does not write it.
        mha("run", *SMALL, "--seq_len", "3", "--weights", os.path.join(out, "weights.npz"),
            "--out_dir", out)
        self.assertIn("weights.npz", self.listing(out))

    def test_failed_run_leaves_earlier_run_whole(self):
        out = self.path("out")
        mha("run", *SMALL, "--seq_len", "3", "--save_attention", "--out_dir", out)
        before = {n: read(os.path.join(out, n)) for n in self.listing(out)}
        p = mha("run", *SMALL, "--seq_len", "3", "--query", self.path("missing.npy"),
                "--out_dir", out, code=2)
        self.assertIn("missing.npy", error_line(p))
        after = {n: read(os.path.join(out, n)) for n in self.listing(out)}
        self.assertEqual(before, after)

    def test_failed_run_into_new_directory_leaves_nothing(self):
        out = self.path("new")
        mha("run", *SMALL, "--query", self.path("missing.npy"), "--out_dir", out, code=2)
        self.assertFalse(os.path.exists(out))


class Checksums(Case):
    def setUp(self):
        super().setUp()
        self.out = self.path("out")
        mha("run", *SMALL, "--seq_len", "3", "--save_attention", "--out_dir", self.out)
        self.attention = os.path.join(self.out, "attention.npy")

    def test_run_json_records_size_and_crc32(self):
        listed = load_json(os.path.join(self.out, "run.json"))["outputs"]
        for name in ("attention.npy", "output.npy"):
            data = read(os.path.join(self.out, name))
            self.assertEqual(listed[name]["bytes"], len(data))
            self.assertEqual(listed[name]["crc32"], f"{zlib.crc32(data):08x}")

    def test_unchanged_run_is_read(self):
        mha("view", self.out, "-o", self.path("v.html"))
        mha("inspect", self.out)
        mha("plot", self.out, "-o", self.path("p.png"))
        self.assertTrue(os.path.getsize(self.path("p.png")) > 0)

    def test_stale_map_is_refused(self):
        kept = read(self.attention)
        mha("run", *SMALL, "--seq_len", "4", "--save_attention", "false", "--out_dir", self.out)
        with open(self.attention, "wb") as f:  # an old map put back beside the new run.json
            f.write(kept)
        for args in (["view", self.out, "-o", self.path("v.html")],
                     ["view", self.attention, "-o", self.path("v.html")],
                     ["inspect", self.attention],
                     ["plot", self.attention, "-o", self.path("p.png")],
                     ["plot", self.out, "-o", self.path("p.png")]):
            line = error_line(mha(*args, code=2))
            self.assertTrue("run.json lists" in line or "not among the outputs" in line, line)
        self.assertFalse(os.path.exists(self.path("v.html")))
        self.assertFalse(os.path.exists(self.path("p.png")))

    def test_changed_map_is_refused(self):
        with open(self.attention, "r+b") as f:
            f.seek(200)
            f.write(b"\x01")
        for args in (["view", self.out, "-o", self.path("v.html")], ["inspect", self.out],
                     ["plot", self.out, "-o", self.path("p.png")]):
            line = error_line(mha(*args, code=2))
            self.assertIn("attention.npy: crc32", line)
            self.assertIn("the file changed after its run", line)
        with open(self.attention, "ab") as f:
            f.write(b"\0")
        self.assertIn("bytes, but", error_line(mha("inspect", self.attention, code=2)))

    def test_loose_files_are_not_checked(self):
        loose = self.path("loose")
        os.makedirs(loose)
        shutil.copy(self.attention, loose)
        mha("inspect", os.path.join(loose, "attention.npy"))
        mha("plot", os.path.join(loose, "attention.npy"))


class Locks(Case):
    def start_slow(self, out):
        p = subprocess.Popen([MHA, "run", *SLOW, "--out_dir", out], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        lock = os.path.join(out, ".mha.lock")
        deadline = time.time() + 30
        while not (os.path.exists(lock) and read(lock, "r").strip()):
            self.assertIsNone(p.poll(), "the slow run ended before it was seen holding its lock")
            self.assertLess(time.time(), deadline)
            time.sleep(0.01)
        return p

    def test_second_run_exits_2_at_once_naming_the_holder(self):
        out = self.path("out")
        holder = self.start_slow(out)
        # Frozen while it holds the lock: the second run can end only by refusing at once, not
        # by waiting for the holder (which cannot finish). No clock is read.
        holder.send_signal(signal.SIGSTOP)
        try:
            p = mha("run", *SMALL, "--seq_len", "3", "--out_dir", out, code=2)
            line = error_line(p)
            self.assertIn(f"in use by another mha process (pid {holder.pid})", line)
            self.assertIsNone(holder.poll(), "the holder should still be running")
        finally:
            holder.send_signal(signal.SIGCONT)
            holder.wait(timeout=300)
        self.assertEqual(holder.returncode, 0, holder.stderr.read())
        self.assertEqual(self.listing(out), ["output.npy", "run.json"])  # the lock file is gone
        self.assertEqual(load_json(os.path.join(out, "run.json"))["config"]["seq_len"],
                         2048)

    def test_lock_of_a_killed_process_never_blocks(self):
        out = self.path("out")
        holder = self.start_slow(out)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        self.assertTrue(os.path.exists(os.path.join(out, ".mha.lock")))  # left behind
        mha("run", *SMALL, "--seq_len", "3", "--out_dir", out)
        self.assertEqual(self.listing(out), ["output.npy", "run.json"])

    def test_concurrent_runs_one_wins_each_time(self):
        out = self.path("out")
        procs = [subprocess.Popen([MHA, "run", *SMALL, "--seq_len", str(64 + i), "--save_attention",
                                   "--out_dir", out], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for i in range(6)]
        codes = [p.wait(timeout=120) for p in procs]
        self.assertTrue(all(c in (0, 2) for c in codes), codes)
        self.assertIn(0, codes)
        for p, c in zip(procs, codes):
            if c == 2:
                self.assertIn("in use by another mha process", p.stderr.read())
        # Whatever won last, the directory is one run's: its files match its run.json.
        listed = load_json(os.path.join(out, "run.json"))["outputs"]
        self.assertEqual(self.listing(out), sorted(list(listed) + ["run.json"]))
        for name, entry in listed.items():
            data = read(os.path.join(out, name))
            self.assertEqual(entry["crc32"], f"{zlib.crc32(data):08x}")

    def write_sweep(self, seeds):
        s = self.path("sweep.json")
        with open(s, "w") as f:
            json.dump({"base": {"h": 8, "d_model": 512, "batch": 8, "seq_len": 1024},
                       "grid": {"seed": list(range(seeds))}}, f)
        return s

    def test_second_identical_sweep_exits_2_shards_run_side_by_side(self):
        s, out = self.write_sweep(4), self.path("sweep")
        first = subprocess.Popen([MHA, "sweep", s, "--out_dir", out], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        lock = os.path.join(out, ".mha.shard-0-of-1.lock")
        deadline = time.time() + 30
        while not (os.path.exists(lock) and read(lock, "r").strip()):
            self.assertIsNone(first.poll(), first.stderr.read() if first.poll() else "")
            self.assertLess(time.time(), deadline)
            time.sleep(0.01)
        p = mha("sweep", s, "--out_dir", out, code=2)
        self.assertIn(f"in use by another mha process (pid {first.pid})", error_line(p))
        self.assertEqual(first.wait(timeout=600), 0, first.stderr.read())
        rows = read(os.path.join(out, "results", "shard-0-of-1.jsonl"), "r").splitlines()
        self.assertEqual(len(rows), 4)  # each run once
        # Two shards of one sweep on one out_dir hold different locks.
        s2, out2 = self.write_sweep(2), self.path("sharded")
        procs = [subprocess.Popen([MHA, "sweep", s2, "--out_dir", out2, "--shard", f"{i}/2"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
        for p in procs:
            self.assertEqual(p.wait(timeout=600), 0, p.stderr.read())


class Links(Case):
    """A link planted at each name a command writes; its target must stay as it was."""

    def plant(self, link):
        target = self.path("target_" + os.path.basename(link).replace(".", "_"))
        with open(target, "w") as f:
            f.write("precious")
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(target, link)
        return target

    def assert_untouched(self, target):
        self.assertEqual(read(target, "r"), "precious", target)

    def test_run_outputs(self):
        out = self.path("out")
        targets = [self.plant(os.path.join(out, n))
                   for n in ("output.npy", "run.json", "attention.npy", "attention.png",
                             "hidden_states.npy", "weights.npz")]
        mha("run", *SMALL, "--seq_len", "3", "--save_attention", "--plot", "--save_weights",
            "--out_dir", out)
        for t in targets:
            self.assert_untouched(t)
        for n in ("output.npy", "run.json", "attention.npy", "attention.png", "weights.npz"):
            self.assertFalse(os.path.islink(os.path.join(out, n)), n)
        # hidden_states.npy was not written: the planted link is removed, not followed
        self.assertFalse(os.path.lexists(os.path.join(out, "hidden_states.npy")))

    def test_lock_file(self):
        out = self.path("out")
        target = self.plant(os.path.join(out, ".mha.lock"))
        p = mha("run", *SMALL, "--seq_len", "3", "--out_dir", out, code=1)
        self.assertIn(".mha.lock: is a symbolic link", error_line(p))
        self.assert_untouched(target)

    def sweep_file(self):
        s = self.path("sweep.json")
        with open(s, "w") as f:
            json.dump({"base": {"h": 2, "d_model": 16, "seq_len": 4, "save_attention": True},
                       "grid": {"seed": [0, 1]}}, f)
        return s

    def test_sweep_logs_configs_and_results(self):
        s, out = self.sweep_file(), self.path("sweep")
        targets = [self.plant(os.path.join(out, p))
                   for p in ("seed=0/run.log", "seed=0/config.json", "seed=1/run.json",
                             "results.jsonl", "results.csv", "sweep.json", "report.html")]
        mha("sweep", s, "--out_dir", out, "--report")
        for t in targets:
            self.assert_untouched(t)
        self.assertGreater(os.path.getsize(os.path.join(out, "seed=0", "run.log")), 0)
        self.assertEqual(len(read(os.path.join(out, "results.jsonl"), "r").splitlines()), 2)

    def test_sweep_shard_file(self):
        s, out = self.sweep_file(), self.path("sweep")
        target = self.plant(os.path.join(out, "results", "shard-0-of-1.jsonl"))
        p = mha("sweep", s, "--out_dir", out, code=None)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("shard-0-of-1.jsonl: is a symbolic link", p.stderr)
        self.assert_untouched(target)

    def test_sweep_run_directory_and_results_directory(self):
        s, out = self.sweep_file(), self.path("sweep")
        elsewhere = self.path("elsewhere")
        os.makedirs(elsewhere)
        os.makedirs(out)
        os.symlink(elsewhere, os.path.join(out, "seed=1"))
        p = mha("sweep", s, "--out_dir", out, code=2)
        self.assertIn("seed=1: is a symbolic link", error_line(p))
        self.assertEqual(os.listdir(elsewhere), [])
        os.unlink(os.path.join(out, "seed=1"))
        os.symlink(elsewhere, os.path.join(out, "results"))
        p = mha("sweep", s, "--out_dir", out, code=None)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("results: is a symbolic link", p.stderr)
        self.assertEqual(os.listdir(elsewhere), [])

    def test_view_plot_and_weights_convert(self):
        out = self.path("out")
        mha("run", *SMALL, "--seq_len", "3", "--save_attention", "--save_weights", "--out_dir", out)
        html, png, npz = (self.plant(self.path("links", n)) for n in ("v.html", "p.png", "w.npz"))
        mha("view", out, "-o", self.path("links", "v.html"))
        mha("plot", out, "-o", self.path("links", "p.png"))
        mha("weights", "convert", os.path.join(out, "weights.npz"), "--to", "torch", "-o",
            self.path("links", "w.npz"))
        for t in (html, png, npz):
            self.assert_untouched(t)
        for n in ("v.html", "p.png", "w.npz"):
            self.assertFalse(os.path.islink(self.path("links", n)), n)


if __name__ == "__main__":
    unittest.main()
