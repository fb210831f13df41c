#!/usr/bin/python3
"""reference.py held against independent formulations, in float64, on the checkpoints of
checkpoints.py (right-padded batches; rows t < length compared):

- GPT-2: a forward built from torch.nn.functional primitives (layer_norm, linear,
  multi_head_attention_forward with need_weights and per-head weights, gelu(approximate="tanh"))
  with PyTorch's own causal and key-padding masks.
- BERT: torch.nn.TransformerEncoderLayer (post-norm, activation "gelu" = erf GELU,
  layer_norm_eps) with BERT's weights loaded into it, and its self_attn for the maps.
- LLaMA, Mistral, Qwen2, Qwen3: every layer's attention, each on this formulation's own
  previous output, then the final norm and the logits, against the NumPy transcription of
  Hugging Face's LLaMA attention in tests/cli/test_rope.py (rotate_half, repeat_kv, QK-norm,
  linear rope scaling; Qwen2's biases folded in as an extra input column), the rest of the layer
  (RMSNorm, SwiGLU) with torch.nn.functional; Mistral's sliding window as the unwindowed
  attention restricted to the window and renormalized.
- bfloat16 files: the reference on the widened values differs from float32's.
- bench/model_forward.py's float32 PyTorch GPT-2 against the reference.

  /usr/bin/python3 tests/models/check_reference.py
"""
import math
import os
import sys
import unittest

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import checkpoints  # noqa: E402
import reference  # noqa: E402
import safetensors_write as st  # noqa: E402
from test_rope import llama_attention  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)


def batch(config, T=13, lengths=(13, 8), seed=1):
    ids = np.random.default_rng(seed).integers(0, config["vocab_size"], (len(lengths), T))
    return ids, list(lengths)


def t64(a):
    return torch.as_tensor(np.asarray(a, np.float64))


