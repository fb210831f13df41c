#!/usr/bin/env python3
"""End-to-end tests of `mha inspect`, driving the real binary: headers and statistics of files
NumPy wrote (float16, big-endian float32, Fortran order, int64, bool, .npz), attention.npy from
`mha run --save_attention` against run.json's attention_stats, a real PyTorch
nn.MultiheadAttention map against the statistics computed here in NumPy, the text report, and
errors.

Run by ctest, one TestCase class per test:
  /usr/bin/python3 tests/cli/test_inspect.py [Class]   (MHA_BIN = path to mha,
                                                       MHA_SOURCE_DIR = repository root)
"""
import json
import math
import os
import shutil
import tempfile
import unittest

import numpy as np

from test_cli import load_json, run  # noqa: E402  (same directory)


def finite_stats(a):
    """What `stats` should say, computed in NumPy (float64, finite values, ddof 0)."""
    x = np.asarray(a).astype(np.float64).ravel()
    f = x[np.isfinite(x)]
    return {
        "count": x.size, "finite": f.size, "nan": int(np.isnan(x).sum()),
        "posinf": int(np.isposinf(x).sum()), "neginf": int(np.isneginf(x).sum()),
        "zeros": int((x == 0).sum()),
        "min": float(f.min()) if f.size else None, "max": float(f.max()) if f.size else None,
        "mean": float(f.mean()) if f.size else None, "std": float(f.std()) if f.size else None,
    }


def head_stats(a):
    """Per-head attention statistics of (B, h, T, S) maps, in NumPy: the definitions of
    lib/include/mha/inspect/attention_stats.hpp, over the rows that are distributions."""
    a = np.asarray(a, np.float64)
    B, h, T, S = a.shape
    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    out = []
    for i in range(h):
        m = a[:, i]                                    # (B, T, S)
        ok = (m >= 0).all(-1) & (np.abs(m.sum(-1) - 1) <= 1e-3)
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.where(m > 0, m * np.log(m), 0).sum(-1)
        diag = np.zeros((B, T))
        for q in range(min(T, S)):
            diag[:, q] = m[:, q, q]
        above = np.where(s > t, m, 0).max(axis=(-1), initial=0)
        out.append({
            "entropy": ent[ok].mean(),
            "entropy_fraction": ent[ok].mean() / math.log(S),
            "max_weight": m.max(-1)[ok].mean(),
            "distance": (m * np.abs(t - s)).sum(-1)[ok].mean(),
            "diagonal": diag[ok].mean(),
            "first_key": m[:, :, 0][ok].mean(),
            "max_above_diagonal": above[ok].max(initial=0),
            "rows": int(ok.sum()),
            "skipped_rows": int((~ok).sum()),
        })
    return out


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_inspect_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def save(self, name, array):
        np.save(self.path(name), array)
        return self.path(name)

    def inspect(self, *args):
        rc, out, err = run(["inspect", "--json"] + list(args))
        self.assertEqual(rc, 0, f"mha inspect {args} failed: {err}")
        return json.loads(out)

    def assert_stats(self, got, array):
        want = finite_stats(array)
        for key, value in want.items():
            if isinstance(value, float):
                self.assertAlmostEqual(got[key], value, delta=1e-12 * (1 + abs(value)), msg=key)
            else:
                self.assertEqual(got[key], value, key)


