#!/usr/bin/env python3
"""Golden files for `mha run`: small fixed problems whose expected outputs come
from an independent NumPy implementation of docs/config.md's math, in float64.

    /usr/bin/python3 tests/golden/make_golden.py          # (re)write tests/golden/<case>/
    /usr/bin/python3 tests/golden/make_golden.py --check  # regenerate in memory, compare

Each case directory holds the inputs exactly as the binary reads them
(query.npy, maybe key.npy / value.npy / mask.npy), the weights (weights.npz,
or a weights/ directory of NAME.npy), config.json (paths relative to the
repository root, no out_dir: tests/test_golden.cpp passes --out_dir and
--save_attention), and expected_output.npy / expected_attention.npy (float64).

For float32 cases every input is rounded to float32 and saved as float32 first;
the reference is then computed in float64 from those float32 values, so the
only difference left between binary and reference is the binary's own float32
arithmetic.

The reference below loops over heads and slices the weight columns exactly as
the formulas say; tests/numpy_crosscheck.py has a second, vectorised (einsum)
implementation, so the two also check each other.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REL = "tests/golden"  # HERE relative to the repository root, as configs name it


# ---------------------------------------------------------------- reference

def reference(xq, xk, xv, w, h, d_k, d_v, scale, allowed, float_mask, masked_rows):
    """Multi-head attention in float64.

    xq (B,T,d_model), xk (B,S,kdim), xv (B,S,vdim); w: dict of native weights
    (biases may be missing); allowed: bool (B,h,T,S), False = masked (-inf);
    float_mask: None or (B|1, h|1, T, S) added to the scaled logits.
    Returns output (B,T,d_out) and attention (B,h,T,S).
    """
    xq, xk, xv = (np.asarray(x, np.float64) for x in (xq, xk, xv))
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    B, T, _ = xq.shape
    S = xk.shape[1]
    zeros = lambda n: np.zeros(n)
    b_q = w.get("b_q", zeros(h * d_k))
    b_k = w.get("b_k", zeros(h * d_k))
    b_v = w.get("b_v", zeros(h * d_v))
    b_o = w.get("b_o", zeros(w["W_o"].shape[1]))
    attention = np.zeros((B, h, T, S))
    heads = []
    for i in range(h):
        qk = slice(i * d_k, (i + 1) * d_k)
        vv = slice(i * d_v, (i + 1) * d_v)
        Q = xq @ w["W_q"][:, qk] + b_q[qk]  # (B,T,d_k)
        K = xk @ w["W_k"][:, qk] + b_k[qk]  # (B,S,d_k)
        V = xv @ w["W_v"][:, vv] + b_v[vv]  # (B,S,d_v)
        logits = scale * (Q @ K.transpose(0, 2, 1))  # (B,T,S)
        if float_mask is not None:
            logits = logits + float_mask[:, min(i, float_mask.shape[1] - 1)]
        logits = np.where(allowed[:, i], logits, -np.inf)
        dead = np.all(logits == -np.inf, axis=-1)  # (B,T): no key to attend to
        row_max = np.where(dead, 0.0, logits.max(axis=-1))
        e = np.exp(logits - row_max[..., None])
        A = e / np.where(dead, 1.0, e.sum(axis=-1))[..., None]
        fill = {"zero": 0.0, "uniform": 1.0 / S, "nan": np.nan}[masked_rows]
        A[dead] = fill
        attention[:, i] = A
        heads.append(A @ V)  # (B,T,d_v)
    context = np.concatenate(heads, axis=-1)  # (B,T,h*d_v), head i in columns i*d_v...
    output = context @ w["W_o"] + b_o
    return output, attention


def allowed_mask(B, h, T, S, causal="none", key_lengths=None, bool_mask=None):
    """(B,h,T,S) bool: True = query t may attend to key s."""
    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    a = np.ones((B, h, T, S), bool)
    if causal == "top-left":
        a &= s <= t
    elif causal == "bottom-right":
        a &= s <= t + S - T
    if key_lengths is not None:
        a &= np.arange(S)[None, None, None, :] < np.asarray(key_lengths)[:, None, None, None]
    if bool_mask is not None:
        m = np.asarray(bool_mask, bool)
        if m.ndim == 2:
            m = m[None, None]
        elif m.ndim == 3:
            m = m[:, None]
        a &= m
    return a


def as_4d(mask):
    mask = np.asarray(mask, np.float64)
    return mask[None, None] if mask.ndim == 2 else mask[:, None] if mask.ndim == 3 else mask


# ---------------------------------------------------------------- cases

def glorot(rng, rows, cols):
    limit = np.sqrt(6.0 / (rows + cols))
    return rng.uniform(-limit, limit, size=(rows, cols))


def make_weights(rng, d_model, kdim, vdim, h, d_k, d_v, d_out, use_bias):
    w = {
        "W_q": glorot(rng, d_model, h * d_k),
        "W_k": glorot(rng, kdim, h * d_k),
        "W_v": glorot(rng, vdim, h * d_v),
        "W_o": glorot(rng, h * d_v, d_out),
    }
    if use_bias:
        w["b_q"] = rng.uniform(-0.5, 0.5, h * d_k)
        w["b_k"] = rng.uniform(-0.5, 0.5, h * d_k)
        w["b_v"] = rng.uniform(-0.5, 0.5, h * d_v)
        w["b_o"] = rng.uniform(-0.5, 0.5, d_out)
    return w


def case_self_bias(rng):
    """The paper's layer, small: self-attention, h = 4, d_model = 32, non-zero biases."""
    B, T, h, d_model = 2, 6, 4, 32
    d_k = d_v = d_model // h
    files = {"query": rng.standard_normal((B, T, d_model))}
    w = make_weights(rng, d_model, d_model, d_model, h, d_k, d_v, d_model, True)
    config = {"h": h, "dtype": "float32", "query": "query.npy", "weights": "weights.npz"}
    ref = dict(h=h, d_k=d_k, d_v=d_v, scale=1 / np.sqrt(d_k), masked_rows="zero")
    return config, files, w, ref, {}


