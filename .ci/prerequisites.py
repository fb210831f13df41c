#!/usr/bin/python3
"""CI: fails (exit 1, one line per missing piece) when this machine lacks what the test suite
needs to run every test: Chromium (the view.* tests), a Slurm installation (slurm.arrays), and
NumPy and PyTorch for /usr/bin/python3 (most tests; nothing skips without them, they fail).

Chromium and Slurm may be missing when MHA_ALLOW_SKIPS lists every test that needs them
(README, "Tests that may be skipped"), e.g. MHA_ALLOW_SKIPS="view.* slurm.arrays".

    /usr/bin/python3 .ci/prerequisites.py
"""
import importlib.util
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "view"))
import skips  # noqa: E402  (tests/skips.py)
from browser import chromium_path  # noqa: E402  (tests/view/browser.py: the tests' own lookup)

# What each optional piece is needed by (ctest names, tests/CMakeLists.txt).
CHROMIUM_TESTS = ["view.AttentionPage", "view.RunHtml", "view.LargePage", "view.SweepReport",
                  "view.browser"]
SLURM_TESTS = ["slurm.arrays"]
SLURM_TOOLS = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel"]


def missing():
    """(what is missing, the tests that need it or None when nothing may skip for it)."""
    found = []
    if chromium_path() is None:
        found.append(("chromium (apt-get install chromium, or MHA_CHROMIUM)", CHROMIUM_TESTS))
    # As tests/slurm/test_slurm.py looks: PATH, then /usr/sbin (not on a user's PATH).
    absent = [t for t in SLURM_TOOLS
              if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
    if absent:
        found.append((f"Slurm ({', '.join(absent)}: apt-get install slurmctld slurmd slurm-client "
                      "munge)", SLURM_TESTS))
    for module, package in (("numpy", "python3-numpy"), ("torch", "python3-torch"),
                            ("h5py", "python3-h5py")):
        if importlib.util.find_spec(module) is None:
            found.append((f"{module} for {sys.executable} ({package})", None))
    return found


def main():
    problems = []
    for what, tests in missing():
        if tests is not None and skips.allowed(tests):
            print(f"prerequisites: {what} is missing; accepted, MHA_ALLOW_SKIPS lists "
                  f"{' '.join(tests)}")
            continue
        hint = (f"or list {' '.join(tests)} in MHA_ALLOW_SKIPS" if tests is not None
                else "no test may skip for it")
        problems.append(f"prerequisites: {what} is missing (scripts/setup.sh --test installs it; "
                        f"{hint})")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