class NumpyFiles(Case):
    def test_float16(self):
        a = np.array([[0.5, -1.5, np.nan], [np.inf, 0, 65504]], np.float16)
        j = self.inspect(self.save("h.npy", a))
        self.assertEqual(j["file"], self.path("h.npy"))
        h = j["header"]
        self.assertEqual((h["version"], h["descr"], h["dtype"]), ("1.0", "<f2", "float16"))
        self.assertEqual((h["byte_order"], h["fortran_order"], h["shape"]), ("little", False, [2, 3]))
        self.assertEqual(h["header_bytes"], 128)
        self.assertEqual(h["data_bytes"], 12)
        self.assert_stats(j["stats"], a)
        self.assertNotIn("attention", j)

    def test_float32_big_endian(self):
        rng = np.random.default_rng(1)
        a = rng.standard_normal((3, 4, 5)).astype(">f4")
        j = self.inspect(self.save("be.npy", a))
        self.assertEqual((j["header"]["descr"], j["header"]["byte_order"]), (">f4", "big"))
        self.assert_stats(j["stats"], a)
        self.assertEqual(j["stats"]["min"], float(a.min()))  # float32 values, exactly

    def test_fortran_order(self):
        rng = np.random.default_rng(2)
        a = np.asfortranarray(rng.random((4, 6)))
        a /= a.sum(-1, keepdims=True)                      # rows are distributions
        j = self.inspect(self.save("f.npy", a))
        self.assertTrue(j["header"]["fortran_order"])
        self.assert_stats(j["stats"], a)
        self.assertEqual(j["attention"]["layout"], "(T, S)")
        self.assertEqual(j["attention"]["detected_by"], "rows")
        want = head_stats(np.ascontiguousarray(a)[None, None])[0]
        for key in ("entropy", "max_weight", "distance", "diagonal", "first_key"):
            self.assertAlmostEqual(j["attention"]["heads"][0][key], want[key], delta=1e-12)

    def test_int64_and_bool(self):
        a = np.array([[2**62 + 1, -3], [0, 7]], np.int64)
        j = self.inspect(self.save("i.npy", a))
        self.assertEqual(j["header"]["dtype"], "int64")
        self.assertEqual(j["stats"]["max"], 2**62 + 1)         # exact, not rounded to a double
        self.assertEqual(j["stats"]["min"], -3)
        self.assertEqual(j["stats"]["zeros"], 1)
        self.assertAlmostEqual(j["stats"]["mean"], float(a.astype(np.float64).mean()))
        b = np.array([True, False, True, True])
        jb = self.inspect(self.save("b.npy", b))
        self.assertEqual((jb["header"]["descr"], jb["header"]["byte_order"]), ("|b1", "none"))
        self.assertEqual((jb["stats"]["min"], jb["stats"]["max"]), (0, 1))
        self.assertEqual(jb["stats"]["mean"], 0.75)
        self.assertNotIn("attention", jb)

    def test_versions_2_and_3(self):
        a = np.arange(6, dtype=np.float64).reshape(2, 3)
        for version in ((2, 0), (3, 0)):
            p = self.path(f"v{version[0]}.npy")
            with open(p, "wb") as f:
                np.lib.format.write_array(f, a, version=version)
            j = self.inspect(p)
            self.assertEqual(j["header"]["version"], f"{version[0]}.0")
            self.assert_stats(j["stats"], a)

    def test_npz_and_several_files(self):
        rng = np.random.default_rng(3)
        att = rng.random((2, 2, 3, 4)).astype(np.float32)
        att /= att.sum(-1, keepdims=True)
        np.savez_compressed(self.path("a.npz"), attention=att, lengths=np.array([3, 2]))
        p = self.save("x.npy", np.ones(3))
        j = self.inspect(self.path("a.npz"), p)
        self.assertIsInstance(j, list)                       # several arrays: a list
        self.assertEqual([r["file"] for r in j],
                         [self.path("a.npz") + ":attention", self.path("a.npz") + ":lengths", p])
        self.assertEqual(j[0]["attention"]["layout"], "(B, h, T, S)")
        self.assertEqual(len(j[0]["attention"]["heads"]), 2)
        self.assertEqual(j[1]["stats"]["max"], 3)

    def test_random_matrix_is_not_attention(self):
        rng = np.random.default_rng(4)
        j = self.inspect(self.save("w.npy", rng.standard_normal((8, 8)).astype(np.float32)))
        self.assertNotIn("attention", j)
        # Softmax rows with a fully masked (zero) row are.
        a = np.exp(rng.standard_normal((5, 6)))
        a /= a.sum(-1, keepdims=True)
        a[2] = 0
        j = self.inspect(self.save("m.npy", a))
        self.assertEqual(j["attention"]["masked_rows"], 1)
        self.assertEqual(j["attention"]["mean"]["skipped_rows"], 1)
        # --no_attention turns it off; --attention forces it.
        self.assertNotIn("attention", self.inspect("--no_attention", self.path("m.npy")))
        forced = self.inspect("--attention", self.path("w.npy"))
        self.assertEqual(forced["attention"]["detected_by"], "forced")


