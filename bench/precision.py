#!/usr/bin/python3
"""Error of each compute dtype of `mha run` against float64, on the same inputs and weights.

Usage: /usr/bin/python3 bench/precision.py [--mha build/bin/mha] [--threads N] [--markdown]

For each shape below, one set of float32 inputs (standard normal) and weights (Glorot uniform,
biases uniform in [-0.1, 0.1]) is saved to .npy/.npz, so that every run reads exactly the same
values, and the layer runs as

  mha run --query x.npy --weights w.npz --h H [--causal] --save_attention --dtype D
          [--output_dtype O]

for D = float64 (the reference), float32, bfloat16, and float32 written as float16. Each
output.npy and attention.npy is compared with float64's:

  max abs   max |x - ref|
  max rel   max |x - ref| / max |ref|        (the largest error, relative to the largest value)
  rms rel   ||x - ref||_2 / ||ref||_2        (the typical error, relative to the typical value)

The table printed is the one in docs/benchmarks.md, "Precision".
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# name: (B, T, d_model, h, causal)
SHAPES = {
    "tutorial-T128": (4, 128, 512, 8, False),
    "bert-s512": (1, 512, 768, 12, False),
    "causal-T2048": (1, 2048, 512, 8, True),
}
# row label: (dtype, output_dtype or None)
RUNS = {
    "float32": ("float32", None),
    "bfloat16": ("bfloat16", None),
    "float32, written float16": ("float32", "float16"),
}


def glorot(rng, fan_in, fan_out):
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)


def make_layer(directory, B, T, d_model, h, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, d_model)).astype(np.float32)
    w = {name: glorot(rng, d_model, d_model) for name in ("W_q", "W_k", "W_v", "W_o")}
    for name in ("b_q", "b_k", "b_v", "b_o"):
        w[name] = rng.uniform(-0.1, 0.1, d_model).astype(np.float32)
    np.save(os.path.join(directory, "x.npy"), x)
    np.savez(os.path.join(directory, "w.npz"), **w)


def run(mha, directory, out, h, causal, threads, dtype, output_dtype):
    args = [mha, "run", "-q", "--query", os.path.join(directory, "x.npy"),
            "--weights", os.path.join(directory, "w.npz"), "--h", str(h), "--save_attention",
            "--dtype", dtype, "--threads", str(threads), "--out_dir", out]
    if causal:
        args.append("--causal")
    if output_dtype:
        args += ["--output_dtype", output_dtype]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("precision.py: %s failed: %s" % (" ".join(args), p.stderr.strip()))
    with open(os.path.join(out, "run.json")) as f:
        report = json.load(f)
    return (np.load(os.path.join(out, "output.npy")).astype(np.float64),
            np.load(os.path.join(out, "attention.npy")).astype(np.float64), report)


def errors(x, ref):
    err = np.abs(x - ref)
    return (float(err.max()), float(err.max() / np.abs(ref).max()),
            float(np.linalg.norm(err) / np.linalg.norm(ref)))


def main(argv):
    p = argparse.ArgumentParser(prog="precision.py", description=__doc__.split("\n")[0])
    p.add_argument("--mha", default="build/bin/mha", help="the mha binary (default %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="threads per run (default 2)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = p.parse_args(argv)
    rows = []
    backend = None
    with tempfile.TemporaryDirectory(prefix="mha_precision_") as tmp:
        for name, (B, T, d_model, h, causal) in SHAPES.items():
            d = os.path.join(tmp, name)
            os.makedirs(d)
            make_layer(d, B, T, d_model, h)
            ref_out, ref_att, _ = run(a.mha, d, os.path.join(d, "float64"), h, causal, a.threads,
                                      "float64", None)
            for label, (dtype, output_dtype) in RUNS.items():
                out, att, report = run(a.mha, d, os.path.join(d, label.replace(" ", "_")), h,
                                       causal, a.threads, dtype, output_dtype)
                backend = report.get("bf16_gemm", backend)
                rows.append((name, label) + errors(out, ref_out) + errors(att, ref_att))
    head = ("shape", "dtype", "output max abs", "max rel", "rms rel",
            "attention max abs", "max rel", "rms rel")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(list(r[:2]) + ["%.2e" % v for v in r[2:]]) + " |")
    else:
        print("%-14s %-25s" % head[:2] + "".join("%18s" % x for x in head[2:]))
        for r in rows:
            print("%-14s %-25s" % r[:2] + "".join("%18.2e" % v for v in r[2:]))
    if backend:
        print("\nbfloat16 GEMMs ran through %s (run.json's bf16_gemm)" % backend)


if __name__ == "__main__":
    main(sys.argv[1:])
