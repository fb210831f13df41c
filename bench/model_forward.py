#!/usr/bin/python3
"""A whole GPT-2-small-size model forward: `mha run --model` against a plain PyTorch GPT-2.

The model: 12 layers, d_model 768, 12 heads, vocab 50257, n_positions 1024 (GPT-2 small's
shapes), random weights (tests/models/checkpoints.py), written once as a float32 checkpoint in
Hugging Face's layout (config.json + model.safetensors, ~0.5 GB) into a cache directory and
reused. The input: 512 random token ids (ids.npy), and a --text run when the checkpoint
directory holds a tokenizer.json (optional; put one there yourself).

Timed, each the median of --repeat runs after one warm-up:
  torch   a plain PyTorch GPT-2 forward in this process (float32, torch.set_num_threads(threads),
          torch.no_grad): the embeddings, 12 pre-norm blocks (LayerNorm, Conv1D c_attn, causal
          softmax(QK^T/sqrt(d)), c_proj, gelu_new MLP), ln_f, returning every layer's attention
          maps (the equivalent of need_weights / output_attentions) and the final hidden states;
          no LM head. The weights are read from the same file beforehand (not timed).
  mha     `mha run --model DIR --tokens ids.npy --save_attention --threads N --out_dir OUT` as a
          whole process (wall time: start, reading the checkpoint, compute, writing output.npy
          and the 12 x 12 x T x T maps), and the phases run.json reports when it has them:
          every number in its "timings" or "timings_ms" object (e.g. read_weights_ms,
          forward_ms, total_ms), each as the median over the runs; run.json's keys are printed.
mha's output.npy is compared with the PyTorch forward's (float32 both) as a sanity check.

  /usr/bin/python3 bench/model_forward.py [--layers 12] [--seq 512] [--repeat 5]
      [--threads 2] [--mha build/bin/mha] [--cache DIR] [--json]
"""
import argparse
import json
import math
import os
import shutil
import statistics
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

SIZES = dict(hidden=768, heads=12, vocab=50257, max_positions=1024)


def ensure_checkpoint(directory, layers):
    """Writes the checkpoint unless the directory already holds this one (stamp.json)."""
    stamp = dict(SIZES, layers=layers, seed=0, version=1)
    sp = os.path.join(directory, "stamp.json")
    if os.path.exists(sp) and os.path.exists(os.path.join(directory, "model.safetensors")):
        with open(sp) as f:
            if json.load(f) == stamp:
                return False
    os.makedirs(directory, exist_ok=True)
    config, t = checkpoints.make("gpt2", seed=0, layers=layers, **SIZES)
    checkpoints.write(directory, config, t, "F32")
    with open(sp, "w") as f:
        json.dump(stamp, f)
    return True


