#!/usr/bin/env python3
"""Cross-check of the `mha` binary against PyTorch's nn.MultiheadAttention.

    /usr/bin/python3 tests/interop/torch_crosscheck.py path/to/mha [--keep] [--only NAME] [-v]
                                                                   [--via-native] [--list]

For each case a random nn.MultiheadAttention(E, h, bias, kdim, vdim, batch_first=True)
is built under torch.manual_seed (in_proj_bias and out_proj.bias randomised too,
since PyTorch starts them at zero), run in eval() under no_grad() with
need_weights=True, average_attn_weights=False, and its state_dict saved the way
users save it:
    numpy.savez(f, **{k: v.numpy() for k, v in m.state_dict().items()})
together with the inputs, masks, and PyTorch's output and attention. Then

    mha run --weights state.npz --weights_format torch --h H --query q.npy [...]
            --masked_rows nan --save_attention --out_dir DIR

runs on the same files and `mha compare` holds output.npy and attention.npy
against PyTorch's at rtol = atol = 1e-5 (float32) or 1e-10 (float64); every
verdict of `mha compare --equal_nan` is also checked against numpy.allclose(equal_nan=True).

Masks: PyTorch's bool attn_mask means True = masked, so it goes to mha with
--mask_true_means ignore; its 3-D (B*h, T, S) form is passed reshaped to
(B, h, T, S); float masks (with -inf entries) are passed as they are;
key_padding_mask (bool or float) goes to --key_padding_mask; causal cases use
a triu bool attn_mask on the PyTorch side and --causal true (and, separately,
the same mask with --mask_true_means ignore) on ours. PyTorch gives NaN for
query rows with no key left, hence --masked_rows nan.

Also checked: weights-format auto-detection, the refusal of bias_k/bias_v
(add_bias_kv=True: exit 2 naming bias_k), `mha weights convert` torch ->
native -> torch (exact, and native as PyTorch's Linear layout says:
W_q = in_proj_weight[:E].T ...), torch -> keras, identical outputs from the
torch, native and keras files, save_weights in each layout, and a few
`mha compare` verdicts (NaN at the same index, NaN mismatch, shape mismatch,
bad input).

--via-native is a diagnostic: it converts weights and masks in Python to the
native layout and the pre-existing keys (--weights native .npz, one --mask with
true = attend or a float mask with -inf) instead of using the interop
features, which separates harness or kernel problems from format handling.

Exit 0 with a one-line summary when all agree; 1 naming the failing cases.
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Failure, Harness, case_filter, check_same_arrays,  # noqa: E402
                    load_npz, save_inputs, save_npz)

import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("error: PyTorch is needed (Debian: python3-torch); run with /usr/bin/python3")

TOL = {"float32": 1e-5, "float64": 1e-10}
TDTYPE = {"float32": torch.float32, "float64": torch.float64}


def C(name, E=32, h=4, B=2, T=6, S=None, kdim=None, vdim=None, bias=True, mode="self",
      dtype="float32", causal=None, attn_mask=None, kpm=None, fmt="torch", dead=False,
      store="plain"):
    """One case. mode: self (key = value = query), kv (key is value, S keys),
    qkv (three tensors). causal: None | "flag" (--causal true) | "ignore" (the
    triu mask with --mask_true_means ignore). attn_mask: None | bool2d | bool3d |
    float2d | float3d | float2d_dead_row | dead. kpm: None | bool | float |
    float_neginf (some -inf) | bool_fullpad | float_dead (last batch all padding).
    fmt: "torch" or None (auto-detect). dead: the case has fully masked rows.
    store: plain | fortran (state arrays saved in Fortran order) | prefix (names
    as in a whole model's state_dict, "encoder.self_attn.in_proj_weight")."""
    S = T if S is None else S
    return dict(name=name, E=E, h=h, B=B, T=T, S=S, kdim=kdim or E, vdim=vdim or E, bias=bias,
                mode=mode, dtype=dtype, causal=causal, attn_mask=attn_mask, kpm=kpm, fmt=fmt,
                dead=dead, store=store)


CASES = [
    C("self_basic", E=32, h=4, B=2, T=7),
    C("self_h1_b1", E=16, h=1, B=1, T=5),
    C("self_h16_b5", E=64, h=16, B=5, T=9),
    C("self_odd_h", E=30, h=3, B=2, T=4),
    C("cross_packed_T_lt_S", E=32, h=4, B=3, T=5, S=11, mode="qkv"),
    C("cross_packed_T_gt_S", E=32, h=8, B=2, T=10, S=3, mode="qkv"),
    C("cross_key_is_value", E=24, h=2, B=2, T=4, S=9, mode="kv"),
    C("cross_kdim_vdim", E=24, h=3, B=2, T=6, S=11, kdim=10, vdim=14, mode="qkv"),
    C("cross_kdim_eq_vdim_ne_E", E=16, h=4, B=1, T=3, S=8, kdim=20, vdim=20, mode="kv"),
    C("cross_vdim_only", E=16, h=2, B=2, T=5, S=5, kdim=16, vdim=7, mode="qkv"),
    C("nobias_self", E=32, h=4, B=2, T=6, bias=False),
    C("nobias_cross_kdim_vdim", E=20, h=5, B=3, T=4, S=7, kdim=9, vdim=13, mode="qkv",
      bias=False),
    C("causal_flag_self", E=32, h=4, B=2, T=8, causal="flag"),
    C("causal_flag_T_lt_S", E=16, h=2, B=2, T=4, S=9, mode="qkv", causal="flag"),
    C("causal_flag_T_gt_S", E=16, h=2, B=2, T=9, S=4, mode="qkv", causal="flag"),
    C("causal_mask_ignore_self", E=32, h=4, B=2, T=8, causal="ignore"),
    C("causal_mask_ignore_T_lt_S", E=16, h=2, B=2, T=4, S=9, mode="qkv", causal="ignore"),
    C("causal_flag_kpm_bool", E=16, h=4, B=3, T=7, causal="flag", kpm="bool"),
    C("causal_flag_and_bool_mask_ignore", E=16, h=2, B=2, T=6, S=8, mode="qkv", causal="flag",
      attn_mask="bool3d"),
    C("bool_mask_2d", E=32, h=4, B=2, T=6, S=10, mode="qkv", attn_mask="bool2d"),
    C("bool_mask_3d", E=32, h=4, B=3, T=6, S=8, mode="qkv", attn_mask="bool3d"),
    C("bool_mask_3d_self_h16", E=32, h=16, B=2, T=5, attn_mask="bool3d"),
    C("float_mask_2d", E=32, h=4, B=2, T=6, S=9, mode="qkv", attn_mask="float2d"),
    C("float_mask_3d", E=24, h=3, B=2, T=5, S=7, mode="kv", attn_mask="float3d"),
    C("kpm_bool_self", E=32, h=4, B=3, T=7, kpm="bool"),
    C("kpm_bool_cross", E=32, h=4, B=3, T=5, S=9, mode="qkv", kpm="bool"),
    C("kpm_float_cross", E=32, h=4, B=2, T=5, S=9, mode="qkv", kpm="float"),
    C("kpm_float_self_odd_h", E=15, h=5, B=2, T=6, kpm="float"),
    C("kpm_float_neginf", E=16, h=2, B=3, T=4, S=7, mode="kv", kpm="float_neginf"),
    C("dead_rows_kpm_float_neginf", E=16, h=2, B=3, T=4, S=7, mode="qkv", kpm="float_dead",
      dead=True),
    C("bool_mask_and_kpm", E=32, h=4, B=3, T=6, S=8, mode="qkv", attn_mask="bool3d",
      kpm="bool"),
    C("float_mask_and_kpm_bool", E=32, h=4, B=3, T=6, S=8, mode="qkv", attn_mask="float2d",
      kpm="bool"),
    C("dead_rows_bool", E=32, h=4, B=3, T=6, S=8, mode="qkv", attn_mask="dead",
      kpm="bool_fullpad", dead=True),
    C("dead_row_float_neginf", E=16, h=2, B=2, T=5, S=6, mode="qkv",
      attn_mask="float2d_dead_row", dead=True),
    C("float64_cross_masks", E=24, h=3, B=2, T=5, S=7, kdim=11, vdim=6, mode="qkv",
      dtype="float64", attn_mask="bool3d", kpm="bool"),
    C("float64_self_causal_b5", E=32, h=4, B=5, T=6, dtype="float64", causal="flag"),
    C("float64_kpm_float_kdim", E=12, h=2, B=3, T=4, S=6, kdim=5, vdim=5, mode="kv",
      dtype="float64", kpm="float"),
    C("state_fortran_order", E=16, h=4, B=2, T=5, S=7, kdim=6, vdim=9, mode="qkv",
      store="fortran"),
    C("state_module_prefix", E=16, h=2, B=2, T=5, mode="self", store="prefix", fmt=None),
    C("auto_detect_packed", E=32, h=4, B=2, T=6, S=8, mode="qkv", fmt=None),
    C("auto_detect_separate_nobias", E=16, h=2, B=2, T=4, S=5, kdim=6, vdim=9, mode="qkv",
      bias=False, fmt=None),
]


# ---------------------------------------------------------------- PyTorch side

def make_module(E, h, bias, kdim, vdim, dtype, add_bias_kv=False):
    m = torch.nn.MultiheadAttention(E, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=True,
                                    add_bias_kv=add_bias_kv)
    with torch.no_grad():
        # PyTorch starts the biases at zero, which would hide bias bugs.
        if m.in_proj_bias is not None:
            m.in_proj_bias.uniform_(-1.0, 1.0)
        if m.out_proj.bias is not None:
            m.out_proj.bias.uniform_(-1.0, 1.0)
    if dtype == "float64":
        m = m.double()
    return m.eval()


def state_arrays(m):
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}


