#!/usr/bin/env python3
"""Cross-check of the `mha` binary against Keras' MultiHeadAttention, computed in NumPy.

    /usr/bin/python3 tests/interop/keras_crosscheck.py path/to/mha [--keep] [--only NAME] [-v]
                                                                   [--list]

No TensorFlow needed: the reference follows the einsum equations Keras'
MultiHeadAttention builds (keras/layers/attention/multi_head_attention.py):

    query   = einsum('abc,cde->abde', query, Wq) + bq     Wq (d_model, h, key_dim)
    key     = einsum('abc,cde->abde', key,   Wk) + bk     Wk (kdim, h, key_dim)
    value   = einsum('abc,cde->abde', value, Wv) + bv     Wv (vdim, h, value_dim)
    query  *= 1 / sqrt(key_dim)
    scores  = einsum('aecd,abcd->acbe', key, query)       (B, h, T, S)
    scores += (1 - mask) * -1e9                           Softmax layer with a mask, in float32
    attn    = softmax(scores, axis=-1)
    out     = einsum('acbe,aecd->abcd', attn, value)      (B, T, h, value_dim)
    output  = einsum('abcd,cde->abe', out, Wo) + bo       Wo (h, value_dim, d_out)

attention_mask is (B, T, S) bool, True = attend; use_causal_mask ANDs it with
a lower-triangular (T, S) mask (query t sees keys s <= t). The -1e9 is added
in float32 as Keras does, so a query row with every key masked gets uniform
weights: mha runs with --masked_rows uniform.

Weights go to an .npz (or a directory of .npy files) with Keras' variable
names, with '/' and '.' separators, layer-name prefixes ("mha/query/kernel",
"multi_head_attention.query.kernel") and TensorFlow's ":0" suffix; mha runs
with --weights_format keras (or auto-detection) and `mha compare` holds
output.npy and attention.npy against the reference at rtol = atol = 1e-5
(1e-10 for the float64 case). Also checked: `mha weights convert` keras ->
native (exact reshapes) -> keras round trip (exact), and that the native file
gives bit-identical outputs.

Exit 0 with a one-line summary when all agree; 1 naming the failing cases.
"""
import argparse
import os
import re
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Failure, Harness, case_filter, check_same_arrays,  # noqa: E402
                    load_npz, save_inputs, save_npz)

import numpy as np  # noqa: E402

TOL = {"float32": 1e-5, "float64": 1e-10}
PARTS = ["query/kernel", "query/bias", "key/kernel", "key/bias", "value/kernel", "value/bias",
         "attention_output/kernel", "attention_output/bias"]


def K(name, d_model=32, h=4, key_dim=8, value_dim=None, d_out=None, B=2, T=6, S=None,
      kdim=None, vdim=None, bias=True, mode="self", mask=None, causal=False, dtype="float32",
      prefix="", sep="/", suffix="", fmt="keras", store="npz"):
    """mode: self (key = value = query), kv (Keras' default key = value), qkv.
    mask: None | partial | dead (some query rows have every key masked).
    Names are prefix + part.replace('/', sep) + suffix; store: npz | npz_fortran
    (arrays saved in Fortran order) | dir (a directory of NAME.npy)."""
    S = T if S is None else S
    if mode == "self":
        assert S == T and kdim in (None, d_model) and vdim in (None, d_model)
    return dict(name=name, d_model=d_model, h=h, key_dim=key_dim, value_dim=value_dim or key_dim,
                d_out=d_out or d_model, B=B, T=T, S=S, kdim=kdim or d_model,
                vdim=vdim or (kdim or d_model), bias=bias, mode=mode, mask=mask, causal=causal,
                dtype=dtype, prefix=prefix, sep=sep, suffix=suffix, fmt=fmt, store=store)


