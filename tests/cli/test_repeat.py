#!/usr/bin/python3
"""`repeat` (docs/config.md, "Timing the compute"): a run with repeat N > 1 writes the same
bytes as repeat 1 and records N timed calls in run.json (timings_ms.compute_repeat); stacks time
their layers too and `--model` refuses it; a sweep's rows carry compute_ms_median, _min and _max
(results.jsonl, results.csv), its report's data and PNG chart the median with the range, and
--resume reruns a run made with another repeat. `warmup` (SweepWarmup): a sweep's layer runs
call their forward once untimed before the timed one unless the file says otherwise, so a
worker's first run is not timed cold; it changes no byte written.

  /usr/bin/python3 tests/cli/test_repeat.py [Class]   (MHA_BIN = path to mha,
                                                      MHA_SOURCE_DIR = repository root)
"""
import csv
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import jsonschema
import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.getcwd()))


def validator(name):
    with open(os.path.join(ROOT, "schemas", name)) as f:
        return jsonschema.Draft202012Validator(json.load(f))


class Case(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_repeat_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def p(self, *parts):
        return os.path.join(self.dir, *parts)

    def mha(self, args, code=0):
        r = subprocess.run([MHA] + args, capture_output=True, text=True, cwd=ROOT, timeout=300)
        self.assertEqual(r.returncode, code, r.stderr)
        return r

    def run_json(self, out):
        with open(os.path.join(out, "run.json")) as f:
            return json.load(f)

    def files(self, out):
        found = {}
        for n in sorted(os.listdir(out)):
            if n.endswith((".npy", ".npz", ".png")):
                with open(os.path.join(out, n), "rb") as f:
                    found[n] = f.read()
        return found

    def check_timings(self, timings, n):
        rep = timings["compute_repeat"]
        self.assertEqual(rep["repeat"], n)
        samples = rep["samples"]
        self.assertEqual(len(samples), n)
        self.assertTrue(all(s > 0 for s in samples), samples)
        self.assertEqual(rep["min"], min(samples))
        self.assertEqual(rep["max"], max(samples))
        self.assertAlmostEqual(rep["median"], float(np.median(samples)), places=9)
        self.assertLessEqual(rep["min"], rep["median"])
        self.assertLessEqual(rep["median"], rep["max"])


class RunRepeat(Case):
    def same_bytes(self, args, n):
        """repeat 1 and repeat n: every file written the same bytes; run.json as documented."""
        one, many = self.p("one"), self.p("many")
        self.mha(["run", *args, "--out_dir", one])
        self.mha(["run", *args, "--repeat", str(n), "--out_dir", many])
        a, b = self.files(one), self.files(many)
        self.assertIn("output.npy", a)
        self.assertEqual(sorted(a), sorted(b))
        for name in a:
            self.assertEqual(a[name], b[name], name + " differs between repeat 1 and %d" % n)
        j1, jn = self.run_json(one), self.run_json(many)
        self.assertEqual(j1["config"]["repeat"], 1)
        self.assertNotIn("compute_repeat", j1["timings_ms"])
        self.assertEqual(jn["config"]["repeat"], n)
        self.check_timings(jn["timings_ms"], n)
        self.assertEqual(j1["output_stats"], jn["output_stats"])
        self.assertEqual(j1.get("attention_stats"), jn.get("attention_stats"))
        schema = validator("run.schema.json")
        for j in (j1, jn):
            schema.validate(j)
        shutil.rmtree(one)
        shutil.rmtree(many)
        return jn

    def test_attention_maps_exact_path(self):
        self.same_bytes(["--h", "4", "--d_model", "32", "--seq_len", "16", "--batch", "2",
                         "--causal", "true", "--save_attention", "--save_inputs", "--plot"], 5)

    def test_fused_path_even_count(self):
        # No maps: the fused kernel; 4 samples: the median is the mean of the middle two.
        j = self.same_bytes(["--h", "2", "--d_model", "16", "--seq_len", "40", "--kv_heads", "1",
                             "--window", "8"], 4)
        s = sorted(j["timings_ms"]["compute_repeat"]["samples"])
        self.assertAlmostEqual(j["timings_ms"]["compute_repeat"]["median"], (s[1] + s[2]) / 2)

    def test_averaged_maps_and_attention_axes(self):
        q = self.p("grid.npy")
        np.save(q, np.random.default_rng(0).random((2, 3, 4, 5, 8), dtype=np.float32))
        self.same_bytes(["--query", q, "--h", "2", "--attention_axes", "2,3", "--save_attention",
                         "--average_heads"], 3)

    def test_stacks(self):
        self.same_bytes(["--layer", "encoder", "--num_layers", "2", "--h", "2", "--d_model", "8",
                         "--seq_len", "5", "--batch", "2", "--save_attention",
                         "--save_hidden_states"], 3)
        self.same_bytes(["--layer", "decoder", "--num_layers", "2", "--h", "2", "--d_model", "8",
                         "--seq_len", "4", "--kv_seq_len", "6", "--save_attention"], 2)

    def test_config_file_and_flag(self):
        cfg = self.p("c.json")
        with open(cfg, "w") as f:
            json.dump({"h": 2, "d_model": 8, "seq_len": 4, "repeat": 3}, f)
        self.mha(["run", "--config", cfg, "--out_dir", self.p("a")])
        self.check_timings(self.run_json(self.p("a"))["timings_ms"], 3)
        self.mha(["run", "--config", cfg, "--repeat", "2", "--out_dir", self.p("b")])
        self.check_timings(self.run_json(self.p("b"))["timings_ms"], 2)

    def test_model_refuses_it(self):
        r = self.mha(["run", "--model", self.p("no_model"), "--text", "hi", "--repeat", "3",
                      "--out_dir", self.p("m")], code=2)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("--repeat: not supported with --model", lines[0])
        self.assertFalse(os.path.exists(self.p("m")))


class SweepRepeat(Case):
    def sweep(self, repeat, *extra):
        path = self.p("sweep.json")
        with open(path, "w") as f:
            json.dump({"base": {"d_model": 16, "batch": 1, "seed": 0, "save_attention": True,
                                "repeat": repeat},
                       "grid": {"h": [1, 2], "seq_len": [8, 16, 32]},
                       "out_dir": self.p("out")}, f)
        return self.mha(["sweep", path, "--jobs", "1", *extra])

    def rows(self):
        with open(self.p("out", "results.jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_rows_csv_and_report(self):
        self.sweep(3, "--report")
        rows = self.rows()
        self.assertEqual(len(rows), 6)
        schema = validator("results-row.schema.json")
        for row in rows:
            schema.validate(row)
            run = self.run_json(row["run_dir"] if os.path.isabs(row["run_dir"])
                                else os.path.join(ROOT, row["run_dir"]))
            rep = run["timings_ms"]["compute_repeat"]
            self.assertEqual(rep["repeat"], 3)
            self.assertEqual((row["compute_ms_median"], row["compute_ms_min"],
                              row["compute_ms_max"]), (rep["median"], rep["min"], rep["max"]))
            self.assertLessEqual(row["compute_ms_min"], row["compute_ms_median"])
            self.assertLessEqual(row["compute_ms_median"], row["compute_ms_max"])
            self.assertEqual(row["compute_ms"], run["timings_ms"]["compute"])
        with open(self.p("out", "results.csv")) as f:
            table = list(csv.DictReader(f))
        for column in ("compute_ms", "compute_ms_median", "compute_ms_min", "compute_ms_max"):
            self.assertIn(column, table[0])
        self.assertEqual([float(t["compute_ms_median"]) for t in table],
                         [r["compute_ms_median"] for r in rows])
        # The page's data names the columns compute_ms is charted from.
        with open(self.p("out", "report.html")) as f:
            html = f.read()
        data = json.loads(re.search(r'<script id="mha-data" type="application/json">(.*?)</script>',
                                    html, re.S).group(1))
        self.assertEqual(data["ranges"]["compute_ms"],
                         {"value": "compute_ms_median", "lo": "compute_ms_min",
                          "hi": "compute_ms_max"})
        self.assertIn("compute_ms_median", data["numeric_columns"])
        self.assertNotIn("compute_ms_median", data["swept_keys"])
        self.assertIn("errorBars", html)
        # The PNG's title says what is charted (mha view logs it).
        r = self.mha(["view", self.p("out"), "-o", self.p("again.html"), "--png",
                      self.p("again.png")])
        self.assertIn("compute_ms against seq_len for each h", r.stderr)
        self.assertTrue(os.path.getsize(self.p("again.png")) > 0)

    def test_without_repeat_no_columns(self):
        self.sweep(1, "--report")
        for row in self.rows():
            for column in ("compute_ms_median", "compute_ms_min", "compute_ms_max"):
                self.assertNotIn(column, row)
        with open(self.p("out", "report.html")) as f:
            html = f.read()
        self.assertIn('"ranges":{}', html)

    def test_resume_reruns_another_repeat(self):
        self.sweep(1)
        self.assertNotIn("compute_ms_median", self.rows()[0])
        self.sweep(2, "--resume")
        for row in self.rows():
            self.assertIn("compute_ms_median", row)
        before = [r["finished_at"] for r in self.rows()]
        self.sweep(2, "--resume")  # the same repeat: nothing to run again
        self.assertEqual([r["finished_at"] for r in self.rows()], before)


class SweepWarmup(Case):
    """Each worker's first run used to time its cold start: h = 1, T = 8, 16, 32 took 0.31,
    0.42, 0.13 ms (0.69, 0.59, 0.11 another time) with one worker per core, so a chart showed
    time falling as sequences grew; warm, 0.022, 0.033, 0.034 ms."""

    def sweep(self, base_extra=None, name="s"):
        path = self.p(name + ".json")
        base = {"d_model": 64, "h": 1, "batch": 1, "seq_len": 32, "threads": 1}
        base.update(base_extra or {})
        with open(path, "w") as f:
            json.dump({"base": base, "grid": {"seed": [0, 1, 2, 3, 4, 5]},
                       "out_dir": self.p(name)}, f)
        self.mha(["sweep", path, "--jobs", "1", "-q"])
        with open(self.p(name, "results.jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_first_run_is_not_timed_cold(self):
        # One noisy sample can hit the first run on a busy machine: any of 3 sweeps
        # passing is enough, while a cold first run is slow in every sweep.
        ratios = []
        for attempt in range(3):
            rows = self.sweep(name="w%d" % attempt)
            for row in rows:
                with open(os.path.join(row["run_dir"], "config.json")) as f:
                    self.assertIs(json.load(f)["warmup"], True)
                self.assertIs(self.run_json(row["run_dir"])["config"]["warmup"], True)
            times = [r["compute_ms"] for r in rows]
            ratios.append(times[0] / float(np.median(times[1:])))
            if ratios[-1] < 3:
                break
        self.assertLess(min(ratios), 3, "first run / median of the others: %r" % ratios)

    def test_file_can_turn_it_off(self):
        rows = self.sweep({"warmup": False}, name="off")
        for row in rows:
            self.assertIs(self.run_json(row["run_dir"])["config"]["warmup"], False)

    def test_same_bytes_and_run_json(self):
        args = ["--h", "2", "--d_model", "16", "--seq_len", "8", "--save_attention", "--plot"]
        self.mha(["run", *args, "--out_dir", self.p("cold")])
        self.mha(["run", *args, "--warmup", "--out_dir", self.p("warm")])
        self.assertEqual(self.files(self.p("cold")), self.files(self.p("warm")))
        cold, warm = self.run_json(self.p("cold")), self.run_json(self.p("warm"))
        self.assertIs(cold["config"]["warmup"], False)
        self.assertIs(warm["config"]["warmup"], True)
        schema = validator("run.schema.json")
        for j in (cold, warm):
            schema.validate(j)


if __name__ == "__main__":
    unittest.main()
