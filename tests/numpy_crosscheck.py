#!/usr/bin/env python3
"""Random cross-check of the `mha` binary against a NumPy reference.

    /usr/bin/python3 tests/numpy_crosscheck.py path/to/mha [--seed N] [--cases N]
                                                          [--only I] [--keep] [-v]

Draws --cases random problems (seeded: the same seed gives the same cases):
h in 1..6, d_k and d_v in 1..9, T and S in 1..12, B in 1..4, random d_model,
kdim, vdim and d_out, with and without biases, every causal mode, bool, integer
and float masks of every broadcast shape, key_lengths (inline or .npy,
including 0), every masked_rows policy, float32 and float64, averaged heads,
2-D inputs, self-attention (query only), query+value (key = value) and
query+key+value, weights as .npz or as a directory, input files in float16/32/64.
Each case's files and config.json go to a fresh temp dir, `mha run` runs there
(paths in the config are relative to it), and output.npy / attention.npy are
compared with a float64 reference computed from the values the binary sees
(file values rounded to the compute dtype):
    |got - ref| <= tol * (1 + |ref|),  tol = 1e-5 (float32), 1e-12 (float64),
NaN (masked_rows nan) exactly where the reference has it. Also checked: exit
code 0, run.json "status": "complete", its resolved sizes and scale, and the
shapes and dtypes of the outputs.

Exit status 0 with a one-line summary when every case agrees; 1 with the
failing cases' configs otherwise (rerun one with --only I --keep to keep its files).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

CAUSAL = [None, False, True, "top-left", "bottom-right"]  # None: key omitted
MASK_KINDS = [None, "bool", "int", "float"]
MASK_SHAPES = ["TS", "BTS", "1TS", "11TS", "B1TS", "1hTS", "BhTS"]
POLICIES = [None, "zero", "uniform", "nan"]  # None: key omitted (zero)
MODES = ["self", "query+value", "query+key+value"]


# ---------------------------------------------------------------- reference

def reference(xq, xk, xv, w, h, d_k, d_v, scale, allowed, float_mask, policy):
    """Multi-head attention in float64, vectorised over heads.

    xq (B,T,d_model), xk (B,S,kdim), xv (B,S,vdim); w: native weights dict
    (biases optional); allowed: bool broadcastable to (B,h,T,S); float_mask:
    None or broadcastable to (B,h,T,S), added to the scaled logits; policy:
    "zero" | "uniform" | "nan" for query rows with no key left.
    Returns output (B,T,d_out), attention (B,h,T,S) and the (B,h,T) dead rows.
    """
    B, T, _ = xq.shape
    S = xk.shape[1]
    bias = lambda name, n: w[name] if name in w else np.zeros(n)
    Q = (xq @ w["W_q"] + bias("b_q", h * d_k)).reshape(B, T, h, d_k)
    K = (xk @ w["W_k"] + bias("b_k", h * d_k)).reshape(B, S, h, d_k)
    V = (xv @ w["W_v"] + bias("b_v", h * d_v)).reshape(B, S, h, d_v)
    logits = scale * np.einsum("bthd,bshd->bhts", Q, K)
    if float_mask is not None:
        logits = logits + float_mask
    logits = np.where(np.broadcast_to(allowed, logits.shape), logits, -np.inf)
    dead = np.all(logits == -np.inf, axis=-1)
    peak = np.where(dead, 0.0, np.max(logits, axis=-1))
    e = np.exp(logits - peak[..., None])
    A = e / np.where(dead, 1.0, e.sum(axis=-1))[..., None]
    A[dead] = {"zero": 0.0, "uniform": 1.0 / S, "nan": np.nan}[policy]
    context = np.einsum("bhts,bshd->bthd", A, V).reshape(B, T, h * d_v)
    W_o = w["W_o"]
    output = context @ W_o + bias("b_o", W_o.shape[1])
    return output, A, dead


def to_4d(mask):
    """A (T,S), (B',T,S) or (B',h',T,S) mask as (B',h',T,S)."""
    if mask.ndim == 2:
        return mask[None, None]
    if mask.ndim == 3:
        return mask[:, None]
    return mask


# ---------------------------------------------------------------- cases

def balanced(rng, options, n):
    """n picks from options, each about equally often, in random order."""
    reps = -(-n // len(options))
    return [options[i] for i in rng.permutation(np.tile(np.arange(len(options)), reps))[:n]]


def plan(seed, n):
    """Per-case categorical choices, balanced so that every option is exercised."""
    rng = np.random.default_rng([seed, 0])
    keys = {
        "causal": CAUSAL,
        "mask": MASK_KINDS,
        "mask_shape": MASK_SHAPES,
        "policy": POLICIES,
        "mode": MODES,
        "dtype": ["float32", "float64"],
        "weights_as": ["npz", "npz_compressed", "dir"],
    }
    columns = {k: balanced(rng, v, n) for k, v in keys.items()}
    return [{k: columns[k][i] for k in keys} for i in range(n)]


def glorot(rng, rows, cols):
    limit = np.sqrt(6.0 / (rows + cols))
    return rng.uniform(-limit, limit, size=(rows, cols))


def pick(rng, options, p=None):
    return options[int(rng.choice(len(options), p=p))]


def file_dtype(rng):
    return pick(rng, [np.float16, np.float32, np.float64], p=[0.15, 0.4, 0.45])


def draw_case(seed, index, choice):
    """Returns (config, files, spec): config.json contents (paths relative to
    the case dir), {relative path: array | {name: array}} and what the
    reference needs."""
    rng = np.random.default_rng([seed, index + 1])
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))
    B, T, S, h = r(1, 4), r(1, 12), r(1, 12), r(1, 6)
    d_k, d_v = r(1, 9), r(1, 9)
    d_model, d_out = r(1, 16), r(1, 16)
    mode = choice["mode"]
    if mode == "self":
        S, kdim, vdim = T, d_model, d_model
    elif mode == "query+value":
        kdim = vdim = r(1, 16)
    else:
        kdim, vdim = r(1, 16), r(1, 16)
    use_bias = bool(rng.random() < 0.6)
    dtype = choice["dtype"]
    config = {"dtype": dtype} if rng.random() < 0.8 or dtype == "float64" else {}

    # Sizes: h (or d_k alone, the weights fixing h), sometimes the rest explicitly.
    if rng.random() < 0.15:
        config["d_k"] = d_k
    else:
        config["h"] = h
        if rng.random() < 0.5:
            config["d_k"] = d_k
    if rng.random() < 0.5:
        config["d_v"] = d_v
    for key, value in (("batch", B), ("seq_len", T), ("kv_seq_len", S), ("d_model", d_model),
                       ("kdim", kdim), ("vdim", vdim), ("d_out", d_out)):
        if rng.random() < 0.25:
            config[key] = value
    if not use_bias or rng.random() < 0.3:
        config["use_bias"] = use_bias
    scale = 1.0 / np.sqrt(d_k)
    if rng.random() < 0.3:
        scale = pick(rng, [-1.0, 1.0], p=[0.2, 0.8]) * float(rng.uniform(0.05, 1.5))
        config["scale"] = scale

    # Inputs: 3-D, or 2-D (meaning B = 1) when B is 1.
    files = {}

    def tensor(name, L, F):
        x = rng.standard_normal((B, L, F))
        if B == 1 and rng.random() < 0.5:
            x = x[0]
        files[name + ".npy"] = x.astype(file_dtype(rng))
        config[name] = name + ".npy"

    tensor("query", T, d_model)
    if mode == "query+value":
        tensor("value", S, vdim)
    elif mode == "query+key+value":
        tensor("key", S, kdim)
        tensor("value", S, vdim)

    # Weights, in one file dtype; non-zero biases.
    wd = file_dtype(rng)
    w = {"W_q": glorot(rng, d_model, h * d_k), "W_k": glorot(rng, kdim, h * d_k),
         "W_v": glorot(rng, vdim, h * d_v), "W_o": glorot(rng, h * d_v, d_out)}
    if use_bias:
        for name, n in (("b_q", h * d_k), ("b_k", h * d_k), ("b_v", h * d_v), ("b_o", d_out)):
            w[name] = rng.uniform(-0.5, 0.5, n)
    w = {k: v.astype(wd) for k, v in w.items()}
    if choice["weights_as"] == "dir":
        for k, v in w.items():
            files["weights/" + k + ".npy"] = v
        config["weights"] = "weights"
    else:
        files["weights.npz"] = {"__compressed__": choice["weights_as"] == "npz_compressed", **w}
        config["weights"] = "weights.npz"

    # Masking.
    causal = choice["causal"]
    if causal is not None:
        config["causal"] = causal
    kind = choice["mask"]
    if kind is not None:
        sizes = {"B": B, "h": h, "T": T, "S": S, "1": 1}
        shape = tuple(sizes[c] for c in choice["mask_shape"])
        if kind == "bool":
            m = rng.random(shape) < 0.7
        elif kind == "int":
            m = rng.choice([0, 0, 1, 2, 7], size=shape).astype(
                pick(rng, [np.int8, np.uint8, np.int16, np.int32, np.int64]))
        else:
            m = rng.normal(0.0, 2.0, size=shape)
            m[rng.random(shape) < 0.15] = -np.inf
            m = m.astype(file_dtype(rng))
        files["mask.npy"] = m
        config["mask"] = "mask.npy"
    if rng.random() < 0.4:
        lengths = rng.integers(0, S + 1, size=B)
        if rng.random() < 0.3:
            lengths[rng.integers(0, B)] = 0
        if rng.random() < 0.5:
            config["key_lengths"] = [int(x) for x in lengths]
        else:
            files["key_lengths.npy"] = lengths.astype(
                pick(rng, [np.int64, np.int32, np.int16, np.uint8]))
            config["key_lengths"] = "key_lengths.npy"
    policy = choice["policy"]
    if policy is not None:
        config["masked_rows"] = policy

    # Outputs.
    save_attention = bool(rng.random() < 0.85)
    average_heads = bool(rng.random() < 0.3)
    if save_attention or rng.random() < 0.5:
        config["save_attention"] = save_attention
    if average_heads or rng.random() < 0.3:
        config["average_heads"] = average_heads

    spec = dict(B=B, T=T, S=S, h=h, d_k=d_k, d_v=d_v, d_model=d_model, kdim=kdim, vdim=vdim,
                d_out=d_out, scale=scale, dtype=dtype, mode=mode, use_bias=use_bias,
                causal={None: "none", False: "none", True: "top-left"}.get(causal, causal),
                policy=policy or "zero", save_attention=save_attention,
                average_heads=average_heads)
    return config, files, spec