CASES = [
    K("self_basic", d_model=32, h=4, key_dim=8),
    K("self_h1_b1", d_model=16, h=1, key_dim=16, B=1, T=5),
    K("self_b5_kd_ne_vd", d_model=24, h=3, key_dim=5, value_dim=11, B=5, T=7),
    K("self_key_dim_not_dmodel_over_h", d_model=20, h=8, key_dim=3, value_dim=2, T=4),
    K("self_output_shape", d_model=16, h=2, key_dim=6, d_out=9, T=5),
    K("cross_kv", d_model=16, h=4, key_dim=4, B=3, T=5, S=9, kdim=12, mode="kv"),
    K("cross_qkv", d_model=16, h=3, key_dim=5, value_dim=7, d_out=9, T=6, S=10, kdim=10,
      vdim=12, mode="qkv"),
    K("cross_T_gt_S", d_model=8, h=2, key_dim=4, T=9, S=3, kdim=5, vdim=6, mode="qkv"),
    K("nobias_self", d_model=16, h=4, key_dim=4, bias=False),
    K("nobias_cross", d_model=12, h=3, key_dim=5, value_dim=3, d_out=7, T=4, S=8, kdim=9,
      vdim=6, mode="qkv", bias=False),
    K("mask_partial", d_model=16, h=2, key_dim=8, B=3, T=5, S=7, kdim=11, mode="kv",
      mask="partial"),
    K("mask_dead_rows_uniform", d_model=16, h=4, key_dim=4, value_dim=6, B=3, T=6, S=8,
      kdim=10, vdim=12, mode="qkv", mask="dead"),
    K("causal_self", d_model=32, h=4, key_dim=8, T=8, causal=True),
    K("causal_T_lt_S", d_model=16, h=2, key_dim=8, T=4, S=9, kdim=16, mode="kv", causal=True),
    K("causal_T_gt_S", d_model=16, h=2, key_dim=8, T=9, S=4, kdim=16, mode="kv", causal=True),
    K("causal_and_dead_mask", d_model=16, h=2, key_dim=4, value_dim=5, B=2, T=6, mode="self",
      mask="dead", causal=True),
    K("names_dot", d_model=16, h=2, key_dim=4, sep="."),
    K("names_prefix_slash", d_model=16, h=2, key_dim=4, T=5, S=7, kdim=6, vdim=9, mode="qkv",
      prefix="mha/"),
    K("names_prefix_dot", d_model=16, h=2, key_dim=4, T=5, S=7, kdim=6, mode="kv", sep=".",
      prefix="multi_head_attention."),
    K("names_tf_suffix", d_model=16, h=2, key_dim=4, prefix="multi_head_attention/",
      suffix=":0"),
    K("auto_detect_slash", d_model=16, h=4, key_dim=3, value_dim=5, d_out=7, fmt=None),
    K("auto_detect_prefix_dot_nobias", d_model=16, h=2, key_dim=4, T=5, S=7, kdim=6, vdim=9,
      mode="qkv", bias=False, sep=".", prefix="mha.", fmt=None),
    K("dir_dot_names", d_model=16, h=2, key_dim=4, sep=".", store="dir"),
    K("kernels_fortran_order", d_model=12, h=3, key_dim=4, value_dim=5, d_out=7, T=4, S=6,
      kdim=8, vdim=9, mode="qkv", store="npz_fortran"),
    K("float64_cross_mask", d_model=16, h=3, key_dim=5, value_dim=4, d_out=6, B=2, T=5, S=7,
      kdim=9, vdim=10, mode="qkv", mask="partial", dtype="float64"),
]


# ---------------------------------------------------------------- reference

