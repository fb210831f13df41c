#!/usr/bin/python3
"""A small writer of the .safetensors format with NumPy, following the format's specification
(https://github.com/huggingface/safetensors, "Format"), not this tool's reader:

  8 bytes   N, the header's length, unsigned little-endian
  N bytes   a UTF-8 JSON object: {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
            ..., "__metadata__": {str: str}}; offsets relative to the byte after the header
  the rest  the tensors' bytes, little-endian, C order, one after another

The header is padded with spaces to a multiple of 8 bytes (as the Rust writer does) so that
every tensor starts 8-byte aligned. Tensors are written in name order (the Rust writer sorts by
dtype alignment, then name; any order is valid).

dtypes: F32, F16 (IEEE half, NumPy's round-to-nearest-even), BF16 (the upper 16 bits of the
float32, rounded to nearest even, as torch's float32 -> bfloat16 cast; NaN kept quiet), F64.

A sharded checkpoint is model-0000K-of-0000N.safetensors files and model.safetensors.index.json:
{"metadata": {"total_size": bytes of tensor data}, "weight_map": {NAME: shard file name}}, as
transformers' save_pretrained(max_shard_size=...) writes it.
"""
import json
import os
import struct

import numpy as np

DTYPES = ("F32", "F16", "BF16", "F64")


def to_bfloat16_bits(a):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest, ties to even; NaN stays NaN."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    rounded = np.where(nan, (u >> 16) | 0x40, rounded)  # keep the sign, force a quiet NaN
    return rounded.astype("<u2")


def from_bfloat16_bits(bits):
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (np.asarray(bits, dtype="<u2").astype("<u4") << 16).view("<f4")


def round_to_bfloat16(a):
    """The float32 values a BF16 tensor written from `a` holds."""
    return from_bfloat16_bits(to_bfloat16_bits(a)).reshape(np.shape(a))


