#!/usr/bin/env python3
"""The attention variants of `mha run` against a NumPy transcription of their
definitions in the layers that have them.

    /usr/bin/python3 tests/interop/variants_crosscheck.py path/to/mha [--only NAME] [--keep] [-v]

The reference follows ONNX Attention (opset 23/24) and PyTorch SDPA where they
define a variant, written with NumPy only:
  kv_heads  ONNX kv_num_heads / SDPA enable_gqa: K and V have kv_heads heads,
            each repeated h / kv_heads times (np.repeat on the head axis), so
            query head i reads key/value head i // (h / kv_heads);
  softcap   ONNX softcap / Gemma 2: c * tanh(QK^T scale / c), before any mask
            or bias is added;
  window    sliding window of width w: key s is visible from query t when
            |t' - s| < w, t' = t (or t + S - T with bottom-right causality);
            with causality, the w keys t'-w+1 .. t' (Mistral's sliding_window);
  alibi     -m_i |t' - s| added to head i's logits, slopes m_i from the ALiBi
            paper's recipe (2^(-8i/h) for h a power of two);
  bias      a float array broadcast (NumPy rules) to (B, h, T, S), added to the
            logits like ONNX's float attn_mask (T5-style relative biases).
Each case writes inputs and native weights, runs the binary with save_attention
and compares output.npy and attention.npy (rtol 1e-5 float32 / 1e-10 float64).
The fused path (no attention written) is also run and compared to the same
output. Exit 0 when every case agrees.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Harness, save_npz  # noqa: E402


def alibi_slopes(h):
    """The ALiBi paper's get_slopes."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(np.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if np.log2(h).is_integer():
        return power_of_2(h)
    closest = 2 ** int(np.floor(np.log2(h)))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: h - closest]