def keras_reference(query, key, value, w, mask):
    """Keras MultiHeadAttention in float64 (the -1e9 adder in float32, as Keras
    adds it for float32 inputs). mask: (B, T, S) bool, True = attend, or None."""
    f = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    key_dim = w["query/kernel"].shape[-1]
    b = lambda n: f(w[n]) if n in w else 0.0  # noqa: E731
    q = np.einsum("abc,cde->abde", f(query), f(w["query/kernel"])) + b("query/bias")
    k = np.einsum("abc,cde->abde", f(key), f(w["key/kernel"])) + b("key/bias")
    v = np.einsum("abc,cde->abde", f(value), f(w["value/kernel"])) + b("value/bias")
    q = q * (1.0 / np.sqrt(float(key_dim)))
    scores = np.einsum("aecd,abcd->acbe", k, q)                    # (B, h, T, S)
    dead = None
    if mask is not None:
        m = mask[:, None, :, :]                                    # Keras expands the head axis
        masked32 = scores.astype(np.float32) + np.float32(-1e9)   # (1 - mask) * -1e9, float32
        scores = np.where(m, scores, masked32.astype(np.float64))
        dead = ~np.broadcast_to(m, scores.shape).any(axis=-1)      # (B, h, T)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    attn = e / e.sum(axis=-1, keepdims=True)
    if dead is not None and dead.any():
        S = scores.shape[-1]
        if not np.allclose(attn[dead], 1.0 / S, rtol=0, atol=1e-12):
            raise Failure("harness: Keras' -1e9 adder did not give uniform weights on a fully "
                          "masked row (logits too large?)")
    out = np.einsum("acbe,aecd->abcd", attn, v)                    # (B, T, h, value_dim)
    output = np.einsum("abcd,cde->abe", out, f(w["attention_output/kernel"]))
    output = output + b("attention_output/bias")
    return output, attn


# ---------------------------------------------------------------- case data

def build_case(c, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(c["dtype"])
    h, kd, vd = c["h"], c["key_dim"], c["value_dim"]
    B, T, S = c["B"], c["T"], c["S"]

    def glorot(shape, fan_in, fan_out):
        lim = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-lim, lim, shape).astype(dt)

    w = {
        "query/kernel": glorot((c["d_model"], h, kd), c["d_model"], h * kd),
        "key/kernel": glorot((c["kdim"], h, kd), c["kdim"], h * kd),
        "value/kernel": glorot((c["vdim"], h, vd), c["vdim"], h * vd),
        "attention_output/kernel": glorot((h, vd, c["d_out"]), h * vd, c["d_out"]),
    }
    if c["bias"]:  # Keras starts biases at zero, which would hide bias bugs
        w["query/bias"] = rng.uniform(-1, 1, (h, kd)).astype(dt)
        w["key/bias"] = rng.uniform(-1, 1, (h, kd)).astype(dt)
        w["value/bias"] = rng.uniform(-1, 1, (h, vd)).astype(dt)
        w["attention_output/bias"] = rng.uniform(-1, 1, (c["d_out"],)).astype(dt)

    query = rng.standard_normal((B, T, c["d_model"])).astype(dt)
    if c["mode"] == "self":
        key = value = query
    elif c["mode"] == "kv":
        key = value = rng.standard_normal((B, S, c["kdim"])).astype(dt)
    else:
        key = rng.standard_normal((B, S, c["kdim"])).astype(dt)
        value = rng.standard_normal((B, S, c["vdim"])).astype(dt)

    mask = None     # (B, T, S), True = attend, what Keras' attention_mask takes
    if c["mask"]:
        mask = rng.random((B, T, S)) >= 0.3
        if c["mask"] == "dead":
            mask[0, 1, :] = False
            mask[B - 1, T - 1, :] = False
    tril = np.tril(np.ones((T, S), dtype=bool))       # use_causal_mask: s <= t
    if mask is not None and c["mask"] != "dead":
        # Random masks keep every query row a key (fully masked rows have their own cases).
        allowed = mask & tril if c["causal"] else mask
        for b, t in zip(*np.nonzero(~allowed.any(axis=-1))):
            mask[b, t, rng.integers(0, min(S, t + 1) if c["causal"] else S)] = True
    full = mask
    if c["causal"]:
        full = np.broadcast_to(tril, (B, T, S)) if mask is None else mask & tril
    if full is not None:
        dead = ~full.any(axis=-1)
        if dead.any() != (c["mask"] == "dead"):
            raise Failure(f"harness: fully masked rows: {dead.any()}, case mask {c['mask']!r}")
    output, attn = keras_reference(query, key, value, w, full)
    return dict(w=w, query=query, key=key, value=value, mask=mask, output=output, attn=attn)


