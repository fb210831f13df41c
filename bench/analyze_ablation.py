#!/usr/bin/python3
"""Head ablation over a whole grid: `mha analyze --method ablation` against PyTorch as people
write it (a hook that zeroes one head's output, one full forward and loss per head).

The model: GPT-2-small shapes (12 layers, d_model 768, 12 heads), a 4,096-token vocabulary and
random weights (tests/models/checkpoints.py), written once as a float32 checkpoint into a cache
directory. The input: one text of --seq random token ids. Every one of the 144 heads is
zero-ablated and the mean next-token loss measured.

  mha     `mha analyze --model DIR --tokens ids.npy --method ablation --threads N` as a whole
          process (wall time), and the ablation's own time from run.json (summary.ablation.ms:
          the first full pass plus the 144 partial ones).
  torch   the same grid in PyTorch 1.13 in this process (float32, torch.set_num_threads(N),
          no_grad): for each head a forward hook on the layer's c_proj input zeroes the head's
          columns, then a full forward, the LM head and the loss; the weights read beforehand.
  floor   the multiply-adds the grid needs at the machine's FMA peak (`mha bench --json`'s
          fma_peak_gflops, the best ISA): one full pass, then for each head the layers from its
          own on and the LM head over every position.
The two grids are compared (max |difference| of the loss changes).

  /usr/bin/python3 bench/analyze_ablation.py [--seq 128] [--threads 2] [--mha build/bin/mha]
      [--cache DIR] [--torch_heads N] [--json]
--torch_heads times N of PyTorch's 144 forwards and scales the time (default all 144).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import checkpoints  # noqa: E402
import safetensors_write as st  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
from model_forward import gelu_new  # noqa: E402

SIZES = dict(layers=12, hidden=768, heads=12, vocab=4096, max_positions=1024)


def ensure_checkpoint(directory):
    stamp = dict(SIZES, seed=0, version=1)
    sp = os.path.join(directory, "stamp.json")
    if os.path.exists(sp) and os.path.exists(os.path.join(directory, "model.safetensors")):
        with open(sp) as f:
            if json.load(f) == stamp:
                return
    os.makedirs(directory, exist_ok=True)
    config, t = checkpoints.make("gpt2", seed=0, **SIZES)
    checkpoints.write(directory, config, t, "F32")
    with open(sp, "w") as f:
        json.dump(stamp, f)


def torch_loss(w, ids, layers, heads, ablate=None, eps=1e-5):
    """GPT-2's mean next-token loss; ablate = (layer, head) zeroes that head's output."""
    B, T = ids.shape
    E = w["wte.weight"].shape[1]
    d = E // heads
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    for n in range(layers):
        p = f"h.{n}."
        a = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = torch.addmm(w[p + "attn.c_attn.bias"], a.view(-1, E), w[p + "attn.c_attn.weight"])
        q, k, v = qkv.view(B, T, 3, heads, d).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        s.masked_fill_(causal, torch.finfo(s.dtype).min)
        ctx = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B * T, E)
        if ablate is not None and ablate[0] == n:  # the hook: the head's output zeroed
            ctx[:, ablate[1] * d:(ablate[1] + 1) * d] = 0
        x = x + torch.addmm(w[p + "attn.c_proj.bias"], ctx, w[p + "attn.c_proj.weight"]).view(B, T, E)
        m = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(torch.addmm(w[p + "mlp.c_fc.bias"], m.view(-1, E), w[p + "mlp.c_fc.weight"]))
        x = x + torch.addmm(w[p + "mlp.c_proj.bias"], m, w[p + "mlp.c_proj.weight"]).view(B, T, E)
    x = torch.nn.functional.layer_norm(x, (E,), w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x[0] @ w["wte.weight"].T
    return torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:]).item()


def floor_flops(T, L, E, V, heads):
    """Multiply-adds x 2 of the grid: a full pass, then per head its layers and the LM head."""
    layer = 2 * T * E * (3 * E + E + 8 * E) + 2 * 2 * (T * (T + 1) / 2) * E  # projections, MLP, causal QK and AV
    head = 2 * T * E * V
    grid = sum((L - l) for l in range(L)) * heads
    return (L * layer + head) + grid * layer + L * heads * head


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "mha_bench_ablation"))
    ap.add_argument("--torch_heads", type=int, default=144)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    model = os.path.join(a.cache, "gpt2-small-v4096")
    ensure_checkpoint(model)
    ids = np.random.default_rng(0).integers(0, SIZES["vocab"], (1, a.seq))
    np.save(os.path.join(a.cache, "ids.npy"), ids)
    bench = json.loads(subprocess.run([a.mha, "bench", "--shapes", "tutorial:plain", "--repeat", "1",
                                       "--threads", str(a.threads), "--json", "-q"],
                                      capture_output=True, text=True, check=True).stdout)
    peak = max(bench["fma_peak_gflops"].values())
    out = os.path.join(a.cache, "out")
    t0 = time.perf_counter()
    subprocess.run([a.mha, "analyze", "--model", model, "--tokens", os.path.join(a.cache, "ids.npy"),
                    "--method", "ablation", "--threads", str(a.threads), "--out_dir", out, "-q"], check=True)
    mha_s = time.perf_counter() - t0
    with open(os.path.join(out, "run.json")) as f:
        run = json.load(f)
    ablation_s = run["summary"]["ablation"]["ms"] / 1e3
    got = np.load(os.path.join(out, "ablation.npy"))[0]
    torch.set_num_threads(a.threads)
    w = {k: torch.from_numpy(np.array(v, dtype=np.float32))
         for k, v in st.load_file(os.path.join(model, "model.safetensors")).items()}
    tid = torch.as_tensor(ids)
    L, H = SIZES["layers"], SIZES["heads"]
    with torch.no_grad():
        t0 = time.perf_counter()
        clean = torch_loss(w, tid, L, H)
        grid = [(l, h) for l in range(L) for h in range(H)][:a.torch_heads]
        want = {}
        for l, h in grid:
            want[l, h] = torch_loss(w, tid, L, H, (l, h)) - clean
        torch_s = (time.perf_counter() - t0) * (L * H + 1) / (len(grid) + 1)
    diff = max(abs(got[l, h] - v) for (l, h), v in want.items())
    floor_s = floor_flops(a.seq, L, SIZES["hidden"], SIZES["vocab"], H) / (peak * 1e9)
    r = {"seq": a.seq, "threads": a.threads, "heads": L * H, "fma_peak_gflops": peak,
         "kernels": bench.get("kernels"), "mha_process_s": mha_s, "mha_ablation_s": ablation_s,
         "torch_s": torch_s, "torch_heads_timed": len(grid), "speedup": torch_s / ablation_s,
         "floor_s": floor_s, "over_floor": ablation_s / floor_s,
         "layer_passes": run["summary"]["ablation"]["layer_passes"],
         "max_abs_diff_vs_torch": float(diff)}
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"144 zero-ablations, GPT-2-small shapes, vocab 4096, T={a.seq}, {a.threads} threads "
              f"(FMA peak {peak:.0f} GFLOP/s)")
        print(f"  mha analyze    {ablation_s:8.2f} s  ({mha_s:.2f} s as a process)")
        print(f"  torch (hooks)  {torch_s:8.2f} s  ({len(grid)} of 144 timed)   {torch_s / ablation_s:.1f}x")
        print(f"  FLOP floor     {floor_s:8.2f} s   mha at {ablation_s / floor_s:.2f}x the floor")
        print(f"  max |mha - torch| of the loss changes: {diff:.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
