#!/usr/bin/python3
"""One layer out of a whole-model checkpoint by the model's own names (mha/config/presets.hpp),
against NumPy transcriptions of each model's published attention, not of this tool's code.
The checkpoints are made here: random weights with Hugging Face's tensor names and shapes for
2-layer BERT, GPT-2 and LLaMA-style (and Qwen2-style, with q/k/v biases) models, written as
.safetensors by a few lines that follow the format's specification, with a config.json beside.

  /usr/bin/python3 tests/cli/test_presets.py   (MHA_BIN = path to mha)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_rope import llama_attention  # noqa: E402  (LLaMA's attention, transcribed there)

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
rng = np.random.default_rng(17)


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        raw = np.asarray(a, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(a)), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def u(*shape):
    return rng.uniform(-0.3, 0.3, shape).astype(np.float32)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def bert_self_attention(x, t, N, h):
    """transformers' BertSelfAttention + BertSelfOutput.dense (nn.Linear: x W^T + b)."""
    B, T, E = x.shape
    d = E // h
    p = f"encoder.layer.{N}.attention."
    lin = lambda v, name: v @ t[p + name + ".weight"].T + t[p + name + ".bias"]  # noqa: E731
    split = lambda v: v.reshape(B, T, h, d).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(lin(x, "self.query")), split(lin(x, "self.key")), split(lin(x, "self.value"))
    a = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d))
    return lin((a @ v).transpose(0, 2, 1, 3).reshape(B, T, E), "output.dense"), a


def gpt2_attention(x, t, N, h):
    """GPT-2's Attention: Conv1D c_attn (x W + b, W (E, 3E)) split into q|k|v, causal, c_proj."""
    B, T, E = x.shape
    d = E // h
    qkv = x @ t[f"h.{N}.attn.c_attn.weight"] + t[f"h.{N}.attn.c_attn.bias"]
    q, k, v = (qkv[..., i * E:(i + 1) * E].reshape(B, T, h, d).transpose(0, 2, 1, 3) for i in range(3))
    w = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    w = np.where(np.tril(np.ones((T, T), bool)), w, -1e4)  # GPT-2's masked_bias
    a = softmax(w)
    out = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, E)
    return out @ t[f"h.{N}.attn.c_proj.weight"] + t[f"h.{N}.attn.c_proj.bias"], a


