#!/usr/bin/env python3
"""End-to-end tests of reduced precision through the real binary: output_dtype float16 (files
equal to NumPy's float16 cast of the float32 or float64 run, run.json and output_stats describing
the file as written, overflow refused), dtype bfloat16 (close to float32, not equal), both swept
with `mha sweep`, and `mha bench --dtype`.

Run by ctest, one TestCase class per test:
  /usr/bin/python3 tests/cli/test_precision.py [Class]   (MHA_BIN = path to mha,
                                                          MHA_SOURCE_DIR = repository root)
"""
import csv
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import zlib

import numpy as np

from test_cli import load_json, read_bytes  # noqa: E402  (same directory)

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.environ.get("MHA_SOURCE_DIR", os.getcwd())
LAYER = ["--h", "4", "--d_model", "32", "--seq_len", "24", "--batch", "3", "--causal",
         "--key_lengths", "24,10,1", "--save_attention"]
# bfloat16 against float32: four chained GEMMs with operands within 2^-8 relative
# (tests/test_precision.cpp derives the same bound).
BF16_RMS_REL = 4 * 2.0 ** -8


def run(args, env=None):
    p = subprocess.run([MHA] + args, cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def rms_rel(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_precision_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def ok(self, args, env=None):
        rc, out, err = run(args, env)
        self.assertEqual(rc, 0, f"mha {' '.join(args)} failed: {err}")
        return out, err

    def layer(self, name, *extra):
        """Runs LAYER with `extra` flags into tmp/name; returns the directory."""
        out = self.path(name)
        self.ok(["run", "-q"] + LAYER + list(extra) + ["--out_dir", out])
        return out


class Float16Output(Case):
    def check_cast(self, wide_dir, half_dir, names):
        report = load_json(os.path.join(half_dir, "run.json"))
        for name in names:
            wide = np.load(os.path.join(wide_dir, name))
            half = np.load(os.path.join(half_dir, name))
            self.assertEqual(half.dtype, np.dtype("<f2"), name)
            # Bit for bit NumPy's cast, NaN included (none here).
            np.testing.assert_array_equal(half.view(np.uint16),
                                          wide.astype(np.float16).view(np.uint16), name)
            self.assertEqual(report["outputs"][name]["dtype"], "float16")
            self.assertEqual(report["outputs"][name]["shape"], list(half.shape))
        return report

    def test_float32_run_written_as_float16(self):
        wide = self.layer("f32", "--save_inputs")
        half = self.layer("f16", "--save_inputs", "--output_dtype", "float16")
        report = self.check_cast(wide, half, ["output.npy", "attention.npy", "query.npy"])
        self.assertEqual(report["config"]["output_dtype"], "float16")
        self.assertEqual(report["config"]["dtype"], "float32")
        # output_stats describe output.npy as written: its crc and its float16 values.
        path = os.path.join(half, "output.npy")
        stats, values = report["output_stats"], np.load(path).astype(np.float64)
        self.assertEqual(stats["crc32"], "%08x" % zlib.crc32(read_bytes(path)))
        self.assertEqual(stats["min"], values.min())
        self.assertEqual(stats["max"], values.max())
        self.assertAlmostEqual(stats["mean"], values.mean(), delta=1e-12)

    def test_float64_run_written_as_float16_rounds_once(self):
        wide = self.layer("f64", "--dtype", "float64")
        half = self.layer("f64_f16", "--dtype", "float64", "--output_dtype", "float16")
        self.check_cast(wide, half, ["output.npy", "attention.npy"])

    def test_float32_run_written_as_float64(self):
        wide = self.layer("f32")
        f64 = self.layer("f32_f64", "--output_dtype", "float64")
        for name in ("output.npy", "attention.npy"):
            x = np.load(os.path.join(f64, name))
            self.assertEqual(x.dtype, np.dtype("<f8"))
            np.testing.assert_array_equal(x, np.load(os.path.join(wide, name)).astype(np.float64))

    def test_weights_stay_in_the_compute_dtype(self):
        out = self.layer("w", "--output_dtype", "float16", "--save_weights")
        with np.load(os.path.join(out, "weights.npz")) as z:
            self.assertEqual({z[k].dtype for k in z.files}, {np.dtype("float32")})
        self.assertEqual(load_json(os.path.join(out, "run.json"))["outputs"]["weights.npz"]["dtype"],
                         "float32")

    def test_values_beyond_float16_are_refused(self):
        q = self.path("q.npy")
        np.save(q, np.full((2, 5, 8), 1e5, np.float32) * (1 + np.arange(8, dtype=np.float32)))
        out = self.path("out")
        rc, _, err = run(["run", "--query", q, "--h", "2", "--output_dtype", "float16",
                          "--out_dir", out])
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn("beyond float16's range (+-65504); output_dtype float16 would write it as "
                      "inf", lines[0])
        self.assertEqual(os.listdir(out) if os.path.isdir(out) else [], [])
        self.ok(["run", "-q", "--query", q, "--h", "2", "--output_dtype", "float16",
                 "--allow_nonfinite", "--out_dir", out])
        self.assertTrue(np.isinf(np.load(os.path.join(out, "output.npy"))).any())


class Bfloat16(Case):
    def test_close_to_float32_not_equal(self):
        f32 = self.layer("f32")
        bf16 = self.layer("bf16", "--dtype", "bfloat16")
        report = load_json(os.path.join(bf16, "run.json"))
        self.assertEqual(report["config"]["dtype"], "bfloat16")
        self.assertIn(report["bf16_gemm"], ("amx", "avx512bf16", "sgemm", "sbgemm"))
        for name in ("output.npy", "attention.npy"):
            x, ref = np.load(os.path.join(bf16, name)), np.load(os.path.join(f32, name))
            self.assertEqual(x.dtype, np.dtype("<f4"), name)
            self.assertEqual(report["outputs"][name]["dtype"], "float32")
            err = rms_rel(x, ref)
            self.assertLess(err, BF16_RMS_REL, name)
            self.assertGreater(err, 1e-4, f"{name}: bfloat16 changed nothing")
        # Masked keys still get exactly zero weight.
        a = np.load(os.path.join(bf16, "attention.npy"))
        self.assertTrue((a[1, :, :, 10:] == 0).all())
        self.assertTrue((np.triu(np.ones((24, 24), bool), 1) <= (a[0] == 0)).all())

    def test_bfloat16_written_as_float16(self):
        wide = self.layer("bf16", "--dtype", "bfloat16")
        half = self.layer("bf16_f16", "--dtype", "bfloat16", "--output_dtype", "float16")
        for name in ("output.npy", "attention.npy"):
            np.testing.assert_array_equal(np.load(os.path.join(half, name)),
                                          np.load(os.path.join(wide, name)).astype(np.float16))

    def test_backend_override(self):
        env = dict(os.environ, MHA_BF16_GEMM="fast")
        rc, _, err = run(["run", "--h", "2", "--d_model", "8", "--seq_len", "3", "--dtype",
                          "bfloat16", "--out_dir", self.path("a")], env)
        self.assertEqual(rc, 2, err)
        self.assertIn("MHA_BF16_GEMM: expected 'amx', 'avx512bf16', 'sbgemm' or 'sgemm', got 'fast'", err)
        env["MHA_BF16_GEMM"] = "sgemm"
        self.ok(["run", "-q", "--h", "2", "--d_model", "8", "--seq_len", "3", "--dtype",
                 "bfloat16", "--out_dir", self.path("b")], env)
        self.assertEqual(load_json(self.path("b", "run.json"))["bf16_gemm"], "sgemm")


    def test_every_backend_this_cpu_has(self):
        """The native kernels (VDPBF16PS where the CPU has AVX512_BF16, AMX tiles where it has
        AMX-BF16) and sgemm on rounded operands: each within bfloat16's error of float32, both as
        fused output and with the maps, and close to each other (same products, other sums)."""
        f32 = self.layer("f32")
        f32_fused = self.path("f32_fused")
        self.ok(["run", "-q"] + LAYER[:-1] + ["--out_dir", f32_fused])
        cpuinfo = read_bytes("/proc/cpuinfo").decode()
        native = "avx512_bf16" in cpuinfo
        backends = ["sgemm"] + (["avx512bf16"] if native else []) + \
            (["amx"] if native and "amx_bf16" in cpuinfo else [])
        outs = {}
        for backend in backends:
            env = dict(os.environ, MHA_BF16_GEMM=backend)
            d = self.path(backend)
            self.ok(["run", "-q"] + LAYER + ["--dtype", "bfloat16", "--out_dir", d], env)
            self.assertEqual(load_json(os.path.join(d, "run.json"))["bf16_gemm"], backend)
            fused = self.path(backend + "_fused")
            self.ok(["run", "-q"] + LAYER[:-1] + ["--dtype", "bfloat16", "--out_dir", fused], env)
            for name, ref in (("output.npy", f32), ("attention.npy", f32)):
                x = np.load(os.path.join(d, name))
                err = rms_rel(x, np.load(os.path.join(ref, name)))
                self.assertLess(err, BF16_RMS_REL, (backend, name))
                self.assertGreater(err, 1e-4, (backend, name))
            x = np.load(os.path.join(fused, "output.npy"))
            self.assertLess(rms_rel(x, np.load(os.path.join(f32_fused, "output.npy"))),
                            BF16_RMS_REL, backend)
            outs[backend] = x
        if native:
            for backend in backends[1:]:
                self.assertLess(rms_rel(outs[backend], outs["sgemm"]), BF16_RMS_REL, backend)
        else:
            env = dict(os.environ, MHA_BF16_GEMM="avx512bf16")
            rc, _, err = run(["run", "--h", "2", "--d_model", "8", "--seq_len", "3", "--dtype",
                              "bfloat16", "--out_dir", self.path("refused")], env)
            self.assertEqual(rc, 2, err)
            self.assertIn("MHA_BF16_GEMM=avx512bf16: this CPU has no AVX512_BF16", err)


class PrecisionSweep(Case):
    def test_dtype_by_output_dtype(self):
        sweep = self.path("sweep.json")
        with open(sweep, "w") as f:
            json.dump({"base": {"h": 2, "d_model": 16, "seq_len": 8, "batch": 2, "seed": 3,
                                "save_attention": True},
                       "grid": {"dtype": ["float32", "bfloat16"],
                                "output_dtype": ["float16", "float32"]},
                       "name": "{dtype}_{output_dtype}",
                       "out_dir": self.path("out")}, f)
        out, _ = self.ok(["sweep", sweep, "--dry_run"])
        self.assertEqual(out.count("valid"), 4, out)
        self.ok(["sweep", sweep, "--jobs", "1"])
        with open(self.path("out", "results.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(r["dtype"], r["output_dtype"], r["status"]) for r in rows],
                         [("float32", "float16", "ok"), ("float32", "float32", "ok"),
                          ("bfloat16", "float16", "ok"), ("bfloat16", "float32", "ok")])
        arrays = {}
        for r in rows:
            d = self.path("out", r["name"])
            for name in ("output.npy", "attention.npy"):
                a = np.load(os.path.join(d, name))
                self.assertEqual(a.dtype, np.dtype(r["output_dtype"]), (r["name"], name))
                arrays[r["name"], name] = a
            self.assertEqual(r["output_crc32"],
                             "%08x" % zlib.crc32(read_bytes(os.path.join(d, "output.npy"))))
        for dtype in ("float32", "bfloat16"):
            for name in ("output.npy", "attention.npy"):
                np.testing.assert_array_equal(arrays[f"{dtype}_float16", name],
                                              arrays[f"{dtype}_float32", name].astype(np.float16))
        err = rms_rel(arrays["bfloat16_float32", "output.npy"],
                      arrays["float32_float32", "output.npy"])
        self.assertLess(err, BF16_RMS_REL)
        self.assertGreater(err, 1e-4)


class PrecisionBench(Case):
    def test_bench_dtypes(self):
        out, _ = self.ok(["bench", "--shapes", "tutorial:plain,bert-s128:causal", "--dtype",
                          "float32,bfloat16", "--repeat", "1", "--threads", "2", "--json"])
        r = json.loads(out)
        self.assertEqual([(x["shape"], x["variant"], x["dtype"]) for x in r["results"]],
                         [("tutorial", "plain", "float32"), ("tutorial", "plain", "bfloat16"),
                          ("bert-s128", "causal", "float32"), ("bert-s128", "causal", "bfloat16")])
        self.assertGreater(r["bf16_gemm_gflops"], 0)
        self.assertIn(r["bf16_gemm_backend"], ("amx", "avx512bf16", "sgemm", "sbgemm"))
        self.assertTrue(all(x["ms_median"] > 0 for x in r["results"]))

    def test_bench_table_and_bad_dtype(self):
        out, _ = self.ok(["bench", "--shapes", "tutorial:plain", "--dtype", "bfloat16",
                          "--repeat", "1", "--threads", "1"])
        self.assertIn("bfloat16 GEMM 2048^3", out)
        self.assertRegex(out, r"tutorial\s+plain\s+bfloat16")
        rc, _, err = run(["bench", "--shapes", "tutorial:plain", "--dtype", "float16"])
        self.assertEqual(rc, 2)
        self.assertIn("--dtype: unknown dtype 'float16' (expected float32 or bfloat16)", err)


if __name__ == "__main__":
    unittest.main()
