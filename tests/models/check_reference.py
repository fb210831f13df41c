#!/usr/bin/python3
"""reference.py held against independent formulations, in float64, on the checkpoints of
checkpoints.py (right-padded batches; rows t < length compared):

- GPT-2: a forward built from torch.nn.functional primitives (layer_norm, linear,
  multi_head_attention_forward with need_weights and per-head weights, gelu(approximate="tanh"))
  with PyTorch's own causal and key-padding masks.
- BERT: torch.nn.TransformerEncoderLayer (post-norm, activation "gelu" = erf GELU,
  layer_norm_eps) with BERT's weights loaded into it, and its self_attn for the maps.
- RoBERTa, XLM-RoBERTa: the same layers, the position ids from a loop over each row's ids
  (fairseq's make_positions: padding_idx + 1 on, a token equal to pad_token_id keeps
  padding_idx), RobertaModel's and RobertaForMaskedLM's names.
- LLaMA, Mistral, Qwen2, Qwen3, Phi-3: every layer's attention, each on this formulation's own
  previous output, then the final norm and the logits, against the NumPy transcription of
  Hugging Face's LLaMA attention in tests/cli/test_rope.py (rotate_half, repeat_kv, QK-norm,
  linear rope scaling, a partial rotary dimension; Qwen2's biases folded in as an extra input
  column; Phi-3's fused qkv_proj / gate_up_proj split by np.split), the rest of the layer
  (RMSNorm, SwiGLU) with torch.nn.functional; Mistral's and Phi-3's sliding window as the
  unwindowed attention restricted to the window and renormalized.
- GPT-NeoX: a NumPy loop over heads, queries and rotary pairs (each head's rows of the
  interleaved query_key_value, the rotary embedding as 2-D rotations of the pairs (j, j + r/2)
  of the first r = head_dim · rotary_pct features), parallel and sequential residuals;
  GPTNeoXModel's names give the same states and no logits.
- Gemma, Gemma 2, Gemma 3: a NumPy loop over heads and queries with the visible keys listed
  (the sliding layers given from HF's rules: Gemma 2 the even layers, Gemma 3
  bool((i + 1) % sliding_window_pattern) or layer_types), cap·tanh(s/cap) soft-capping,
  query_pre_attn_scalar, (1 + w) RMSNorms, the sandwich norms, sqrt(d)-scaled embeddings,
  Gemma 3's QK-norm and its two rope bases (test_rope's llama_rope), the final logit cap.
- OPT: torch.nn.functional (multi_head_attention_forward with PyTorch's masks), the positions a
  loop over the attention mask (real token i at row i + 2), pre-norm with the final layer norm
  and post-norm without it; OPTForCausalLM's and OPTModel's names.
- off=: every name of reference.FEATURES changes the hidden states or logits by more than 1e-4
  on the family's default checkpoint (a variant where the default lacks the feature); unknown
  names and names of another family raise.
- bfloat16 files: the reference on the widened values differs from float32's.
- bench/model_forward.py's float32 PyTorch GPT-2 against the reference.
- record=: the sites recorded (forward, vit, seq2seq) leave every output bit for bit as it was;
  each layer has the site names of kernel/site.hpp's table (no hook_resid_mid with a parallel
  residual), the shapes of the table, pattern = softmax(scores) = the attentions, resid_pre =
  the hidden states, resid_post of a pre-norm layer = the next layer's resid_pre.

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
from test_rope import llama_attention, llama_rope  # noqa: E402

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

    def check_encoder(self, family, prefixed, seed, ids, lengths, positions):
        """BERT-style encoder against nn.TransformerEncoderLayer, positions (B, T) given."""
        config, t = checkpoints.make(family, seed=seed, prefixed=prefixed)
        got = reference.forward(config, t, ids, lengths)
        sd = {k: t64(v) for k, v in t.items()}
        p = {"bert": "bert.", "roberta": "roberta.", "xlm-roberta": "roberta."}[family] if prefixed else ""
        E, h, I, T = config["hidden_size"], config["num_attention_heads"], config["intermediate_size"], ids.shape[1]
        eps = config["layer_norm_eps"]
        e = p + "embeddings."
        x = (sd[e + "word_embeddings.weight"][torch.as_tensor(ids)]
             + sd[e + "position_embeddings.weight"][torch.as_tensor(positions)]
             + sd[e + "token_type_embeddings.weight"][0])
        x = F.layer_norm(x, (E,), sd[e + "LayerNorm.weight"], sd[e + "LayerNorm.bias"], eps)
        pad = torch.arange(T)[None, :] >= torch.as_tensor(lengths)[:, None]
        self.assert_rows(got["hidden_states"][0], x.numpy(), lengths, msg=f"{family} embeddings")
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
            self.assert_rows(got["attentions"][n], w.numpy(), lengths, axis_t=2, msg=f"{family} maps {n}")
            self.assert_rows(got["hidden_states"][n + 1], x.numpy(), lengths, msg=f"{family} hidden {n + 1}")
        self.assertIsNone(got["logits"])
        return config

    def test_bert_against_transformer_encoder_layer(self):
        for prefixed in (False, True):
            config, _ = checkpoints.make("bert")
            ids, lengths = batch(config)
            self.check_encoder("bert", prefixed, 4, ids, lengths, np.tile(np.arange(ids.shape[1]), (2, 1)))

    def test_roberta_positions(self):
        """RoBERTa / XLM-RoBERTa: fairseq's make_positions written as a loop over each row (the
        ids decide: a token equal to pad_token_id keeps position padding_idx and does not count),
        the layers as BERT's, for RobertaModel's and RobertaForMaskedLM's names."""
        for family in ("roberta", "xlm-roberta"):
            for prefixed in (False, True):
                config, _ = checkpoints.make(family)
                pad = config["pad_token_id"]
                self.assertEqual(pad, 1)
                ids, lengths = batch(config, seed=2)
                ids[ids == pad] = pad + 1
                ids[0, 5] = pad                # a real token that is the padding id
                ids[1, lengths[1]:] = pad      # the padded tail as a tokenizer fills it
                positions = np.zeros_like(ids)
                for b in range(ids.shape[0]):
                    count = pad
                    for i, tok in enumerate(ids[b]):
                        if tok != pad:
                            count += 1
                            positions[b, i] = count
                        else:
                            positions[b, i] = pad
                self.assertEqual(positions[0, :7].tolist(), [2, 3, 4, 5, 6, 1, 7])
                self.assertEqual(config["max_position_embeddings"], 64 + 2)
                self.check_encoder(family, prefixed, 8, ids, lengths, positions)

    def llama_layer(self, family, config, t, g, rms, x, ids, lengths, layer, got):
        """Layer `layer` of a LLaMA-family model on `x`, checked against `got`; its output."""
        E, h, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
        d = config.get("head_dim") or E // h
        rot = int(d * config.get("partial_rotary_factor", 1.0))  # Phi-3: the rotated features
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
        out, maps = llama_attention(a_in, a_in, w, h, kv, config["rope_theta"], rot, 0, True, False,
                                    scaling=scaling, qk_norm=norms, eps=eps)
        if family in ("mistral", "phi3"):  # the window: the same logits, keys t - w < s <= t only
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
        eps = config["rms_norm_eps"]
        if family == "phi3":  # the fused projections as separate ones: rows q | k | v, gate | up
            t = dict(t)
            h, kv, I = config["num_attention_heads"], config["num_key_value_heads"], config["intermediate_size"]
            d = config["hidden_size"] // h
            for n in range(config["num_hidden_layers"]):
                p = f"model.layers.{n}."
                (t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"],
                 t[p + "self_attn.v_proj.weight"]) = np.split(t.pop(p + "self_attn.qkv_proj.weight"),
                                                              [h * d, (h + kv) * d])
                t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"] = np.split(
                    t.pop(p + "mlp.gate_up_proj.weight"), [I])
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

    def test_phi3_fused_partial_rotary_window(self):
        config, _, _ = self.llama_like("phi3")
        self.assertEqual((config["partial_rotary_factor"], config["sliding_window"]), (1.0, 4))
        config, _, _ = self.llama_like("phi3", partial_rotary_factor=0.5)
        self.assertEqual(int(16 * config["partial_rotary_factor"]), 8)

    def compare(self, family, got, hs, maps, logits, lengths):
        """hs: this formulation's L + 1 hidden states; maps, logits likewise (rows t < length)."""
        self.assertEqual(len(got["hidden_states"]), len(hs))
        for i, x in enumerate(hs):
            self.assert_rows(got["hidden_states"][i], x, lengths, msg=f"{family} hidden {i}")
        for i, m in enumerate(maps):
            self.assert_rows(got["attentions"][i], m, lengths, axis_t=2, msg=f"{family} maps {i}")
        if logits is None:
            self.assertIsNone(got["logits"])
        else:
            self.assert_rows(got["logits"], logits, lengths, msg=f"{family} logits")

    def test_gpt_neox_per_head_loop(self):
        """GPT-NeoX as a NumPy loop over heads, queries and rotary pairs: each head's q, k, v rows
        taken from query_key_value's interleaved (heads, 3, head_dim) layout, the rotary
        embedding as 2-D rotations of the pairs (j, j + r/2), j < r/2, of the first
        r = head_dim · rotary_pct features (angle t · base^(-2j/r)), the rest untouched;
        parallel residual x + attn(ln1(x)) + mlp(ln2(x)) or the sequential one."""
        for parallel in (True, False):
            config, t = checkpoints.make("gpt_neox", seed=9, use_parallel_residual=parallel)
            ids, lengths = batch(config, T=13, lengths=(13, 9))
            got = reference.forward(config, t, ids, lengths)
            g = lambda n: t["gpt_neox." + n].astype(np.float64)  # noqa: E731
            E, h, L = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
            d, eps, base = E // h, config["layer_norm_eps"], config["rotary_emb_base"]
            r = int(d * config["rotary_pct"])
            self.assertEqual((d, r), (16, 4))
            B, T = ids.shape

            def ln(x, name):
                return F.layer_norm(t64(x), (E,), t64(g(name + ".weight")), t64(g(name + ".bias")), eps).numpy()

            def rotate(v, pos):  # one head's (d,) vector at position pos
                out = v.copy()
                for j in range(r // 2):
                    a = pos * base ** (-2.0 * j / r)
                    x1, x2 = v[j], v[j + r // 2]
                    out[j], out[j + r // 2] = x1 * math.cos(a) - x2 * math.sin(a), x2 * math.cos(a) + x1 * math.sin(a)
                return out

            x = g("embed_in.weight")[ids]
            hs, maps = [x], []
            for n in range(L):
                p = f"layers.{n}."
                a_in = ln(x, p + "input_layernorm")
                W, bias = g(p + "attention.query_key_value.weight"), g(p + "attention.query_key_value.bias")
                ctx, m = np.zeros((B, T, E)), np.zeros((B, h, T, T))
                for head in range(h):
                    rows = [slice(head * 3 * d + i * d, head * 3 * d + (i + 1) * d) for i in range(3)]
                    q, k, v = (a_in @ W[s_].T + bias[s_] for s_ in rows)
                    for b in range(B):
                        kr = np.stack([rotate(k[b, s_], s_) for s_ in range(T)])
                        for tq in range(lengths[b]):
                            z = kr[:tq + 1] @ rotate(q[b, tq], tq) / math.sqrt(d)
                            w = np.exp(z - z.max())
                            w /= w.sum()
                            m[b, head, tq, :tq + 1] = w
                            ctx[b, tq, head * d:(head + 1) * d] = w @ v[b, :tq + 1]
                attn = ctx @ g(p + "attention.dense.weight").T + g(p + "attention.dense.bias")

                def mlp(y):
                    y = F.gelu(t64(y @ g(p + "mlp.dense_h_to_4h.weight").T + g(p + "mlp.dense_h_to_4h.bias"))).numpy()
                    return y @ g(p + "mlp.dense_4h_to_h.weight").T + g(p + "mlp.dense_4h_to_h.bias")

                if parallel:
                    x = x + attn + mlp(ln(x, p + "post_attention_layernorm"))
                else:
                    x = x + attn
                    x = x + mlp(ln(x, p + "post_attention_layernorm"))
                hs.append(x)
                maps.append(m)
            hs[-1] = ln(x, "final_layer_norm")
            self.compare("gpt_neox", got, hs, maps, hs[-1] @ t["embed_out.weight"].astype(np.float64).T, lengths)
            # GPTNeoXModel's names (no gpt_neox. prefix, no embed_out): the same states, no logits
            config2, t2 = checkpoints.make("gpt_neox", seed=9, use_parallel_residual=parallel, prefixed=False)
            self.assertNotIn("embed_out.weight", t2)
            base_model = reference.forward(config2, t2, ids, lengths)
            np.testing.assert_array_equal(base_model["hidden_states"], got["hidden_states"])
            self.assertIsNone(base_model["logits"])

    def gemma_numpy(self, family, config, t, ids, lengths, sliding):
        """Gemma, Gemma 2, Gemma 3 in NumPy, its attention a loop over heads and queries with the
        window, soft-cap and scale spelt out; `sliding` lists the windowed layers (given by the
        caller from HF's rules, not derived here)."""
        g = lambda n: t[n].astype(np.float64)  # noqa: E731
        E, h, kv, d = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"))
        L, eps = config["num_hidden_layers"], config["rms_norm_eps"]
        B, T = ids.shape
        cap = config.get("attn_logit_softcapping")
        final_cap = config.get("final_logit_softcapping")
        scale = config["query_pre_attn_scalar"] ** -0.5 if family != "gemma" else d ** -0.5
        window = config.get("sliding_window")

        def norm(v, name):  # GemmaRMSNorm: the weight stored as w of 1 + w
            return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * (1.0 + g(name))

        def gelu_tanh(v):
            return F.gelu(t64(v), approximate="tanh").numpy()

        x = g("model.embed_tokens.weight")[ids] * math.sqrt(E)
        hs, maps = [x], []
        for n in range(L):
            p = f"model.layers.{n}."
            theta = config.get("rope_theta", 10000.0)
            if family == "gemma3_text" and sliding[n]:
                theta = config["rope_local_base_freq"]
            factor = 1.0
            if family == "gemma3_text" and not sliding[n] and config.get("rope_scaling"):
                factor = config["rope_scaling"]["factor"]
            a_in = norm(x, p + "input_layernorm.weight")
            q = (a_in @ g(p + "self_attn.q_proj.weight").T).reshape(B, T, h, d).transpose(0, 2, 1, 3)
            k = (a_in @ g(p + "self_attn.k_proj.weight").T).reshape(B, T, kv, d).transpose(0, 2, 1, 3)
            v = (a_in @ g(p + "self_attn.v_proj.weight").T).reshape(B, T, kv, d).transpose(0, 2, 1, 3)
            if family == "gemma3_text":
                q, k = norm(q, p + "self_attn.q_norm.weight"), norm(k, p + "self_attn.k_norm.weight")
            q = llama_rope(q, np.arange(T) / factor, theta, d, False)
            k = llama_rope(k, np.arange(T) / factor, theta, d, False)
            ctx, m = np.zeros((B, T, h * d)), np.zeros((B, h, T, T))
            for b in range(B):
                for head in range(h):
                    j = head // (h // kv)
                    for tq in range(lengths[b]):
                        keys = [s_ for s_ in range(tq + 1) if not sliding[n] or tq - s_ < window]
                        z = np.array([q[b, head, tq] @ k[b, j, s_] for s_ in keys]) * scale
                        if cap is not None:
                            z = cap * np.tanh(z / cap)
                        w = np.exp(z - z.max())
                        w /= w.sum()
                        m[b, head, tq, keys] = w
                        ctx[b, tq, head * d:(head + 1) * d] = w @ v[b, j, keys]
            y = ctx @ g(p + "self_attn.o_proj.weight").T

            def mlp(u):
                return (gelu_tanh(u @ g(p + "mlp.gate_proj.weight").T) * (u @ g(p + "mlp.up_proj.weight").T)) \
                    @ g(p + "mlp.down_proj.weight").T

            if family == "gemma":
                x = x + y
                x = x + mlp(norm(x, p + "post_attention_layernorm.weight"))
            else:
                x = x + norm(y, p + "post_attention_layernorm.weight")
                m_out = mlp(norm(x, p + "pre_feedforward_layernorm.weight"))
                x = x + norm(m_out, p + "post_feedforward_layernorm.weight")
            hs.append(x)
            maps.append(m)
        hs[-1] = norm(x, "model.norm.weight")
        logits = hs[-1] @ g("model.embed_tokens.weight").T
        if final_cap is not None:
            logits = final_cap * np.tanh(logits / final_cap)
        return hs, maps, logits

    def check_gemma(self, family, sliding, **kw):
        config, t = checkpoints.make(family, seed=10, **kw)
        ids, lengths = batch(config, T=14, lengths=(14, 10))
        got = reference.forward(config, t, ids, lengths)
        self.compare(family, got, *self.gemma_numpy(family, config, t, ids, lengths, sliding), lengths)
        for n, windowed in enumerate(sliding):  # a windowed layer's maps: 0 outside the window
            if windowed:
                s_, q = np.arange(14)[None, :], np.arange(14)[:, None]
                outside = (s_ <= q) & (q - s_ >= config["sliding_window"])
                self.assertTrue((got["attentions"][n][0][:, outside] == 0).all())
        return config, got

    def test_gemma(self):
        config, _ = self.check_gemma("gemma", [False, False])
        self.assertNotEqual(config["head_dim"] * config["num_attention_heads"], config["hidden_size"])

    def test_gemma2_softcap_and_sandwich_norms(self):
        # HF Gemma2Attention: sliding_window "if not bool(layer_idx % 2)": layers 0 and 2
        config, got = self.check_gemma("gemma2", [True, False, True])
        self.assertNotEqual(config["query_pre_attn_scalar"], config["head_dim"])
        # the final soft-cap bounds the logits; the attention one acts (checked through the maps)
        self.assertLess(np.abs(got["logits"]).max(), config["final_logit_softcapping"])

    def test_gemma3_text(self):
        # sliding_window_pattern 3: bool((i + 1) % 3) -> layers 0, 1, 3 sliding, 2 global
        self.check_gemma("gemma3_text", [True, True, False, True])
        # layer_types wins over the pattern; soft-caps and linear rope scaling of the global layers
        types = ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]
        self.check_gemma("gemma3_text", [False, True, False, True], layer_types=types,
                         attn_logit_softcapping=6.0, final_logit_softcapping=4.0,
                         rope_scaling={"rope_type": "linear", "factor": 2.0})

    def test_opt_positions_and_norm_order(self):
        """OPT through torch.nn.functional (multi_head_attention_forward with PyTorch's causal
        and key-padding masks), the positions a loop over each row of the attention mask:
        the i-th real token reads embed_positions row i + 2 (OPT's offset), pre-norm with the
        final layer norm, post-norm (OPT-350m's order) without it; OPTForCausalLM's names and
        OPTModel's."""
        for pre, prefixed in ((True, True), (False, True), (True, False)):
            config, t = checkpoints.make("opt", seed=11, do_layer_norm_before=pre, prefixed=prefixed)
            ids, lengths = batch(config, T=13, lengths=(13, 8))
            got = reference.forward(config, t, ids, lengths)
            p = "model.decoder." if prefixed else "decoder."
            sd = {k: t64(v) for k, v in t.items()}
            self.assertEqual(sd[p + "embed_positions.weight"].shape[0], config["max_position_embeddings"] + 2)
            self.assertEqual(p + "final_layer_norm.weight" in sd, pre)
            E, h, T = config["hidden_size"], config["num_attention_heads"], ids.shape[1]
            positions = np.zeros_like(ids)
            for b, n in enumerate(lengths):
                for i in range(T):
                    positions[b, i] = i + 2 if i < n else 1  # (cumsum(mask)·mask - 1) + 2
            x = (sd[p + "embed_tokens.weight"][torch.as_tensor(ids)]
                 + sd[p + "embed_positions.weight"][torch.as_tensor(positions)])
            causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
            pad = torch.arange(T)[None, :] >= torch.as_tensor(lengths)[:, None]
            ln = lambda v, name: F.layer_norm(v, (E,), sd[name + ".weight"], sd[name + ".bias"], 1e-5)  # noqa: E731
            hs, maps = [x], []
            for n in range(config["num_hidden_layers"]):
                q = f"{p}layers.{n}."
                a = ln(x, q + "self_attn_layer_norm") if pre else x
                w_in = torch.cat([sd[q + f"self_attn.{w}_proj.weight"] for w in "qkv"])
                b_in = torch.cat([sd[q + f"self_attn.{w}_proj.bias"] for w in "qkv"])
                y, w = F.multi_head_attention_forward(
                    a.transpose(0, 1), a.transpose(0, 1), a.transpose(0, 1), E, h, w_in, b_in, None, None, False,
                    0.0, sd[q + "self_attn.out_proj.weight"], sd[q + "self_attn.out_proj.bias"], training=False,
                    key_padding_mask=pad, need_weights=True, attn_mask=causal, average_attn_weights=False)
                x = x + y.transpose(0, 1)
                if not pre:
                    x = ln(x, q + "self_attn_layer_norm")
                m = ln(x, q + "final_layer_norm") if pre else x
                x = x + F.linear(F.relu(F.linear(m, sd[q + "fc1.weight"], sd[q + "fc1.bias"])),
                                 sd[q + "fc2.weight"], sd[q + "fc2.bias"])
                if not pre:
                    x = ln(x, q + "final_layer_norm")
                hs.append(x)
                maps.append(w)
            if pre:
                hs[-1] = ln(x, p + "final_layer_norm")
            logits = hs[-1] @ sd[p + "embed_tokens.weight"].T  # tied
            self.compare("opt", got, [v.numpy() for v in hs], [m.numpy() for m in maps], logits.numpy(), lengths)

    # features whose default checkpoint lacks them, and the variant that has them
    OFF_VARIANTS = {
        ("qwen2", "sliding_window"): (dict(), dict(use_sliding_window=True, max_window_layers=1)),
        ("qwen3", "sliding_window"): (dict(), dict(use_sliding_window=True, max_window_layers=1)),
        ("gemma3_text", "softcap"): (dict(attn_logit_softcapping=8.0, final_logit_softcapping=5.0), {}),
        ("phi3", "partial_rotary"): (dict(partial_rotary_factor=0.5), {}),
    }

    def test_off_switches(self):
        """Every feature of reference.FEATURES, turned off, changes the outputs (rows t < length
        of the hidden states and logits) by more than 1e-4 on the family's default checkpoint
        (a variant for the four the default lacks); bad names raise."""
        checked = set()
        for family in checkpoints.FAMILIES:
            for feature in reference.FEATURES[family]:
                sizes, config_extra = self.OFF_VARIANTS.get((family, feature), ({}, {}))
                config, t = checkpoints.make(family, **sizes)
                config = dict(config, **config_extra)
                ids, lengths = batch(config, T=16, lengths=(16, 11))
                on = reference.forward(config, t, ids, lengths)
                off = reference.forward(config, t, ids, lengths, off={feature})
                diff = max(np.abs(on[k][..., b, :n, :] - off[k][..., b, :n, :]).max()  # real rows of each b
                           for k in ("hidden_states", "logits") if on[k] is not None
                           for b, n in enumerate(lengths))
                self.assertGreater(diff, 1e-4, f"{family}: off={feature} changes nothing")
                checked.add(feature)
        self.assertEqual(checked, set(reference.ALL_FEATURES))
        config, t = checkpoints.make("gemma2")
        ids, lengths = batch(config)
        self.assertEqual(reference.forward(config, t, ids, lengths, off="softcap")["output"].tolist(),
                         reference.forward(config, t, ids, lengths, off=["softcap"])["output"].tolist())
        with self.assertRaisesRegex(ValueError, "unknown feature"):
            reference.forward(config, t, ids, lengths, off={"softcaps"})
        with self.assertRaisesRegex(ValueError, "not a feature of gemma2"):
            reference.forward(config, t, ids, lengths, off={"parallel_residual"})

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


LAYER_SITES = ("hook_resid_pre", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k", "attn.hook_v",
               "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "hook_attn_out",
               "hook_resid_mid", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_post",
               "hook_mlp_out", "hook_resid_post")
CROSS_SITES = ("cross_attn.hook_q", "cross_attn.hook_k", "cross_attn.hook_v", "cross_attn.hook_attn_scores",
               "cross_attn.hook_pattern", "cross_attn.hook_z", "hook_cross_attn_out",
               "hook_resid_mid_cross", "ln3.hook_normalized")


def softmax(scores):
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class RecordedSites(unittest.TestCase):
    def check_stack(self, rec, prefix, states, maps, B, T, h, pre_norm, cross=None, parallel=False):
        L = len(maps)
        for n in range(L):
            b = f"{prefix}blocks.{n}."
            want = set(LAYER_SITES) - ({"hook_resid_mid"} if parallel else set())
            want |= set(CROSS_SITES) if cross else set()
            self.assertEqual({k[len(b):] for k in rec if k.startswith(b)}, want, b)
            self.assertEqual(rec[b + "attn.hook_q"].shape[:3], (B, T, h), b)
            self.assertEqual(rec[b + "attn.hook_z"].shape[:3], (B, T, h), b)
            self.assertEqual(rec[b + "attn.hook_attn_scores"].shape, (B, h, T, T), b)
            np.testing.assert_array_equal(rec[b + "attn.hook_pattern"], maps[n])
            np.testing.assert_allclose(softmax(rec[b + "attn.hook_attn_scores"]), maps[n], **TOL)
            np.testing.assert_array_equal(rec[b + "hook_resid_pre"], states[n])
            if pre_norm and n + 1 < L:
                np.testing.assert_array_equal(rec[b + "hook_resid_post"], states[n + 1])
            if cross:
                np.testing.assert_array_equal(rec[b + "cross_attn.hook_pattern"], cross[n])
                self.assertEqual(rec[b + "cross_attn.hook_k"].shape[:2], (B, cross[n].shape[-1]))
        self.assertNotIn(f"{prefix}blocks.{L}.hook_resid_pre", rec)

    def test_text_families(self):
        cases = [(f, {}) for f in checkpoints.FAMILIES]
        cases += [("gpt_neox", {"use_parallel_residual": False}), ("opt", {"do_layer_norm_before": False})]
        for family, sizes in cases:
            with self.subTest(family=family, **sizes):
                config, t = checkpoints.make(family, **sizes)
                ids, lengths = batch(config, T=9, lengths=(9, 6))
                rec = {}
                got = reference.forward(config, t, ids, lengths, record=rec)
                plain = reference.forward(config, t, ids, lengths)
                for key in ("hidden_states", "output", "logits"):
                    np.testing.assert_array_equal(got[key], plain[key])
                post = family in reference.ENCODERS or not sizes.get("do_layer_norm_before", True)
                parallel = family == "gpt_neox" and sizes.get("use_parallel_residual", True)
                h = got["attentions"][0].shape[1]
                self.check_stack(rec, "", got["hidden_states"], got["attentions"], 2, 9, h, not post,
                                 parallel=parallel)
                self.assertIn("hook_embed", rec)
                self.assertEqual("ln_final.hook_normalized" in rec, not post)

    def test_image_families(self):
        for family in checkpoints.IMAGE_FAMILIES:
            config, t = checkpoints.make(family)
            size = config["image_size"]
            size = size if isinstance(size, list) else [size, size]
            px = np.random.default_rng(3).standard_normal((1, 3, *size))
            rec = {}
            got = getattr(reference, family)(config, t, px, record=rec)
            np.testing.assert_array_equal(got["output"], getattr(reference, family)(config, t, px)["output"])
            T = got["output"].shape[1]
            self.check_stack(rec, "", got["hidden_states"], got["attentions"], 1, T,
                             got["attentions"][0].shape[1], True)
            np.testing.assert_array_equal(rec["ln_final.hook_normalized"], got["output"])

    def test_seq2seq(self):
        rng = np.random.default_rng(4)
        for family in checkpoints.SEQ2SEQ_FAMILIES:
            config, t = checkpoints.make(family)
            src, labels = rng.integers(0, 50, (2, 7)), rng.integers(0, 50, (2, 5))
            rec = {}
            got = reference.seq2seq(config, t, src, labels, [7, 6], [5, 4], record=rec)
            plain = reference.seq2seq(config, t, src, labels, [7, 6], [5, 4])
            np.testing.assert_array_equal(got["logits"], plain["logits"])
            h = got["encoder_attentions"][0].shape[1]
            self.check_stack(rec, "encoder.", got["encoder_hidden_states"], got["encoder_attentions"],
                             2, 7, h, family == "t5")
            self.check_stack(rec, "decoder.", got["decoder_hidden_states"], got["decoder_attentions"],
                             2, 5, h, family == "t5", cross=got["cross_attentions"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
