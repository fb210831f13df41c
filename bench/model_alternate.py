#!/usr/bin/python3
"""Whole-model runs of two or more mha builds (or flag sets), timed in alternation.

Each round runs `BIN run --model DIR --tokens ids.npy --threads N -q --out_dir OUT [FLAGS]`
once per variant, in turn, and reads the forward's time (run.json timings.forward_ms) and the
peak RSS (getrusage of the child); the table gives the median over rounds of each and the
ratio to the first variant. The model is bench/model_forward.py's GPT-2-small-size random
checkpoint (written once into its cache). A variant is BIN or BIN:FLAGS (flags separated by
spaces), e.g. comparing a build before a change with one after it, or one build saving the
maps against the same build saving every site:

  /usr/bin/python3 bench/model_alternate.py --rounds 7 \\
      --variants 'OLD/mha,build/bin/mha'
  /usr/bin/python3 bench/model_alternate.py --rounds 5 --variants \\
      'build/bin/mha:--save_attention,build/bin/mha:--save_sites *'
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_forward  # noqa: E402  (the checkpoint it writes and caches)


def run_once(binary, flags, model, ids, threads, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "run", "--model", model, "--tokens", ids, "--threads", str(threads), "-q",
           "--out_dir", out] + flags
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"model_alternate.py: {' '.join(cmd)[:300]} exited {p.returncode}: "
                 f"{p.stderr.strip()}")
    # ru_maxrss of the children is the largest so far: run each variant in its own process tree
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(os.path.join(out, "run.json")) as f:
        run = json.load(f)
    t = run.get("timings_ms") or run.get("timings") or {}
    return float(t.get("forward_ms", float("nan"))), rss, before


def main(argv):
    ap = argparse.ArgumentParser(prog="model_alternate.py", description=__doc__.split("\n")[0])
    ap.add_argument("--variants", required=True, help="comma-separated BIN or BIN:FLAGS")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=None)
    a = ap.parse_args(argv)
    cache = a.cache or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                    "mha-bench", f"gpt2-L{a.layers}")
    model_forward.ensure_checkpoint(cache, a.layers)
    variants = []
    for v in a.variants.split(","):
        binary, _, flags = v.partition(":")
        variants.append((v, binary, flags.split(" ") if flags else []))
    work = tempfile.mkdtemp(prefix="mha-alternate-")
    try:
        ids = os.path.join(work, "ids.npy")
        np.save(ids, np.random.default_rng(0).integers(0, 50257, size=(1, a.seq)).astype(np.int32))
        times = {v: [] for v, _, _ in variants}
        rss = {v: [] for v, _, _ in variants}
        for r in range(a.rounds + 1):  # round 0 warms the page cache
            for v, binary, flags in variants:
                # each run in a fresh child tree so that its peak RSS is its own
                code = ("import sys, json; sys.path.insert(0, %r); import model_alternate as m; "
                        "print(json.dumps(m.run_once(%r, %r, %r, %r, %d, %r)))"
                        % (os.path.dirname(os.path.abspath(__file__)), binary, flags, cache, ids,
                           a.threads, os.path.join(work, "out")))
                p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(p.stderr.strip() or p.stdout.strip())
                ms, peak, _ = json.loads(p.stdout.strip().splitlines()[-1])
                if r:
                    times[v].append(ms)
                    rss[v].append(peak / 1024)
        first = statistics.median(times[variants[0][0]])
        print(f"{a.rounds} rounds, {a.layers} layers, {a.seq} tokens, {a.threads} threads")
        print(f"{'variant':60s} {'forward ms':>11s} {'ratio':>6s} {'peak RSS MiB':>13s}")
        for v, _, _ in variants:
            m = statistics.median(times[v])
            print(f"{v[:60]:60s} {m:11.1f} {m / first:6.3f} {statistics.median(rss[v]):13.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