def as_stored(a, dtype):
    """The values a tensor written as `dtype` holds, as float64 (what a reader widens to)."""
    a = np.asarray(a)
    if dtype == "BF16":
        return round_to_bfloat16(a.astype(np.float32)).astype(np.float64)
    return a.astype({"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dtype]).astype(np.float64)


def tensor_bytes(a, dtype):
    a = np.asarray(a)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(DTYPES)}")
    if dtype == "BF16":
        return to_bfloat16_bits(a.astype(np.float32)).tobytes()
    return np.ascontiguousarray(a, dtype={"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dtype]).tobytes()


def save_file(path, tensors, dtype="F32", metadata=None):
    """Writes {name: array} to path; dtype is one dtype for all, or {name: dtype}.
    Returns the number of tensor data bytes."""
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        dt = dtype[name] if isinstance(dtype, dict) else dtype
        raw = tensor_bytes(tensors[name], dt)
        header[name] = {"dtype": dt, "shape": [int(s) for s in np.shape(tensors[name])],
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    header["__metadata__"] = dict(metadata if metadata is not None else {"format": "pt"})
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return at


def shard_name(k, n):
    return f"model-{k:05d}-of-{n:05d}.safetensors"


def save_sharded(directory, tensors, num_shards, dtype="F32", metadata=None):
    """Splits the tensors (name order) into num_shards files of roughly equal byte size and writes
    model.safetensors.index.json beside them. Returns the index as a dict."""
    names = sorted(tensors)
    if not 1 <= num_shards <= len(names):
        raise ValueError(f"num_shards {num_shards}: between 1 and the {len(names)} tensors")
    sizes = [len(tensor_bytes(tensors[n], dtype[n] if isinstance(dtype, dict) else dtype)) for n in names]
    total, target = sum(sizes), sum(sizes) / num_shards
    groups, acc = [[]], 0
    for i, (n, s) in enumerate(zip(names, sizes)):
        left_names, left_groups = len(names) - i, num_shards - len(groups)
        if groups[-1] and (acc >= target * len(groups) or left_names == left_groups) and left_groups > 0:
            groups.append([])
        groups[-1].append(n)
        acc += s
    assert len(groups) == num_shards, (len(groups), num_shards)
    weight_map = {}
    for k, group in enumerate(groups, 1):
        fname = shard_name(k, num_shards)
        save_file(os.path.join(directory, fname), {n: tensors[n] for n in group}, dtype, metadata)
        weight_map.update({n: fname for n in group})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return index


def load_file(path):
    """Reads a .safetensors file back (F32, F16, BF16, F64) as {name: float32/float64 array};
    a check of the writer, not a validating reader."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out, base = {}, 8 + n
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        if e["dtype"] == "BF16":
            a = from_bfloat16_bits(np.frombuffer(raw, "<u2"))
        else:
            a = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[e["dtype"]])
        out[name] = a.reshape(e["shape"])
    return out


if __name__ == "__main__":
    # self-check: round trips, and bfloat16 rounding against torch when it is there
    import tempfile
    rng = np.random.default_rng(0)
    t = {"a": rng.standard_normal((3, 5)).astype(np.float32), "b.weight": rng.standard_normal(7),
         "c": np.float32([1.0, -0.0, np.inf, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.0e38])}
    with tempfile.TemporaryDirectory() as d, np.errstate(over="ignore"):  # 3e38 -> F16 inf
        for dt in DTYPES:
            p = os.path.join(d, dt + ".safetensors")
            save_file(p, t, dt)
            back = load_file(p)
            for k in t:
                assert np.array_equal(back[k].astype(np.float64), as_stored(t[k], dt)), (dt, k)
        for n in (1, 2, 3):
            idx = save_sharded(d, t, n)
            assert sorted(set(idx["weight_map"].values())) == [shard_name(k, n) for k in range(1, n + 1)]
            assert set(idx["weight_map"]) == set(t)
    try:
        import torch
        x = np.concatenate([rng.standard_normal(100000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 100000),
                            t["c"]]).astype(np.float32)
        want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(to_bfloat16_bits(x), want), "bfloat16 rounding differs from torch's"
        print("bfloat16 rounding matches torch's on", x.size, "values")
    except ImportError:
        pass
    # the files through this tool's reader (`mha inspect --json`), when the binary is there
    mha = os.environ.get("MHA_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                 "build", "bin", "mha"))
    if os.path.exists(mha):
        import subprocess
        w = {"embed.weight": rng.standard_normal((50, 16)).astype(np.float32),
             "layers.0.q.weight": rng.standard_normal((16, 16)).astype(np.float32) * 3,
             "layers.0.q.bias": rng.standard_normal(16).astype(np.float32), "scalar": np.float32(2.5)}
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for dt in ("F32", "F16", "BF16"):
                paths.append(os.path.join(d, dt + ".safetensors"))
                save_file(paths[-1], w, dt)
            save_sharded(d, w, 2, "BF16")
            paths += [os.path.join(d, shard_name(k, 2)) for k in (1, 2)]
            p = subprocess.run([mha, "inspect", "--json"] + paths, capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            rows = json.loads(p.stdout)
            seen = 0
            for r in rows:
                path, name = r["file"].rsplit(":", 1)
                dt = os.path.basename(path).split(".")[0]
                dt = dt if dt in DTYPES else "BF16"  # the shards
                want = as_stored(w[name], dt)
                assert r["header"]["shape"] == list(want.shape), (r["file"], r["header"])
                s = r["stats"]
                assert s["count"] == want.size and s["min"] == want.min() and s["max"] == want.max(), (r["file"], s)
                assert abs(s["mean"] - want.mean()) <= 1e-6 * (1 + abs(want.mean())), (r["file"], s)
                seen += 1
            assert seen == 3 * len(w) + len(w), seen
        print(f"mha inspect reads the {seen} tensors back with their shapes and values ({mha})")
    else:
        print(f"no {mha}: the read-back through mha inspect was not run")
    print("ok")
