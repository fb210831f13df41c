#!/usr/bin/python3
"""Peak memory of `mha run --model --save_sites '*'` against a run that saves only the maps: the
sites are streamed to their files as the pass computes them, so saving all of them should hold
no more than one layer's activations (docs/models.md, "Activation sites").

The model: GPT-2-small shapes (12 layers, d_model 768, 12 heads, d_ff 3072), a 4,096-token
vocabulary and random weights (tests/models/checkpoints.py, as bench/analyze_ablation.py), written
once as a float32 checkpoint into a cache directory. The input: one row of --seq random ids.

  maps   mha run --model DIR --tokens ids.npy --save_attention
  sites  the same with --save_sites '*' (every site: 2 + 12 x 15 + 1 files)
Each is run --rounds times in alternation under /usr/bin/time -v; the table gives the median
of the peak resident set ("Maximum resident set size") and of the wall time, and the bytes the
run wrote. Exit 1 when the sites' median peak is over --bound (default 1.2) times the maps'.

  /usr/bin/python3 bench/site_memory.py [--seq 512] [--rounds 3] [--threads 2]
      [--mha build/bin/mha] [--cache DIR] [--json]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))

sys.path.insert(0, os.path.join(ROOT, "bench"))
# the same GPT-2-small-shaped checkpoint (vocabulary 4096) as the ablation benchmark's
from analyze_ablation import SIZES, ensure_checkpoint  # noqa: E402


def measured(cmd):
    """(peak RSS in bytes, wall seconds) of cmd under /usr/bin/time -v."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) * 1024
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    wall = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    return rss, wall


def tree_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bound", type=float, default=1.2)
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "mha_bench_gpt2_small"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ensure_checkpoint(a.cache)
    work = tempfile.mkdtemp(prefix="mha_site_memory_")
    try:
        ids = os.path.join(work, "ids.npy")
        np.save(ids, np.random.default_rng(1).integers(0, SIZES["vocab"], (1, a.seq)))
        base = [a.mha, "run", "-q", "--model", a.cache, "--tokens", ids, "--threads", str(a.threads),
                "--save_attention"]
        runs = {"maps": [], "sites": []}
        written = {}
        for _ in range(a.rounds):
            for kind in runs:
                out = os.path.join(work, kind)
                shutil.rmtree(out, ignore_errors=True)
                extra = ["--save_sites", "*"] if kind == "sites" else []
                runs[kind].append(measured(base + ["--out_dir", out] + extra))
                written[kind] = tree_bytes(out)
        result = {k: {"peak_rss_bytes": statistics.median(r for r, _ in v),
                      "wall_s": statistics.median(w for _, w in v), "written_bytes": written[k]}
                  for k, v in runs.items()}
        ratio = result["sites"]["peak_rss_bytes"] / result["maps"]["peak_rss_bytes"]
        result["ratio"] = ratio
        result["seq"], result["rounds"], result["threads"] = a.seq, a.rounds, a.threads
        if a.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"GPT-2-small shapes, {a.seq} tokens, {a.threads} threads, median of {a.rounds}")
            print(f"{'run':8s} {'peak RSS':>12s} {'wall':>8s} {'written':>12s}")
            for k in runs:
                r = result[k]
                print(f"{k:8s} {r['peak_rss_bytes'] / 2**20:9.1f} MiB {r['wall_s']:7.2f}s "
                      f"{r['written_bytes'] / 2**20:9.1f} MiB")
            print(f"sites / maps peak RSS: {ratio:.3f} (bound {a.bound})")
        return 0 if ratio <= a.bound else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
