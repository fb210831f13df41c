#!/usr/bin/python3
"""mha.Layer from Python against PyTorch 1.13 and `mha bench`, in one run.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_layer.py [--threads 2] [--repeat 30]
                                                                      [--mha build/bin/mha] [--json]

Each case, same process, same thread count (torch.set_num_threads and the config's threads):

  mha.Layer      a layer built once with the module's state_dict as weights, then called on
                 the same tensor the module gets (`layer(x)`; a torch tensor in, a tensor out)
  torch          the nn.MultiheadAttention (batch_first, eval) called inside
                 torch.inference_mode() with need_weights=False (its fastest path)
  mha bench      `mha bench --shapes NAME:plain --json`, warm median, run as a subprocess
                 between the two (the same machine state; decode-4k, tutorial, ...)

plus the encoder layer (BERT-base, (1, 512, 768)) through mha.Layer.from_torch against
nn.TransformerEncoderLayer, a (1, 16, 64) h = 4 call, and mha.attention with a torch
state_dict (a one-shot Layer: plan, weights, call) against a Layer call on the tutorial shape.
Times are medians over 3 rounds of `repeat` calls after 3 warm-up calls, the rounds alternating
(mha, torch, mha, torch, ...) so that a slow spell of the shared machine hits both.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import mha

# name: (B, T, S, d_model, h); S != T: a (B, 1, d) query over a (B, S, d) memory.
SHAPES = {
    "small": (1, 16, 16, 64, 4),
    "tutorial": (64, 5, 5, 512, 8),
    "bert-s128": (8, 128, 128, 768, 12),
    "bert-s512": (1, 512, 512, 768, 12),
    "decode-4k": (1, 1, 4096, 512, 8),
}


def interleaved(fns, repeat, warmup=3, rounds=3):
    """Median ms of each function: `rounds` rounds, each calling every function `warmup` times
    untimed, then `repeat` times timed, one function after the other. Blocks rather than
    alternate calls: PyTorch's OpenMP threads spin for a while after each of its calls, which
    would slow the next call of whatever runs after it."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            for _ in range(warmup):
                f()
            for _ in range(repeat):
                t0 = time.perf_counter()
                f()
                times[i].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]


def bench_warm(mha_bin, name, threads, repeat):
    p = subprocess.run([mha_bin, "bench", "--shapes", name + ":plain", "--threads", str(threads),
                        "--repeat", str(repeat), "--json"], capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout)["results"][0]["ms_median"]


def main(argv):
    p = argparse.ArgumentParser(prog="python_layer.py")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--mha", default="build/bin/mha")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rows = []
    with torch.inference_mode():
        for name, (B, T, S, d, h) in SHAPES.items():
            m = torch.nn.MultiheadAttention(d, h, batch_first=True).eval()
            x = torch.rand(B, T, d)
            mem = x if S == T else torch.rand(B, S, d)
            layer = mha.Layer(h=h, weights=m.state_dict(), threads=a.threads)
            if S == T:
                call_mha = lambda: layer(x)
                call_torch = lambda: m(x, x, x, need_weights=False)
            else:
                call_mha = lambda: layer(x, mem, mem)
                call_torch = lambda: m(x, mem, mem, need_weights=False)
            diff = float((layer(x) if S == T else layer(x, mem, mem))[0].sub(
                call_torch()[0]).abs().max())
            ms_mha, ms_torch = interleaved([call_mha, call_torch], a.repeat)
            warm = bench_warm(a.mha, name, a.threads, a.repeat) if name != "small" else None
            rows.append({"case": name, "mha_layer_ms": ms_mha, "torch_ms": ms_torch,
                         "bench_warm_ms": warm, "max_abs_diff": diff})

        # BERT-base's encoder layer through from_torch.
        enc = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True).eval()
        x = torch.rand(1, 512, 768)
        layer = mha.Layer.from_torch(enc, threads=a.threads)
        diff = float(layer(x)[0].sub(enc(x)).abs().max())
        ms_mha, ms_torch = interleaved([lambda: layer(x), lambda: enc(x)], a.repeat)
        rows.append({"case": "encoder-layer (1, 512, 768)", "mha_layer_ms": ms_mha,
                     "torch_ms": ms_torch,
                     "bench_warm_ms": bench_warm(a.mha, "bert-layer", a.threads, a.repeat),
                     "max_abs_diff": diff})

        # mha.attention with a torch state_dict: a one-shot Layer per call. The state_dict is
        # taken outside inference mode, as a model's usually is: inference tensors carry no
        # version counter, so mha.attention cannot know them unchanged and converts them anew.
        with torch.inference_mode(False):
            m = torch.nn.MultiheadAttention(512, 8, batch_first=True).eval()
            sd = m.state_dict()
        x = torch.rand(64, 5, 512)
        layer = mha.Layer(h=8, weights=sd, threads=a.threads)
        ms_attention, ms_layer = interleaved(
            [lambda: mha.attention(x, h=8, weights=sd, threads=a.threads), lambda: layer(x)],
            a.repeat)
        one_shot = {"mha_attention_ms": ms_attention, "mha_layer_ms": ms_layer,
                    "ratio": ms_attention / ms_layer}

    if a.json:
        print(json.dumps({"threads": a.threads, "torch": torch.__version__, "cases": rows,
                          "attention_vs_layer": one_shot}, indent=2))
        return
    print(f"threads {a.threads}, torch {torch.__version__}, medians of {a.repeat}")
    print(f"{'case':30} {'Layer ms':>9} {'torch ms':>9} {'torch/Layer':>11} {'bench ms':>9}"
          f" {'Layer/bench':>11} {'max|diff|':>10}")
    for r in rows:
        warm = r["bench_warm_ms"]
        print(f"{r['case']:30} {r['mha_layer_ms']:9.3f} {r['torch_ms']:9.3f}"
              f" {r['torch_ms'] / r['mha_layer_ms']:11.2f}"
              f" {warm if warm is not None else float('nan'):9.3f}"
              f" {r['mha_layer_ms'] / warm if warm else float('nan'):11.2f} {r['max_abs_diff']:10.2e}")
    print(f"mha.attention with a torch state_dict (tutorial): {one_shot['mha_attention_ms']:.3f} ms,"
          f" Layer call {one_shot['mha_layer_ms']:.3f} ms, ratio {one_shot['ratio']:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
