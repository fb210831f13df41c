#!/usr/bin/env python3
"""Cross-check of `mha run --attention_axes` against Keras' MultiHeadAttention, computed in NumPy.

    /usr/bin/python3 tests/interop/keras_axes_crosscheck.py path/to/mha [--keep] [--only NAME]
                                                                        [-v] [--list]

No TensorFlow needed: for each query rank and attention_axes the reference
builds the einsum equations Keras builds (keras/layers/attention/
multi_head_attention.py: _build_proj_equation, _build_attention_equation) and
evaluates them in float64. For a query of rank 5 and attention_axes (2, 3):

    query   = einsum('abcde,efg->abcdfg', query, Wq) + bq   Wq (d_model, h, key_dim)
    key     = einsum('abcde,efg->abcdfg', key, Wk) + bk     (value likewise, value_dim)
    query  *= 1 / sqrt(key_dim)
    scores  = einsum('abhief,abcdef->abecdhi', key, query)  (B, 5, h, 3, 4, S_2, S_3)
    attn    = softmax(scores, axis=(-2, -1))                 jointly over the key's attention axes
    out     = einsum('abecdhi,abhief->abcdef', attn, value)
    output  = einsum('abcdef,efg->abcdg', out, Wo) + bo     Wo (h, value_dim, d_out)

Keras normalizes a negative axis a to a + rank(query); the non-attention axes
(axis 0 first) are batch axes in ascending order, followed by the heads; the
query's and the key's attention axes appear in the scores in the order given.
output.npy and attention.npy (save_attention: Keras' scores layout) are held
against the reference with `mha compare` at rtol = atol = 1e-5 (1e-10 in
float64). Also checked: rank-3 inputs with attention_axes [1] and [-2] give
bytes identical to a run without it; save_inputs writes the N-D inputs back
unchanged; causal, window and ALiBi along a single attention axis equal the
same run on inputs flattened by NumPy; `mha sweep` over attention_axes on one
set of files; and bad combinations exit 2 with a one-line message.

Exit 0 with a one-line summary when all agree; 1 naming the failing cases.
"""
import argparse
import csv
import json
import os
import string
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Failure, Harness, case_filter, save_inputs, save_npz  # noqa: E402

import numpy as np  # noqa: E402

TOL = {"float32": 1e-5, "float64": 1e-10}
LETTERS = string.ascii_lowercase


# ---------------------------------------------------------------- Keras' equations

def proj_equation(free_dims, bound_dims, output_dims):
    """The EinsumDense equation of Keras' projections: free input axes kept,
    bound axes contracted with the kernel, output axes appended."""
    free = LETTERS[:free_dims]
    bound = LETTERS[free_dims:free_dims + bound_dims]
    out = LETTERS[free_dims + bound_dims:free_dims + bound_dims + output_dims]
    return f"{free}{bound},{bound}{out}->{free}{out}"


def attention_equations(rank, attn_axes):
    """Keras' dot-product and combine equations for projected tensors of
    `rank` (the query's rank + 1: ..., heads, channels)."""
    target = LETTERS[:rank]
    batch = [i for i in range(rank) if i not in attn_axes and i != rank - 1]
    source, extra = "", rank
    for i in range(rank):
        if i in batch or i == rank - 1:
            source += target[i]
        else:
            source += LETTERS[extra]
            extra += 1
    product = ("".join(target[i] for i in batch) + "".join(target[i] for i in attn_axes)
               + "".join(source[i] for i in attn_axes))
    return f"{source},{target}->{product}", f"{product},{source}->{target}"


def keras_axes(query_rank, axes):
    """attention_axes as Keras' _build_attention normalizes them: (rank - 1) + a
    for the projected rank query_rank + 1."""
    return tuple(a if a >= 0 else query_rank + a for a in axes)


