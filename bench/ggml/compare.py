#!/usr/bin/python3
"""mha against ggml (the tensor library under llama.cpp) on one GPT-2-small-shaped forward over
512 tokens, on this machine, side by side.

  GGML_DIR=/path/to/ggml /usr/bin/python3 bench/ggml/compare.py [--threads 2] [--runs 3]

GGML_DIR is a checkout of https://github.com/ggml-org/ggml; the script checks out the pinned
commit below in it and builds, in GGML_DIR/build-mha-bench (CMake Release with GGML_NATIVE and
GGML_LLAMAFILE, as llama.cpp builds it: the CPU backend with the llamafile GEMM), two programs:
  gpt-2-backend     its GPT-2 example as it is (examples/gpt-2/main-backend.cpp), whose graph
                    computes attention as KQ, soft_max, KQV (no flash attention), F32 K/V cache;
  gpt-2-backend-fa  a copy of it, examples/gpt-2/main-backend-fa.cpp, with bench/ggml/
                    flash_attn.patch applied (the script writes the copy and adds the CMake
                    target). With -fa, attention is one ggml_flash_attn_ext per layer, as
                    llama.cpp's best CPU configuration computes it: a causal mask (F16,
                    [n_kv, n_tokens]), scale 1/sqrt(64), GGML_PREC_F32, and an F16 K/V cache
                    (llama.cpp's default cache type; llama.cpp casts F32 K/V to F16 for it).
                    Without -fa its graph is the example's; --logits FILE writes the logits
                    of the prompt's last position.
It converts the checkpoint of bench/analyze_ablation.py (12 layers, d_model 768, 12 heads,
vocabulary 4,096, random weights; written once into its cache) to ggml's format in float32 and
float16 (bench/ggml/convert.py). The input: 512 copies of token 97 (the letter a, one token each
in the converted vocabulary).

Timed, --runs times each, alternating: ggml's prompt evaluation of the 512 tokens (the example's
"predict time": one forward of the whole batch, logits for every position), F32 and F16 weights,
each with the example's attention and with flash attention; `mha run --model DIR --tokens ids.npy
--threads N` in float32 and bfloat16, its run.json's forward less the time reading the weights
(the compute), and the whole process. "ggml best / this" divides the best (least) median of the
four ggml rows by the row's. The checks: the most likely next token (greedy sampling, --top_k 1)
is the same in every row (mha's forward is held to PyTorch's by tests/models), and, for F32 and
F16 weights, the last position's logits with flash attention differ from those with the
example's attention (gpt-2-backend-fa without -fa, untimed) by at most LOGITS_RTOL times the
logits' max |value| (measured here: about 1.4e-4 of it with F32 weights, 4e-4 with F16 weights,
where the activations are rounded to F16 for each matrix product; F16 against F32 weights, both
with the example's attention, differ by about 8e-4 of it).
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
LOGITS_RTOL = 1e-3  # flash attention (F16 K/V, F16 mask) against the example's (F32 K/V)
FA_TARGET = """
# mha bench: main-backend.cpp with bench/ggml/flash_attn.patch (ggml_flash_attn_ext)
set(TEST_TARGET gpt-2-backend-fa)
add_executable(${TEST_TARGET} main-backend-fa.cpp)
target_link_libraries(${TEST_TARGET} PRIVATE ggml common common-ggml)
"""
sys.path.insert(0, os.path.join(ROOT, "bench"))
import analyze_ablation  # noqa: E402  (its checkpoint)


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"compare.py: {' '.join(args)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def add_flash_attn_variant(ggml):
    """examples/gpt-2/main-backend-fa.cpp: the pinned main-backend.cpp with flash_attn.patch
    (rewritten only when it changes, so that the build stays incremental), and its CMake target."""
    src = sh(["git", "-C", ggml, "show", f"{PINNED}:examples/gpt-2/main-backend.cpp"]).stdout
    rel = os.path.join("examples", "gpt-2", "main-backend-fa.cpp")
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "examples", "gpt-2"))
        with open(os.path.join(tmp, rel), "w") as f:
            f.write(src)
        sh(["git", "apply", os.path.join(ROOT, "bench", "ggml", "flash_attn.patch")], cwd=tmp)
        with open(os.path.join(tmp, rel)) as f:
            patched = f.read()
    dst = os.path.join(ggml, rel)
    if not os.path.exists(dst) or open(dst).read() != patched:
        with open(dst, "w") as f:
            f.write(patched)
    cml = os.path.join(ggml, "examples", "gpt-2", "CMakeLists.txt")
    with open(cml) as f:
        has_target = "gpt-2-backend-fa" in f.read()
    if not has_target:
        with open(cml, "a") as f:
            f.write(FA_TARGET)


def run_ggml(exe, model, prompt, threads, extra=()):
    """The example's predict time (ms) and its next token (None if not printed as <id>)."""
    p = sh([exe, "-m", model, "-p", prompt, "-n", "1", "-t", str(threads), "-b", "512",
            "--top_k", "1", "-s", "1"] + list(extra))
    ms = float(re.search(r"predict time =\s*([0-9.]+) ms", p.stdout + p.stderr).group(1))
    m = re.search(r"a{512}<(\d+)>", p.stdout)
    return ms, int(m.group(1)) if m else None


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
    add_flash_attn_variant(ggml)
    build = os.path.join(ggml, "build-mha-bench")
    sh(["cmake", "-S", ggml, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
        "-DGGML_LLAMAFILE=ON"])
    sh(["cmake", "--build", build, "-j", str(os.cpu_count()), "--target", "gpt-2-backend",
        "gpt-2-backend-fa"])
    exe = os.path.join(build, "bin", "gpt-2-backend")
    exe_fa = os.path.join(build, "bin", "gpt-2-backend-fa")

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

    # the last position's logits: the example's attention (the patched copy without -fa,
    # untimed) and flash attention (written by the timed runs below)
    logits = {}
    tops = {}
    for dtype in ("f32", "f16"):
        out = os.path.join(a.cache, f"ggml_logits_{dtype}.f32")
        _, tops[f"ggml {dtype.upper()} (gpt-2-backend-fa without -fa)"] = run_ggml(
            exe_fa, files[dtype], prompt, a.threads, ["--logits", out])
        logits[dtype] = np.fromfile(out, np.float32)

    ggml_rows = ("ggml F32", "ggml F16", "ggml F32, flash attn", "ggml F16, flash attn")
    times = {k: [] for k in ggml_rows + ("mha float32", "mha bfloat16")}
    walls = {k: [] for k in ("mha float32", "mha bfloat16")}
    logits_fa = {}
    for _ in range(a.runs):
        for dtype in ("f32", "f16"):
            k = "ggml " + dtype.upper()
            ms, tops[k] = run_ggml(exe, files[dtype], prompt, a.threads)
            times[k].append(ms)
            out = os.path.join(a.cache, f"ggml_logits_{dtype}_fa.f32")
            ms, tops[k + ", flash attn"] = run_ggml(exe_fa, files[dtype], prompt, a.threads,
                                                    ["-fa", "--logits", out])
            times[k + ", flash attn"].append(ms)
            logits_fa[dtype] = np.fromfile(out, np.float32)
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
    best_ggml = min(statistics.median(times[k]) for k in ggml_rows)
    print(f"GPT-2-small shapes, vocabulary 4096, 512 tokens, {a.threads} threads, {a.runs} runs "
          f"each (median); ggml {PINNED}")
    print(f"{'':20} {'compute ms':>11} {'whole process ms':>17} {'ggml best / this':>17} {'next token':>11}")
    for k, v in times.items():
        med = statistics.median(v)
        wall = f"{statistics.median(walls[k]):.0f}" if k in walls else "-"
        print(f"{k:20} {med:11.1f} {wall:>17} {best_ggml / med:17.2f} {str(tops.get(k)):>11}")
    bad = {}
    for dtype in ("f32", "f16"):
        ref, fa = logits[dtype], logits_fa[dtype]
        diff = float(np.max(np.abs(fa - ref))) if fa.shape == ref.shape else float("inf")
        scale = float(np.max(np.abs(ref)))
        print(f"last position's logits, ggml {dtype.upper()}, flash attn against the example's "
              f"attention: max |diff| {diff:.2e} ({diff / scale:.1e} of their max |value| "
              f"{scale:.2f})")
        if not diff <= LOGITS_RTOL * scale:
            bad[dtype] = diff
    if len(set(tops.values())) != 1:
        sys.exit(f"compare.py: the next tokens differ: {tops}")
    if bad:
        sys.exit(f"compare.py: flash attention's logits differ by more than {LOGITS_RTOL} of "
                 f"their max |value|: {bad}")


if __name__ == "__main__":
    main()