def keras_name(part, prefix, sep, suffix):
    return prefix + part.replace("/", sep) + suffix


def save_keras_weights(c, d, w):
    named = {keras_name(k, c["prefix"], c["sep"], c["suffix"]): v for k, v in w.items()}
    if c["store"] == "npz_fortran":
        named = {k: np.asfortranarray(v) for k, v in named.items()}
    if c["store"] == "dir":
        path = os.path.join(d, "weights_dir")
        os.makedirs(path, exist_ok=True)
        for k, v in named.items():
            assert "/" not in k
            np.save(os.path.join(path, k + ".npy"), v)
    else:
        path = os.path.join(d, "weights.npz")
        save_npz(path, named)
    return path


def input_args(c, d, data):
    return save_inputs(c["mode"], d, data["query"], data["key"], data["value"])


def check_case(hx, c, seed, via_native=False):
    d = hx.case_dir(c["name"])
    data = build_case(c, seed)
    p = lambda f: os.path.join(d, f)  # noqa: E731
    if via_native:
        save_npz(p("native.npz"), keras_to_native(data["w"]))
        args = ["run"] + input_args(c, d, data) + [
            "--weights", p("native.npz"), "--h", c["h"], "--d_k", c["key_dim"],
            "--d_v", c["value_dim"], "--use_bias", "true" if c["bias"] else "false"]
    else:
        wpath = save_keras_weights(c, d, data["w"])
        args = ["run"] + input_args(c, d, data) + ["--weights", wpath]
        if c["fmt"]:
            args += ["--weights_format", c["fmt"]]
    if data["mask"] is not None:
        np.save(p("mask.npy"), data["mask"])
        args += ["--mask", p("mask.npy")]
    if c["causal"]:
        args += ["--causal", "true"]
    args += ["--masked_rows", "uniform", "--save_attention", "--dtype", c["dtype"],
             "--out_dir", p("out"), "-q"]
    np.save(p("expected_output.npy"), data["output"].astype(c["dtype"]))
    np.save(p("expected_attention.npy"), data["attn"].astype(c["dtype"]))
    hx.mha(args, what="mha run")
    tol = TOL[c["dtype"]]
    for name in ("output", "attention"):
        got = p(f"out/{name}.npy")
        if not os.path.isfile(got):
            raise Failure(f"mha run wrote no {name}.npy")
        if np.load(got).dtype != np.dtype(c["dtype"]):
            raise Failure(f"{name}.npy has dtype {np.load(got).dtype}, expected {c['dtype']}")
        hx.compare(got, p(f"expected_{name}.npy"), tol, tol, f"{name} vs the Keras reference")


def describe(c):
    keys = ("d_model", "h", "key_dim", "value_dim", "d_out", "B", "T", "S", "kdim", "vdim", "bias",
            "mode", "mask", "causal", "dtype", "prefix", "sep", "suffix", "fmt", "store")
    return ", ".join(f"{k}={c[k]!r}" for k in keys)


# ---------------------------------------------------------------- round trip

def canonical(names_to_arrays, what):
    """'mha/query/kernel:0', 'multi_head_attention.query.kernel' -> 'query/kernel'."""
    out = {}
    for k, v in names_to_arrays.items():
        parts = re.split(r"[/.]", re.sub(r":\d+$", "", k))
        if len(parts) < 2:
            raise Failure(f"{what}: {k!r} is not a Keras variable name")
        name = "/".join(parts[-2:])
        if name in out:
            raise Failure(f"{what}: two arrays map to {name}")
        out[name] = v
    return out


def keras_to_native(w):
    n = {}
    for part, native in (("query", "q"), ("key", "k"), ("value", "v")):
        kern = w[f"{part}/kernel"]
        n[f"W_{native}"] = kern.reshape(kern.shape[0], -1)
        if f"{part}/bias" in w:
            n[f"b_{native}"] = w[f"{part}/bias"].reshape(-1)
    ko = w["attention_output/kernel"]
    n["W_o"] = ko.reshape(-1, ko.shape[-1])
    if "attention_output/bias" in w:
        n["b_o"] = w["attention_output/bias"]
    return n


