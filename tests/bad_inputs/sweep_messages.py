#!/usr/bin/python3
"""Sweep validation and `mha run` share one plan (lib/include/mha/run/plan.hpp): for every `run`
case of the bad-input corpus that fails (exit 2) and that a sweep can hold (its flags written as
a config file), `mha sweep --dry_run` must list the run as invalid with exactly the message
`mha run --config` prints for the same config. Cases that only fail on array data or in the
computation (non-finite values, an .npy whose data is cut short) are checks of the load and
compute stages, which a dry run does not reach: they must be reported valid, and are counted.

    /usr/bin/python3 tests/bad_inputs/sweep_messages.py build/bin/mha
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "mha: error: "


def value_of(text):
    """A flag's text as the JSON value the same config key takes."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def config_of(args):
    """`run` flags as a config object, or None when they are not plain --key value pairs."""
    config = {}
    i = 1
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or "=" in a:
            return None
        key = a[2:].replace("-", "_")
        if key in ("config", "out_dir"):
            return None
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            config[key] = value_of(args[i + 1])
            i += 2
        else:
            config[key] = True
            i += 1
    return config


def main():
    mha = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.environ["MHA_BIN"])
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)["cases"]
    same, data_checks, skipped, failures = 0, [], 0, []
    with tempfile.TemporaryDirectory(prefix="mha_sweep_messages_") as tmp:
        for case in cases:
            args = case["args"]
            if args[0] != "run" or case["exit"] != 2 or case.get("xfail"):
                continue
            config = config_of(args)
            if config is None:
                skipped += 1
                continue
            # A sweep warms each layer run up before timing it (docs/sweeps.md), which its
            # memory estimate counts: the same for `mha run`, unless the case sets it.
            config.setdefault("warmup", True)
            cfg = os.path.join(tmp, case["name"] + ".json")
            with open(cfg, "w") as f:
                json.dump(dict(config, out_dir=os.path.join(tmp, "out", case["name"])), f)
            run = subprocess.run([mha, "run", "--config", cfg], cwd=HERE, capture_output=True,
                                 text=True, timeout=120)
            if run.returncode == 2 and "paths in a config file are relative" in run.stderr:
                # A config file's own check, before the plan (a missing relative input): the
                # plan's message is the run's with those paths given as flags, which win.
                flags = [x for k, v in config.items() if isinstance(v, str) and
                         not os.path.exists(os.path.join(HERE, v)) for x in ("--" + k, v)]
                run = subprocess.run([mha, "run", "--config", cfg] + flags, cwd=HERE,
                                     capture_output=True, text=True, timeout=120)
            if run.returncode != 2:
                skipped += 1  # the flags meant something else as config values
                continue
            run_msg = run.stderr.strip().splitlines()[-1]
            assert run_msg.startswith(PREFIX), run.stderr
            run_msg = run_msg[len(PREFIX):]
            sweep_file = os.path.join(tmp, case["name"] + ".sweep.json")
            with open(sweep_file, "w") as f:
                json.dump({"base": config, "grid": {"seed": [0]},
                           "out_dir": os.path.join(tmp, "sweeps", case["name"])}, f)
            dry = subprocess.run([mha, "sweep", sweep_file, "--dry_run"], cwd=HERE,
                                 capture_output=True, text=True, timeout=120)
            if dry.returncode == 2 and "invalid: " not in dry.stdout:
                skipped += 1  # the sweep file itself is refused (its base keys): not a run
                continue
            rows = [line for line in dry.stdout.splitlines() if " seed=0 " in line]
            if len(rows) != 1:
                failures.append("%s: no row for the run in\n%s%s" % (case["name"], dry.stdout,
                                                                     dry.stderr))
                continue
            status = rows[0].split(None, 3)[3]
            if status.startswith("invalid: "):
                if status[len("invalid: "):] == run_msg:
                    same += 1
                else:
                    failures.append("%s:\n  mha run:   %s\n  sweep:     %s"
                                    % (case["name"], run_msg, status[len("invalid: "):]))
            else:
                data_checks.append("%s: %s" % (case["name"], run_msg))
    print("sweep --dry_run vs mha run: %d identical messages, %d failing only on data or in the"
          " computation (valid to a dry run), %d cases not expressible as a sweep"
          % (same, len(data_checks), skipped))
    for d in data_checks:
        print("  data/compute check: " + d)
    if failures:
        print("%d passed, %d failed" % (same, len(failures)))
        for f in failures:
            print("FAIL " + f)
        return 1
    if same < 50:
        print("too few cases compared (%d): the corpus or its conversion changed" % same)
        return 1
    print("%d passed, 0 failed" % same)
    return 0


if __name__ == "__main__":
    sys.exit(main())