def keras_reference(query, key, value, w, axes, causal=False):
    """Output and attention scores of Keras' MultiHeadAttention(attention_axes=axes),
    in float64. causal: a lower-triangular mask along the single attention axis
    (not a Keras option: this tool's causal under one attention axis)."""
    f = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    b = lambda n: f(w[n]) if n in w else 0.0  # noqa: E731
    r = query.ndim
    attn_axes = keras_axes(r, axes)
    proj_in = proj_equation(r - 1, 1, 2)
    q = np.einsum(proj_in, f(query), f(w["query/kernel"])) + b("query/bias")
    k = np.einsum(proj_in, f(key), f(w["key/kernel"])) + b("key/bias")
    v = np.einsum(proj_in, f(value), f(w["value/kernel"])) + b("value/bias")
    q = q * (1.0 / np.sqrt(float(w["query/kernel"].shape[-1])))
    dot, combine = attention_equations(r + 1, attn_axes)
    scores = np.einsum(dot, k, q)
    n = len(attn_axes)
    norm = tuple(range(scores.ndim - n, scores.ndim))
    if causal:
        assert n == 1
        T, S = scores.shape[-2], scores.shape[-1]
        scores = np.where(np.tril(np.ones((T, S), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=norm, keepdims=True))
    attn = e / e.sum(axis=norm, keepdims=True)
    out = np.einsum(combine, attn, v)
    output = np.einsum(proj_equation(r - 1, 2, 1), out, f(w["attention_output/kernel"]))
    return output + b("attention_output/bias"), attn


# ---------------------------------------------------------------- cases

def A(name, query, axes, h=4, key_dim=8, value_dim=None, d_out=None, key=None, value=None,
      mode="self", bias=True, dtype="float32", average=False, attention=True, extra=()):
    """query: the query's shape (features last). mode: self (key = value = query),
    kv (a value file used as key too, shape `value`), qkv (key and value files).
    key/value: their shapes. attention: save_attention (else the fused path runs).
    extra: more flags for mha run."""
    return dict(name=name, query=tuple(query), axes=list(axes), h=h, key_dim=key_dim,
                value_dim=value_dim or key_dim, d_out=d_out or query[-1], key=key, value=value,
                mode=mode, bias=bias, dtype=dtype, average=average, attention=attention,
                extra=list(extra))


CASES = [
    A("issue_example_axes_2_3", (2, 5, 3, 4, 16), [2, 3]),
    A("rank4_axis_1", (2, 3, 4, 8), [1], h=2, key_dim=4),
    A("rank4_axis_2", (2, 3, 4, 8), [2], h=2, key_dim=4),
    A("rank5_axes_1_3", (2, 4, 3, 2, 8), [1, 3], h=2, key_dim=3, value_dim=5),
    A("rank5_axes_3_1_order_given", (2, 4, 3, 2, 8), [3, 1], h=2, key_dim=3),
    A("negative_axes_-4_-2", (2, 4, 3, 2, 8), [-4, -2], h=2, key_dim=4),
    A("negative_axis_-2_rank4", (2, 3, 4, 8), [-2], h=4, key_dim=2),
    A("negative_mixed_3_-4", (2, 4, 3, 2, 8), [3, -4], h=1, key_dim=8),
    A("rank6_axes_1_4", (2, 2, 3, 2, 3, 6), [1, 4], h=3, key_dim=2, value_dim=3, d_out=5),
    A("all_axes_rank5", (1, 3, 2, 4, 8), [1, 2, 3], h=2, key_dim=4),
    A("cross_kv_axes_2_3", (2, 5, 3, 4, 16), [2, 3], value=(2, 5, 6, 2, 12), mode="kv"),
    A("cross_qkv_kd_ne_vd", (2, 3, 4, 2, 10), [2], h=3, key_dim=5, value_dim=7, d_out=9,
      key=(2, 3, 5, 2, 6), value=(2, 3, 5, 2, 11), mode="qkv"),
    A("cross_qkv_axes_1_3_S_gt_T", (2, 2, 3, 2, 8), [1, 3], h=2, key_dim=3, value_dim=4,
      key=(2, 5, 3, 3, 7), value=(2, 5, 3, 3, 9), mode="qkv"),
    A("nobias_rank4", (3, 2, 5, 8), [2], h=2, key_dim=4, bias=False),
    A("float64_axes_1_2", (2, 3, 2, 4, 6), [1, 2], h=2, key_dim=3, value_dim=2, d_out=4,
      dtype="float64"),
    A("float64_cross", (2, 2, 3, 4, 6), [3, 1], h=2, key_dim=3, key=(2, 4, 3, 2, 5),
      value=(2, 4, 3, 2, 7), mode="qkv", dtype="float64"),
    A("average_heads", (2, 5, 3, 4, 16), [2, 3], average=True),
    A("fused_path_no_attention", (2, 5, 3, 4, 16), [3, 2], attention=False),
    A("causal_single_axis", (2, 3, 6, 8), [2], h=2, key_dim=4, extra=["--causal", "true"]),
]


def glorot(rng, shape, fan_in, fan_out, dt):
    lim = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, shape).astype(dt)


