#!/usr/bin/python3
"""mha against ggml (the tensor library under llama.cpp) on one GPT-2-small-shaped forward over
512 tokens, on this machine, side by side.

  GGML_DIR=/path/to/ggml /usr/bin/python3 bench/ggml/compare.py [--threads 2] [--runs 3]

GGML_DIR is a checkout of https://github.com/ggml-org/ggml; the script checks out the pinned
commit below in it, builds its GPT-2 example (examples/gpt-2/main-backend.cpp, CMake Release with
GGML_NATIVE and GGML_LLAMAFILE, as llama.cpp builds it: the CPU backend with the llamafile GEMM;
the example's graph has no flash attention) in GGML_DIR/build-mha-bench, and converts
the checkpoint of bench/analyze_ablation.py (12 layers, d_model 768, 12 heads, vocabulary 4,096,
random weights; written once into its cache) to ggml's format in float32 and float16
(bench/ggml/convert.py). The input: 512 copies of token 97 (the letter a, one token each in the
converted vocabulary).

Timed, --runs times each, alternating: ggml's prompt evaluation of the 512 tokens (the example's
"predict time": one forward of the whole batch, logits for every position), F32 and F16 weights;
`mha run --model DIR --tokens ids.npy --threads N` in float32 and bfloat16, its run.json's
forward less the time reading the weights (the compute), and the whole process. The check: the
most likely next token of ggml (greedy sampling, --top_k 1) equals mha's (mha's forward is held
to PyTorch's by tests/models).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINNED = "d99724f2"  # ggml-org/ggml, 2026-11 ("readme : update following llama.cpp style")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import analyze_ablation  # noqa: E402  (its checkpoint)


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(args)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "mha_bench_ablation"))
    a = ap.parse_args()
    ggml = os.environ.get("GGML_DIR")
    if not ggml:
        sys.exit("compare.py: set GGML_DIR to a checkout of https://github.com/ggml-org/ggml")
    sh(["git", "-C", ggml, "checkout", "-q", PINNED])
    build = os.path.join(ggml, "build-mha-bench")
    sh(["cmake", "-S", ggml, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
        "-DGGML_LLAMAFILE=ON"])
    sh(["cmake", "--build", build, "-j", str(os.cpu_count()), "--target", "gpt-2-backend"])
    exe = os.path.join(build, "bin", "gpt-2-backend")

    model = os.path.join(a.cache, "gpt2-small-v4096")
    analyze_ablation.ensure_checkpoint(model)
    files = {}
    for dtype in ("f32", "f16"):
        files[dtype] = os.path.join(a.cache, f"ggml-{dtype}.bin")
        if not os.path.exists(files[dtype]):
            sh([sys.executable, os.path.join(ROOT, "bench", "ggml", "convert.py"), model,
                files[dtype]] + (["--f16"] if dtype == "f16" else []))
    ids = os.path.join(a.cache, "ids_a512.npy")
    np.save(ids, np.full((1, 512), 97, dtype=np.int64))
    prompt = "a" * 512

    times = {k: [] for k in ("ggml F32", "ggml F16", "mha float32", "mha bfloat16")}
    walls = {k: [] for k in ("mha float32", "mha bfloat16")}
    tops = {}
    for _ in range(a.runs):
        for dtype in ("f32", "f16"):
            p = sh([exe, "-m", files[dtype], "-p", prompt, "-n", "1", "-t", str(a.threads), "-b",
                    "512", "--top_k", "1", "-s", "1"])
            ms = float(re.search(r"predict time =\s*([0-9.]+) ms", p.stdout + p.stderr).group(1))
            times["ggml " + dtype.upper()].append(ms)
            m = re.search(r"a{512}<(\d+)>", p.stdout)
            tops["ggml " + dtype.upper()] = int(m.group(1)) if m else None
        for dtype in ("float32", "bfloat16"):
            out = os.path.join(a.cache, "ggml_cmp_" + dtype)
            t0 = time.perf_counter()
            sh([a.mha, "run", "--model", model, "--tokens", ids, "--threads", str(a.threads),
                "--dtype", dtype, "--top_k", "1", "--out_dir", out, "-q"])
            walls["mha " + dtype].append(1e3 * (time.perf_counter() - t0))
            with open(os.path.join(out, "run.json")) as f:
                r = json.load(f)
            times["mha " + dtype].append(r["timings"]["forward_ms"] - r["timings"]["read_weights_ms"])
            tops["mha " + dtype] = r["top_k"][0][0]["id"]
    best_ggml = min(statistics.median(times["ggml F32"]), statistics.median(times["ggml F16"]))
    print(f"GPT-2-small shapes, vocabulary 4096, 512 tokens, {a.threads} threads, {a.runs} runs "
          f"each (median); ggml {PINNED}")
    print(f"{'':14} {'compute ms':>11} {'whole process ms':>17} {'ggml best / this':>17} {'next token':>11}")
    for k, v in times.items():
        med = statistics.median(v)
        wall = f"{statistics.median(walls[k]):.0f}" if k in walls else "-"
        print(f"{k:14} {med:11.1f} {wall:>17} {best_ggml / med:17.2f} {str(tops.get(k)):>11}")
    if len(set(tops.values())) != 1:
        sys.exit(f"compare.py: the next tokens differ: {tops}")


if __name__ == "__main__":
    main()