class Presets(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_presets_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_mha(self, model, x, *extra, code=0):
        np.save(os.path.join(self.dir, "hidden.npy"), x)
        out = os.path.join(self.dir, "out")
        shutil.rmtree(out, ignore_errors=True)
        p = subprocess.run([MHA, "run", "--weights", os.path.join(self.dir, model, "model.safetensors"),
                            "--query", os.path.join(self.dir, "hidden.npy"), "--save_attention",
                            "--out_dir", out, "-q"] + list(extra), capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, code, p.stderr)
        if code:
            return p.stderr
        maps = os.path.join(out, "attention.npy")  # layer runs: self_attention.npy
        if not os.path.exists(maps):
            maps = os.path.join(out, "self_attention.npy")
        return np.load(os.path.join(out, "output.npy")), np.load(maps)

    def save(self, model, tensors, config):
        os.makedirs(os.path.join(self.dir, model))
        write_safetensors(os.path.join(self.dir, model, "model.safetensors"), tensors)
        with open(os.path.join(self.dir, model, "config.json"), "w") as f:
            json.dump(config, f)

    def bert_checkpoint(self, E, h, I):
        t = {"embeddings.word_embeddings.weight": u(50, E)}
        for N in range(2):
            p = f"encoder.layer.{N}."
            for n in ("query", "key", "value"):
                t[p + f"attention.self.{n}.weight"], t[p + f"attention.self.{n}.bias"] = u(E, E), u(E)
            t[p + "attention.output.dense.weight"], t[p + "attention.output.dense.bias"] = u(E, E), u(E)
            t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"] = u(E), u(E)
            t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = u(I, E), u(I)
            t[p + "output.dense.weight"], t[p + "output.dense.bias"] = u(E, I), u(E)
            t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"] = u(E) + 1, u(E)
        self.save("bert", t, {"model_type": "bert", "num_attention_heads": h, "hidden_size": E,
                              "layer_norm_eps": 1e-12})
        return t

    def test_bert(self):
        E, h, I = 32, 4, 64
        t = self.bert_checkpoint(E, h, I)
        x = rng.standard_normal((2, 7, E)).astype(np.float32)
        out, maps = self.run_mha("bert", x, "--layer_index", "1")
        want, want_maps = bert_self_attention(x.astype(np.float64), t, 1, h)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(maps, want_maps, rtol=1e-5, atol=1e-6)

    def test_bert_whole_layer(self):
        E, h, I = 32, 4, 64
        t = self.bert_checkpoint(E, h, I)
        x = rng.standard_normal((2, 7, E))
        out, maps = self.run_mha("bert", x, "--layer_index", "1", "--layer", "encoder",
                                 "--dtype", "float64")[0], None
        # transformers' BertLayer: BertAttention (self + dense, Add & LayerNorm), then
        # BertIntermediate (dense, gelu) and BertOutput (dense, Add & LayerNorm), eps 1e-12
        p = "encoder.layer.1."
        def norm(v, name):
            mu = v.mean(-1, keepdims=True)
            var = ((v - mu) ** 2).mean(-1, keepdims=True)
            return (v - mu) / np.sqrt(var + 1e-12) * t[p + name + ".weight"] + t[p + name + ".bias"]
        from math import erf, sqrt
        gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
        attn, _ = bert_self_attention(x, t, 1, h)
        h1 = norm(x + attn, "attention.output.LayerNorm")
        inter = gelu(h1 @ t[p + "intermediate.dense.weight"].T + t[p + "intermediate.dense.bias"])
        want = norm(h1 + inter @ t[p + "output.dense.weight"].T + t[p + "output.dense.bias"],
                    "output.LayerNorm")
        np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-9)

    def test_gpt2(self):
        E, h = 32, 4
        t = {"wte.weight": u(50, E)}
        for N in range(2):
            t[f"h.{N}.attn.c_attn.weight"], t[f"h.{N}.attn.c_attn.bias"] = u(E, 3 * E), u(3 * E)
            t[f"h.{N}.attn.c_proj.weight"], t[f"h.{N}.attn.c_proj.bias"] = u(E, E), u(E)
            t[f"h.{N}.attn.bias"] = np.tril(np.ones((1, 1, 8, 8), np.float32))  # a buffer
            t[f"h.{N}.ln_1.weight"], t[f"h.{N}.mlp.c_fc.weight"] = u(E), u(E, 4 * E)
        self.save("gpt2", t, {"model_type": "gpt2", "n_head": h})
        x = rng.standard_normal((2, 8, E)).astype(np.float32)
        out, maps = self.run_mha("gpt2", x, "--layer_index", "0")
        want, want_maps = gpt2_attention(x.astype(np.float64), t, 0, h)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(maps, want_maps, rtol=1e-5, atol=1e-6)

    def llama_like(self, model, biases, qk_norm=False):
        E, h, kv, d = 64, 4, 2, 16
        t = {"model.embed_tokens.weight": u(50, E)}
        for N in range(2):
            p = f"model.layers.{N}."
            t[p + "self_attn.q_proj.weight"] = u(h * d, E)
            t[p + "self_attn.k_proj.weight"] = u(kv * d, E)
            t[p + "self_attn.v_proj.weight"] = u(kv * d, E)
            t[p + "self_attn.o_proj.weight"] = u(E, h * d)
            if biases:
                for n, m in (("q", h), ("k", kv), ("v", kv)):
                    t[p + f"self_attn.{n}_proj.bias"] = u(m * d)
            if qk_norm:
                t[p + "self_attn.q_norm.weight"] = rng.uniform(0.5, 1.5, d).astype(np.float32)
                t[p + "self_attn.k_norm.weight"] = rng.uniform(0.5, 1.5, d).astype(np.float32)
            t[p + "input_layernorm.weight"], t[p + "mlp.gate_proj.weight"] = u(E), u(96, E)
        self.save(model, t, {"model_type": model, "num_attention_heads": h,
                             "num_key_value_heads": kv, "rope_theta": 500000.0,
                             "rms_norm_eps": 1e-5})
        x = rng.standard_normal((2, 9, E)).astype(np.float32)
        out, maps = self.run_mha(model, x, "--layer_index", "1")
        p = "model.layers.1.self_attn."
        w = {"W_q": t[p + "q_proj.weight"].T, "W_k": t[p + "k_proj.weight"].T,
             "W_v": t[p + "v_proj.weight"].T, "W_o": t[p + "o_proj.weight"].T}
        x64 = x.astype(np.float64)
        if biases:  # Qwen2: the q/k/v biases enter before RoPE; folded into an extra input column
            x64 = np.concatenate([x64, np.ones(x64.shape[:-1] + (1,))], -1)
            for n in ("q", "k", "v"):
                w["W_" + n] = np.concatenate([w["W_" + n], t[p + f"{n}_proj.bias"][None, :]], 0)
        w = {k: v.astype(np.float64) for k, v in w.items()}
        norms = None
        if qk_norm:
            norms = (t[p + "q_norm.weight"].astype(np.float64), t[p + "k_norm.weight"].astype(np.float64))
        want, want_maps = llama_attention(x64, x64, w, h, kv, 500000.0, d, 0, True, False,
                                          qk_norm=norms, eps=1e-5)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(maps, want_maps, rtol=1e-5, atol=1e-6)

    def test_llama(self):
        self.llama_like("llama", biases=False)

    def test_qwen2_biases(self):
        self.llama_like("qwen2", biases=True)

    def test_qwen3_qk_norm(self):
        self.llama_like("qwen3", biases=False, qk_norm=True)

    def test_one_layer_reads_only_its_bytes(self):
        # the same two layers with and without a 64 MiB embedding: picking layer 1 reads
        # that layer's tensors only, so the embedding costs no memory
        E, h = 32, 4
        t = {}
        for N in range(2):
            t[f"h.{N}.attn.c_attn.weight"], t[f"h.{N}.attn.c_attn.bias"] = u(E, 3 * E), u(3 * E)
            t[f"h.{N}.attn.c_proj.weight"], t[f"h.{N}.attn.c_proj.bias"] = u(E, E), u(E)
        self.save("small", t, {"n_head": h})
        self.save("big", dict(t, **{"wte.weight": np.ones((16384, 1024), np.float32)}), {"n_head": h})
        x = rng.standard_normal((1, 4, E)).astype(np.float32)
        peaks = {}
        for model in ("small", "big"):
            out, _ = self.run_mha(model, x, "--layer_index", "1")
            with open(os.path.join(self.dir, "out", "run.json")) as f:
                peaks[model] = json.load(f)["peak_rss_bytes"]
        self.assertLess(peaks["big"] - peaks["small"], 16 << 20, peaks)

    def test_errors_list_the_layers(self):
        self.save("g", {f"h.{N}.attn.c_attn.weight": u(8, 24) for N in (0, 1, 2)} |
                  {f"h.{N}.attn.c_attn.bias": u(24) for N in (0, 1, 2)} |
                  {f"h.{N}.attn.c_proj.weight": u(8, 8) for N in (0, 1, 2)} |
                  {f"h.{N}.attn.c_proj.bias": u(8) for N in (0, 1, 2)}, {"n_head": 2})
        x = rng.standard_normal((1, 4, 8)).astype(np.float32)
        err = self.run_mha("g", x, "--layer_index", "7", code=2)
        self.assertIn("no layer 7; the file holds layers 0, 1, 2", err)
        err = self.run_mha("g", x, code=2)
        self.assertIn("holds 3 layers (0, 1, 2); choose one with layer_index", err)
        err = self.run_mha("g", x, "--weights_prefix", "decoder.", code=2)
        self.assertIn("no tensor name starts with weights_prefix 'decoder.'", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
