#!/usr/bin/python3
"""`mha compare` against numpy.allclose itself: arrays with NaN and infinities at the same and at
different indices, in float16, float32 and float64, with and without --equal_nan, give the verdict
(exit 0 close, 1 not) and the count of elements outside that NumPy gives; tolerances that are
negative, infinite or NaN are refused (exit 2, one line naming the option).

  /usr/bin/python3 tests/cli/test_compare.py [Class]   (MHA_BIN = path to mha)
"""
import itertools
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
NAN, INF = float("nan"), float("inf")

# Pairs (A, B) of 1-D arrays, each named after what it holds.
PAIRS = {
    "nan_same_index": ([1.0, NAN, 3.0], [1.0, NAN, 3.0]),
    "nan_different_index": ([1.0, NAN, 3.0], [1.0, 2.0, NAN]),
    "nan_in_a_only": ([NAN, 2.0], [1.0, 2.0]),
    "nan_in_b_only": ([1.0, 2.0], [1.0, NAN]),
    "nan_against_inf": ([NAN, 1.0], [INF, 1.0]),
    "all_nan": ([NAN, NAN], [NAN, NAN]),
    "inf_same_sign": ([INF, -INF, 1.0], [INF, -INF, 1.0]),
    "inf_opposite_sign": ([INF, 1.0], [-INF, 1.0]),
    "inf_against_finite": ([INF, 1.0], [1e308, 1.0]),
    "finite_against_inf": ([1e308, 1.0], [INF, 1.0]),
    "nan_and_inf_same_index": ([NAN, INF, -INF, 2.0], [NAN, INF, -INF, 2.0]),
    "nan_same_index_and_a_near_miss": ([NAN, 1.0], [NAN, 1.0 + 2e-5]),
    "finite_close": ([1.0, 100.0], [1.0 + 5e-6, 100.0 + 5e-4]),
    "finite_not_close": ([1.0, 100.0], [1.0, 100.1]),
}
TOLERANCES = [(1e-5, 1e-8), (0.0, 0.0), (1e-3, 1e-3)]


def run(*args):
    p = subprocess.run([MHA, *map(str, args)], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


class Verdicts(unittest.TestCase):
    """Every pair, dtype, tolerance and --equal_nan setting: mha's verdict is NumPy's."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_compare_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def save(self, name, values, dtype):
        path = os.path.join(self.dir, f"{name}.npy")
        with np.errstate(over="ignore"):  # 1e308 is inf in float16 and float32: still a case
            np.save(path, np.array(values, dtype=np.float64).astype(dtype))
        return path

    def test_verdicts_are_numpy_allclose(self):
        checked = 0
        for (name, (a, b)), dtype in itertools.product(PAIRS.items(),
                                                       [np.float16, np.float32, np.float64]):
            fa = self.save(f"{name}_{dtype.__name__}_a", a, dtype)
            fb = self.save(f"{name}_{dtype.__name__}_b", b, dtype)
            x, y = np.load(fa), np.load(fb)
            for (rtol, atol), equal_nan in itertools.product(TOLERANCES, [False, True]):
                args = ["compare", fa, fb, "--rtol", repr(rtol), "--atol", repr(atol)]
                if equal_nan:
                    args.append("--equal_nan")
                want = bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan))
                outside = int((~np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)).sum())
                code, out, err = run(*args)
                what = f"{name} {dtype.__name__} rtol={rtol} atol={atol} equal_nan={equal_nan}"
                self.assertEqual(code, 0 if want else 1, f"{what}: numpy says {want}\n{out}{err}")
                self.assertIn(f"allclose: {'yes' if want else 'no'}", out, what)
                self.assertIn(f" {outside} outside ", out, what)
                self.assertEqual(err, "", what)
                checked += 1
        self.assertEqual(checked, len(PAIRS) * 3 * len(TOLERANCES) * 2)

    def test_the_default_is_numpy_default(self):
        # NaN at the same index: numpy.allclose's default says not close, and so does mha.
        fa = self.save("a", [1.0, NAN], np.float32)
        fb = self.save("b", [1.0, NAN], np.float32)
        self.assertFalse(np.allclose(np.load(fa), np.load(fb)))
        code, out, _ = run("compare", fa, fb)
        self.assertEqual(code, 1, out)
        self.assertIn("NaN: 1 in A, 1 in B, 0 at different positions "
                      "(NaN is not close to NaN without --equal_nan)", out)
        code, out, _ = run("compare", fa, fb, "--equal_nan")
        self.assertEqual(code, 0, out)
        self.assertIn("outside rtol=1e-05 atol=1e-08 equal_nan\n", out)
        # Same infinities are close without the flag, as in numpy.
        fi = self.save("i", [INF, -INF], np.float64)
        self.assertTrue(np.allclose(np.load(fi), np.load(fi)))
        self.assertEqual(run("compare", fi, fi)[0], 0)


class Tolerances(unittest.TestCase):
    """--rtol and --atol take finite numbers >= 0; anything else is one line and exit 2."""

    def test_refused(self):
        d = tempfile.mkdtemp(prefix="mha_compare_tol_")
        self.addCleanup(shutil.rmtree, d, True)
        f = os.path.join(d, "a.npy")
        np.save(f, np.ones(3, dtype=np.float32))
        for option, value in [("--rtol", "nan"), ("--rtol", "-1e-5"), ("--rtol", "inf"),
                              ("--atol", "-1"), ("--atol", "NaN"), ("--atol", "-inf"),
                              ("--atol", "1e999"), ("--rtol", "abc"), ("--atol", "")]:
            code, out, err = run("compare", f, f, option, value)
            self.assertEqual(code, 2, f"{option} {value!r}: {out}{err}")
            self.assertEqual(out, "", f"{option} {value!r}")
            lines = err.splitlines()
            self.assertEqual(len(lines), 1, err)
            self.assertTrue(lines[0].startswith(f"mha: error: {option}: "), err)
            self.assertIn("expected a finite number >= 0", lines[0])
            self.assertLess(len(lines[0]), 160, "a short line, not the largest double spelled out")
            self.assertIsNone(re.search(r"\d{20}", lines[0]), lines[0])
        # Zero and large finite tolerances are fine.
        for option, value in [("--rtol", "0"), ("--atol", "0"), ("--atol", "1e300")]:
            self.assertEqual(run("compare", f, f, option, value)[0], 0, f"{option} {value}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