def case_cross(rng):
    """Cross-attention: T != S, d_k != d_v, kdim != vdim != d_model, d_out != d_model,
    separate key and value files, weights as a directory, an explicit scale."""
    B, T, S, h, d_k, d_v = 2, 5, 7, 3, 4, 6
    d_model, kdim, vdim, d_out = 10, 8, 12, 9
    files = {
        "query": rng.standard_normal((B, T, d_model)),
        "key": rng.standard_normal((B, S, kdim)),
        "value": rng.standard_normal((B, S, vdim)),
    }
    w = make_weights(rng, d_model, kdim, vdim, h, d_k, d_v, d_out, True)
    config = {"h": h, "d_k": d_k, "d_v": d_v, "d_out": d_out, "scale": 0.375,
              "query": "query.npy", "key": "key.npy", "value": "value.npy",
              "weights": "weights"}
    ref = dict(h=h, d_k=d_k, d_v=d_v, scale=0.375, masked_rows="zero")
    return config, files, w, ref, {"weights_as_dir": True}


def case_causal_key_lengths(rng):
    """Top-left causal self-attention with padding; key length 0 gives fully
    masked rows (masked_rows zero: weights 0, that head's output row 0)."""
    B, T, h, d_model = 3, 5, 2, 8
    d_k = d_v = d_model // h
    key_lengths = [5, 3, 0]
    files = {"query": rng.standard_normal((B, T, d_model))}
    w = make_weights(rng, d_model, d_model, d_model, h, d_k, d_v, d_model, False)
    config = {"h": h, "use_bias": False, "causal": True, "key_lengths": key_lengths,
              "masked_rows": "zero", "query": "query.npy", "weights": "weights.npz"}
    ref = dict(h=h, d_k=d_k, d_v=d_v, scale=1 / np.sqrt(d_k), masked_rows="zero",
               causal="top-left", key_lengths=key_lengths)
    return config, files, w, ref, {}