class Reference(unittest.TestCase):
    def assert_rows(self, got, want, lengths, axis_t=1, msg=""):
        """got/want (B, T, ...) [or (B, h, T, T) with axis_t=2]: rows t < length per batch."""
        for b, n in enumerate(lengths):
            g = np.take(got[b], range(n), axis=axis_t - 1)
            w = np.take(want[b], range(n), axis=axis_t - 1)
            np.testing.assert_allclose(g, w, err_msg=f"{msg} batch {b}", **TOL)

    def test_gpt2_against_torch_functional(self):
        for prefixed in (False, True):
            config, t = checkpoints.make("gpt2", seed=3, prefixed=prefixed)
            ids, lengths = batch(config)
            got = reference.forward(config, t, ids, lengths)
            sd = {k: t64(v) for k, v in t.items()}
            p = "transformer." if prefixed else ""
            E, h, T = config["n_embd"], config["n_head"], ids.shape[1]
            eps = config["layer_norm_epsilon"]
            x = sd[p + "wte.weight"][torch.as_tensor(ids)] + sd[p + "wpe.weight"][:T]
            causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # True = not allowed
            pad = torch.arange(T)[None, :] >= torch.as_tensor(lengths)[:, None]
            hs, maps = [x], []
            for n in range(config["n_layer"]):
                q = f"{p}h.{n}."
                a = F.layer_norm(x, (E,), sd[q + "ln_1.weight"], sd[q + "ln_1.bias"], eps)
                y, w = F.multi_head_attention_forward(
                    a.transpose(0, 1), a.transpose(0, 1), a.transpose(0, 1), E, h,
                    sd[q + "attn.c_attn.weight"].T, sd[q + "attn.c_attn.bias"], None, None, False, 0.0,
                    sd[q + "attn.c_proj.weight"].T, sd[q + "attn.c_proj.bias"], training=False,
                    key_padding_mask=pad, need_weights=True, attn_mask=causal,
                    average_attn_weights=False)
                x = x + y.transpose(0, 1)
                m = F.layer_norm(x, (E,), sd[q + "ln_2.weight"], sd[q + "ln_2.bias"], eps)
                m = F.gelu(F.linear(m, sd[q + "mlp.c_fc.weight"].T, sd[q + "mlp.c_fc.bias"]),
                           approximate="tanh")
                x = x + F.linear(m, sd[q + "mlp.c_proj.weight"].T, sd[q + "mlp.c_proj.bias"])
                hs.append(x)
                maps.append(w)
            hs[-1] = F.layer_norm(x, (E,), sd[p + "ln_f.weight"], sd[p + "ln_f.bias"], eps)
            logits = hs[-1] @ sd[p + "wte.weight"].T
            for i in range(len(hs)):
                self.assert_rows(got["hidden_states"][i], hs[i].numpy(), lengths, msg=f"hidden {i}")
            for i in range(len(maps)):
                self.assert_rows(got["attentions"][i], maps[i].numpy(), lengths, axis_t=2, msg=f"maps {i}")
            self.assert_rows(got["logits"], logits.numpy(), lengths, msg="logits")
            np.testing.assert_array_equal(got["output"], got["hidden_states"][-1])

    def test_bert_against_transformer_encoder_layer(self):
        for prefixed in (False, True):
            config, t = checkpoints.make("bert", seed=4, prefixed=prefixed)
            ids, lengths = batch(config)
            got = reference.forward(config, t, ids, lengths)
            sd = {k: t64(v) for k, v in t.items()}
            p = "bert." if prefixed else ""
            E, h, I, T = config["hidden_size"], config["num_attention_heads"], config["intermediate_size"], ids.shape[1]
            eps = config["layer_norm_eps"]
            e = p + "embeddings."
            x = (sd[e + "word_embeddings.weight"][torch.as_tensor(ids)] + sd[e + "position_embeddings.weight"][:T]
                 + sd[e + "token_type_embeddings.weight"][0])
            x = F.layer_norm(x, (E,), sd[e + "LayerNorm.weight"], sd[e + "LayerNorm.bias"], eps)
            pad = torch.arange(T)[None, :] >= torch.as_tensor(lengths)[:, None]
            self.assert_rows(got["hidden_states"][0], x.numpy(), lengths, msg="embeddings")
            for n in range(config["num_hidden_layers"]):
                q = f"{p}encoder.layer.{n}."
                layer = torch.nn.TransformerEncoderLayer(E, h, I, dropout=0.0, activation="gelu",
                                                         layer_norm_eps=eps, batch_first=True,
                                                         norm_first=False).double().eval()
                s = layer.state_dict()
                s["self_attn.in_proj_weight"] = torch.cat([sd[q + f"attention.self.{w}.weight"] for w in ("query", "key", "value")])
                s["self_attn.in_proj_bias"] = torch.cat([sd[q + f"attention.self.{w}.bias"] for w in ("query", "key", "value")])
                for mine, theirs in (("self_attn.out_proj", "attention.output.dense"),
                                     ("linear1", "intermediate.dense"), ("linear2", "output.dense"),
                                     ("norm1", "attention.output.LayerNorm"), ("norm2", "output.LayerNorm")):
                    s[mine + ".weight"], s[mine + ".bias"] = sd[q + theirs + ".weight"], sd[q + theirs + ".bias"]
                layer.load_state_dict(s)
                with torch.no_grad():
                    _, w = layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=True,
                                           average_attn_weights=False)
                    # the fast path is for float32/16 only; float64 runs the plain math
                    x = layer(x, src_key_padding_mask=pad)
                self.assert_rows(got["attentions"][n], w.numpy(), lengths, axis_t=2, msg=f"maps {n}")
                self.assert_rows(got["hidden_states"][n + 1], x.numpy(), lengths, msg=f"hidden {n + 1}")
            self.assertIsNone(got["logits"])

    def llama_layer(self, family, config, t, g, rms, x, ids, lengths, layer, got):
        """Layer `layer` of a LLaMA-family model on `x`, checked against `got`; its output."""
        _, h, kv, d = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
        eps = config["rms_norm_eps"]
        L = config["num_hidden_layers"]
        sc = config.get("rope_scaling") or {}
        scaling = sc.get("factor", 1.0)
        p = f"model.layers.{layer}."
        a = rms(x, g(p + "input_layernorm.weight"))
        w = {f"W_{n}": g(p + f"self_attn.{n}_proj.weight").T for n in "qkvo"}
        a_in = a
        if family == "qwen2":  # biases as a ones column
            a_in = np.concatenate([a, np.ones(a.shape[:-1] + (1,))], -1)
            for n in "qkv":
                w["W_" + n] = np.concatenate([w["W_" + n], g(p + f"self_attn.{n}_proj.bias")[None]], 0)
        norms = None
        if family == "qwen3":
            norms = (g(p + "self_attn.q_norm.weight"), g(p + "self_attn.k_norm.weight"))
        out, maps = llama_attention(a_in, a_in, w, h, kv, config["rope_theta"], d, 0, True, False,
                                    scaling=scaling, qk_norm=norms, eps=eps)
        if family == "mistral":  # the window: the same logits, keys t - w < s <= t only
            T, win = ids.shape[1], config["sliding_window"]
            self.assertLess(win, T)
            s, q = np.arange(T)[None, :], np.arange(T)[:, None]
            inside = (s <= q) & (s > q - win)
            for b, n in enumerate(lengths):  # (padded query rows may see no key at all)
                np.testing.assert_array_equal(got["attentions"][layer][b, :, :n][..., ~inside[:n]], 0.0)
            maps = np.where(inside, maps, 0.0)
            maps /= maps.sum(-1, keepdims=True)
            vv = (a @ w["W_v"]).reshape(*a.shape[:2], kv, d).transpose(0, 2, 1, 3).repeat(h // kv, 1)
            out = (maps @ vv).transpose(0, 2, 1, 3).reshape(*a.shape[:2], h * d) @ w["W_o"]
        self.assert_rows(got["attentions"][layer], maps, lengths, axis_t=2, msg=f"{family} maps {layer}")
        x1 = t64(x + out)
        m = t64(rms(x1.numpy(), g(p + "post_attention_layernorm.weight")))
        x2 = x1 + F.linear(F.silu(F.linear(m, t64(t[p + "mlp.gate_proj.weight"]))) * F.linear(m, t64(t[p + "mlp.up_proj.weight"])),
                           t64(t[p + "mlp.down_proj.weight"]))
        if layer + 1 < L:  # the last entry is after the final norm (checked by the caller)
            self.assert_rows(got["hidden_states"][layer + 1], x2.numpy(), lengths,
                             msg=f"{family} hidden {layer + 1}")
        return x2.numpy()

    def llama_like(self, family, **kw):
        config, t = checkpoints.make(family, seed=5, **kw)
        ids, lengths = batch(config, T=14, lengths=(14, 10))
        got = reference.forward(config, t, ids, lengths)
        E, h, kv, d = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
        eps = config["rms_norm_eps"]
        sc = config.get("rope_scaling") or {}
        scaling = sc.get("factor", 1.0)
        g = lambda n: t[n].astype(np.float64)  # noqa: E731
        x = g("model.embed_tokens.weight")[ids]
        np.testing.assert_array_equal(got["hidden_states"][0], x)
        rms = lambda v, w: v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w  # noqa: E731
        L = config["num_hidden_layers"]
        self.assertEqual(got["hidden_states"].shape[0], L + 1)
        for layer in range(L):  # every layer, each from this formulation's own previous output
            x = self.llama_layer(family, config, t, g, rms, x, ids, lengths, layer, got)
        # the end: the final RMSNorm, then the LM head (tied or not), both from this chain
        last = rms(x, g("model.norm.weight"))
        self.assert_rows(got["hidden_states"][L], last, lengths, msg=family + " final norm")
        head = g("model.embed_tokens.weight") if config["tie_word_embeddings"] else g("lm_head.weight")
        self.assert_rows(got["logits"], last @ head.T, lengths, msg=family + " logits")
        return config, t, got

    def test_llama(self):
        self.llama_like("llama")

    def test_llama_linear_rope_scaling(self):
        for key in ("type", "rope_type"):
            config, _, got = self.llama_like("llama", rope_scaling={key: "linear", "factor": 2.0})
            unscaled = reference.forward(dict(config, rope_scaling=None), checkpoints.make("llama", seed=5)[1],
                                         *batch(config, T=14, lengths=(14, 10)))
            self.assertGreater(np.abs(unscaled["attentions"][0] - got["attentions"][0]).max(), 1e-3)

    def test_mistral_sliding_window(self):
        self.llama_like("mistral")

    def test_qwen2_biases(self):
        self.llama_like("qwen2")

    def test_qwen3_qk_norm(self):
        config, _, _ = self.llama_like("qwen3")
        self.assertNotEqual(config["head_dim"] * config["num_attention_heads"], config["hidden_size"])

    def test_bfloat16_values(self):
        config, t = checkpoints.make("gpt2")
        ids, lengths = batch(config)
        bf = {k: st.as_stored(v, "BF16") for k, v in t.items()}
        a = reference.forward(config, t, ids, lengths)["output"]
        b = reference.forward(config, bf, ids, lengths)["output"]
        self.assertGreater(np.abs(a - b).max(), 1e-4)  # the rounding shows
        self.assertLess(np.abs(a - b).max(), 0.5)

    def test_bench_torch_gpt2(self):
        """bench/model_forward.py's float32 PyTorch GPT-2 (the one timed) computes the same model."""
        sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
        import model_forward
        config, t = checkpoints.make("gpt2", seed=6)
        ids, _ = batch(config, lengths=(13, 13))
        want = reference.forward(config, t, ids)
        with torch.no_grad():
            x, maps = model_forward.torch_gpt2({k: torch.from_numpy(v) for k, v in t.items()},
                                               torch.from_numpy(ids), config["n_layer"], config["n_head"])
        np.testing.assert_allclose(x.numpy(), want["output"], rtol=1e-5, atol=1e-5)
        for m, a in zip(maps, want["attentions"]):
            np.testing.assert_allclose(m.numpy(), a, rtol=1e-5, atol=1e-5)

    def test_top_k(self):
        logits = np.array([[[0.0, 1.0, 2.0, math.log(3.0) + 2.0]]])
        (row,) = reference.top_k(logits, [1], 2)
        self.assertEqual([i for i, _ in row], [3, 2])
        z = np.exp([0.0, 1.0, 2.0, math.log(3.0) + 2.0])
        np.testing.assert_allclose([p for _, p in row], z[[3, 2]] / z.sum(), rtol=1e-15)


if __name__ == "__main__":
    unittest.main(verbosity=2)
