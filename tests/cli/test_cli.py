#!/usr/bin/env python3
"""End-to-end tests of the real `mha` binary: outputs, run.json, flag-over-file
precedence, reproducibility, and every documented error path with its exit code.

Run by ctest as: /usr/bin/python3 tests/cli/test_cli.py  (MHA_BIN = path to mha,
MHA_SOURCE_DIR = repository root).
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

MHA = os.environ.get("MHA_BIN", "build/bin/mha")
ROOT = os.environ.get("MHA_SOURCE_DIR", os.getcwd())


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def load_json(path):
    with open(path) as f:
        return json.load(f)


def run(args, cwd=ROOT):
    p = subprocess.run([MHA] + args, cwd=cwd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_cli_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def ok(self, args, cwd=ROOT):
        rc, out, err = run(args, cwd)
        self.assertEqual(rc, 0, f"mha {' '.join(args)} failed: {err}")
        return out, err

    def save(self, name, array):
        np.save(self.path(name), array)
        return self.path(name)

    def write_config(self, name, obj_or_text):
        text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text)
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def expect_error(self, args, code, fragment, out_dir=None):
        """A failing run: exit code, one stderr line naming the problem, no output files."""
        out_dir = out_dir or self.path("out")
        before = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else None
        contents = {f: read_bytes(os.path.join(out_dir, f)) for f in before or []}
        rc, out, err = run(args + ["--out_dir", out_dir])
        self.assertEqual(rc, code, f"exit code for {args}: stderr was {err!r}")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got {err!r}")
        self.assertIn(fragment, lines[0])
        after = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else None
        self.assertEqual(before or [], after or [], "a failed run left files behind")
        for f, data in contents.items():
            self.assertEqual(read_bytes(os.path.join(out_dir, f)), data, f"a failed run changed {f}")
        return lines[0]


class DefaultConfig(Case):
    def test_default_config_outputs(self):
        out = self.path("out")
        self.ok(["run", "--config", "configs/default.json", "--out_dir", out])
        o = np.load(os.path.join(out, "output.npy"))
        a = np.load(os.path.join(out, "attention.npy"))
        self.assertEqual(o.shape, (64, 5, 512))
        self.assertEqual(o.dtype, np.float32)
        self.assertEqual(a.shape, (64, 8, 5, 5))
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
        self.assertTrue(np.isfinite(o).all())
        report = load_json(os.path.join(out, "run.json"))
        self.assertEqual(report["status"], "complete")
        self.assertEqual(report["config"]["h"], 8)
        self.assertEqual(report["config"]["d_k"], 64)
        self.assertEqual(report["config"]["d_v"], 64)
        self.assertAlmostEqual(report["config"]["scale"], 0.125)
        self.assertEqual(report["outputs"]["output.npy"]["shape"], [64, 5, 512])
        self.assertEqual(report["outputs"]["attention.npy"]["shape"], [64, 8, 5, 5])
        self.assertEqual(report["sources"]["query"], {"random": "uniform[0,1)", "seed": 0})
        self.assertEqual(report["sources"]["key"], {"same_as": "query"})
        # 4 projections of 320 rows x 512 x 512 plus 2 attention products.
        flops = 2 * 320 * 512 * 512 * 4 + 2 * 64 * 8 * 5 * 5 * 64 * 2
        self.assertEqual(report["flops"], flops)
        for k in ("load", "compute", "write"):
            self.assertGreaterEqual(report["timings_ms"][k], 0)
        self.assertGreater(report["peak_rss_bytes"], 0)
        self.assertIn("version", report["tool"])
        self.assertEqual(sorted(os.listdir(out)), ["attention.npy", "output.npy", "run.json"])

    def test_print_json_matches_file(self):
        out = self.path("out")
        stdout, _ = self.ok(["run", "--config", "configs/default.json", "--out_dir", out,
                             "--json", "-q"])
        self.assertEqual(json.loads(stdout), load_json(os.path.join(out, "run.json")))

    def test_every_bundled_config_runs(self):
        for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
            if not name.endswith(".json"):
                continue  # configs/sweeps/ holds sweep files (tests/cli/test_sweep.py)
            out = self.path(name)
            self.ok(["run", "-q", "--config", os.path.join("configs", name), "--out_dir", out])
            self.assertTrue(os.path.exists(os.path.join(out, "run.json")), name)


class Precedence(Case):
    def test_flags_override_file(self):
        cfg = self.write_config("c.json", {"h": 8, "d_model": 64, "seq_len": 4, "batch": 2})
        out = self.path("out")
        self.ok(["run", "--config", cfg, "--h", "4", "--seq-len", "3", "--out_dir", out])
        r = load_json(os.path.join(out, "run.json"))
        self.assertEqual((r["config"]["h"], r["config"]["seq_len"], r["config"]["batch"]), (4, 3, 2))
        self.assertEqual(r["config"]["d_k"], 16)
        self.assertEqual(np.load(os.path.join(out, "output.npy")).shape, (2, 3, 64))

    def test_bare_bool_flag_and_explicit_false(self):
        out = self.path("out")
        self.ok(["run", "--h", "2", "--d_model", "8", "--seq_len", "3", "--save_attention",
                 "--out_dir", out])
        self.assertTrue(os.path.exists(os.path.join(out, "attention.npy")))
        cfg = self.write_config("c.json", {"h": 2, "d_model": 8, "seq_len": 3,
                                           "save_attention": True})
        out2 = self.path("out2")
        self.ok(["run", "--config", cfg, "--save-attention", "false", "--out_dir", out2])
        self.assertFalse(os.path.exists(os.path.join(out2, "attention.npy")))


class Reproducibility(Case):
    args = ["run", "--h", "3", "--d_model", "12", "--seq_len", "7", "--batch", "2",
            "--save_attention", "--save_weights", "--save_inputs"]

    def test_same_seed_same_bytes_other_seed_differs(self):
        a, b, c = self.path("a"), self.path("b"), self.path("c")
        self.ok(self.args + ["--seed", "5", "--out_dir", a])
        self.ok(self.args + ["--seed", "5", "--out_dir", b])
        self.ok(self.args + ["--seed", "6", "--out_dir", c])
        for f in ("output.npy", "attention.npy", "query.npy"):
            self.assertEqual(read_bytes(os.path.join(a, f)),
                             read_bytes(os.path.join(b, f)), f)
            self.assertNotEqual(read_bytes(os.path.join(a, f)),
                                read_bytes(os.path.join(c, f)), f)

    def test_saved_inputs_and_weights_reproduce_the_run(self):
        a, b = self.path("a"), self.path("b")
        self.ok(self.args + ["--seed", "9", "--out_dir", a])
        # The same path (attention saved) gives the same bits.
        self.ok(["run", "--h", "3", "--query", os.path.join(a, "query.npy"), "--save_attention",
                 "--weights", os.path.join(a, "weights.npz"), "--out_dir", b])
        np.testing.assert_array_equal(np.load(os.path.join(a, "output.npy")),
                                      np.load(os.path.join(b, "output.npy")))
        # Without attention the fused kernel sums in another order: equal to 1e-5.
        f = self.path("fused")
        self.ok(["run", "--h", "3", "--query", os.path.join(a, "query.npy"),
                 "--weights", os.path.join(a, "weights.npz"), "--out_dir", f])
        np.testing.assert_allclose(np.load(os.path.join(f, "output.npy")),
                                   np.load(os.path.join(a, "output.npy")), rtol=1e-5, atol=1e-6)
        w = np.load(os.path.join(a, "weights.npz"))
        self.assertEqual(sorted(w.files), ["W_k", "W_o", "W_q", "W_v", "b_k", "b_o", "b_q", "b_v"])
        self.assertEqual(w["W_q"].shape, (12, 12))
        # Glorot-uniform kernels stay inside their limit, biases start at zero.
        self.assertLessEqual(np.abs(w["W_q"]).max(), np.sqrt(6 / 24))
        self.assertEqual(np.abs(w["b_q"]).max(), 0)
        q = np.load(os.path.join(a, "query.npy"))
        self.assertTrue(((q >= 0) & (q < 1)).all())

    def test_weights_directory_and_float64(self):
        a, b = self.path("a"), self.path("b")
        self.ok(self.args + ["--dtype", "float64", "--out_dir", a])
        wdir = self.path("w")
        os.makedirs(wdir)
        with np.load(os.path.join(a, "weights.npz")) as w:
            for k in w.files:
                np.save(os.path.join(wdir, k + ".npy"), w[k])
        self.ok(["run", "--h", "3", "--dtype", "float64", "--query", os.path.join(a, "query.npy"),
                 "--weights", wdir, "--save_attention", "--out_dir", b])
        o = np.load(os.path.join(b, "output.npy"))
        self.assertEqual(o.dtype, np.float64)
        np.testing.assert_array_equal(o, np.load(os.path.join(a, "output.npy")))


class ThreadCounts(Case):
    """Every path writes the same bytes for 1, 2, 3 and 4 threads: the work is cut
    in pieces (GEMM rows, key splits, blocks) whose sizes and order depend on the
    shape alone, never on the thread count."""

    CASES = {
        # The case from the issue: causal, the exact path, attention streamed to its file.
        "exact_causal": ["--h", "4", "--d_model", "64", "--seq_len", "150", "--batch", "3",
                         "--causal", "true", "--save_attention"],
        # The fused kernel with several query blocks and a 1-row remainder piece.
        "fused": ["--h", "4", "--d_model", "64", "--seq_len", "1025", "--batch", "1"],
        # Decode: one query over a long memory, keys split into tasks and merged.
        "decode_split": ["--h", "2", "--d_model", "32", "--seq_len", "1", "--kv_seq_len", "4100",
                         "--batch", "1"],
        # Mean over heads on the exact path, several query blocks per batch element.
        "mean": ["--h", "8", "--d_model", "128", "--seq_len", "300", "--batch", "2",
                 "--save_attention", "--average_heads"],
        # Variants: grouped-query heads, a window, ALiBi, soft-capping.
        "variants": ["--h", "4", "--kv_heads", "2", "--d_model", "64", "--seq_len", "700",
                     "--window", "100", "--alibi", "true", "--softcap", "30"],
        "variants_exact": ["--h", "4", "--kv_heads", "1", "--d_model", "64", "--seq_len", "260",
                           "--window", "40", "--causal", "true", "--save_attention"],
        "float64": ["--h", "2", "--d_model", "32", "--seq_len", "200", "--dtype", "float64",
                    "--save_attention"],
        "bfloat16": ["--h", "2", "--d_model", "32", "--seq_len", "520", "--dtype", "bfloat16"],
    }

    def test_same_bytes_for_any_thread_count(self):
        for name, args in self.CASES.items():
            outs = {}
            for threads in (1, 2, 3, 4):
                d = self.path(name, str(threads))
                self.ok(["run"] + args + ["--seed", "3", "--threads", str(threads), "--out_dir", d])
                outs[threads] = d
            for threads in (2, 3, 4):
                # attention.npy exactly where the case saves it: never skipped when missing.
                saved = "--save_attention" in args
                self.assertEqual(os.path.exists(os.path.join(outs[threads], "attention.npy")), saved, name)
                for f in ("output.npy", "attention.npy") if saved else ("output.npy",):
                    a = os.path.join(outs[1], f)
                    self.assertEqual(read_bytes(a), read_bytes(os.path.join(outs[threads], f)),
                                     f"{name}: {f} differs between 1 and {threads} threads")
                r1 = load_json(os.path.join(outs[1], "run.json"))
                rt = load_json(os.path.join(outs[threads], "run.json"))
                self.assertEqual(rt["config"]["threads"], threads)
                self.assertEqual(r1["output_stats"], rt["output_stats"], name)
                self.assertEqual(r1.get("attention_stats"), rt.get("attention_stats"), name)

    def test_repeated_two_thread_runs_agree(self):
        """Concurrent GEMM calls from the pool: a race would show as runs that differ."""
        args = ["run", "--h", "8", "--d_model", "256", "--seq_len", "300", "--batch", "2",
                "--save_attention", "--average_heads", "--threads", "2"]
        first = None
        for i in range(8):
            d = self.path(f"r{i}")
            self.ok(args + ["--out_dir", d])
            data = read_bytes(os.path.join(d, "output.npy"))
            first = first or data
            self.assertEqual(first, data, f"run {i} differs from run 0")


class BlasKernels(Case):
    def test_run_json_names_the_blas_and_user_coretype_wins(self):
        args = ["run", "--h", "4", "--d_model", "64", "--seq_len", "40", "--save_attention"]
        a, b = self.path("auto"), self.path("haswell")
        self.ok(args + ["--out_dir", a])
        blas = load_json(os.path.join(a, "run.json"))["blas"]
        self.assertIn("libopenblas", blas["library"])
        self.assertEqual(blas["threading"], "pthreads")
        # The suite also runs whole under OPENBLAS_CORETYPE=Haswell (.ci/run).
        expected = ("user",) if os.environ.get("OPENBLAS_CORETYPE") else ("mha", "openblas")
        self.assertIn(blas["coretype_source"], expected)
        self.assertTrue(blas["core"])
        # The user's OPENBLAS_CORETYPE always wins; the AVX2 kernels agree to rounding.
        env = dict(os.environ, OPENBLAS_CORETYPE="Haswell")
        p = subprocess.run([MHA] + args + ["--out_dir", b], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        blas = load_json(os.path.join(b, "run.json"))["blas"]
        self.assertEqual(blas["coretype"], "Haswell")
        self.assertEqual(blas["coretype_source"], "user")
        self.assertEqual(blas["core"], "Haswell")
        for f in ("output.npy", "attention.npy"):
            np.testing.assert_allclose(np.load(os.path.join(a, f)), np.load(os.path.join(b, f)),
                                       rtol=1e-5, atol=1e-6)

    def test_direct_gemm_builds_give_the_same_bytes(self):
        # 300 query rows: the fused kernel's P V_i and Q_i K_i^T both go
        # through the direct GEMM, whose AVX2 and AVX-512 builds compute each
        # element by the same chain of FMAs; OpenBLAS ("blas") agrees to rounding.
        args = ["run", "--h", "2", "--d_model", "48", "--seq_len", "300", "--batch", "2",
                "--causal", "true", "--seed", "3"]
        outputs = {}
        for isa in ("avx512", "avx2", "blas"):
            d = self.path(isa)
            env = dict(os.environ, MHA_DIRECT_GEMM=isa)
            p = subprocess.run([MHA] + args + ["--out_dir", d], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            outputs[load_json(os.path.join(d, "run.json"))["kernels"]["direct_gemm"]] = \
                read_bytes(os.path.join(d, "output.npy"))
        self.assertIn("blas", outputs)
        if "avx512" in outputs and "avx2" in outputs:
            self.assertEqual(outputs["avx512"], outputs["avx2"])
        vector = outputs.get("avx512") or outputs.get("avx2")
        if vector is not None:
            self.assertNotEqual(vector, outputs["blas"])  # another summation order
            np.testing.assert_allclose(np.load(io.BytesIO(vector)),
                                       np.load(io.BytesIO(outputs["blas"])), rtol=1e-5, atol=1e-6)


class Bench(Case):
    def test_bench_one_shot_json(self):
        """Not a timing test: --one_shot runs `mha run` processes and reports their stages."""
        out, _ = self.ok(["bench", "--shapes", "tutorial:plain,tutorial:weights", "--repeat", "2",
                          "--threads", "1", "--one_shot", "--json"])
        r = json.loads(out)
        self.assertTrue(r["blas"]["core"])  # the kernel set OpenBLAS runs
        self.assertTrue(r["blas"]["library"])
        for case in r["results"]:
            one = case["one_shot"]
            self.assertEqual(one["repeat"], 2)
            for key in ("wall_ms_median", "load_ms_median", "compute_ms_median"):
                self.assertGreater(one[key], 0, key)
            self.assertGreater(one["wall_ms_median"], one["compute_ms_median"])
            self.assertAlmostEqual(one["compute_over_warm"],
                                   one["compute_ms_median"] / case["ms_median"], places=6)

    def test_bench_json_smoke(self):
        """Not a timing test: the command runs and reports what docs/benchmarks.md describes."""
        out, _ = self.ok(["bench", "--shapes", "tutorial:plain,decode-4k:causal", "--repeat", "1",
                          "--threads", "2", "--json"])
        r = json.loads(out)
        self.assertEqual(r["threads"], 2)
        self.assertGreater(r["sgemm_gflops"], 0)
        self.assertEqual([(x["shape"], x["variant"]) for x in r["results"]],
                         [("tutorial", "plain"), ("decode-4k", "causal")])
        tut = r["results"][0]
        self.assertEqual((tut["B"], tut["T"], tut["S"], tut["d_model"], tut["h"]), (64, 5, 5, 512, 8))
        self.assertEqual(tut["flops"], 2 * 64 * (5 * 512 * 512 * 4 + 8 * 5 * 5 * 128))
        self.assertGreater(tut["ms_median"], 0)
        self.assertLessEqual(tut["ms_min"], tut["ms_median"])
        # The FMA peak of every ISA the CPU has (/proc/cpuinfo's flags), widest first; each case
        # as a fraction of the widest.
        with open("/proc/cpuinfo") as f:
            flags = f.read().split("flags")[1].split("\n")[0].split()
        isas = [isa for isa, flag in (("avx512", "avx512f"), ("avx2", "avx2")) if flag in flags]
        # VDPBF16PS's peak too where the CPU has it (bfloat16 cases are measured against it).
        bf16 = ["avx512bf16"] if "avx512_bf16" in flags else []
        self.assertEqual(sorted(r["fma_peak_gflops"]), sorted(isas + bf16))
        # Each peak is a measured rate, positive; how they compare is the CPU's (a Sapphire Rapids
        # runs VDPBF16PS at a third of its FP32 FMA rate, a Zen 4 at twice it): no test of speed.
        for isa in isas + bf16:
            self.assertGreater(r["fma_peak_gflops"][isa], 0, isa)
        if isas:
            widest = r["fma_peak_gflops"][isas[0]]
            self.assertAlmostEqual(tut["fma_peak_fraction"], tut["gflops"] / widest, places=9)

    def test_bench_bad_shape(self):
        rc, _, err = run(["bench", "--shapes", "huge"])
        self.assertEqual(rc, 2)
        self.assertIn("unknown shape 'huge'", err)

    def test_threads_do_not_change_results_beyond_rounding(self):
        a, b = self.path("a"), self.path("b")
        args = ["run", "--h", "4", "--d_model", "32", "--seq_len", "300", "--batch", "3",
                "--causal", "--key_lengths", "300,17,0"]
        self.ok(args + ["--threads", "1", "--out_dir", a])
        self.ok(args + ["--threads", "2", "--out_dir", b])
        np.testing.assert_allclose(np.load(os.path.join(a, "output.npy")),
                                   np.load(os.path.join(b, "output.npy")), rtol=1e-5, atol=1e-6)
        self.assertEqual(load_json(os.path.join(b, "run.json"))["config"]["threads"], 2)


class CrashSafety(Case):
    # A run that writes a 128 MiB attention file, killed at random points.
    args = ["run", "-q", "--h", "8", "--d_model", "256", "--seq_len", "2048", "--save_attention"]
    shapes = {"output.npy": (1, 2048, 256), "attention.npy": (1, 8, 2048, 2048)}

    def check_complete(self, out):
        """Every file under its final name is whole: it loads, with the shape run.json states."""
        for name in os.listdir(out):
            if name.startswith("."):
                continue  # temporaries (left only by SIGKILL, which cannot be caught)
            path = os.path.join(out, name)
            if name == "run.json":
                self.assertEqual(load_json(path)["status"], "complete")
            else:
                a = np.load(path, mmap_mode="r")
                self.assertEqual(a.shape, self.shapes[name], name)
                self.assertTrue(np.isfinite(a[-1]).all(), name)  # the last row was written

    def test_sigkill_at_random_points_leaves_only_whole_files(self):
        import random
        import signal
        import time
        out = self.path("out")
        self.ok(self.args + ["--seed", "0", "--out_dir", out])
        start = time.monotonic()
        self.ok(self.args + ["--seed", "0", "--out_dir", self.path("timing")])
        duration = time.monotonic() - start
        rng = random.Random(1234)
        for i in range(8):
            p = subprocess.Popen([MHA] + self.args + ["--seed", str(i + 1), "--out_dir", out],
                                 stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0, 1.2 * duration))
            p.send_signal(signal.SIGKILL)
            p.wait()
            self.check_complete(out)
        for name in os.listdir(out):  # SIGKILL's leftovers: temporaries and the unheld lock
            if name.startswith(".") and name != ".mha.lock":
                self.assertIn(".tmp.", name)

    def test_sigterm_and_sigint_remove_temporaries(self):
        import signal
        import time
        for sig in (signal.SIGTERM, signal.SIGINT):
            out = self.path("out_%d" % sig)
            p = subprocess.Popen([MHA] + self.args + ["--out_dir", out], stderr=subprocess.DEVNULL)
            # Wait until the attention file is being written, then interrupt.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                    os.path.isdir(out) and any(n.startswith(".") for n in os.listdir(out))):
                time.sleep(0.005)
            # Frozen first: the signal reaches a run that is still writing, never one that has
            # finished (which would exit 0 and prove nothing).
            p.send_signal(signal.SIGSTOP)
            self.assertIsNone(p.poll(), "the run ended before it could be interrupted")
            p.send_signal(sig)
            p.send_signal(signal.SIGCONT)
            rc = p.wait()
            self.assertEqual(rc, -sig)
            self.assertEqual(os.listdir(out), [])


class Errors(Case):
    def test_unknown_config_key_suggests(self):
        cfg = self.write_config("c.json", {"h": 2, "dmodel": 8, "seq_len": 2})
        line = self.expect_error(["run", "--config", cfg], 2, "unknown key")
        self.assertIn("d_model", line)
        self.assertIn("c.json", line)

    def test_config_paths_relative_to_the_working_directory(self):
        # A bundled config from another directory: its input named with the config file, the
        # key and the working directory, before anything is opened; a flag given instead wins.
        config = os.path.join(os.path.abspath(ROOT), "configs", "causal_padded.json")

        def run(args, cwd):  # from another directory
            p = subprocess.run([os.path.abspath(MHA)] + args, cwd=cwd, capture_output=True,
                               text=True, timeout=120)
            return p.returncode, p.stdout, p.stderr

        rc, _, err = run(["run", "--config", config, "--out_dir", self.path("out")], self.tmp)
        self.assertEqual(rc, 2, err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(config + ': query "data/tokens.npy": no such file; paths in a config file '
                      "are relative to the working directory", err)
        self.assertIn(json.dumps(os.path.realpath(self.tmp)), err)
        self.assertFalse(os.path.exists(self.path("out")))
        query = self.save("q.npy", np.random.default_rng(0).random((3, 8, 16), np.float32))
        rc, _, err = run(["run", "--config", config, "--query", query, "--out_dir", self.path("out"), "-q"],
                         self.tmp)
        self.assertEqual(rc, 0, err)
        # Beside the config file it would be found: the message says where.
        os.makedirs(self.path("cfg", "data"))
        np.save(self.path("cfg", "data", "q.npy"), np.zeros((3, 8, 16), np.float32))
        cfg = self.write_config(os.path.join("cfg", "c.json"), {"query": "data/q.npy", "h": 2})
        rc, _, err = run(["run", "--config", cfg, "--out_dir", self.path("out2")], self.tmp)
        self.assertEqual(rc, 2, err)
        self.assertIn("relative to the config file it would be " +
                      json.dumps(os.path.join(self.tmp, "cfg", "data", "q.npy")), err)

    def test_unknown_flag_suggests(self):
        line = self.expect_error(["run", "--h", "2", "--d-modl", "8"], 2, "--d-modl")
        self.assertIn("did you mean --d_model", line)

    def test_json_syntax_error_has_line_and_column(self):
        cfg = self.write_config("c.json", '{\n  "h": 2,\n  "d_model": 8 oops\n}\n')
        self.expect_error(["run", "--config", cfg], 2, "c.json:3:")

    def test_wrong_type_and_range(self):
        for value, fragment in (('"8"', "expected an integer"), ("8.5", "expected an integer"),
                                ("true", "expected an integer"), ("0", "[1, 1073741824]"),
                                ("3000000000", "[1, 1073741824]")):
            cfg = self.write_config("c.json", '{"h": %s, "d_model": 8, "seq_len": 2}' % value)
            line = self.expect_error(["run", "--config", cfg], 2, fragment)
            self.assertIn("'h'", line)
        self.expect_error(["run", "--h", "two", "--d_model", "8"], 2, "--h: expected an integer")
        self.expect_error(["run", "--h", "2", "--d_model", "8", "--seq_len", "2",
                           "--masked_rows", "skip"], 2, "--masked_rows")

    def test_missing_and_inconsistent_hyperparameters(self):
        self.expect_error(["run", "--d_model", "8", "--seq_len", "2"], 2, "h (number of heads)")
        self.expect_error(["run", "--h", "3", "--d_model", "8", "--seq_len", "2"], 2,
                          "not divisible by h = 3")
        self.expect_error(["run", "--h", "2", "--d_model", "8"], 2, "seq_len is required")
        q = self.save("q.npy", np.zeros((2, 5, 8), np.float32))
        line = self.expect_error(["run", "--h", "2", "--query", q, "--seq_len", "4"], 2,
                                 "seq_len mismatch")
        self.assertIn("q.npy", line)

    def test_bad_weights(self):
        w = self.path("w.npz")
        np.savez(w, W_q=np.zeros((8, 8), np.float32), W_k=np.zeros((8, 8), np.float32),
                 W_v=np.zeros((8, 8), np.float32), W_o=np.zeros((8, 7), np.float32))
        self.expect_error(["run", "--h", "2", "--d_model", "8", "--seq_len", "2", "--weights", w,
                           "--use_bias", "false", "--d_out", "8"], 2, "d_out mismatch")
        # Biases follow the file unless use_bias is given.
        line = self.expect_error(["run", "--h", "2", "--seq_len", "2", "--weights", w,
                                  "--use_bias", "true"], 2,
                                 "missing bias 'b_q'")
        self.assertIn("w.npz", line)
        np.savez(w, W_q=np.zeros((8, 8), np.float32), W_k=np.zeros((8, 9), np.float32),
                 W_v=np.zeros((8, 8), np.float32), W_o=np.zeros((8, 8), np.float32))
        self.expect_error(["run", "--h", "2", "--seq_len", "2", "--weights", w,
                           "--use_bias", "false"], 2, "W_k has shape (8, 9), expected (8, 8)")

    def test_bad_files(self):
        self.expect_error(["run", "--h", "2", "--query", self.path("nope.npy")], 2, "nope.npy")
        trunc = self.path("t.npy")
        np.save(trunc, np.zeros((4, 8), np.float32))
        data = read_bytes(trunc)
        with open(trunc, "wb") as f:
            f.write(data[:-3])
        self.expect_error(["run", "--h", "2", "--query", trunc], 2, "t.npy")
        obj = self.path("o.npy")
        np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        self.expect_error(["run", "--h", "2", "--query", obj], 2, "o.npy")
        ints = self.save("i.npy", np.zeros((4, 8), np.int64))
        self.expect_error(["run", "--h", "2", "--query", ints], 2, "expected a float array")
        nan = np.zeros((4, 8), np.float32)
        nan[2, 3] = np.nan
        nanf = self.save("nan.npy", nan)
        self.expect_error(["run", "--h", "2", "--query", nanf], 2, "(0, 2, 3)")

    def test_bad_mask_and_key_lengths(self):
        q = self.save("q.npy", np.zeros((2, 5, 8), np.float32))
        m = self.save("m.npy", np.ones((5, 4), bool))
        self.expect_error(["run", "--h", "2", "--query", q, "--mask", m], 2, "m.npy")
        self.expect_error(["run", "--h", "2", "--query", q, "--key_lengths", "5"], 2,
                          "expected B = 2 key lengths")
        self.expect_error(["run", "--h", "2", "--query", q, "--key_lengths", "5,6"], 2,
                          "outside [0, S = 5]")

    def test_output_problems(self):
        blocker = self.path("file")
        with open(blocker, "w") as f:
            f.write("x")
        rc, _, err = run(["run", "--h", "2", "--d_model", "8", "--seq_len", "2",
                          "--out_dir", blocker])
        self.assertEqual(rc, 1, err)
        self.assertIn("file", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        # An output may not overwrite one of the run's inputs.
        out = self.path("out")
        os.makedirs(out)
        q = os.path.join(out, "output.npy")
        np.save(q, np.zeros((3, 8), np.float32))
        self.expect_error(["run", "--h", "2", "--query", q], 2, "would overwrite the input",
                          out_dir=out)

    def test_failed_run_keeps_previous_outputs(self):
        out = self.path("out")
        self.ok(["run", "--h", "2", "--d_model", "8", "--seq_len", "2", "--out_dir", out])
        self.expect_error(["run", "--h", "3", "--d_model", "8", "--seq_len", "2"], 2,
                          "not divisible", out_dir=out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
