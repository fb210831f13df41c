#!/usr/bin/python3
"""Inputs that are not regular files (docs/files.md): a process substitution `<(...)` or a FIFO
works for .npy and .npz inputs, configs, inspect and plot up to the caps, with the same results
as the regular file; a stream that is not a .npy, is endless or longer than its header says is
refused at once (exit 2, one line naming it).

  /usr/bin/python3 tests/cli/test_streams.py [Class]   (MHA_BIN = path to mha,
                                                       MHA_SOURCE_DIR = repository root)
"""
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
import unittest

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


class Streams(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_streams_")
        rng = np.random.default_rng(3)
        self.query = self.path("q.npy")
        np.save(self.query, rng.random((2, 5, 16), dtype=np.float32))
        # weights saved by a run, to feed back through a pipe
        self.bash(f"{MHA} run --query {self.query} --h 2 --save_weights --out_dir "
                  f"{self.path('ref')} -q")
        self.weights = self.path("ref/weights.npz")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def bash(self, command, code=0, timeout=60):
        p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, code, f"{command}\n{p.stderr}")
        return p

    def read(self, p):
        with open(p, "rb") as f:
            return f.read()

    def test_run_reads_npy_and_npz_from_pipes(self):
        out = self.path("piped")
        self.bash(f"{MHA} run --query <(cat {self.query}) --h 2 --weights <(cat {self.weights}) "
                  f"--out_dir {out} -q")
        self.assertEqual(self.read(os.path.join(out, "output.npy")),
                         self.read(self.path("ref/output.npy")))
        # a named FIFO too, and a config from a pipe
        fifo = self.path("fifo.npy")
        os.mkfifo(fifo)
        config = json.dumps({"query": fifo, "h": 2, "weights": self.weights,
                             "out_dir": self.path("fifo_out")})
        self.bash(f"(cat {self.query} > {fifo} &); {MHA} run --config <(echo {shlex.quote(config)}) -q")
        self.assertEqual(self.read(self.path("fifo_out/output.npy")),
                         self.read(self.path("ref/output.npy")))

    def test_inspect_and_plot_from_pipes(self):
        want = json.loads(self.bash(f"{MHA} inspect --json {self.query} {self.weights}").stdout)
        got = json.loads(self.bash(f"{MHA} inspect --json <(cat {self.query}) "
                                   f"<(cat {self.weights})").stdout)
        for w, g in zip(want, got):
            w.pop("file"), g.pop("file")
        self.assertEqual(got, want)
        a = self.path("a.npy")
        np.save(a, np.full((1, 2, 3, 3), 1 / 3, dtype=np.float32))
        self.bash(f"{MHA} plot <(cat {a}) -o {self.path('a.png')} -q")
        self.assertEqual(self.read(self.path("a.png"))[:8], b"\x89PNG\r\n\x1a\n")
        p = self.bash(f"{MHA} plot <(cat {a})", code=2)
        self.assertIn("has no directory to put the PNG beside; give -o", p.stderr)

    def test_bad_streams_are_refused_at_once(self):
        out = self.path("bad")
        p = self.bash(f"{MHA} run --query /dev/zero --h 2 --out_dir {out}", code=2)
        self.assertEqual(p.stderr.strip(), "mha: error: /dev/zero: not a .npy file (it does not "
                                           "start with the \\x93NUMPY magic string)")
        # a valid header followed by endless data stops where the array should end
        p = self.bash(f"{MHA} run --query <(cat {self.query} /dev/zero) --h 2 --out_dir {out}",
                      code=2)
        self.assertRegex(p.stderr, r"^mha: error: /dev/fd/\d+: holds more than the 768 bytes its "
                                   r"header describes\n$")
        p = self.bash(f"{MHA} run --query <(head -c 300 {self.query}) --h 2 --out_dir {out}",
                      code=2)
        self.assertIn("data is 172 bytes, expected 640", p.stderr)
        p = self.bash(f"{MHA} run --query {self.query} --h 2 --weights <(true) --out_dir {out}",
                      code=2)
        self.assertIn("not a valid .npz (zip) archive: the file is empty", p.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main(verbosity=2)