def reference(xq, xk, xv, w, c):
    """Output (B,T,d_out) and attention (B,h,T,S) in float64."""
    B, T, _ = xq.shape
    S = xk.shape[1]
    h, d_k, d_v = c["h"], c["d_k"], c["d_v"]
    kvh = c.get("kv_heads", h)
    Q = (xq @ w["W_q"] + w["b_q"]).reshape(B, T, h, d_k).transpose(0, 2, 1, 3)
    K = (xk @ w["W_k"] + w["b_k"]).reshape(B, S, kvh, d_k).transpose(0, 2, 1, 3)
    V = (xv @ w["W_v"] + w["b_v"]).reshape(B, S, kvh, d_v).transpose(0, 2, 1, 3)
    K = np.repeat(K, h // kvh, axis=1)  # [k0, k0, k1, k1, ...]
    V = np.repeat(V, h // kvh, axis=1)
    logits = np.einsum("bhtd,bhsd->bhts", Q, K) / np.sqrt(d_k)
    if "softcap" in c:
        logits = c["softcap"] * np.tanh(logits / c["softcap"])
    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    causal = c.get("causal", False)
    ta = t + (S - T) if causal == "bottom-right" else t
    visible = np.ones((T, S), dtype=bool)
    if causal:
        visible &= s <= ta
    if "window" in c:
        visible &= np.abs(ta - s) < c["window"]
    if c.get("alibi"):
        m = np.array(alibi_slopes(h))
        logits = logits - m[None, :, None, None] * np.abs(ta - s)[None, None]
    if "bias_array" in c:
        logits = logits + c["bias_array"]
    logits = np.where(visible, logits, -np.inf)
    dead = np.all(logits == -np.inf, axis=-1)
    peak = np.where(dead, 0.0, logits.max(axis=-1))
    e = np.exp(logits - peak[..., None])
    A = e / np.where(dead, 1.0, e.sum(axis=-1))[..., None]
    A[dead] = 0.0  # masked_rows "zero"
    context = np.einsum("bhts,bhsd->bthd", A, V).reshape(B, T, h * d_v)
    return context @ w["W_o"] + w["b_o"], A


CASES = [
    {"name": "gqa", "h": 8, "kv_heads": 2},
    {"name": "mqa_causal", "h": 4, "kv_heads": 1, "causal": True},
    {"name": "gqa_cross", "h": 6, "kv_heads": 3, "S": 11, "d_v": 5},
    {"name": "softcap", "h": 4, "softcap": 2.0, "logit_scale": 4.0},
    {"name": "softcap_causal_f64", "h": 2, "softcap": 1.5, "causal": True, "dtype": "float64",
     "logit_scale": 4.0},
    {"name": "window", "h": 2, "window": 3},
    {"name": "window_causal", "h": 4, "window": 4, "causal": True},
    {"name": "window_bottom_right", "h": 2, "window": 2, "causal": "bottom-right", "S": 13},
    {"name": "alibi_h8", "h": 8, "alibi": True, "causal": True},
    {"name": "alibi_h6", "h": 6, "alibi": True},
    {"name": "alibi_h12_window", "h": 12, "alibi": True, "window": 5, "causal": True},
    {"name": "bias_hts", "h": 4, "bias_shape": "hTS"},
    {"name": "bias_1h1s", "h": 4, "bias_shape": "1h1S", "causal": True},
    {"name": "bias_bhts_f64", "h": 2, "bias_shape": "BhTS", "dtype": "float64"},
    {"name": "everything", "h": 8, "kv_heads": 4, "softcap": 3.0, "window": 6, "alibi": True,
     "bias_shape": "hTS", "causal": True, "logit_scale": 3.0},
]


def check_case(hx, c, seed):
    rng = np.random.default_rng(seed)
    d = hx.case_dir(c["name"])
    B, T = 3, 9
    S = c.get("S", T)
    h, kvh = c["h"], c.get("kv_heads", c["h"])
    d_model, d_k = 16, c.get("d_k", 4)
    d_v = c.get("d_v", d_k)
    c = dict(c, d_k=d_k, d_v=d_v)
    dtype = c.get("dtype", "float32")
    npdt = np.float32 if dtype == "float32" else np.float64
    # logit_scale widens the logits so that soft-capping bites.
    xq = (rng.standard_normal((B, T, d_model)) * c.get("logit_scale", 1.0)).astype(npdt)
    xk = rng.standard_normal((B, S, d_model)).astype(npdt)
    xv = rng.standard_normal((B, S, d_model)).astype(npdt)
    w = {"W_q": rng.standard_normal((d_model, h * d_k)) / 4,
         "b_q": rng.standard_normal(h * d_k) / 4,
         "W_k": rng.standard_normal((d_model, kvh * d_k)) / 4,
         "b_k": rng.standard_normal(kvh * d_k) / 4,
         "W_v": rng.standard_normal((d_model, kvh * d_v)) / 4,
         "b_v": rng.standard_normal(kvh * d_v) / 4,
         "W_o": rng.standard_normal((h * d_v, 12)) / 4,
         "b_o": rng.standard_normal(12) / 4}
    w = {k: v.astype(npdt) for k, v in w.items()}
    save_npz(os.path.join(d, "weights.npz"), w)
    for name, x in (("query", xq), ("key", xk), ("value", xv)):
        np.save(os.path.join(d, name + ".npy"), x)
    config = {"h": h, "dtype": dtype, "query": "query.npy", "key": "key.npy",
              "value": "value.npy", "weights": "weights.npz", "save_attention": True}
    for key in ("kv_heads", "softcap", "window", "alibi", "causal"):
        if key in c:
            config[key] = c[key]
    if "bias_shape" in c:
        sizes = {"B": B, "h": h, "T": T, "S": S, "1": 1}
        shape = tuple(sizes[ch] for ch in c["bias_shape"])
        bias = rng.uniform(-2, 2, size=shape).astype(npdt)
        np.save(os.path.join(d, "bias.npy"), bias)
        config["bias"] = "bias.npy"
        c = dict(c, bias_array=bias.astype(np.float64))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    out, A = reference(*(x.astype(np.float64) for x in (xq, xk, xv)),
                       {k: v.astype(np.float64) for k, v in w.items()}, c)
    np.save(os.path.join(d, "want_output.npy"), out)
    np.save(os.path.join(d, "want_attention.npy"), A)
    tol = 1e-5 if dtype == "float32" else 1e-10
    cwd = os.getcwd()
    os.chdir(d)
    try:
        hx.mha(["run", "-q", "--config", "config.json", "--out_dir", "exact"])
        hx.mha(["run", "-q", "--config", "config.json", "--out_dir", "fused",
                "--save_attention", "false"])
    finally:
        os.chdir(cwd)
    hx.compare(os.path.join(d, "exact", "output.npy"), os.path.join(d, "want_output.npy"),
               tol, tol, "output (exact path)")
    hx.compare(os.path.join(d, "exact", "attention.npy"), os.path.join(d, "want_attention.npy"),
               tol, tol, "attention")
    hx.compare(os.path.join(d, "fused", "output.npy"), os.path.join(d, "want_output.npy"),
               tol, tol, "output (fused path)")
    report = json.load(open(os.path.join(d, "exact", "run.json")))
    for key in ("kv_heads", "softcap", "window", "alibi"):
        if key in c and report["config"][key] != c[key]:
            raise AssertionError(f"run.json config.{key} = {report['config'][key]!r}, "
                                 f"expected {c[key]!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary")
    p.add_argument("--only", action="append")
    p.add_argument("--keep", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args()
    hx = Harness(a.binary, keep=a.keep, verbose=a.verbose, prefix="mha_variants_")
    start = time.time()
    for i, c in enumerate(CASES):
        if a.only and c["name"] not in a.only:
            continue
        hx.run_case(c["name"], lambda c=c, i=i: check_case(hx, c, 7000 + i))
    return hx.finish("variants_crosscheck", time.time() - start)


if __name__ == "__main__":
    sys.exit(main())