def case_bottom_right_float_mask(rng):
    """Bottom-right causal with T < S (query t sees keys s <= t + S - T) plus an
    additive float mask (B,T,S) with finite values and -inf entries; query and
    value only, so key = value."""
    B, T, S, h, d_k, d_v = 2, 3, 6, 2, 5, 3
    d_model, kv = 6, 7
    float_mask = rng.normal(0.0, 1.5, size=(B, T, S))
    float_mask[rng.random((B, T, S)) < 0.2] = -np.inf
    float_mask[0, 1, :] = -np.inf  # one fully masked row by the float mask alone
    files = {
        "query": rng.standard_normal((B, T, d_model)),
        "value": rng.standard_normal((B, S, kv)),
        "mask": float_mask,
    }
    w = make_weights(rng, d_model, kv, kv, h, d_k, d_v, d_model, True)
    config = {"h": h, "d_k": d_k, "d_v": d_v, "causal": "bottom-right", "masked_rows": "zero",
              "query": "query.npy", "value": "value.npy", "mask": "mask.npy",
              "weights": "weights.npz"}
    ref = dict(h=h, d_k=d_k, d_v=d_v, scale=1 / np.sqrt(d_k), masked_rows="zero",
               causal="bottom-right", float_mask=True)
    return config, files, w, ref, {"key_is_value": True}


def case_bool_mask_uniform(rng):
    """A bool (1, h, T, S) mask, different for every head and broadcast over the
    batch, with one fully masked row (masked_rows uniform: 1/S on every key)."""
    B, T, S, h, d_k, d_v = 2, 4, 5, 3, 2, 4
    d_model = 6
    m = rng.random((1, h, T, S)) < 0.6
    m[:, :, :, 0] |= rng.random((1, h, T)) < 0.5
    m[0, 1, 2, :] = False  # head 1, query 2: nothing to attend to
    m[0, 0, 2, :] = True  # while head 0 sees every key for that query
    files = {
        "query": rng.standard_normal((B, T, d_model)),
        "key": rng.standard_normal((B, S, d_model)),
        "value": rng.standard_normal((B, S, d_model)),
        "mask": m,
    }
    w = make_weights(rng, d_model, d_model, d_model, h, d_k, d_v, d_model, True)
    config = {"h": h, "d_k": d_k, "masked_rows": "uniform", "query": "query.npy",
              "key": "key.npy", "value": "value.npy", "mask": "mask.npy",
              "weights": "weights.npz"}
    ref = dict(h=h, d_k=d_k, d_v=d_v, scale=1 / np.sqrt(d_k), masked_rows="uniform",
               bool_mask=True)
    return config, files, w, ref, {}


def case_float64(rng):
    """float64 end to end: 2-D inputs (B = 1), cross-attention with T > S,
    bottom-right causal (the first T - S queries see no key: masked_rows nan),
    no biases, attention averaged over heads."""
    T, S, h, d_k, d_v = 6, 4, 3, 3, 5
    d_model, kdim, vdim, d_out = 7, 5, 4, 6
    files = {
        "query": rng.standard_normal((T, d_model)),
        "key": rng.standard_normal((S, kdim)),
        "value": rng.standard_normal((S, vdim)),
    }
    w = make_weights(rng, d_model, kdim, vdim, h, d_k, d_v, d_out, False)
    config = {"h": h, "dtype": "float64", "use_bias": False, "causal": "bottom-right",
              "masked_rows": "nan", "average_heads": True, "query": "query.npy",
              "key": "key.npy", "value": "value.npy", "weights": "weights.npz"}
    ref = dict(h=h, d_k=d_k, d_v=d_v, scale=1 / np.sqrt(d_k), masked_rows="nan",
               causal="bottom-right", average_heads=True)
    return config, files, w, ref, {}


CASES = {
    "self_bias": case_self_bias,
    "cross": case_cross,
    "causal_key_lengths": case_causal_key_lengths,
    "bottom_right_float_mask": case_bottom_right_float_mask,
    "bool_mask_uniform": case_bool_mask_uniform,
    "float64": case_float64,
}


