#!/usr/bin/python3
"""GGUF files as `mha run --model FILE.gguf` reads them (lib/src/checkpoint/gguf_source.cpp),
against the safetensors checkpoints they were made from.

Each GGUF file is written here the way llama.cpp's convert_hf_to_gguf.py writes one (its
LlamaModel.permute of q_proj and k_proj rows, Gemma's 1 + w norms, GPT-2's Conv1D weights
transposed, gguf-py's tensor names, metadata keys and reversed dims), from the random
checkpoints of tests/models/checkpoints.py, with tests/gguf/gguf_writer.py (written from ggml's
docs/gguf.md). The inverse mha applies is not used here: the test only converts forward.

  Float32    F32 GGUF files of llama, qwen2, qwen3, gemma, gemma2, gemma3 and gpt2: the output
             and every attention map equal the safetensors run's (bit for bit where nothing is
             undone in float32 arithmetic; Gemma's norms, w = (1 + w) - 1, to 1e-6), from token
             ids and from text (the file's own tokenizer metadata against tokenizer.json); run
             through `mha analyze` and mha.Model too.
  Quantized  F16, BF16 and every quantized type mha reads (Q4_0 ... Q8_0, Q2_K ... Q6_K) in every
             architecture: random blocks with scales that give the weights their usual size;
             the maps equal those of a safetensors checkpoint holding the blocks' values
             dequantized by tests/gguf/ggml_reference.py, to 1e-5.
  Errors     an architecture mha has no family for, a tensor missing, Llama 3's rope_freqs, a
             truncated file, sizes declared past the file (a string of 2^63 bytes, an array of
             2^40 elements, 2^60 tensors, a tensor of 2^40 floats), a block_count past the
             tensors held (2^32) or the blocks held, NaN or infinite float metadata: exit 2, one
             line naming the file (and key), nothing written, peak RSS under 200 MB.

    MHA_BIN=build/bin/mha /usr/bin/python3 tests/models/test_gguf.py [TestCase ...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "gguf"))
import checkpoints  # noqa: E402
import ggml_reference  # noqa: E402
import gguf_writer  # noqa: E402

MHA = os.environ.get("MHA_BIN", os.path.join(HERE, "..", "..", "build", "bin", "mha"))
ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma": "gemma",
        "gemma2": "gemma2", "gemma3_text": "gemma3", "gpt2": "gpt2"}
# Configs a GGUF file can hold: llama.cpp keeps no query_pre_attn_scalar (head_dim here) nor a
# sliding-window pattern (Gemma 3's is 6), so the checkpoints use what its loader assumes.
SIZES = {"gemma2": dict(query_pre_attn_scalar=16),
         "gemma3_text": dict(layers=7, query_pre_attn_scalar=16, sliding_window_pattern=6)}

LAYER_NAMES = {  # gguf-py tensor_mapping.py: (GGUF name after blk.N., HF name after the prefix)
    "llama": [("attn_norm", "input_layernorm"), ("attn_q", "self_attn.q_proj"),
              ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
              ("attn_output", "self_attn.o_proj"), ("attn_q_norm", "self_attn.q_norm"),
              ("attn_k_norm", "self_attn.k_norm"), ("ffn_norm", "post_attention_layernorm"),
              ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
              ("ffn_down", "mlp.down_proj")],
    "gemma2": [("attn_norm", "input_layernorm"), ("attn_q", "self_attn.q_proj"),
               ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
               ("attn_output", "self_attn.o_proj"), ("attn_q_norm", "self_attn.q_norm"),
               ("attn_k_norm", "self_attn.k_norm"),
               ("post_attention_norm", "post_attention_layernorm"),
               ("ffn_norm", "pre_feedforward_layernorm"),
               ("post_ffw_norm", "post_feedforward_layernorm"), ("ffn_gate", "mlp.gate_proj"),
               ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj")],
    "gpt2": [("attn_norm", "ln_1"), ("attn_qkv", "attn.c_attn"), ("attn_output", "attn.c_proj"),
             ("ffn_norm", "ln_2"), ("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj")],
}


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute, as written there (numpy for torch)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_names(family, config, tensors):
    """{GGUF name: HF name} of the checkpoint's tensors (gguf-py's tensor_mapping.py)."""
    c = config
    if family == "gpt2":
        top = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight",
               "ln_f.weight": "output_norm.weight", "ln_f.bias": "output_norm.bias"}
        names, prefix, L = LAYER_NAMES["gpt2"], "h.{}.", c["n_layer"]
    else:
        top = {"model.embed_tokens.weight": "token_embd.weight",
               "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
        names = LAYER_NAMES["gemma2" if family in ("gemma2", "gemma3_text") else "llama"]
        prefix, L = "model.layers.{}.", c["num_hidden_layers"]
    out = {g: hf for hf, g in top.items() if hf in tensors}
    for n in range(L):
        for g, hf in names:
            for part in (".weight", ".bias"):
                if prefix.format(n) + hf + part in tensors:
                    out[f"blk.{n}.{g}{part}"] = prefix.format(n) + hf + part
    if family in ("gemma", "gemma2"):
        out.pop("output.weight", None)  # GemmaModel skips lm_head
    return out


def permuted_heads(family, config, g):
    """The head count LlamaModel.permute uses on GGUF tensor g, or None (not permuted)."""
    if family != "llama" or not (".attn_q." in g or ".attn_k." in g):
        return None
    return config["num_attention_heads"] if ".attn_q." in g else config["num_key_value_heads"]


def gemma_norm(family, g):
    return family.startswith("gemma") and g.endswith("norm.weight")


def transposed(family, g):
    return family == "gpt2" and g.endswith(".weight") and any(
        s in g for s in (".attn_qkv.", ".attn_output.", ".ffn_up.", ".ffn_down."))


def convert(family, config, tensors):
    """(metadata, {GGUF name: float32 array in the converter's layout}) of a checkpoint, as
    convert_hf_to_gguf.py writes them for its architecture."""
    arch = ARCH[family]
    c = config
    out = {}
    for g, hf in gguf_names(family, config, tensors).items():
        w = tensors[hf].astype(np.float32)
        if permuted_heads(family, c, g):
            w = permute(w, permuted_heads(family, c, g))
        if gemma_norm(family, g):
            w = w + np.float32(1)  # GemmaModel / Gemma2Model / Gemma3Model: data_torch + 1
        if transposed(family, g):
            w = w.T  # GPT2Model: c_attn, c_proj, c_fc weights transposed
        out[g] = np.ascontiguousarray(w, dtype=np.float32)
    k = arch + "."
    meta = [("general.architecture", "string", arch)]
    if family == "gpt2":
        meta += [(k + "block_count", "uint32", c["n_layer"]),
                 (k + "context_length", "uint32", c["n_ctx"]),
                 (k + "embedding_length", "uint32", c["n_embd"]),
                 (k + "feed_forward_length", "uint32", 4 * c["n_embd"]),
                 (k + "attention.head_count", "uint32", c["n_head"]),
                 (k + "attention.layer_norm_epsilon", "float32", c["layer_norm_epsilon"])]
        return meta, out
    meta += [(k + "block_count", "uint32", c["num_hidden_layers"]),
             (k + "context_length", "uint32", c["max_position_embeddings"]),
             (k + "embedding_length", "uint32", c["hidden_size"]),
             (k + "feed_forward_length", "uint32", c["intermediate_size"]),
             (k + "attention.head_count", "uint32", c["num_attention_heads"]),
             (k + "attention.head_count_kv", "uint32", c["num_key_value_heads"]),
             (k + "attention.layer_norm_rms_epsilon", "float32", c["rms_norm_eps"]),
             (k + "rope.freq_base", "float32", c.get("rope_theta", 10000.0))]
    if "head_dim" in c:
        meta += [(k + "attention.key_length", "uint32", c["head_dim"]),
                 (k + "attention.value_length", "uint32", c["head_dim"])]
    if family in ("gemma2", "gemma3_text"):
        meta.append((k + "attention.sliding_window", "uint32", c["sliding_window"]))
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if c.get(key):
                meta.append((k + key, "float32", c[key]))
    if family == "gemma3_text":
        meta.append((k + "rope.freq_base_swa", "float32", c["rope_local_base_freq"]))
    return meta, out


def write_gguf(path, meta, arrays, qtype="F32", rng=None):
    """The GGUF file of `arrays` (name: float32 array), 2-d weights in `qtype` (random blocks
    scaled to each array's size), the rest F32 as the converter keeps norms and biases.
    Returns {name: the float32 values the file holds} (the blocks dequantized)."""
    tensors, held = [], {}
    for name, a in arrays.items():
        quantize = qtype != "F32" and a.ndim == 2 and name != "position_embd.weight"
        if quantize:
            if qtype == "F16":
                raw = a.astype("<f2").tobytes()
            elif qtype == "BF16":  # the upper halves (truncated: any bits are a valid file)
                raw = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
            else:
                raw = scaled_blocks(qtype, a.size, rng, float(np.std(a)))
            held[name] = ggml_reference.dequantize(qtype, raw).reshape(a.shape)
            tensors.append((name, gguf_writer.TYPES[qtype], list(a.shape[::-1]), raw))
        else:
            held[name] = a
            tensors.append((name, gguf_writer.TYPES["F32"], list(a.shape[::-1]),
                            a.astype("<f4").tobytes()))
    gguf_writer.write(path, meta, tensors)
    return held


def scaled_blocks(qtype, n, rng, std):
    """Random blocks of `qtype` whose values have about `std` as their standard deviation: every
    scale field set to one value c (the values are linear in the scales together)."""
    raw = np.frombuffer(ggml_reference.random_blocks(qtype, n, rng), np.uint8).copy()
    size = ggml_reference.BLOCKS[qtype][1]
    b = raw.reshape(-1, size)

    def set_scales(c):
        for at in ggml_reference.HALF_FIELDS[qtype]:
            b[:, at:at + 2] = np.full(b.shape[0], c, "<f2").view(np.uint8).reshape(-1, 2)

    set_scales(1.0)
    unit = float(np.std(ggml_reference.dequantize(qtype, b.tobytes())))
    set_scales(std / unit)
    return b.tobytes()


def unconvert(family, config, held, tensors):
    """The safetensors tensors whose GGUF file holds `held`: convert() undone on each tensor
    (permute's row order found by permuting the row numbers with the converter's own code), so
    that both runs compute with the same numbers."""
    out = dict(tensors)
    for g, hf in gguf_names(family, config, tensors).items():
        v = held[g].astype(np.float32)
        if transposed(family, g):
            v = v.T
        if gemma_norm(family, g):
            v = v - np.float32(1)
        heads = permuted_heads(family, config, g)
        if heads:
            rows = permute(np.arange(v.shape[0]), heads)  # GGUF row i holds HF row rows[i]
            w = np.empty_like(v)
            w[rows] = v
            v = w
        out[hf] = np.ascontiguousarray(v)
    return out


def mha(args):
    p = subprocess.run([MHA] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


class Runs:
    """Runs of `mha run --model` on one set of token ids, results by directory."""

    def __init__(self, tmp, T=16):
        self.tmp = tmp
        self.ids = os.path.join(tmp, "ids.npy")
        self.T = T

    def run(self, model, name, vocab, dtype="float32"):
        np.save(self.ids, (np.arange(self.T, dtype=np.int64) * 7 + 3)[None] % vocab)
        out = os.path.join(self.tmp, name)
        code, _, err = mha(["run", "--model", model, "--tokens", self.ids, "--save_attention",
                            "--top_k", "0", "--dtype", dtype, "--out_dir", out, "-q"])
        if code != 0:
            raise AssertionError(f"mha run --model {model}: exit {code}: {err}")
        return (np.load(os.path.join(out, "output.npy")),
                np.load(os.path.join(out, "self_attention.npy")), out)


def make(family, **sizes):
    s = dict(SIZES.get(family, {}))
    s.update(sizes)
    return checkpoints.make(family, seed=3, **s)


def vocab_of(config):
    return config["vocab_size"]


class Float32(unittest.TestCase):
    def test_families(self):
        with tempfile.TemporaryDirectory() as tmp:
            runs = Runs(tmp)
            for family in ARCH:
                with self.subTest(family=family):
                    config, tensors = make(family)
                    d = os.path.join(tmp, family)
                    checkpoints.write(d, config, tensors)
                    meta, arrays = convert(family, config, tensors)
                    path = os.path.join(tmp, family + ".gguf")
                    write_gguf(path, meta, arrays)
                    out_st, att_st, _ = runs.run(d, family + "_st", vocab_of(config))
                    out_g, att_g, run_dir = runs.run(path, family + "_gguf", vocab_of(config))
                    self.assertEqual(out_g.shape, out_st.shape)
                    self.assertEqual(att_g.shape, att_st.shape)
                    if family.startswith("gemma"):
                        np.testing.assert_allclose(att_g, att_st, rtol=0, atol=1e-6)
                        scale = np.max(np.abs(out_st))
                        np.testing.assert_allclose(out_g, out_st, rtol=0, atol=1e-6 * scale)
                    else:  # nothing recomputed: the same float32 values, the same bits
                        np.testing.assert_array_equal(att_g, att_st)
                        np.testing.assert_array_equal(out_g, out_st)
                    with open(os.path.join(run_dir, "run.json")) as f:
                        m = json.load(f)["model"]
                    self.assertEqual([f["path"] for f in m["files"]], [path])
                    self.assertEqual(m["gguf_architecture"], ARCH[family])
                    self.assertEqual(m["stored_dtypes"], ["F32"])

    def test_text(self):
        """Every architecture from text: a byte-level BPE vocabulary as tokenizer.json beside the
        checkpoint and as tokenizer.ggml.* in its GGUF file (written as _set_vocab_gpt2 writes
        it, tests/models/test_gguf_tokenizer.py); the same ids, output and maps."""
        import test_gguf_tokenizer  # noqa: E402  (it imports this module)
        import tokenizer_files  # noqa: E402
        text = "the quick brown fox jumps over the lazy dog, then the fox naps"
        tok, _, n_vocab = tokenizer_files.byte_level_bpe([text] * 3, merges=20)
        meta_tok = test_gguf_tokenizer.gpt2_metadata("gpt2", tok, {})
        with tempfile.TemporaryDirectory() as tmp:
            for family in ARCH:
                with self.subTest(family=family):
                    config, tensors = make(family, vocab=n_vocab)
                    d = os.path.join(tmp, family)
                    checkpoints.write(d, config, tensors)
                    with open(os.path.join(d, "tokenizer.json"), "w") as f:
                        json.dump(tok, f)
                    meta, arrays = convert(family, config, tensors)
                    path = os.path.join(tmp, family + ".gguf")
                    write_gguf(path, meta + meta_tok, arrays)
                    got = {}
                    for name, model in (("st", d), ("gguf", path)):
                        out = os.path.join(tmp, f"{family}_{name}_text")
                        code, _, err = mha(["run", "--model", model, "--text", text,
                                            "--save_attention", "--top_k", "0", "--out_dir", out,
                                            "-q"])
                        self.assertEqual(code, 0, err)
                        with open(os.path.join(out, "tokens.json")) as f:
                            ids = json.load(f)
                        got[name] = (ids, np.load(os.path.join(out, "output.npy")),
                                     np.load(os.path.join(out, "self_attention.npy")))
                    self.assertEqual(got["gguf"][0]["ids"], got["st"][0]["ids"])
                    self.assertGreater(len(got["st"][0]["ids"][0]), 8)
                    tol = 1e-6 if family.startswith("gemma") else 0
                    np.testing.assert_allclose(got["gguf"][2], got["st"][2], rtol=0, atol=tol)
                    scale = np.max(np.abs(got["st"][1]))
                    np.testing.assert_allclose(got["gguf"][1], got["st"][1], rtol=0,
                                               atol=tol * scale)

    def test_analyze_and_python(self):
        """`mha analyze` and mha.Model on a GGUF file give what they give on its checkpoint."""
        family = "qwen2"
        config, tensors = make(family)
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "st")
            checkpoints.write(d, config, tensors)
            meta, arrays = convert(family, config, tensors)
            path = os.path.join(tmp, "m.gguf")
            write_gguf(path, meta, arrays)
            ids = os.path.join(tmp, "ids.npy")
            np.save(ids, (np.arange(12, dtype=np.int64) * 5 + 1)[None] % config["vocab_size"])
            got = {}
            for name, model in (("st", d), ("gguf", path)):
                out = os.path.join(tmp, "an_" + name)
                code, _, err = mha(["analyze", "--model", model, "--tokens", ids, "--method",
                                    "loss", "--method", "rollout", "--out_dir", out, "-q"])
                self.assertEqual(code, 0, err)
                got[name] = [np.load(os.path.join(out, f)) for f in ("loss.npy", "rollout.npy")]
            for a, b in zip(got["gguf"], got["st"]):
                np.testing.assert_array_equal(a, b)
            build_python = os.path.join(os.path.dirname(MHA), "..", "python")
            if os.path.isdir(build_python):  # the module, when built (docs/python.md)
                code = ("import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import mha; "
                        "ids = np.load(sys.argv[4]); "
                        "a = mha.Model(sys.argv[2])(ids); b = mha.Model(sys.argv[3])(ids); "
                        "assert np.array_equal(a['output'], b['output']), 'outputs differ'")
                p = subprocess.run([sys.executable, "-c", code, build_python, path, d, ids],
                                   capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)


class Quantized(unittest.TestCase):
    TYPES = ("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
             "Q5_K", "Q6_K")
    # rows of 256 for the k-quants' super-blocks (ggml quantizes along a row)
    WIDE = dict(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=96)
    SIZES = {"llama": WIDE, "qwen2": WIDE, "qwen3": WIDE, "gemma": dict(WIDE, kv_heads=1),
             "gemma2": dict(WIDE, query_pre_attn_scalar=64),
             "gemma3_text": dict(WIDE, query_pre_attn_scalar=64),
             "gpt2": dict(hidden=256, heads=4, vocab=96, layers=2)}

    def test_types(self):
        rng = np.random.default_rng(7)
        with tempfile.TemporaryDirectory() as tmp:
            runs = Runs(tmp)
            for family, sizes in self.SIZES.items():
                config, tensors = make(family, **sizes)
                meta, arrays = convert(family, config, tensors)
                for qtype in self.TYPES:
                    with self.subTest(family=family, type=qtype):
                        path = os.path.join(tmp, f"{family}-{qtype}.gguf")
                        held = write_gguf(path, meta, arrays, qtype, rng)
                        st = unconvert(family, config, held, tensors)
                        d = os.path.join(tmp, f"{family}-{qtype}")
                        checkpoints.write(d, config, st)
                        out_st, att_st, _ = runs.run(d, f"{family}-{qtype}-st", vocab_of(config))
                        out_g, att_g, _ = runs.run(path, f"{family}-{qtype}-g", vocab_of(config))
                        self.assertGreater(np.std(att_st), 1e-3)  # maps that show something
                        np.testing.assert_allclose(att_g, att_st, rtol=0, atol=1e-5)
                        scale = np.max(np.abs(out_st))
                        np.testing.assert_allclose(out_g, out_st, rtol=0, atol=1e-5 * scale)
                        with open(os.path.join(self.tmp_run(runs, family, qtype), "run.json")) as f:
                            stored = json.load(f)["model"]["stored_dtypes"]
                        self.assertEqual(stored, sorted({"F32", qtype}))
                        if qtype in ("BF16", "Q4_K"):  # bfloat16 GEMMs: the same packed weights
                            v = vocab_of(config)
                            _, att_st, _ = runs.run(d, f"{family}-{qtype}-st16", v, "bfloat16")
                            _, att_g, _ = runs.run(path, f"{family}-{qtype}-g16", v, "bfloat16")
                            np.testing.assert_array_equal(att_g, att_st)
                        shutil.rmtree(d)

    @staticmethod
    def tmp_run(runs, family, qtype):
        return os.path.join(runs.tmp, f"{family}-{qtype}-g")

    def test_unconvert_inverts_convert(self):
        """The test's own inverse: convert(unconvert(convert(x))) == convert(x)."""
        for family in ("llama", "gemma2", "gpt2"):
            config, tensors = make(family)
            _, arrays = convert(family, config, tensors)
            back = unconvert(family, config, arrays, tensors)
            for name, v in tensors.items():
                if name in back and ".attn.bias" not in name:
                    np.testing.assert_allclose(back[name], v, rtol=0, atol=1e-6, err_msg=name)


class Errors(unittest.TestCase):
    def refused(self, path, expect, tmp):
        out = os.path.join(tmp, "out")
        ids = os.path.join(tmp, "ids.npy")
        np.save(ids, np.zeros((1, 4), np.int64))
        code, _, err = mha(["run", "--model", path, "--tokens", ids, "--out_dir", out, "-q"])
        self.assertEqual(code, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn(path, lines[0])
        self.assertIn(expect, lines[0])
        self.assertFalse(os.path.exists(out))

    def test_bounded(self):
        """Sizes a file declares but cannot hold: refused before anything of that size is
        allocated (the process's peak RSS stays under 200 MB)."""
        import struct
        w = gguf_writer
        head = lambda n_tensors, n_kv: b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)
        arch = w.kv("general.architecture", "string", "llama")
        cases = {
            "string length 2^63": head(0, 2) + arch + w.gguf_string("k") +
            struct.pack("<I", w.VALUE_TYPES["string"]) + struct.pack("<Q", 1 << 63),
            "array of 2^40": head(0, 2) + arch + w.gguf_string("k") +
            struct.pack("<IIQ", w.VALUE_TYPES["array"], w.VALUE_TYPES["uint8"], 1 << 40),
            "2^60 tensors": head(1 << 60, 1) + arch,
            "a tensor of 2^40 floats": head(1, 1) + arch + w.gguf_string("token_embd.weight") +
            struct.pack("<IQQIQ", 2, 1 << 20, 1 << 20, 0, 0) + b"\0" * 64,
        }
        with tempfile.TemporaryDirectory() as tmp:
            ids = os.path.join(tmp, "ids.npy")
            np.save(ids, np.zeros((1, 4), np.int64))
            for what, data in cases.items():
                with self.subTest(what):
                    path = os.path.join(tmp, "hostile.gguf")
                    with open(path, "wb") as f:
                        f.write(data)
                    p = subprocess.Popen([MHA, "run", "--model", path, "--tokens", ids, "--out_dir",
                                          os.path.join(tmp, "out"), "-q"],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    p.stdout.close()
                    err = p.stderr.read().decode()
                    p.stderr.close()
                    _, status, usage = os.wait4(p.pid, 0)
                    p.returncode = 0  # reaped by wait4
                    self.assertEqual(os.waitstatus_to_exitcode(status), 2, err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertIn(path, err)
                    self.assertLess(usage.ru_maxrss / 1024, 200, err)

    def run_bounded(self, path, tmp, seconds=30):
        """`mha run --model path`: (exit code, stderr, peak RSS in MiB, wall seconds); killed
        after `seconds` (exit -9)."""
        import signal
        import time
        ids = os.path.join(tmp, "ids.npy")
        np.save(ids, np.zeros((1, 4), np.int64))
        out = os.path.join(tmp, "out-" + os.path.basename(path))
        start = time.monotonic()
        with tempfile.TemporaryFile() as err:
            p = subprocess.Popen([MHA, "run", "--model", path, "--tokens", ids, "--out_dir", out,
                                  "-q"], stdout=subprocess.DEVNULL, stderr=err)
            while True:  # wait4 for the peak RSS, polled for the time limit
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() - start > seconds:
                    os.kill(p.pid, signal.SIGKILL)
                    _, status, usage = os.wait4(p.pid, 0)
                    break
                time.sleep(0.02)
            p.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            text = err.read().decode()
        self.assertFalse(os.path.exists(out))
        return p.returncode, text, usage.ru_maxrss / 1024, time.monotonic() - start

    def test_counts_against_tensors(self):
        """block_count past the tensors the file holds: refused before a name is built per block
        (2^32 blocks looped for minutes before), and a last block the file lacks named."""
        config, tensors = make("llama")
        meta, arrays = convert("llama", config, tensors)
        with tempfile.TemporaryDirectory() as tmp:
            for blocks, kind, expect in (
                    (2**32, "uint64", '"llama.block_count" is 4294967296, but the file holds only '
                                      f"{len(arrays)} tensors"),
                    (2**40, "uint64", '"llama.block_count" is 1099511627776'),
                    (3, "uint32", '"llama.block_count" is 3, but the file holds no tensor of '
                                  "block 2 (blk.2.*)")):
                with self.subTest(blocks=blocks):
                    p = os.path.join(tmp, f"blocks_{blocks}.gguf")
                    write_gguf(p, [(k, kind, blocks) if k == "llama.block_count" else (k, t, v)
                                   for k, t, v in meta], arrays)
                    code, err, rss, seconds = self.run_bounded(p, tmp)
                    self.assertEqual(code, 2, err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertIn(p + ": metadata key " + expect, err)
                    self.assertLess(seconds, 10, err)
                    self.assertLess(rss, 200, err)

    def test_non_finite_metadata(self):
        """NaN and infinities in float metadata refused by key (a NaN became JSON null, the
        key's default, and ran; -1 and 0 were refused by the config's own checks)."""
        cases = [("llama", "attention.layer_norm_rms_epsilon", "float32", float("nan"), "nan"),
                 ("llama", "rope.freq_base", "float32", float("-inf"), "-inf"),
                 ("llama", "rope.scaling.factor", "float64", float("inf"), "inf"),
                 ("gemma2", "attn_logit_softcapping", "float32", float("nan"), "nan"),
                 ("gemma2", "final_logit_softcapping", "float32", float("inf"), "inf"),
                 ("gemma3_text", "rope.freq_base_swa", "float32", float("nan"), "nan"),
                 ("gpt2", "attention.layer_norm_epsilon", "float64", float("-inf"), "-inf")]
        made = {}
        with tempfile.TemporaryDirectory() as tmp:
            for family, key, kind, value, shown in cases:
                with self.subTest(family=family, key=key):
                    if family not in made:
                        config, tensors = make(family)
                        made[family] = convert(family, config, tensors)
                    meta, arrays = made[family]
                    k = ARCH[family] + "." + key
                    extra = ([(ARCH[family] + ".rope.scaling.type", "string", "linear")]
                             if key.startswith("rope.scaling") else [])
                    p = os.path.join(tmp, f"{family}-{key}.gguf")
                    write_gguf(p, [m for m in meta if m[0] != k] + extra + [(k, kind, value)],
                               arrays)
                    self.refused(p, f'metadata key "{k}" is {shown}, expected a finite number',
                                 tmp)

    def test_refusals(self):
        config, tensors = make("llama")
        meta, arrays = convert("llama", config, tensors)
        with tempfile.TemporaryDirectory() as tmp:
            p = os.path.join(tmp, "arch.gguf")
            write_gguf(p, [("general.architecture", "string", "mamba")] + meta[1:], arrays)
            self.refused(p, '"mamba"', tmp)
            p = os.path.join(tmp, "missing.gguf")
            write_gguf(p, meta, {k: v for k, v in arrays.items() if k != "blk.1.ffn_down.weight"})
            self.refused(p, "model.layers.1.mlp.down_proj.weight", tmp)
            p = os.path.join(tmp, "rope_freqs.gguf")
            write_gguf(p, meta, {**arrays, "rope_freqs.weight": np.ones(8, np.float32)})
            self.refused(p, "rope_freqs.weight", tmp)
            p = os.path.join(tmp, "truncated.gguf")
            write_gguf(p, meta, arrays)
            with open(p, "rb") as f:
                data = f.read()
            with open(p, "wb") as f:
                f.write(data[:len(data) // 2])
            self.refused(p, "truncated.gguf", tmp)
            p = os.path.join(tmp, "no_blocks.gguf")
            write_gguf(p, [m for m in meta if not m[0].endswith("block_count")], arrays)
            self.refused(p, "llama.block_count", tmp)


if __name__ == "__main__":
    unittest.main()