def write_files(directory, config, files):
    for rel, content in files.items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(content, dict):
            arrays = {k: v for k, v in content.items() if k != "__compressed__"}
            (np.savez_compressed if content.get("__compressed__") else np.savez)(path, **arrays)
        else:
            np.save(path, content)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def expected(directory, config, spec):
    """The reference, from the files as written (and as the binary reads them)."""
    compute = np.float64 if spec["dtype"] == "float64" else np.float32
    seen = lambda a: np.asarray(a).astype(compute).astype(np.float64)
    load = lambda name: np.load(os.path.join(directory, name))
    B, T, S, h = spec["B"], spec["T"], spec["S"], spec["h"]

    def inp(name, L, F):
        return seen(load(config[name])).reshape(B, L, F)

    xq = inp("query", T, spec["d_model"])
    if spec["mode"] == "self":
        xk = xv = xq
    elif spec["mode"] == "query+value":
        xk = xv = inp("value", S, spec["vdim"])
    else:
        xk, xv = inp("key", S, spec["kdim"]), inp("value", S, spec["vdim"])
    if config["weights"] == "weights.npz":
        with np.load(os.path.join(directory, "weights.npz")) as z:
            w = {k: seen(z[k]) for k in z.files}
    else:
        wdir = os.path.join(directory, "weights")
        w = {n[:-4]: seen(np.load(os.path.join(wdir, n))) for n in os.listdir(wdir)}

    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    allowed = np.ones((B, h, T, S), bool)
    if spec["causal"] == "top-left":
        allowed &= s <= t
    elif spec["causal"] == "bottom-right":
        allowed &= s <= t + S - T
    kl = config.get("key_lengths")
    if kl is not None:
        lengths = np.asarray(kl if isinstance(kl, list) else load(kl), np.int64)
        allowed &= np.arange(S) < lengths[:, None, None, None]
    float_mask = None
    if "mask" in config:
        m = load(config["mask"])
        if m.dtype == bool or np.issubdtype(m.dtype, np.integer):
            allowed &= to_4d(m != 0)
        else:
            float_mask = to_4d(seen(m))
    output, attention, dead = reference(xq, xk, xv, w, h, spec["d_k"], spec["d_v"],
                                        spec["scale"], allowed, float_mask, spec["policy"])
    if spec["average_heads"]:
        attention = attention.mean(axis=1)
    return output, attention, bool(dead.any())


