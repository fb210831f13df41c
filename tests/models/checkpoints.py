#!/usr/bin/python3
"""Small random checkpoints in the model hubs' layout: Hugging Face's tensor names and shapes for
BERT, GPT-2, LLaMA, Mistral, Qwen2 and Qwen3, and a config.json with the keys transformers'
save_pretrained writes for each (values shrunk).

  make(family, seed=0, **sizes) -> (config, tensors)     tensors: {name: float32 array}
  write(directory, config, tensors, dtype="F32"|"BF16"|"F16", shards=1) -> the values stored,
      {name: float64 array} (a bfloat16 file's values widened), the state_dict to give
      reference.forward

Variants: make("bert", prefixed=True) is BertForMaskedLM's names (bert.* and cls.predictions.*),
make("gpt2", prefixed=True) GPT2LMHeadModel's (transformer.*; lm_head tied, not stored, as
save_pretrained drops tied copies); make("llama", rope_scaling={"rope_type": "linear",
"factor": 2.0}). Sizes: layers, hidden, heads, kv_heads, head_dim, intermediate, vocab,
max_positions.

Weights are drawn so that every part matters: projections N(0, 1/fan_in) (attention logits of
order 1, maps neither uniform nor one-hot), biases and norm weights away from 0 and 1,
embeddings and LM heads small enough that the top next-token probabilities are not all ~0 or 1.

  /usr/bin/python3 tests/models/checkpoints.py DIR [FAMILY ...]   writes DIR/FAMILY{,_bf16}/
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_write as st  # noqa: E402

FAMILIES = ("bert", "gpt2", "llama", "mistral", "qwen2", "qwen3")
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

DEFAULTS = {
    "bert": dict(layers=2, hidden=32, heads=4, intermediate=64, vocab=120, max_positions=64),
    "gpt2": dict(layers=3, hidden=48, heads=4, vocab=200, max_positions=64),
    "llama": dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96,
                  vocab=160, max_positions=64),
    "mistral": dict(layers=2, hidden=48, heads=6, kv_heads=2, head_dim=8, intermediate=80,
                    vocab=150, max_positions=64, sliding_window=4),
    "qwen2": dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96,
                  vocab=180, max_positions=64),
    # Qwen3: head_dim 16 != hidden / heads = 12, as Qwen3's configs have it
    "qwen3": dict(layers=3, hidden=48, heads=4, kv_heads=2, head_dim=16, intermediate=64,
                  vocab=140, max_positions=64),
}


class _Draw:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def linear(self, out_f, in_f, gain=1.0):  # nn.Linear weight (out, in)
        return (self.rng.standard_normal((out_f, in_f)) * gain / np.sqrt(in_f)).astype(np.float32)

    def conv1d(self, in_f, out_f, gain=1.0):  # GPT-2's Conv1D weight (in, out)
        return self.linear(out_f, in_f, gain).T.copy()

    def bias(self, n, scale=0.1):
        return (self.rng.standard_normal(n) * scale).astype(np.float32)

    def norm(self, n):  # norm weights around 1
        return (1.0 + 0.2 * self.rng.standard_normal(n)).astype(np.float32)

    def embed(self, n, d, scale):
        return (self.rng.standard_normal((n, d)) * scale).astype(np.float32)


def make(family, seed=0, prefixed=False, rope_scaling=None, **sizes):
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")
    s = dict(DEFAULTS[family], **sizes)
    r = _Draw(seed)
    if family == "bert":
        return _bert(r, s, prefixed)
    if family == "gpt2":
        return _gpt2(r, s, prefixed)
    if prefixed:
        raise ValueError(f"{family}: no prefixed variant (its names already start with model.)")
    return _llama(family, r, s, rope_scaling)


def _bert(r, s, prefixed):
    E, I, V, P, L = s["hidden"], s["intermediate"], s["vocab"], s["max_positions"], s["layers"]
    t = {"embeddings.word_embeddings.weight": r.embed(V, E, 0.5),
         "embeddings.position_embeddings.weight": r.embed(P, E, 0.2),
         "embeddings.token_type_embeddings.weight": r.embed(2, E, 0.2),
         "embeddings.LayerNorm.weight": r.norm(E), "embeddings.LayerNorm.bias": r.bias(E)}
    for n in range(L):
        p = f"encoder.layer.{n}."
        for w, gain in (("query", 1.5), ("key", 1.5), ("value", 1.0)):
            t[p + f"attention.self.{w}.weight"] = r.linear(E, E, gain)
            t[p + f"attention.self.{w}.bias"] = r.bias(E)
        t[p + "attention.output.dense.weight"], t[p + "attention.output.dense.bias"] = r.linear(E, E), r.bias(E)
        t[p + "attention.output.LayerNorm.weight"] = r.norm(E)
        t[p + "attention.output.LayerNorm.bias"] = r.bias(E)
        t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = r.linear(I, E), r.bias(I)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = r.linear(E, I), r.bias(E)
        t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"] = r.norm(E), r.bias(E)
    if prefixed:  # BertForMaskedLM: no pooler; the MLM head (decoder.weight tied to the embeddings)
        t = {"bert." + k: v for k, v in t.items()}
        t["cls.predictions.bias"] = r.bias(V)
        t["cls.predictions.transform.dense.weight"] = r.linear(E, E)
        t["cls.predictions.transform.dense.bias"] = r.bias(E)
        t["cls.predictions.transform.LayerNorm.weight"] = r.norm(E)
        t["cls.predictions.transform.LayerNorm.bias"] = r.bias(E)
    else:  # BertModel: the pooler, which the forward does not use
        t["pooler.dense.weight"], t["pooler.dense.bias"] = r.linear(E, E), r.bias(E)
    config = {
        "architectures": ["BertForMaskedLM" if prefixed else "BertModel"],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": E,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": P,
        "model_type": "bert",
        "num_attention_heads": s["heads"],
        "num_hidden_layers": L,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
        "transformers_version": "4.41.2",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": V,
    }
    return config, t


def _gpt2(r, s, prefixed):
    E, V, P, L = s["hidden"], s["vocab"], s["max_positions"], s["layers"]
    t = {"wte.weight": r.embed(V, E, 0.3), "wpe.weight": r.embed(P, E, 0.1),
         "ln_f.weight": r.norm(E), "ln_f.bias": r.bias(E)}
    for n in range(L):
        p = f"h.{n}."
        t[p + "ln_1.weight"], t[p + "ln_1.bias"] = r.norm(E), r.bias(E)
        t[p + "attn.c_attn.weight"] = np.concatenate(
            [r.conv1d(E, E, 1.5), r.conv1d(E, E, 1.5), r.conv1d(E, E)], 1)
        t[p + "attn.c_attn.bias"] = r.bias(3 * E)
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = r.conv1d(E, E), r.bias(E)
        # the causal-mask buffer older checkpoints carry (gpt2 on the hub has it); not a weight
        t[p + "attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]
        t[p + "ln_2.weight"], t[p + "ln_2.bias"] = r.norm(E), r.bias(E)
        t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = r.conv1d(E, 4 * E), r.bias(4 * E)
        t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = r.conv1d(4 * E, E), r.bias(E)
    if prefixed:
        t = {"transformer." + k: v for k, v in t.items()}
    config = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": V - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": V - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": P,
        "n_embd": E,
        "n_head": s["heads"],
        "n_inner": None,
        "n_layer": L,
        "n_positions": P,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "transformers_version": "4.41.2",
        "use_cache": True,
        "vocab_size": V,
    }
    return config, t


ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM"}
# tie_word_embeddings as the small public models of each family ship it (Qwen2-0.5B, Qwen3-0.6B
# tie; LLaMA and Mistral do not), so both lm_head paths are held
TIED = {"llama": False, "mistral": False, "qwen2": True, "qwen3": True}


def _llama(family, r, s, rope_scaling):
    E, I, V, P, L = s["hidden"], s["intermediate"], s["vocab"], s["max_positions"], s["layers"]
    h, kv, d = s["heads"], s["kv_heads"], s["head_dim"]
    t = {"model.embed_tokens.weight": r.embed(V, E, 0.3 if TIED[family] else 1.0),
         "model.norm.weight": r.norm(E)}
    if not TIED[family]:
        t["lm_head.weight"] = r.embed(V, E, 0.3)
    for n in range(L):
        p = f"model.layers.{n}."
        t[p + "input_layernorm.weight"] = r.norm(E)
        t[p + "self_attn.q_proj.weight"] = r.linear(h * d, E, 1.5)
        t[p + "self_attn.k_proj.weight"] = r.linear(kv * d, E, 1.5)
        t[p + "self_attn.v_proj.weight"] = r.linear(kv * d, E)
        t[p + "self_attn.o_proj.weight"] = r.linear(E, h * d)
        if family == "qwen2":  # q/k/v biases (not o)
            t[p + "self_attn.q_proj.bias"] = r.bias(h * d, 0.3)
            t[p + "self_attn.k_proj.bias"] = r.bias(kv * d, 0.3)
            t[p + "self_attn.v_proj.bias"] = r.bias(kv * d, 0.3)
        if family == "qwen3":  # RMSNorm over each head's head_dim features
            t[p + "self_attn.q_norm.weight"] = r.norm(d)
            t[p + "self_attn.k_norm.weight"] = r.norm(d)
        t[p + "post_attention_layernorm.weight"] = r.norm(E)
        t[p + "mlp.gate_proj.weight"] = r.linear(I, E)
        t[p + "mlp.up_proj.weight"] = r.linear(I, E)
        t[p + "mlp.down_proj.weight"] = r.linear(E, I)
    c = {
        "architectures": [ARCH[family]],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": d,
        "hidden_act": "silu",
        "hidden_size": E,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": P,
        "model_type": family,
        "num_attention_heads": h,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06 if family.startswith("qwen") else 1e-05,
        "rope_scaling": rope_scaling,
        "rope_theta": 10000.0 if family == "llama" else 1000000.0,
        "tie_word_embeddings": TIED[family],
        "torch_dtype": "float32",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "vocab_size": V,
    }
    if family == "llama":
        c.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1})
    elif family == "mistral":
        c["sliding_window"] = s["sliding_window"]
    else:
        # Qwen2/Qwen3 configs carry a sliding_window that applies only with use_sliding_window
        # true; shipped false, so the window (small here, to tell) must be ignored
        c.update({"use_sliding_window": False, "sliding_window": 4, "max_window_layers": L})
        if family == "qwen3":
            c["attention_bias"] = False
    return c, t


def write(directory, config, tensors, dtype="F32", shards=1, config_extra=None):
    """Writes config.json and model.safetensors (or `shards` shards and the index) into directory;
    returns the stored values {name: float64 array} for reference.forward."""
    os.makedirs(directory, exist_ok=True)
    config = dict(config, torch_dtype=TORCH_DTYPE[dtype], **(config_extra or {}))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    if shards == 1:
        st.save_file(os.path.join(directory, "model.safetensors"), tensors, dtype)
    else:
        st.save_sharded(directory, tensors, shards, dtype)
    return {k: st.as_stored(v, dtype) for k, v in tensors.items()}


def float32_bytes(tensors):
    return sum(np.asarray(v).size * 4 for v in tensors.values())


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for fam in sys.argv[2:] or FAMILIES:
        cfg, ts = make(fam)
        write(os.path.join(sys.argv[1], fam), cfg, ts, "F32")
        write(os.path.join(sys.argv[1], fam + "_bf16"), cfg, ts, "BF16")
        print(os.path.join(sys.argv[1], fam), f"{len(ts)} tensors, {float32_bytes(ts)} bytes as float32")