def build(name, seed):
    """Returns {relative file name: array or bytes} for case `name`."""
    rng = np.random.default_rng(seed)
    config, files, w, ref, opts = CASES[name](rng)
    dtype = np.float64 if config.get("dtype") == "float64" else np.float32
    # Round everything to the compute dtype first: these are the values the binary sees.
    stored = {}
    for role, a in files.items():
        stored[role] = a if a.dtype == bool else a.astype(dtype)
    w = {k: v.astype(dtype) for k, v in w.items()}

    out = {}
    for role, a in stored.items():
        out[role + ".npy"] = a
    if opts.get("weights_as_dir"):
        for k, v in w.items():
            out["weights/" + k + ".npy"] = v
    else:
        out["weights.npz"] = w

    xq = stored["query"]
    if xq.ndim == 2:
        xq = xq[None]
    xk = stored.get("key", stored.get("value", xq))
    xv = stored.get("value", xk)
    xk = xk[None] if xk.ndim == 2 else xk
    xv = xv[None] if xv.ndim == 2 else xv
    B, T, S, h = xq.shape[0], xq.shape[1], xk.shape[1], ref["h"]
    allowed = allowed_mask(B, h, T, S, ref.get("causal", "none"), ref.get("key_lengths"),
                           stored["mask"] if ref.get("bool_mask") else None)
    float_mask = as_4d(stored["mask"]) if ref.get("float_mask") else None
    output, attention = reference(xq, xk, xv, w, h, ref["d_k"], ref["d_v"], ref["scale"],
                                  allowed, float_mask, ref["masked_rows"])
    if ref.get("average_heads"):
        attention = attention.mean(axis=1)
    out["expected_output.npy"] = output
    out["expected_attention.npy"] = attention

    # Paths relative to the repository root, where the test runs the binary.
    for key in ("query", "key", "value", "mask", "weights"):
        if key in config:
            config[key] = f"{REL}/{name}/{config[key]}"
    out["config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    return out


def write_case(directory, files):
    if os.path.isdir(directory):
        shutil.rmtree(directory)
    for rel, content in files.items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(content, bytes):
            with open(path, "wb") as f:
                f.write(content)
        elif isinstance(content, dict):
            np.savez(path, **content)
        else:
            np.save(path, content)


def load_case(directory):
    files = {}
    for root, _, names in os.walk(directory):
        for n in names:
            path = os.path.join(root, n)
            rel = os.path.relpath(path, directory)
            if n.endswith(".npz"):
                with np.load(path) as z:
                    files[rel] = {k: z[k] for k in z.files}
            elif n.endswith(".npy"):
                files[rel] = np.load(path)
            else:
                with open(path, "rb") as f:
                    files[rel] = f.read()
    return files


def same(a, b, exact=True):
    if isinstance(a, bytes) or isinstance(b, bytes):
        return a == b
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same(a[k], b[k], exact) for k in a))
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if exact:
        return np.array_equal(a, b, equal_nan=True)
    # Computed results may differ in the last bit between machines (NumPy picks
    # SIMD loops and libm's exp per CPU); inputs must match exactly.
    return np.allclose(a, b, rtol=1e-13, atol=1e-15, equal_nan=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="compare the files on disk with freshly generated ones, write nothing")
    args = p.parse_args()
    failures = 0
    for index, name in enumerate(CASES):
        files = build(name, seed=20240 + index)
        directory = os.path.join(HERE, name)
        if args.check:
            on_disk = load_case(directory) if os.path.isdir(directory) else {}
            bad = sorted(set(files) ^ set(on_disk)) + sorted(
                k for k in set(files) & set(on_disk)
                if not same(files[k], on_disk[k], exact=not k.startswith("expected_")))
            if bad:
                failures += 1
                print(f"{name}: differs from make_golden.py: {', '.join(bad)}")
        else:
            write_case(directory, files)
            size = sum(os.path.getsize(os.path.join(r, n))
                       for r, _, ns in os.walk(directory) for n in ns)
            print(f"wrote {REL}/{name}/ ({len(files)} files, {size} bytes)")
    if args.check:
        if failures:
            print(f"{failures} golden case(s) out of date: rerun tests/golden/make_golden.py")
            return 1
        print(f"all {len(CASES)} golden cases match make_golden.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