def compare(what, got, want, tol):
    """None if got matches want, else a one-line description of the first mismatch."""
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, expected {want.shape}"
    got = got.astype(np.float64)
    want_nan = np.isnan(want)
    if not np.array_equal(np.isnan(got), want_nan):
        i = np.argwhere(np.isnan(got) != want_nan)[0]
        return (f"{what}: NaN pattern differs ({int(np.isnan(got).sum())} NaN, expected "
                f"{int(want_nan.sum())}); first at {tuple(int(x) for x in i)}: got "
                f"{got[tuple(i)]!r}, expected {want[tuple(i)]!r}")
    with np.errstate(invalid="ignore"):
        err = np.where(want_nan, 0.0, np.abs(got - want) / (1 + np.abs(want)))
    err = np.where(np.isfinite(err) | want_nan, err, np.inf)
    if err.size and err.max() > tol:
        i = np.unravel_index(np.argmax(err), err.shape)
        n = int((err > tol).sum())
        return (f"{what}: {n} of {err.size} elements differ by more than {tol:g}*(1+|ref|); "
                f"worst at {tuple(int(x) for x in i)}: got {got[i]!r}, expected {want[i]!r}")
    return None


def run_case(binary, seed, index, choice, keep, verbose):
    """Returns (list of problems, spec, max relative error, had dead rows)."""
    config, files, spec = draw_case(seed, index, choice)
    directory = tempfile.mkdtemp(prefix=f"mha_crosscheck_{index}_")
    problems = []
    worst = 0.0
    dead = False
    try:
        write_files(directory, config, files)
        cmd = [binary, "run", "-q", "--config", "config.json", "--out_dir", "out"]
        p = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            problems.append(f"exit code {p.returncode}, stderr: {p.stderr.strip()}")
            return problems, config, spec, worst, dead
        out = os.path.join(directory, "out")
        with open(os.path.join(out, "run.json")) as f:
            report = json.load(f)
        if report.get("status") != "complete":
            problems.append(f"run.json status {report.get('status')!r}, expected 'complete'")
        resolved = report.get("config", {})
        for key, want in (("batch", spec["B"]), ("seq_len", spec["T"]), ("kv_seq_len", spec["S"]),
                          ("h", spec["h"]), ("d_k", spec["d_k"]), ("d_v", spec["d_v"]),
                          ("d_model", spec["d_model"]), ("kdim", spec["kdim"]),
                          ("vdim", spec["vdim"]), ("d_out", spec["d_out"])):
            if resolved.get(key) != want:
                problems.append(f"run.json config.{key} = {resolved.get(key)!r}, expected {want}")
        if not np.isclose(resolved.get("scale") or 0.0, spec["scale"], rtol=1e-15, atol=0):
            problems.append(f"run.json config.scale = {resolved.get('scale')!r}, "
                            f"expected {spec['scale']!r}")

        ref_out, ref_att, dead = expected(directory, config, spec)
        tol = 1e-12 if spec["dtype"] == "float64" else 1e-5
        np_dtype = np.dtype(spec["dtype"])
        got_out = np.load(os.path.join(out, "output.npy"))
        if got_out.dtype != np_dtype:
            problems.append(f"output.npy dtype {got_out.dtype}, expected {np_dtype}")
        pairs = [("output.npy", got_out, ref_out)]
        att_path = os.path.join(out, "attention.npy")
        if spec["save_attention"]:
            if not os.path.exists(att_path):
                problems.append("attention.npy missing with save_attention")
            else:
                got_att = np.load(att_path)
                if got_att.dtype != np_dtype:
                    problems.append(f"attention.npy dtype {got_att.dtype}, expected {np_dtype}")
                pairs.append(("attention.npy", got_att, ref_att))
        elif os.path.exists(att_path):
            problems.append("attention.npy written without save_attention")
        for name, got, want in pairs:
            problem = compare(name, got, want, tol)
            if problem:
                problems.append(problem)
            elif got.size:
                with np.errstate(invalid="ignore"):
                    e = np.abs(got.astype(np.float64) - want) / (1 + np.abs(want))
                worst = max(worst, float(np.nanmax(e)) if np.isfinite(want).any() else 0.0)
        if verbose:
            print(f"case {index}: {spec['dtype']} B={spec['B']} T={spec['T']} S={spec['S']} "
                  f"h={spec['h']} d_k={spec['d_k']} d_v={spec['d_v']} {spec['mode']} "
                  f"causal={spec['causal']} mask={choice['mask']}/{choice['mask_shape']} "
                  f"masked_rows={spec['policy']}{' (dead rows)' if dead else ''}: "
                  f"max err {worst:.2g}{' FAIL' if problems else ''}")
        return problems, config, spec, worst, dead
    except Exception as e:  # a crash in this script is a failure too, with the config shown
        problems.append(f"{type(e).__name__}: {e}")
        return problems, config, spec, worst, dead
    finally:
        if keep:
            print(f"case {index}: files kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary", nargs="?", default=os.environ.get("MHA_BIN"),
                   help="path of the mha binary (default: $MHA_BIN)")
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--cases", type=int, default=25)
    p.add_argument("--only", type=int, action="append", help="run only case I (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep each case's temp dir")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = p.parse_args()
    if not args.binary:
        p.error("give the path of the mha binary (or set MHA_BIN)")
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        p.error(f"{binary} is not an executable")

    choices = plan(args.seed, args.cases)
    indices = args.only if args.only else range(args.cases)
    failed, worst, dead_cases = [], {"float32": 0.0, "float64": 0.0}, 0
    for i in indices:
        if not 0 <= i < args.cases:
            p.error(f"--only {i}: cases are 0..{args.cases - 1}")
        problems, config, spec, err, dead = run_case(binary, args.seed, i, choices[i],
                                                     args.keep, args.verbose)
        worst[spec["dtype"]] = max(worst[spec["dtype"]], err)
        dead_cases += dead
        if problems:
            failed.append(i)
            print(f"FAIL case {i} (rerun: {sys.argv[0]} {args.binary} --seed {args.seed} "
                  f"--cases {args.cases} --only {i} --keep)")
            for problem in problems:
                print(f"  {problem}")
            print("  config.json: " + json.dumps(config))
            print("  resolved: " + json.dumps({k: v for k, v in spec.items()}))
    n = len(list(indices))
    if failed:
        print(f"numpy_crosscheck: {len(failed)} of {n} cases FAILED (seed {args.seed}): "
              f"{', '.join(map(str, failed))}")
        return 1
    print(f"numpy_crosscheck: all {n} random cases match NumPy (seed {args.seed}; "
          f"{dead_cases} with fully masked rows; worst |err|/(1+|ref|): "
          f"float32 {worst['float32']:.2g}, float64 {worst['float64']:.2g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
