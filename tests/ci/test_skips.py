#!/usr/bin/python3
"""CI cannot pass with a skipped test it did not accept (README, "Tests that may be skipped"):

- no test skips other than through tests/skips.py (no skipTest, pytest.skip, skipif,
  importorskip or a bare exit 77 anywhere else under tests/);
- on a machine without Chromium (simulated: MHA_CHROMIUM naming no file, or a PATH without it)
  the browser tests exit 77, but fail under MHA_REQUIRE_ALL unless MHA_ALLOW_SKIPS lists them;
- .ci/prerequisites.py fails on that machine, naming Chromium, unless MHA_ALLOW_SKIPS lists
  every test that needs it.

  /usr/bin/python3 tests/ci/test_skips.py [Class]
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)
import skips  # noqa: E402

# Ways a Python or shell test can skip; only tests/skips.py may use them.
SKIP_PATTERNS = re.compile(r"skipTest\(|SkipTest|unittest\.skip|pytest\.skip|pytest\.mark\.skip|"
                           r"skipif|importorskip|exit\(\s*77\s*\)|(?:^|[;&|])\s*exit 77\b|"
                           r"exit\(SKIP\)")
# Ways a C++ test could pass without running: a return after a capability check, or a WARN that
# says it skips. Only test_util.hpp's MHA_SKIP may skip (it fails under MHA_REQUIRE_ALL).
CPP_SKIP_PATTERNS = re.compile(r"cpu_has_\w+\(\)\)\s*return\b|(?:WARN|SUCCEED)\([^)]*[Ss]kip|"
                               r"(?:geteuid|getuid)\(\)\s*==\s*0\)\s*return\b")
BROWSER_TESTS = ["view.AttentionPage", "view.RunHtml", "view.LargePage", "view.SweepReport",
                 "view.browser"]


def env_with(**changes):
    """os.environ without the CI's own settings, plus `changes` (None removes a variable)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MHA_REQUIRE_ALL", "MHA_ALLOW_SKIPS", "MHA_CHROMIUM")}
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run(args, env, timeout=300):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


class OnlyOneWayToSkip(unittest.TestCase):
    def test_no_other_skip_in_tests(self):
        me = os.path.abspath(__file__)
        allowed = {os.path.join(TESTS, "skips.py"), me}
        found = []
        for root, dirs, files in os.walk(TESTS):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "files", "__pycache__")]
            for name in files:
                path = os.path.join(root, name)
                cpp = name.endswith((".cpp", ".hpp"))
                if not (cpp or name.endswith((".py", ".sh"))) or path in allowed:
                    continue
                pattern = CPP_SKIP_PATTERNS if cpp else SKIP_PATTERNS
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        if pattern.search(line):
                            found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
        self.assertEqual(found, [], "skip through tests/skips.py, so that CI can refuse it")

    def test_the_pattern_finds_what_it_should(self):
        for line in ["self.skipTest('no torch')", "raise unittest.SkipTest('x')",
                     "@unittest.skipIf(True, 'x')", "pytest.skip('x')", "torch = "
                     "pytest.importorskip('torch')", "sys.exit(77)", "  exit 77",
                     "@pytest.mark.skipif(x, reason='y')"]:
            self.assertTrue(SKIP_PATTERNS.search(line), line)
        for line in ["--skip_invalid", "N = 77", "skipped: 0", "# it may exit 77 (ctest: skipped)"]:
            self.assertFalse(SKIP_PATTERNS.search(line), line)

    def test_the_cpp_pattern_finds_what_it_should(self):
        for line in ["  if (!mha::detail::cpu_has_avx512_bf16()) return;",
                     '    WARN("no numpy; skipping the interop test");',
                     "  if (::geteuid() == 0) return;"]:
            self.assertTrue(CPP_SKIP_PATTERNS.search(line), line)
        for line in ['    MHA_SKIP("isa.avx2", "no AVX2 on this CPU");',
                     "  if (mha::detail::cpu_has_avx2()) impls.push_back(x);",
                     '  WARN("LLaMA-3: load " << ms << " ms");']:
            self.assertFalse(CPP_SKIP_PATTERNS.search(line), line)