def torch_to_native(state, E):
    """PyTorch's layout (y = x W^T + b) -> the native one (y = x W + b), in numpy."""
    n = {}
    if "in_proj_weight" in state:
        w = state["in_proj_weight"]
        wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
    else:
        wq, wk, wv = state["q_proj_weight"], state["k_proj_weight"], state["v_proj_weight"]
    n["W_q"], n["W_k"], n["W_v"] = wq.T.copy(), wk.T.copy(), wv.T.copy()
    n["W_o"] = state["out_proj.weight"].T.copy()
    if "in_proj_bias" in state:
        b = state["in_proj_bias"]
        n["b_q"], n["b_k"], n["b_v"] = b[:E].copy(), b[E:2 * E].copy(), b[2 * E:].copy()
        n["b_o"] = state["out_proj.bias"].copy()
    return n


def build_case(c, seed):
    """Random module, inputs and masks; PyTorch's output and attention."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    td = TDTYPE[c["dtype"]]
    E, h, B, T, S = c["E"], c["h"], c["B"], c["T"], c["S"]
    m = make_module(E, h, c["bias"], c["kdim"], c["vdim"], c["dtype"])
    q = torch.randn(B, T, E, dtype=td)
    if c["mode"] == "self" and not c["bias"]:
        # PyTorch 1.13's fast path (self-attention in eval, even h) crashes on
        # bias=False; distinct but equal tensors take the regular path.
        k = v = q.clone()
    elif c["mode"] == "self":
        k = v = q
    elif c["mode"] == "kv":
        assert c["kdim"] == c["vdim"]
        k = v = torch.randn(B, S, c["kdim"], dtype=td)
    else:
        k = torch.randn(B, S, c["kdim"], dtype=td)
        v = torch.randn(B, S, c["vdim"], dtype=td)

    attn_mask = None        # as PyTorch takes it
    mha_mask = None         # as mha takes it (numpy), with its meaning
    mask_kind = None        # "ignore" (bool, True = masked) | "float"
    if c["causal"]:
        attn_mask = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1)
        if c["causal"] == "ignore":
            mha_mask, mask_kind = attn_mask.numpy().copy(), "ignore"
    kind = c["attn_mask"]
    if kind is not None:
        # With causality, PyTorch's single attn_mask is triu OR the case's bool mask.
        assert not c["causal"] or (c["causal"] == "flag" and kind in ("bool2d", "bool3d", "dead"))
        if kind == "bool2d":
            am = rng.random((T, S)) < 0.3
            torch_am, mha_mask = am, am
        elif kind in ("bool3d", "dead"):
            am = rng.random((B * h, T, S)) < 0.35
            if kind == "dead":
                am = am.reshape(B, h, T, S)
                am[0, 2, 1, :] = True      # one head of one query row: that output row is NaN
                am[1, :, 4, :] = True      # every head of a query row
                am = am.reshape(B * h, T, S)
            torch_am, mha_mask = am, am.reshape(B, h, T, S)
        elif kind in ("float2d", "float2d_dead_row"):
            am = rng.standard_normal((T, S)) * 2.0
            am[rng.random((T, S)) < 0.2] = -np.inf
            if kind == "float2d_dead_row":
                am[1, :] = -np.inf
            am = am.astype(c["dtype"])
            torch_am, mha_mask = am, am
        elif kind == "float3d":
            am = (rng.standard_normal((B * h, T, S)) * 2.0).astype(c["dtype"])
            torch_am, mha_mask = am, am.reshape(B, h, T, S)
        else:
            raise ValueError(kind)
        mask_kind = "ignore" if torch_am.dtype == bool else "float"

    kpm = None
    if c["kpm"] in ("bool", "bool_fullpad"):
        kpm = rng.random((B, S)) < 0.3
        kpm[:, 0] = False                  # every batch keeps a key ...
        if c["kpm"] == "bool_fullpad":
            kpm[B - 1, :] = True           # ... but the last one, whose rows are all NaN
    elif c["kpm"] in ("float", "float_neginf", "float_dead"):
        kpm = rng.standard_normal((B, S)) * 2.0
        if c["kpm"] != "float":            # -inf marks padding, as users write it
            kpm[rng.random((B, S)) < 0.3] = -np.inf
            kpm[:, 0] = 0.5
        if c["kpm"] == "float_dead":
            kpm[B - 1, :] = -np.inf
        kpm = kpm.astype(c["dtype"])
    if not c["dead"] and kind in ("bool2d", "bool3d"):
        # Random masks must leave every query row a key (fully masked rows have
        # their own cases): unmask one key that key_padding_mask (and causality) keep.
        am = torch_am.reshape((1, 1, T, S) if torch_am.ndim == 2 else (B, h, T, S))
        pad = np.zeros((B, S), dtype=bool) if kpm is None or kpm.dtype != bool else kpm
        for b, hh, t in np.ndindex(*am.shape[:3]):
            pads = pad.any(axis=0) if am.shape[0] == 1 else pad[b]
            if c["causal"]:
                pads = pads | (np.arange(S) > t)
            if np.all(am[b, hh, t] | pads):
                am[b, hh, t, rng.choice(np.flatnonzero(~pads))] = False
    if kind is not None:
        torch_am = torch.from_numpy(np.ascontiguousarray(torch_am))
        if c["causal"]:  # PyTorch takes one mask: causal OR the case's mask (True = masked)
            torch_am = attn_mask.reshape(1, T, S) | torch_am if torch_am.dim() == 3 \
                else attn_mask | torch_am
        attn_mask = torch_am
    kpm_t = None if kpm is None else torch.from_numpy(kpm)

    with torch.no_grad():
        out, attn = m(q, k, v, key_padding_mask=kpm_t, attn_mask=attn_mask, need_weights=True,
                      average_attn_weights=False)
    data = dict(state=state_arrays(m), q=q.numpy(), k=k.numpy(), v=v.numpy(),
                mha_mask=mha_mask, mask_kind=mask_kind, kpm=kpm, out=out.numpy(),
                attn=attn.numpy())
    has_nan = bool(np.isnan(data["out"]).any())
    if has_nan != c["dead"]:
        raise Failure(f"harness: PyTorch output {'has' if has_nan else 'has no'} NaN rows, "
                      f"but the case says dead={c['dead']}")
    return data


# ---------------------------------------------------------------- mha side

def input_args(c, d, data):
    return save_inputs(c["mode"], d, data["q"], data.get("k"), data.get("v"))


def mask_args_interop(c, d, data):
    args = []
    if c["causal"] == "flag":
        args += ["--causal", "true"]
    if data["mha_mask"] is not None:
        np.save(os.path.join(d, "mask.npy"), data["mha_mask"])
        args += ["--mask", os.path.join(d, "mask.npy")]
        if data["mask_kind"] == "ignore":
            args += ["--mask_true_means", "ignore"]
    if data["kpm"] is not None:
        np.save(os.path.join(d, "key_padding_mask.npy"), data["kpm"])
        args += ["--key_padding_mask", os.path.join(d, "key_padding_mask.npy")]
    return args


def mask_args_native(c, d, data):
    """Everything folded into one pre-existing --mask (true = attend, or float with -inf)."""
    T, S = c["T"], c["S"]
    allow = np.ones((1, 1, T, S), dtype=bool)
    add = None
    if c["causal"]:
        allow = allow & np.tril(np.ones((T, S), dtype=bool))
    m = data["mha_mask"]
    if m is not None:
        m4 = m.reshape((1, 1) + m.shape) if m.ndim == 2 else m
        if data["mask_kind"] == "ignore":
            allow = allow & ~m4
        else:
            add = m4.astype(np.float64)
    if data["kpm"] is not None:
        kpm = data["kpm"][:, None, None, :]
        if kpm.dtype == bool:
            allow = allow & ~kpm
        else:
            add = kpm.astype(np.float64) if add is None else add + kpm
    if add is None and allow.all():
        return []
    if add is None:
        mask = allow
    else:
        add, allow = np.broadcast_arrays(add, allow)
        mask = np.where(allow, add, -np.inf).astype(c["dtype"])
    np.save(os.path.join(d, "mask_native.npy"), mask)
    return ["--mask", os.path.join(d, "mask_native.npy")]


def check_case(hx, c, seed, via_native):
    d = hx.case_dir(c["name"])
    data = build_case(c, seed)
    out_dir = os.path.join(d, "out")
    args = ["run"] + input_args(c, d, data)
    if via_native:
        native = torch_to_native(data["state"], c["E"])
        save_npz(os.path.join(d, "native.npz"), native)
        args += ["--weights", os.path.join(d, "native.npz"), "--h", c["h"],
                 "--use_bias", "true" if c["bias"] else "false"]
        args += mask_args_native(c, d, data)
    else:
        state = data["state"]
        if c["store"] == "fortran":
            state = {k: np.asfortranarray(v) for k, v in state.items()}
            assert any(v.ndim == 2 and not v.flags.c_contiguous for v in state.values())
        elif c["store"] == "prefix":
            state = {"encoder.self_attn." + k: v for k, v in state.items()}
        save_npz(os.path.join(d, "state.npz"), state)
        args += ["--weights", os.path.join(d, "state.npz"), "--h", c["h"]]
        if c["fmt"]:
            args += ["--weights_format", c["fmt"]]
        args += mask_args_interop(c, d, data)
    args += ["--masked_rows", "nan", "--save_attention", "--dtype", c["dtype"],
             "--out_dir", out_dir, "-q"]
    np.save(os.path.join(d, "expected_output.npy"), data["out"])
    np.save(os.path.join(d, "expected_attention.npy"), data["attn"])
    hx.mha(args, what="mha run")
    tol = TOL[c["dtype"]]
    for name in ("output", "attention"):
        got = os.path.join(out_dir, f"{name}.npy")
        if not os.path.isfile(got):
            raise Failure(f"mha run wrote no {name}.npy")
        got_dtype = np.load(got).dtype
        if got_dtype != np.dtype(c["dtype"]):
            raise Failure(f"{name}.npy has dtype {got_dtype}, expected {c['dtype']}")
        hx.compare(got, os.path.join(d, f"expected_{name}.npy"), tol, tol, f"{name} vs PyTorch")


def describe(c):
    keys = ("E", "h", "B", "T", "S", "kdim", "vdim", "bias", "mode", "dtype", "causal",
            "attn_mask", "kpm", "fmt")
    return ", ".join(f"{k}={c[k]}" for k in keys)


# ---------------------------------------------------------------- other checks

def check_bias_kv_refused(hx):
    d = hx.case_dir("bias_kv_refused")
    torch.manual_seed(7)
    m = make_module(16, 2, True, 16, 16, "float32", add_bias_kv=True)
    state = state_arrays(m)
    assert "bias_k" in state and "bias_v" in state
    path = os.path.join(d, "state.npz")
    save_npz(path, state)
    x = np.random.default_rng(7).standard_normal((1, 4, 16)).astype(np.float32)
    np.save(os.path.join(d, "query.npy"), x)
    for fmt in (["--weights_format", "torch"], []):
        p = hx.mha(["run", "--weights", path, "--h", 2, "--query", os.path.join(d, "query.npy"),
                    "--out_dir", os.path.join(d, "out")] + fmt,
                   expect=2, what="mha run with bias_k/bias_v " + (" ".join(fmt) or "(auto)"))
        if "bias_k" not in p.stderr:
            raise Failure(f"refusal of add_bias_kv weights ({' '.join(fmt) or 'auto'}) does not "
                          f"mention bias_k: {p.stderr.strip()!r}")
        if os.path.exists(os.path.join(d, "out", "output.npy")):
            raise Failure("a refused run left output.npy behind")


ROUNDTRIP = [
    # name, E, h, kdim, vdim, bias, mode
    ("roundtrip_packed_bias", 32, 4, 32, 32, True, "qkv"),
    ("roundtrip_separate_bias", 24, 3, 10, 14, True, "qkv"),
    ("roundtrip_packed_nobias", 16, 2, 16, 16, False, "self"),
    ("roundtrip_separate_nobias", 16, 4, 5, 9, False, "qkv"),
]


def check_roundtrip(hx, name, E, h, kdim, vdim, bias, mode, seed):
    d = hx.case_dir(name)
    torch.manual_seed(seed)
    m = make_module(E, h, bias, kdim, vdim, "float32")
    state = state_arrays(m)
    p = lambda f: os.path.join(d, f)  # noqa: E731
    save_npz(p("state.npz"), state)

    hx.mha(["weights", "convert", p("state.npz"), "--to", "native", "-o", p("n.npz")],
           what="weights convert torch -> native")
    native = load_npz(p("n.npz"))
    check_same_arrays(native, torch_to_native(state, E), "torch -> native (W = Linear.weight.T)")
    hx.mha(["weights", "convert", p("n.npz"), "--to", "torch", "-o", p("t.npz")],
           what="weights convert native -> torch")
    check_same_arrays(load_npz(p("t.npz")), state, "torch -> native -> torch round trip")
    hx.mha(["weights", "convert", p("state.npz"), "--to", "keras", "--h", h, "-o", p("k.npz")],
           what="weights convert torch -> keras")

    # The same layer from the torch, native and keras files gives identical outputs.
    rng = np.random.default_rng(seed)
    T, S, B = 5, 7, 2
    np.save(p("query.npy"), rng.standard_normal((B, T, E)).astype(np.float32))
    inputs = ["--query", p("query.npy")]
    if mode == "qkv":
        np.save(p("key.npy"), rng.standard_normal((B, S, kdim)).astype(np.float32))
        np.save(p("value.npy"), rng.standard_normal((B, S, vdim)).astype(np.float32))
        inputs += ["--key", p("key.npy"), "--value", p("value.npy")]
    runs = {
        "torch": ["--weights", p("state.npz"), "--weights_format", "torch", "--h", h,
                  "--save_weights", "torch"],
        "native": ["--weights", p("n.npz"), "--weights_format", "native", "--h", h,
                   "--save_weights", "native"],
        "native_auto": ["--weights", p("n.npz"), "--h", h, "--save_weights", "true"],
        "keras": ["--weights", p("k.npz"), "--weights_format", "keras", "--save_weights", "keras"],
    }
    for run_name, extra in runs.items():
        hx.mha(["run"] + inputs + extra + ["--save_attention", "--out_dir", p("out_" + run_name),
                                           "-q"], what=f"mha run on the {run_name} file")
    for run_name in ("native", "native_auto", "keras"):
        for f in ("output.npy", "attention.npy"):
            a, b = p(f"out_{run_name}/{f}"), p(f"out_torch/{f}")
            hx.compare(a, b, 0.0, 0.0, f"{f} from the {run_name} file vs from the torch file")
            if not np.array_equal(np.load(a), np.load(b)):
                raise Failure(f"{f} from the {run_name} file is not bit-identical to the torch "
                              "file's, yet mha compare --rtol 0 --atol 0 said close")
    check_same_arrays(load_npz(p("out_torch/weights.npz")), state, "save_weights torch")
    check_same_arrays(load_npz(p("out_native/weights.npz")), native, "save_weights native")
    check_same_arrays(load_npz(p("out_native_auto/weights.npz")), native,
                      "save_weights true (native layout)")
    check_same_arrays(load_npz(p("out_keras/weights.npz")), load_npz(p("k.npz")),
                      "save_weights keras")


def check_compare_verdicts(hx):
    """The few `mha compare` verdicts this suite relies on."""
    d = hx.case_dir("compare_verdicts")
    p = lambda f: os.path.join(d, f)  # noqa: E731
    a = np.array([[1.0, np.nan], [3.0, 4.0]], dtype=np.float32)
    np.save(p("a.npy"), a)
    np.save(p("a_close.npy"), a + np.float32(1e-7))
    b = a.copy()
    b[1, 1] = 4.01
    np.save(p("b.npy"), b)
    c = a.copy()
    c[0, 1] = 2.0
    np.save(p("nan_mismatch.npy"), c)
    np.save(p("shape.npy"), a.reshape(4))
    with open(p("bad.npy"), "wb") as f:
        f.write(b"not an npy file")
    cases = [("a.npy", "a_close.npy", 0), ("a.npy", "b.npy", 1), ("a.npy", "nan_mismatch.npy", 1),
             ("nan_mismatch.npy", "a.npy", 1), ("a.npy", "shape.npy", 2), ("a.npy", "bad.npy", 2),
             ("a.npy", "missing.npy", 2)]
    for x, y, want in cases:
        hx.mha(["compare", p(x), p(y), "--rtol", "1e-5", "--atol", "1e-5", "--equal_nan"],
               expect=want, what=f"mha compare {x} {y} --equal_nan")
    # Without --equal_nan, as numpy.allclose's default, the NaN at [0, 1] is not close.
    hx.mha(["compare", p("a.npy"), p("a_close.npy"), "--rtol", "1e-5", "--atol", "1e-5"], expect=1,
           what="mha compare a.npy a_close.npy (NaN at the same index, no --equal_nan)")
    # atol + rtol*|b|: |4.01 - 4| = 0.01 <= 0 + 0.0025 * 4.01 holds, with |a| it would not
    hx.mha(["compare", p("a.npy"), p("b.npy"), "--rtol", "0.0025", "--atol", "0", "--equal_nan"],
           expect=0, what="mha compare a.npy b.npy --rtol 0.0025 (rtol scales |b|)")
    hx.mha(["compare", p("b.npy"), p("a.npy"), "--rtol", "0.0025", "--atol", "0", "--equal_nan"],
           expect=1, what="mha compare b.npy a.npy --rtol 0.0025 (rtol scales |b|)")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--only", action="append", help="run only this case (repeatable)")
    ap.add_argument("--via-native", action="store_true",
                    help="diagnostic: native weights and pre-existing mask keys only")
    ap.add_argument("--numpy-compare", action="store_true",
                    help="diagnostic: compare with numpy.allclose only, not `mha compare`")
    ap.add_argument("--list", action="store_true", help="list the case names")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)

    extra = ["bias_kv_refused", "compare_verdicts"] + [r[0] for r in ROUNDTRIP]
    names = [c["name"] for c in CASES] + extra
    want = case_filter(a, names)
    if want is None:
        return 0

    start = time.time()
    hx = Harness(a.binary, keep=a.keep, verbose=a.verbose, prefix="mha_torch_",
                 numpy_compare=a.numpy_compare)
    for i, c in enumerate(CASES):
        if want(c["name"]):
            hx.run_case(c["name"], lambda c=c, i=i: check_case(hx, c, 1000 + i, a.via_native),
                        describe(c))
    if not a.via_native:
        if want("compare_verdicts"):
            hx.run_case("compare_verdicts", lambda: check_compare_verdicts(hx))
        if want("bias_kv_refused"):
            hx.run_case("bias_kv_refused", lambda: check_bias_kv_refused(hx))
        for j, r in enumerate(ROUNDTRIP):
            if want(r[0]):
                hx.run_case(r[0], lambda r=r, j=j: check_roundtrip(hx, *r, seed=2000 + j))
    label = f"torch_crosscheck (torch {torch.__version__}" + (", via native" if a.via_native
                                                               else "") + ")"
    return hx.finish(label, time.time() - start)


if __name__ == "__main__":
    sys.exit(main())