def load_weights(directory):
    t = st.load_file(os.path.join(directory, "model.safetensors"))
    return {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in t.items()}


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def torch_gpt2(w, ids, layers, heads, eps=1e-5):
    """GPT-2 forward, float32: (final hidden states (B, T, E), [L x attention maps (B, h, T, T)])."""
    B, T = ids.shape
    E = w["wte.weight"].shape[1]
    d = E // heads
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    maps = []
    for n in range(layers):
        p = f"h.{n}."
        a = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = torch.addmm(w[p + "attn.c_attn.bias"], a.view(-1, E), w[p + "attn.c_attn.weight"])
        q, k, v = qkv.view(B, T, 3, heads, d).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        s.masked_fill_(causal, torch.finfo(s.dtype).min)
        att = torch.softmax(s, -1)
        maps.append(att)
        ctx = (att @ v).transpose(1, 2).reshape(B * T, E)
        x = x + torch.addmm(w[p + "attn.c_proj.bias"], ctx, w[p + "attn.c_proj.weight"]).view(B, T, E)
        m = torch.nn.functional.layer_norm(x, (E,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(torch.addmm(w[p + "mlp.c_fc.bias"], m.view(-1, E), w[p + "mlp.c_fc.weight"]))
        x = x + torch.addmm(w[p + "mlp.c_proj.bias"], m, w[p + "mlp.c_proj.weight"]).view(B, T, E)
    x = torch.nn.functional.layer_norm(x, (E,), w["ln_f.weight"], w["ln_f.bias"], eps)
    return x, maps


def median_ms(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), times


def run_mha(cmd, optional=False):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    ms = (time.perf_counter() - t) * 1e3
    if p.returncode != 0:
        msg = f"model_forward.py: {' '.join(cmd)[:200]} exited {p.returncode}: {p.stderr.strip()}"
        if optional:
            print(msg, file=sys.stderr)
            return None
        sys.exit(msg)
    return ms


def main(argv):
    ap = argparse.ArgumentParser(prog="model_forward.py", description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    ap.add_argument("--cache", default=None, help="checkpoint directory (default: "
                    "$XDG_CACHE_HOME or ~/.cache, mha-bench/gpt2-L{layers})")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    a = ap.parse_args(argv)
    if not 1 <= a.seq <= SIZES["max_positions"]:
        ap.error(f"--seq: between 1 and {SIZES['max_positions']}")
    cache = a.cache or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                    "mha-bench", f"gpt2-L{a.layers}")
    t0 = time.perf_counter()
    if ensure_checkpoint(cache, a.layers):
        print(f"wrote {cache} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    size = os.path.getsize(os.path.join(cache, "model.safetensors"))
    work = tempfile.mkdtemp(prefix="mha_model_forward_")
    try:
        ids = np.random.default_rng(1).integers(0, SIZES["vocab"], (1, a.seq)).astype(np.int64)
        ids_path = os.path.join(work, "ids.npy")
        np.save(ids_path, ids)

        torch.set_num_threads(a.threads)
        w = load_weights(cache)
        tid = torch.from_numpy(ids)
        with torch.no_grad():
            torch_ms, torch_all = median_ms(lambda: torch_gpt2(w, tid, a.layers, SIZES["heads"]), a.repeat)
            want, _ = torch_gpt2(w, tid, a.layers, SIZES["heads"])
        del w

        rows = [("torch forward (in-process, maps returned)", torch_ms)]
        result = {"layers": a.layers, "seq": a.seq, "threads": a.threads, "repeat": a.repeat,
                  "checkpoint_bytes": size, "torch": torch.__version__, "torch_ms": torch_all}
        out = os.path.join(work, "out")
        cmd = [a.mha, "run", "--model", cache, "--tokens", ids_path, "--save_attention",
               "--threads", str(a.threads), "--out_dir", out, "-q"]
        walls, phases = [], []
        for i in range(a.repeat + 1):
            shutil.rmtree(out, ignore_errors=True)
            ms = run_mha(cmd)
            rj = os.path.join(out, "run.json")
            run = json.load(open(rj)) if os.path.exists(rj) else {}
            if i == 0:  # warm-up: the page cache holds the checkpoint afterwards
                got = np.load(os.path.join(out, "output.npy"))
                diff = (float(np.abs(got - want.numpy()).max()) if got.shape == tuple(want.shape)
                        else float("nan"))  # a wrong shape shows as nan
                result["run_json_keys"] = sorted(run)
                continue
            walls.append(ms)
            phases.append({f"{group}.{k}": v for group in ("timings", "timings_ms")
                           for k, v in (run.get(group) or {}).items() if isinstance(v, (int, float))})
        mha_ms = statistics.median(walls)
        rows.append(("mha run --model (whole process, wall)", mha_ms))
        result.update(mha_wall_ms=walls, max_abs_diff_output=diff)
        for phase in sorted(set().union(*phases)):  # run.json's timings, in ms
            vals = [p[phase] for p in phases if phase in p]
            if len(vals) == len(phases):
                rows.append((f"  run.json {phase}", statistics.median(vals)))
                result["run_json_" + phase.replace(".", "_")] = vals

        tok = os.path.join(cache, "tokenizer.json")
        if os.path.exists(tok):  # optional: the same model from text
            # --seq words of English; GPT-2's tokenizer makes one token of each (" quick", ...)
            words = "the quick brown fox jumps over the lazy dog".split()
            text = " ".join((words * (a.seq // len(words) + 1))[:a.seq])
            tcmd = [a.mha, "run", "--model", cache, "--text", text, "--save_attention",
                    "--threads", str(a.threads), "--out_dir", out, "-q"]
            tw = []
            for i in range(a.repeat + 1):
                shutil.rmtree(out, ignore_errors=True)
                ms = run_mha(tcmd, optional=True)  # (the text may tokenize beyond n_positions)
                if ms is None:
                    break
                if i:
                    tw.append(ms)
            if tw:
                with open(os.path.join(out, "tokens.json")) as f:
                    T = json.load(f)["lengths"][0]
                rows.append((f"mha run --model --text ({T} tokens, wall)", statistics.median(tw)))
                result["mha_text_wall_ms"], result["text_tokens"] = tw, T

        if a.json:
            print(json.dumps(result))
            return
        print(f"GPT-2 {a.layers} layers, d_model 768, 12 heads, vocab 50257; B = 1, T = {a.seq}; "
              f"{a.threads} thread(s); torch {torch.__version__}; medians of {a.repeat} after 1 warm-up")
        print(f"checkpoint {cache} ({size / 2**20:.0f} MiB float32); run.json keys: "
              f"{', '.join(result['run_json_keys']) or '(none)'}")
        print(f"{'':45} {'ms':>10} {'torch / this':>13}")
        for name, ms in rows:
            print(f"{name:45} {ms:10.1f} {torch_ms / ms:13.2f}")
        print(f"max |output.npy - torch| = {diff:.2e}")
        print("reproduce: /usr/bin/python3 bench/model_forward.py " +
              " ".join(f"--{k} {v}" for k, v in (("layers", a.layers), ("seq", a.seq), ("repeat", a.repeat),
                                                  ("threads", a.threads), ("mha", a.mha)))
              + (f" --cache {a.cache}" if a.cache else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
