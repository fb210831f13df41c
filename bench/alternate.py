#!/usr/bin/env python3
"""Two or more mha builds, timed in alternation on this noisy machine.

Warm: each round runs `BIN bench --shapes SHAPES --threads N --repeat 5 --json`
for every binary in turn and keeps each case's median; the table gives the
median over rounds of the time and of the sgemm fraction.

One-shot (--one_shot ARGS...): each round runs `BIN run -q ARGS` once per
binary and reads the compute time from run.json.

  /usr/bin/python3 bench/alternate.py --bins OLD/mha,build/bin/mha --rounds 6 \\
      --shapes tutorial:plain,bert-s512:plain
  /usr/bin/python3 bench/alternate.py --bins OLD/mha,build/bin/mha --rounds 21 \\
      --one_shot --h 8 --d_model 512 --batch 64 --seq_len 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def warm(bins, rounds, shapes, threads):
    times = {b: {} for b in bins}
    for _ in range(rounds):
        for b in bins:
            out = subprocess.run([b, "bench", "--shapes", shapes, "--threads", str(threads),
                                  "--repeat", "5", "--json"], capture_output=True, text=True,
                                 check=True).stdout
            for r in json.loads(out)["results"]:
                key = f'{r["shape"]}:{r["variant"]}'
                times[b].setdefault(key, []).append((r["ms_median"], r["sgemm_fraction"]))
    print(f"{'case':24s} {'binary':32s} {'ms':>9s} {'min':>9s} {'of sgemm':>9s}")
    for key in times[bins[0]]:
        for b in bins:
            v = times[b][key]
            print(f"{key:24s} {b:32s} {statistics.median(x[0] for x in v):9.3f} "
                  f"{min(x[0] for x in v):9.3f} {statistics.median(x[1] for x in v):9.3f}")


def one_shot(bins, rounds, threads, run_args):
    compute = {b: [] for b in bins}
    with tempfile.TemporaryDirectory(prefix="mha_alternate_") as tmp:
        out = os.path.join(tmp, "out")
        for _ in range(rounds):
            for b in bins:
                subprocess.run([b, "run", "-q", "--threads", str(threads), "--out_dir", out]
                               + run_args, check=True)
                with open(os.path.join(out, "run.json")) as f:
                    compute[b].append(json.load(f)["timings_ms"]["compute"])
    print(f"{'binary':32s} {'median ms':>10s} {'q1':>9s} {'min':>9s}")
    for b in bins:
        v = sorted(compute[b])
        print(f"{b:32s} {statistics.median(v):10.3f} {v[len(v) // 4]:9.3f} {v[0]:9.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--bins", required=True, help="comma-separated mha binaries")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--shapes", default="tutorial:plain,bert-s512:plain,long-4k:plain")
    p.add_argument("--one_shot", action="store_true",
                   help="time `mha run` processes; the remaining arguments go to `mha run`")
    args, rest = p.parse_known_args()
    bins = args.bins.split(",")
    if args.one_shot:
        one_shot(bins, args.rounds, args.threads, rest)
    elif rest:
        sys.exit(f"alternate.py: unexpected arguments {rest} (they are for --one_shot)")
    else:
        warm(bins, args.rounds, args.shapes, args.threads)


if __name__ == "__main__":
    main()