class RunAttention(Case):
    def compare_with_run(self, args, layout):
        out = self.path("run")
        rc, _, err = run(["run", "-q", "--save_attention", "--out_dir", out] + args)
        self.assertEqual(rc, 0, err)
        j = self.inspect(os.path.join(out, "attention.npy"))
        report = load_json(os.path.join(out, "run.json"))
        # The same AttentionStats over the same float rows: the same numbers, bit for bit.
        self.assertEqual(j["attention"]["heads"], report["attention_stats"]["heads"])
        self.assertEqual(j["attention"]["mean"], report["attention_stats"]["mean"])
        self.assertEqual(j["attention"]["layout"], layout)
        self.assertEqual(j["attention"]["detected_by"], "name")
        a = np.load(os.path.join(out, "attention.npy"))
        self.assert_stats(j["stats"], a)
        return j

    def test_heads(self):
        j = self.compare_with_run(["--h", "4", "--d_model", "32", "--seq_len", "7", "--batch", "3"],
                                  "(B, h, T, S)")
        self.assertEqual(len(j["attention"]["heads"]), 4)

    def test_masked_rows_and_causal(self):
        # Bottom-right causal with T = 6 > S = 4: the first two queries see no key (rows of 0).
        j = self.compare_with_run(["--h", "2", "--d_model", "8", "--seq_len", "6", "--kv_seq_len",
                                   "4", "--causal", "bottom-right", "--batch", "2"],
                                  "(B, h, T, S)")
        self.assertEqual(j["attention"]["masked_rows"], 2 * 2 * 2)
        self.assertEqual(j["attention"]["mean"]["skipped_rows"], 8)
        self.assertTrue(j["attention"]["mean"]["causal"])

    def test_average_heads(self):
        j = self.compare_with_run(["--h", "4", "--d_model", "16", "--seq_len", "5", "--average_heads",
                                   "--causal"], "(B, T, S)")
        self.assertEqual(len(j["attention"]["heads"]), 1)
        self.assertIsNone(j["attention"]["heads_axis"])


class Torch(Case):
    def test_pytorch_multihead_attention_map(self):
        import torch  # python3-torch; imported here so the other classes start fast
        torch.manual_seed(0)
        B, T, S, E, h = 2, 5, 7, 16, 4
        m = torch.nn.MultiheadAttention(E, h, batch_first=True)
        q, kv = torch.randn(B, T, E), torch.randn(B, S, E)
        mask = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)  # True = masked
        with torch.no_grad():
            _, w = m(q, kv, kv, attn_mask=mask, average_attn_weights=False)
        a = w.detach().numpy()
        self.assertEqual(a.shape, (B, h, T, S))
        p = self.save("torch_map.npy", a)
        j = self.inspect(p)
        self.assertEqual(j["attention"]["detected_by"], "rows")
        self.assertEqual(j["attention"]["layout"], "(B, h, T, S)")
        want = head_stats(a)
        for i, (got, exp) in enumerate(zip(j["attention"]["heads"], want)):
            for key in ("entropy", "entropy_fraction", "max_weight", "distance", "diagonal",
                        "first_key", "max_above_diagonal"):
                self.assertAlmostEqual(got[key], exp[key], delta=1e-9, msg=f"head {i} {key}")
            self.assertEqual(got["rows"], exp["rows"])
            self.assertTrue(got["causal"])       # the triu mask: nothing above the diagonal
        self.assertAlmostEqual(j["attention"]["mean"]["entropy"],
                               np.mean([w["entropy"] for w in want]), delta=1e-9)
        self.assert_stats(j["stats"], a)