def build_case(c, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(c["dtype"])
    h, kd, vd = c["h"], c["key_dim"], c["value_dim"]
    query = rng.standard_normal(c["query"]).astype(dt)
    if c["mode"] == "self":
        key = value = query
    elif c["mode"] == "kv":
        key = value = rng.standard_normal(c["value"]).astype(dt)
    else:
        key = rng.standard_normal(c["key"]).astype(dt)
        value = rng.standard_normal(c["value"]).astype(dt)
    d_model, kdim, vdim = query.shape[-1], key.shape[-1], value.shape[-1]
    w = {
        "query/kernel": glorot(rng, (d_model, h, kd), d_model, h * kd, dt),
        "key/kernel": glorot(rng, (kdim, h, kd), kdim, h * kd, dt),
        "value/kernel": glorot(rng, (vdim, h, vd), vdim, h * vd, dt),
        "attention_output/kernel": glorot(rng, (h, vd, c["d_out"]), h * vd, c["d_out"], dt),
    }
    if c["bias"]:  # Keras starts biases at zero, which would hide bias bugs
        w["query/bias"] = rng.uniform(-1, 1, (h, kd)).astype(dt)
        w["key/bias"] = rng.uniform(-1, 1, (h, kd)).astype(dt)
        w["value/bias"] = rng.uniform(-1, 1, (h, vd)).astype(dt)
        w["attention_output/bias"] = rng.uniform(-1, 1, (c["d_out"],)).astype(dt)
    return dict(query=query, key=key, value=value, w=w)


def input_args(c, d, data):
    return save_inputs(c["mode"], d, data["query"], data["key"], data["value"])


def check_case(hx, c, seed):
    d = hx.case_dir(c["name"])
    p = lambda f: os.path.join(d, f)  # noqa: E731
    data = build_case(c, seed)
    save_npz(p("weights.npz"), data["w"])
    causal = "--causal" in c["extra"]
    output, attn = keras_reference(data["query"], data["key"], data["value"], data["w"],
                                   c["axes"], causal=causal)
    if c["average"]:
        heads_axis = attn.ndim - 1 - 2 * len(c["axes"])
        attn = attn.mean(axis=heads_axis)
    args = (["run"] + input_args(c, d, data)
            + ["--weights", p("weights.npz"), "--weights_format", "keras",
               "--attention_axes", ",".join(str(a) for a in c["axes"]),
               "--save_inputs", "--dtype", c["dtype"],
               "--out_dir", p("out"), "-q"]
            + (["--save_attention"] if c["attention"] else [])
            + (["--average_heads"] if c["average"] else []) + c["extra"])
    hx.mha(args, what="mha run")
    tol = TOL[c["dtype"]]
    np.save(p("expected_output.npy"), output.astype(c["dtype"]))
    hx.compare(p("out/output.npy"), p("expected_output.npy"), tol, tol,
               "output vs the Keras reference")
    if c["attention"]:
        np.save(p("expected_attention.npy"), attn.astype(c["dtype"]))
        hx.compare(p("out/attention.npy"), p("expected_attention.npy"), tol, tol,
                   "attention vs Keras' scores")
    elif os.path.exists(p("out/attention.npy")):
        raise Failure("attention.npy written without save_attention")
    # save_inputs writes the inputs back in their own N-D layout, unchanged.
    saved = {"query": data["query"]}
    if c["mode"] == "kv":
        saved["key"] = data["value"]
    elif c["mode"] == "qkv":
        saved["key"], saved["value"] = data["key"], data["value"]
    for name, want in saved.items():
        got = np.load(p(f"out/{name}.npy"))
        if got.shape != want.shape or not np.array_equal(got, want):
            raise Failure(f"save_inputs: {name}.npy of shape {got.shape} differs from the input "
                          f"of shape {want.shape}")
    report = json.load(open(p("out/run.json")))
    axes = list(keras_axes(data["query"].ndim, c["axes"]))
    if report.get("attention_axes", {}).get("axes") != axes:
        raise Failure(f"run.json attention_axes: {report.get('attention_axes')}, expected axes "
                      f"{axes}")
    if report["outputs"]["output.npy"]["shape"] != list(output.shape):
        raise Failure(f"run.json outputs: {report['outputs']['output.npy']}")


def describe(c):
    keys = ("query", "axes", "h", "key_dim", "value_dim", "d_out", "key", "value", "mode", "bias",
            "dtype", "average", "attention", "extra")
    return ", ".join(f"{k}={c[k]!r}" for k in keys)


# ---------------------------------------------------------------- rank 3: the plain run

def check_rank3_identical(hx, seed):
    d = hx.case_dir("rank3_axis_1_bit_identical")
    p = lambda f: os.path.join(d, f)  # noqa: E731
    rng = np.random.default_rng(seed)
    np.save(p("q.npy"), rng.standard_normal((3, 7, 16)).astype(np.float32))
    np.save(p("v.npy"), rng.standard_normal((3, 9, 12)).astype(np.float32))
    base = ["run", "--query", p("q.npy"), "--value", p("v.npy"), "--h", "4", "--save_attention",
            "--causal", "bottom-right", "--seed", "5", "-q"]
    hx.mha(base + ["--out_dir", p("plain")], what="mha run (no attention_axes)")
    for axes in ("1", "-2"):
        hx.mha(base + ["--attention_axes", axes, "--out_dir", p("axes" + axes)],
               what=f"mha run --attention_axes {axes}")
        for f in ("output.npy", "attention.npy"):
            a = open(p(f"plain/{f}"), "rb").read()
            b = open(p(f"axes{axes}/{f}"), "rb").read()
            if a != b:
                raise Failure(f"{f} with attention_axes {axes} differs from the plain run's")


# ---------------------------------------------------------------- variants along one axis

def check_single_axis_variants(hx, seed):
    """causal, window and ALiBi along one attention axis: the same numbers as the
    plain run on inputs that NumPy flattened ((B, a1, a2, F) over axis 1 ->
    (B*a2, a1, F)), i.e. positions along that axis, every other axis a batch."""
    d = hx.case_dir("single_axis_variants")
    p = lambda f: os.path.join(d, f)  # noqa: E731
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 6, 3, 8)).astype(np.float32)
    np.save(p("x.npy"), x)
    flat = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(6, 6, 8)
    np.save(p("flat.npy"), flat)
    for flags in (["--causal", "true"], ["--window", "2"], ["--alibi", "true", "--causal", "true"],
                  ["--window", "3", "--causal", "bottom-right", "--kv_heads", "2"]):
        tag = "_".join(f.strip("-") for f in flags)
        common = ["--h", "4", "--save_attention", "--seed", "3", "-q"] + flags
        hx.mha(["run", "--query", p("x.npy"), "--attention_axes", "1",
                "--out_dir", p(f"nd_{tag}")] + common, what=f"mha run N-D {flags}")
        hx.mha(["run", "--query", p("flat.npy"), "--out_dir", p(f"flat_{tag}")] + common,
               what=f"mha run flattened {flags}")
        out_nd = np.load(p(f"nd_{tag}/output.npy"))
        out_flat = np.load(p(f"flat_{tag}/output.npy")).reshape(2, 3, 6, 8).transpose(0, 2, 1, 3)
        att_nd = np.load(p(f"nd_{tag}/attention.npy"))                 # (B, a2, h, a1, a1)
        att_flat = np.load(p(f"flat_{tag}/attention.npy")).reshape(2, 3, 4, 6, 6)
        if att_nd.shape != (2, 3, 4, 6, 6):
            raise Failure(f"{flags}: attention.npy has shape {att_nd.shape}, expected (2, 3, 4, 6, 6)")
        for what, a, b in (("output", out_nd, out_flat), ("attention", att_nd, att_flat)):
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-6, atol=1e-6):
                raise Failure(f"{flags}: {what} differs from the run on flattened inputs")


