#!/usr/bin/python3
"""A quantized GGUF file against the same model's BF16 safetensors checkpoint, 512 tokens.

  /usr/bin/python3 bench/gguf_speed.py [--type Q4_K] [--runs 5] [--threads 2]

The model: bench/analyze_ablation.py's GPT-2-small-shaped checkpoint (12 layers, d_model 768,
vocabulary 4,096; cached in the system's temporary directory). Written from it, once: a GGUF
file as llama.cpp's converter lays GPT-2 out (tests/models/test_gguf.py's convert) with every
matrix in --type (random blocks scaled to each matrix's size: the speed of reading and
dequantizing depends on the type and the shapes, not on the values), and a BF16 safetensors
copy of the checkpoint. Timed, alternating, --runs each: `mha run --model M --tokens ids.npy
--threads N --dtype D` for both files and D in float32 and bfloat16, the whole process and
run.json's forward and weight reading. Prints the medians and the ratio GGUF / BF16.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import analyze_ablation  # noqa: E402
import test_gguf  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], "<f4").reshape(t["shape"])
    return out


def write_bf16(path, tensors):
    header, chunks, at = {}, [], 0
    for name, a in tensors.items():
        u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        raw = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()  # nearest even
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--type", default="Q4_K")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mha", default=os.path.join(ROOT, "build", "bin", "mha"))
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "mha_bench_ablation"))
    a = ap.parse_args()
    model = os.path.join(a.cache, "gpt2-small-v4096")
    analyze_ablation.ensure_checkpoint(model)
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    gguf = os.path.join(a.cache, f"gpt2-small-v4096-{a.type}.gguf")
    bf16 = os.path.join(a.cache, "gpt2-small-v4096-bf16-st")
    if not os.path.exists(gguf) or not os.path.exists(bf16):
        tensors = read_safetensors(os.path.join(model, "model.safetensors"))
        meta, arrays = test_gguf.convert("gpt2", config, tensors)
        test_gguf.write_gguf(gguf, meta, arrays, a.type, np.random.default_rng(0))
        os.makedirs(bf16, exist_ok=True)
        write_bf16(os.path.join(bf16, "model.safetensors"), tensors)
        for f in ("config.json", "tokenizer.json"):
            if os.path.exists(os.path.join(model, f)):
                with open(os.path.join(model, f), "rb") as src, open(os.path.join(bf16, f), "wb") as dst:
                    dst.write(src.read())
    ids = os.path.join(a.cache, "ids512.npy")
    np.save(ids, (np.arange(512, dtype=np.int64) * 37) % config["vocab_size"])
    cases = [(f"{a.type} GGUF", gguf), ("BF16 safetensors", bf16)]
    res = {}
    for _ in range(a.runs):
        for dtype in ("float32", "bfloat16"):
            for label, path in cases:
                out = os.path.join(a.cache, "gguf_speed_out")
                t0 = time.perf_counter()
                p = subprocess.run([a.mha, "run", "--model", path, "--tokens", ids, "--threads",
                                    str(a.threads), "--dtype", dtype, "--out_dir", out, "-q"],
                                   capture_output=True, text=True)
                wall = 1e3 * (time.perf_counter() - t0)
                if p.returncode != 0:
                    sys.exit(f"gguf_speed.py: {label}: {p.stderr}")
                with open(os.path.join(out, "run.json")) as f:
                    t = json.load(f)["timings"]
                res.setdefault((label, dtype), []).append(
                    (wall, t["forward_ms"], t["read_weights_ms"]))
    print(f"GPT-2-small shapes, vocabulary 4096, 512 tokens, {a.threads} threads, "
          f"medians of {a.runs} alternating runs, ms")
    print(f"{'':18} {'dtype':9} {'process':>8} {'forward':>8} {'reading':>8} {'process / BF16':>15}")
    for dtype in ("float32", "bfloat16"):
        base = statistics.median(w for w, _, _ in res[("BF16 safetensors", dtype)])
        for label, _ in cases:
            rows = res[(label, dtype)]
            med = [statistics.median(r[i] for r in rows) for i in range(3)]
            print(f"{label:18} {dtype:9} {med[0]:8.0f} {med[1]:8.0f} {med[2]:8.0f} "
                  f"{med[0] / base:15.2f}")


if __name__ == "__main__":
    main()
