"""The one way a test skips: for something the machine lacks (Chromium, a Slurm cluster that
starts), never for a failure.

    sys.path.insert(0, "tests"); import skips
    skips.skip(["view.browser"], "chromium not found (scripts/setup.sh --test installs it)")

skip() exits 77, which ctest counts as skipped (the tests' SKIP_RETURN_CODE). When
MHA_REQUIRE_ALL is set (.ci/run sets it) a skip fails instead (exit 1), unless every ctest test
named is listed in MHA_ALLOW_SKIPS: names or shell patterns separated by spaces, such as
"view.* slurm.arrays" (README, "Tests that may be skipped"). tests/ci/test_skips.py checks that
no test skips any other way.
"""
import fnmatch
import os
import sys

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests (tests/CMakeLists.txt)


def allowed(names, env=None):
    """Whether MHA_ALLOW_SKIPS (in `env`, default os.environ) accepts skipping every test in
    `names`."""
    env = os.environ if env is None else env
    patterns = env.get("MHA_ALLOW_SKIPS", "").split()
    return all(any(fnmatch.fnmatchcase(n, p) for p in patterns) for n in names)


def required(env=None):
    env = os.environ if env is None else env
    return env.get("MHA_REQUIRE_ALL", "") not in ("", "0")


def skip(names, reason):
    """Ends the process: skipped (77), or failed (1) when MHA_REQUIRE_ALL forbids it.
    `names` are the ctest tests this process stands for."""
    names = list(names)
    if required() and not allowed(names):
        print(f"FAIL: {' '.join(names)} cannot run on this machine: {reason}. MHA_REQUIRE_ALL is "
              f"set and MHA_ALLOW_SKIPS ({os.environ.get('MHA_ALLOW_SKIPS', '')!r}) does not "
              f"list {'it' if len(names) == 1 else 'them all'}", flush=True)
        sys.exit(1)
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)
