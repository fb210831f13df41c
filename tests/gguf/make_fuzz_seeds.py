#!/usr/bin/python3
"""Seeds for tests/fuzz/fuzz_gguf.cpp, from gguf_writer.py: small GGUF files (under 4 KiB,
fuzz_gguf's -max_len) with metadata of every value type, tensors of every type mha reads and
of some it lists but refuses, versions 2 and 3, several alignments, empty and 4-D tensors, and
two files the reader refuses, and a whole one-block llama checkpoint. Named by their SHA-1, as
libFuzzer names corpus files. With a second directory, also the named regressions (a
block_count of 2^32, NaN and infinite float metadata, in that checkpoint).

  /usr/bin/python3 tests/gguf/make_fuzz_seeds.py tests/fuzz/corpus/gguf tests/fuzz/regressions/gguf
"""
import hashlib
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ggml_reference  # noqa: E402
import gguf_writer  # noqa: E402

T = gguf_writer.TYPES


def tensors(rng, specs):
    out = []
    for name, t, dims in specs:
        n = int(np.prod(dims))
        if t in ggml_reference.BLOCKS:
            raw = ggml_reference.random_blocks(t, n, rng)
        else:
            per, size = gguf_writer.BLOCKS[t]
            raw = rng.integers(0, 256, size=n // per * size, dtype=np.uint8).tobytes()
        out.append((name, T[t], dims, raw))
    return out


def seeds():
    rng = np.random.default_rng(0)
    every_value = [
        ("general.architecture", "string", "llama"), ("u8", "uint8", 7), ("i8", "int8", -7),
        ("u16", "uint16", 700), ("i16", "int16", -700), ("u32", "uint32", 70000),
        ("i32", "int32", -70000), ("f32", "float32", 0.5), ("b", "bool", True),
        ("u64", "uint64", 2**40), ("i64", "int64", -2**40), ("f64", "float64", 1e-3),
        ("a.s", ("array", "string"), ["<s>", "</s>", ""]), ("a.i", ("array", "int32"), [1, -1]),
        ("a.f", ("array", "float32"), [0.5, 2.0]), ("a.b", ("array", "bool"), [True, False]),
        ("a.u8", ("array", "uint8"), [1, 2]), ("a.e", ("array", "uint64"), []),
    ]
    yield gguf_writer.encode(metadata=every_value)
    yield gguf_writer.encode(
        metadata=[("general.architecture", "string", "gpt2")], version=2,
        tensors=tensors(rng, [("f32", "F32", [3, 2]), ("f16", "F16", [4]),
                              ("bf16", "BF16", [2, 2])]))
    yield gguf_writer.encode(
        alignment=16,
        tensors=tensors(rng, [("q4_0", "Q4_0", [32]), ("q4_1", "Q4_1", [32, 2]),
                              ("q5_0", "Q5_0", [64]), ("q5_1", "Q5_1", [32]),
                              ("q8_0", "Q8_0", [32, 2])]))
    yield gguf_writer.encode(
        tensors=tensors(rng, [("q2_k", "Q2_K", [256]), ("q3_k", "Q3_K", [256]),
                              ("q4_k", "Q4_K", [256])]))
    yield gguf_writer.encode(
        alignment=8,
        tensors=tensors(rng, [("q5_k", "Q5_K", [256]), ("q6_k", "Q6_K", [256]),
                              ("q8_k", "Q8_K", [256])]))
    yield gguf_writer.encode(
        alignment=8,
        tensors=tensors(rng, [("iq2", "IQ2_XXS", [256]), ("nl", "IQ4_NL", [32]),
                              ("q8", "Q8_0", [32])]))
    empty = ("empty", T["Q4_0"], [0, 3], b"")
    yield gguf_writer.encode(
        alignment=1,
        tensors=[empty] + tensors(rng, [("d4", "F32", [2, 1, 2, 2]), ("d3", "F16", [1, 3, 1])]))
    good = gguf_writer.encode(tensors=tensors(rng, [("w", "F32", [8])]))
    yield good[:4] + struct.pack(">I", 3) + good[8:]  # refused: big-endian
    yield good[:-1]  # refused: the tensor runs past the end


def tiny_llama(rng, **changed):
    """A whole llama checkpoint of one block (d_model 8, 2 heads, vocab 4) in under 4 KiB, which
    fuzz_gguf also opens as a checkpoint; `changed` replaces metadata values (key after
    "llama.": (kind, value))."""
    meta = {"block_count": ("uint32", 1), "context_length": ("uint32", 16),
            "embedding_length": ("uint32", 8), "feed_forward_length": ("uint32", 8),
            "attention.head_count": ("uint32", 2), "attention.head_count_kv": ("uint32", 2),
            "attention.layer_norm_rms_epsilon": ("float32", 1e-5),
            "rope.freq_base": ("float32", 10000.0)}
    meta.update(changed)
    specs = [("token_embd.weight", "F32", [8, 4]), ("output_norm.weight", "F32", [8])]
    for name, dims in (("attn_norm", [8]), ("attn_q", [8, 8]), ("attn_k", [8, 8]),
                       ("attn_v", [8, 8]), ("attn_output", [8, 8]), ("ffn_norm", [8]),
                       ("ffn_gate", [8, 8]), ("ffn_up", [8, 8]), ("ffn_down", [8, 8])):
        specs.append((f"blk.0.{name}.weight", "F32", dims))
    ts = [(n, T[t], d, rng.standard_normal(int(np.prod(d))).astype("<f4").tobytes())
          for n, t, d in specs]
    return gguf_writer.encode(
        metadata=[("general.architecture", "string", "llama")] +
        [("llama." + k, kind, v) for k, (kind, v) in meta.items()], tensors=ts)


def regressions():
    """Inputs the checkpoint reader once looped on or took as the key's default: named files
    for tests/fuzz/regressions/gguf (fuzz_regression.gguf replays them)."""
    rng = np.random.default_rng(1)
    yield "block_count_2e32_loop.gguf", tiny_llama(rng, block_count=("uint64", 2**32))
    yield "block_count_2e40_loop.gguf", tiny_llama(rng, block_count=("uint64", 2**40))
    yield "block_count_past_blocks.gguf", tiny_llama(rng, block_count=("uint32", 2))
    yield "rms_epsilon_nan_default.gguf", tiny_llama(
        rng, **{"attention.layer_norm_rms_epsilon": ("float32", float("nan"))})
    yield "freq_base_minus_inf_default.gguf", tiny_llama(
        rng, **{"rope.freq_base": ("float64", float("-inf"))})


def main():
    """make_fuzz_seeds.py CORPUS_DIR [REGRESSIONS_DIR]"""
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for data in list(seeds()) + [tiny_llama(np.random.default_rng(2))]:
        assert len(data) <= 4096, len(data)
        with open(os.path.join(out, hashlib.sha1(data).hexdigest()), "wb") as f:
            f.write(data)
    if len(sys.argv) > 2:
        os.makedirs(sys.argv[2], exist_ok=True)
        for name, data in regressions():
            with open(os.path.join(sys.argv[2], name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