# ---------------------------------------------------------------- sweep

def check_sweep(hx, seed):
    d = hx.case_dir("sweep_over_axes")
    p = lambda f: os.path.join(d, f)  # noqa: E731
    c = A("sweep", (2, 3, 4, 2, 8), [1], h=2, key_dim=4)
    data = build_case(c, seed)
    np.save(p("q.npy"), data["query"])
    save_npz(p("w.npz"), data["w"])
    grid = [[1], [2], [3], [1, 2], [3, 1], [-2], [1, 2, 3]]
    sweep = {"description": "attention_axes over one set of files",
             "base": {"query": p("q.npy"), "weights": p("w.npz"), "weights_format": "keras",
                      "save_attention": True},
             "grid": {"attention_axes": grid}, "name": "axes{index}", "out_dir": p("sweep")}
    with open(p("sweep.json"), "w") as f:
        json.dump(sweep, f)
    hx.mha(["sweep", p("sweep.json"), "--dry_run"], what="mha sweep --dry_run")
    hx.mha(["sweep", p("sweep.json"), "--jobs", "1"], what="mha sweep")
    rows = list(csv.DictReader(open(p("sweep/results.csv"))))
    if len(rows) != len(grid) or any(r["status"] != "ok" for r in rows):
        raise Failure(f"results.csv: {[(r['name'], r['status']) for r in rows]}")
    for i, axes in enumerate(grid):
        output, attn = keras_reference(data["query"], data["query"], data["query"], data["w"],
                                       axes)
        for name, want in (("output", output), ("attention", attn)):
            np.save(p(f"expected_{name}{i}.npy"), want.astype(np.float32))
            hx.compare(p(f"sweep/axes{i}/{name}.npy"), p(f"expected_{name}{i}.npy"), 1e-5, 1e-5,
                       f"sweep run {i} (attention_axes {axes}): {name} vs the Keras reference")