ROUNDTRIP = [
    K("roundtrip_bias_prefix", d_model=16, h=3, key_dim=5, value_dim=7, d_out=9, T=5, S=7,
      kdim=10, vdim=12, mode="qkv", prefix="mha/"),
    K("roundtrip_nobias_dot", d_model=12, h=2, key_dim=4, value_dim=3, d_out=5, bias=False,
      sep=".", prefix="layer."),
    K("roundtrip_float64", d_model=8, h=2, key_dim=3, value_dim=3, T=4, dtype="float64"),
]


def check_roundtrip(hx, c, seed):
    d = hx.case_dir(c["name"])
    p = lambda f: os.path.join(d, f)  # noqa: E731
    data = build_case(c, seed)
    w = data["w"]
    src = save_keras_weights(c, d, w)
    hx.mha(["weights", "convert", src, "--to", "native", "-o", p("n.npz")],
           what="weights convert keras -> native")
    native = load_npz(p("n.npz"))
    check_same_arrays(native, keras_to_native(w), "keras -> native (kernels reshaped)")
    hx.mha(["weights", "convert", p("n.npz"), "--to", "keras", "--h", c["h"], "-o", p("k2.npz")],
           what="weights convert native -> keras")
    back = load_npz(p("k2.npz"))
    check_same_arrays(canonical(back, "native -> keras"), w, "keras -> native -> keras round trip")
    # The converted file is itself a valid Keras weights file, found by auto-detection.
    hx.mha(["weights", "convert", p("k2.npz"), "--to", "native", "-o", p("n2.npz")],
           what="weights convert keras (mha's own names) -> native")
    check_same_arrays(load_npz(p("n2.npz")), native, "keras -> native -> keras -> native")

    inputs = input_args(c, d, data)
    common = ["--save_attention", "--dtype", c["dtype"], "-q"]
    hx.mha(["run"] + inputs + ["--weights", src, "--weights_format", "keras",
                               "--out_dir", p("out_keras")] + common, what="mha run (keras file)")
    hx.mha(["run"] + inputs + ["--weights", p("n.npz"), "--h", c["h"],
                               "--out_dir", p("out_native")] + common, what="mha run (native file)")
    for f in ("output.npy", "attention.npy"):
        a, b = np.load(p(f"out_native/{f}")), np.load(p(f"out_keras/{f}"))
        if a.shape != b.shape or not np.array_equal(a, b):
            raise Failure(f"{f} from the converted native file differs from the keras file's")
    tol = TOL[c["dtype"]]
    np.save(p("expected_output.npy"), data["output"].astype(c["dtype"]))
    hx.compare(p("out_keras/output.npy"), p("expected_output.npy"), tol, tol,
               "output vs the Keras reference")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--only", action="append", help="run only this case (repeatable)")
    ap.add_argument("--numpy-compare", action="store_true",
                    help="diagnostic: compare with numpy.allclose only, not `mha compare`")
    ap.add_argument("--via-native", action="store_true",
                    help="diagnostic: weights converted to the native layout in Python")
    ap.add_argument("--list", action="store_true", help="list the case names")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    names = [c["name"] for c in CASES] + [c["name"] for c in ROUNDTRIP]
    want = case_filter(a, names)
    if want is None:
        return 0

    start = time.time()
    hx = Harness(a.binary, keep=a.keep, verbose=a.verbose, prefix="mha_keras_",
                 numpy_compare=a.numpy_compare)
    for i, c in enumerate(CASES):
        if want(c["name"]):
            hx.run_case(c["name"], lambda c=c, i=i: check_case(hx, c, 3000 + i, a.via_native),
                        describe(c))
    for j, c in enumerate(ROUNDTRIP):
        if want(c["name"]) and not a.via_native:
            hx.run_case(c["name"], lambda c=c, j=j: check_roundtrip(hx, c, 4000 + j), describe(c))
    return hx.finish("keras_crosscheck" + (" (via native)" if a.via_native else ""),
                     time.time() - start)


if __name__ == "__main__":
    sys.exit(main())