class Allowed(unittest.TestCase):
    def test_names_and_patterns(self):
        env = {"MHA_ALLOW_SKIPS": "view.*  slurm.arrays"}
        self.assertTrue(skips.allowed(["view.browser", "view.RunHtml"], env))
        self.assertTrue(skips.allowed(["slurm.arrays"], env))
        self.assertFalse(skips.allowed(["slurm.arrays", "cli.plot.PlotCommand"], env))
        self.assertFalse(skips.allowed(["view.browser"], {"MHA_ALLOW_SKIPS": "view.brows"}))
        self.assertFalse(skips.allowed(["view.browser"], {}))
        self.assertTrue(skips.required({"MHA_REQUIRE_ALL": "1"}))
        self.assertFalse(skips.required({"MHA_REQUIRE_ALL": "0"}))
        self.assertFalse(skips.required({}))

    def test_skip_exit_codes(self):
        code = ("import sys; sys.path.insert(0, 'tests'); import skips; "
                "skips.skip(['slurm.arrays'], 'no cluster')")
        p = run(["-c", code], env_with())
        self.assertEqual((p.returncode, p.stdout), (77, "SKIP: no cluster\n"))
        p = run(["-c", code], env_with(MHA_REQUIRE_ALL="1"))
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("FAIL: slurm.arrays cannot run on this machine: no cluster", p.stdout)
        p = run(["-c", code], env_with(MHA_REQUIRE_ALL="1", MHA_ALLOW_SKIPS="view.* slurm.*"))
        self.assertEqual(p.returncode, 77, p.stdout)


class WithoutChromium(unittest.TestCase):
    """The real browser tests on a machine without Chromium (MHA_CHROMIUM names no file)."""

    def check(self, args, test_name):
        no_chromium = "/nonexistent/chromium"
        p = run(args, env_with(MHA_CHROMIUM=no_chromium))
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
        self.assertIn("SKIP: chromium not found", p.stdout)
        p = run(args, env_with(MHA_CHROMIUM=no_chromium, MHA_REQUIRE_ALL="1"))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(f"FAIL: {test_name} cannot run on this machine: chromium not found", p.stdout)
        p = run(args, env_with(MHA_CHROMIUM=no_chromium, MHA_REQUIRE_ALL="1",
                               MHA_ALLOW_SKIPS="slurm.arrays"))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        p = run(args, env_with(MHA_CHROMIUM=no_chromium, MHA_REQUIRE_ALL="1",
                               MHA_ALLOW_SKIPS="slurm.arrays view.*"))
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)

    def test_view_browser(self):
        self.check(["tests/view/test_browser.py"], "view.browser")

    def test_view_page_tests(self):
        self.check(["tests/view/test_view.py", "AttentionPage"], "view.AttentionPage")


class Prerequisites(unittest.TestCase):
    """.ci/prerequisites.py with PATH hiding Chromium (and Slurm's client tools with it)."""

    def test_missing_chromium_fails_ci(self):
        with tempfile.TemporaryDirectory() as empty:
            env = env_with(PATH=empty)
            p = run([".ci/prerequisites.py"], env)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("prerequisites: chromium", p.stderr)
            self.assertIn("or list " + " ".join(BROWSER_TESTS) + " in MHA_ALLOW_SKIPS", p.stderr)
            # Accepted only when every test that needs it (and Slurm's) may skip.
            p = run([".ci/prerequisites.py"], env_with(PATH=empty, MHA_ALLOW_SKIPS="view.browser"))
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            p = run([".ci/prerequisites.py"],
                    env_with(PATH=empty, MHA_ALLOW_SKIPS="view.* slurm.arrays"))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("chromium (apt-get install chromium, or MHA_CHROMIUM) is missing; "
                          "accepted", p.stdout)

    def test_missing_chromium_by_mha_chromium(self):
        p = run([".ci/prerequisites.py"], env_with(MHA_CHROMIUM="/nonexistent/chromium"))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("prerequisites: chromium", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