# ---------------------------------------------------------------- bad inputs

BAD = [
    # (name, shape of q.npy, extra flags, fragment of the one-line message)
    ("axis_0_is_batch", (2, 3, 4, 8), ["--attention_axes", "0"], "axis 0 is the batch axis"),
    ("feature_axis", (2, 3, 4, 8), ["--attention_axes", "3"], "axis 3 is the feature axis"),
    ("feature_axis_negative", (2, 3, 4, 8), ["--attention_axes", "-1"],
     "axis -1 is the feature axis"),
    ("out_of_range", (2, 3, 4, 8), ["--attention_axes", "4"], "axis 4 is out of range"),
    ("repeated", (2, 3, 4, 8), ["--attention_axes", "2,-2"], "axis 2 is given twice"),
    ("random_inputs_rank3", None, ["--attention_axes", "2,3", "--seq_len", "4", "--d_model", "8"],
     "random query of shape (batch, seq_len, d_model)"),
    ("rank2_query", (5, 8), ["--attention_axes", "1"], "needs a query of rank 3 or more"),
    ("rank5_without_axes", (2, 5, 3, 4, 8), [], "got (2, 5, 3, 4, 8); to attend over axes of an N-D query give attention_axes"),
    ("key_batch_axis_mismatch", (2, 3, 4, 8), ["--attention_axes", "2", "--value", "BAD"],
     "on axis 1, a batch axis under attention_axes [2]"),
    ("mask_refused", (2, 3, 4, 8), ["--attention_axes", "2", "--mask", "MASK"],
     "mask is not supported with attention_axes on inputs of rank 4"),
    ("key_lengths_refused", (2, 3, 4, 8), ["--attention_axes", "2", "--key_lengths", "2,3"],
     "key_lengths is not supported"),
    ("causal_two_axes", (2, 3, 4, 2, 8), ["--attention_axes", "1,2", "--causal", "true"],
     "causal needs a single attention axis"),
    ("bad_axis_list", (2, 3, 4, 8), ["--attention_axes", "2,x"], "attention_axes"),
]


def check_bad(hx, name, shape, flags, fragment):
    d = hx.case_dir("bad_" + name)
    p = lambda f: os.path.join(d, f)  # noqa: E731
    args = ["run", "--h", "2", "--out_dir", p("out")]
    if shape is not None:
        np.save(p("q.npy"), np.ones(shape, dtype=np.float32))
        args += ["--query", p("q.npy")]
    np.save(p("bad.npy"), np.ones((2, 4, 5, 8), dtype=np.float32))
    np.save(p("mask.npy"), np.ones((4, 4), dtype=bool))
    flags = [p("bad.npy") if f == "BAD" else p("mask.npy") if f == "MASK" else f for f in flags]
    r = hx.mha(args + flags, expect=2, what="mha run (bad input)")
    lines = r.stderr.strip().splitlines()
    if len(lines) != 1 or fragment not in lines[0]:
        raise Failure(f"expected one stderr line containing {fragment!r}, got:\n{r.stderr}")
    if os.path.exists(p("out/output.npy")):
        raise Failure("a refused run wrote output.npy")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--only", action="append", help="run only this case (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the case names")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    extra = ["rank3_axis_1_bit_identical", "single_axis_variants", "sweep_over_axes"]
    names = [c["name"] for c in CASES] + extra + ["bad_" + b[0] for b in BAD]
    want = case_filter(a, names)
    if want is None:
        return 0

    start = time.time()
    hx = Harness(a.binary, keep=a.keep, verbose=a.verbose, prefix="mha_keras_axes_")
    for i, c in enumerate(CASES):
        if want(c["name"]):
            hx.run_case(c["name"], lambda c=c, i=i: check_case(hx, c, 5000 + i), describe(c))
    checks = [lambda: check_rank3_identical(hx, 5100), lambda: check_single_axis_variants(hx, 5101),
              lambda: check_sweep(hx, 5102)]
    for name, fn in zip(extra, checks):
        if want(name):
            hx.run_case(name, fn)
    for b in BAD:
        if want("bad_" + b[0]):
            hx.run_case("bad_" + b[0], lambda b=b: check_bad(hx, *b))
    return hx.finish("keras_axes_crosscheck", time.time() - start)


if __name__ == "__main__":
    sys.exit(main())