class TextReport(Case):
    def test_report(self):
        a = np.full((1, 2, 3, 3), 1 / 3, np.float64)
        p = self.save("attention.npy", a)
        q = self.save("v.npy", np.array([1.0, np.nan, -np.inf]))
        rc, out, err = run(["inspect", p, q])
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        self.assertIn(p + "\n", out)
        self.assertIn("'<f8': float64, little-endian, C order", out)
        self.assertIn("(1, 2, 3, 3), 18 elements", out)
        self.assertIn("(B, h, T, S) = (1, 2, 3, 3)", out)
        self.assertIn("entropy (nats)", out)
        # Head 0: entropy log 3 = 1.0986, fraction 1, max 1/3, distance 8/9, 1/3, 1/3, not causal.
        self.assertRegex(out, r"\n  0 +1\.0986 +1\.0000 +0\.3333 +0\.8889 +0\.3333 +0\.3333 +no +3\n")
        self.assertRegex(out, r"\n  mean +1\.0986 ")
        self.assertIn(q + "\n", out)
        self.assertIn("1 NaN, 0 +Inf, 1 -Inf", out)
        self.assertIn("attention   no", out)

    def test_named_attention_that_is_not_warns(self):
        p = self.save("attention.npy", np.array([[0.5, 0.9], [0.5, 0.5]]))
        rc, out, err = run(["inspect", "--json", p])
        self.assertEqual(rc, 0, err)
        self.assertIn("1 of 2 rows are not distributions", err)
        self.assertEqual(json.loads(out)["attention"]["other_rows"], 1)

    def test_heads_axis(self):
        a = np.full((2, 3, 1, 2, 2), 0.5)
        p = self.save("x.npy", a)
        j = self.inspect("--head_axis", "1", p)
        self.assertEqual(j["attention"]["layout"], "(B0, h, B1, T, S)")
        self.assertEqual(self.inspect("--head-axis", "1", p), j)  # dashes spell the same option
        self.assertEqual(len(j["attention"]["heads"]), 3)
        self.assertEqual(self.inspect(p)["attention"]["layout"], "(B0, B1, B2, T, S)")


class Errors(Case):
    def expect_error(self, args, fragment, code=2):
        rc, out, err = run(["inspect"] + args)
        self.assertEqual(rc, code, f"exit code for {args}: stderr was {err!r}")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got {err!r}")
        self.assertIn(fragment, lines[0])
        self.assertEqual(out, "")
        return lines[0]

    def test_missing_file(self):
        self.expect_error(["--json", self.path("nope.npy")], self.path("nope.npy") + ": cannot open")
        self.expect_error([self.path("nope.npz")], self.path("nope.npz") + ": no such file")

    def test_truncated_file(self):
        p = self.save("t.npy", np.zeros((4, 4), np.float32))
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 10)
        self.expect_error(["--json", p], p + ": data is 54 bytes, expected 64")

    def test_bad_file_among_good_ones_prints_no_json(self):
        good = self.save("g.npy", np.zeros(3))
        bad = self.path("bad.npy")
        with open(bad, "wb") as f:
            f.write(b"not numpy")
        self.expect_error(["--json", good, bad], bad + ": not a .npy file")

    def test_options(self):
        p = self.save("i.npy", np.zeros((2, 2), np.int32))
        self.expect_error(["--attention", p], "cannot inspect the int32 array of shape (2, 2)")
        f = self.save("f.npy", np.full((2, 2), 0.5))
        self.expect_error(["--attention", "--head_axis", "0", f], "heads axis 0 is not a leading")
        self.expect_error(["--attention", "--no_attention", f], "excludes")
        self.expect_error(["--head_axis", f], "")
        self.expect_error(["--head-axes", "1", f], "unknown option --head-axes")
        self.expect_error([], "files is required")


if __name__ == "__main__":
    unittest.main(verbosity=2)
