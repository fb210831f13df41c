#!/usr/bin/python3
"""Small random checkpoints in the model hubs' layout: Hugging Face's tensor names and shapes for
BERT, GPT-2, LLaMA, Mistral, Qwen2, Qwen3, GPT-NeoX (Pythia), Gemma, Gemma 2, Gemma 3 (text),
Phi-3, OPT, RoBERTa and XLM-RoBERTa, and a config.json with the keys transformers'
save_pretrained writes for each (values shrunk).

  make(family, seed=0, prefixed=None, rope_scaling=None, **sizes) -> (config, tensors)
      tensors: {name: float32 array}; sizes: any key of DEFAULTS[family] (others raise)
  write(directory, config, tensors, dtype="F32"|"BF16"|"F16", shards=1) -> the values stored,
      {name: float64 array} (a bfloat16 file's values widened), the state_dict to give
      reference.forward

Layouts: prefixed=None is each family's usual file: the base model's names for BERT, GPT-2 and
RoBERTa, the causal LM's for the others (GPTNeoXForCausalLM: gpt_neox.* + embed_out.weight;
OPTForCausalLM: model.decoder.*, lm_head tied and not stored, as save_pretrained drops tied
copies; the LLaMA-style families: model.* + lm_head.weight when untied). prefixed=True:
BertForMaskedLM (bert.* and cls.predictions.*), GPT2LMHeadModel (transformer.*),
RobertaForMaskedLM / XLMRobertaForMaskedLM (roberta.* and lm_head.*). prefixed=False:
GPTNeoXModel (no embed_out: no logits), OPTModel (decoder.*).

Variants through sizes (the knobs of DEFAULTS): gpt_neox use_parallel_residual=False; phi3
partial_rotary_factor=0.5 (default 1.0, as Phi-3-mini); opt do_layer_norm_before=False (the
post-norm OPT-350m style: no final_layer_norm tensors); gemma3_text layer_types=[...] (written
to config.json; without it the layers follow sliding_window_pattern), attn_logit_softcapping /
final_logit_softcapping (null by default, as Gemma 3 ships); gemma2 the soft-caps, window and
query_pre_attn_scalar; rope_scaling={"rope_type": "linear", "factor": 2.0} for llama, mistral,
qwen2, qwen3 and gemma3_text (its global layers).

Weights are drawn so that every part matters: projections N(0, 1/fan_in) (attention logits of
order 1, maps neither uniform nor one-hot), biases and norm weights away from 0 and 1,
embeddings and LM heads small enough that the top next-token probabilities are not all ~0 or 1.
The defaults make every feature of reference.FEATURES change the outputs on sequences of 16
tokens: windows of 4, soft-caps that bite (Gemma 2: 8 and 5 where the real ones are 50 and 30),
query_pre_attn_scalar != head_dim, rope_local_base_freq != rope_theta, Gemma's norm weights
(stored as w of 1 + w) around 0.3, Pythia's rotary_pct 0.25 of head_dim 16.

  /usr/bin/python3 tests/models/checkpoints.py DIR [FAMILY ...]   writes DIR/FAMILY{,_bf16}/
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_write as st  # noqa: E402

FAMILIES = ("bert", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gpt_neox", "gemma", "gemma2",
            "gemma3_text", "phi3", "opt", "roberta", "xlm-roberta", "stablelm")
# Image models (read from --image, not text): kept out of FAMILIES, which the text tests walk.
IMAGE_FAMILIES = ("vit", "deit")
# Encoder-decoders (run with a target, teacher-forced): kept out of FAMILIES too. t5 draws T5 v1.0
# (relu, tied, d_model**-0.5 before the head) by default, v1.1 / FLAN-T5 with gated=True,
# tied=False; bart BartForConditionalGeneration (model.* + final_logits_bias, lm_head tied).
SEQ2SEQ_FAMILIES = ("t5", "bart")
TORCH_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

DEFAULTS = {
    # d_kv * heads (48) != hidden (32), fewer decoder layers; buckets and distance small enough
    # that sequences of ~16 tokens reach the logarithmic buckets and the last one
    "t5": dict(layers=3, decoder_layers=2, hidden=32, heads=4, d_kv=12, intermediate=64, vocab=120,
               buckets=8, max_distance=12, gated=False, tied=True),
    "bart": dict(layers=2, decoder_layers=3, hidden=32, heads=4, intermediate=64, vocab=120,
                 max_positions=40, scale_embedding=True, activation="gelu",
                 decoder_start_token_id=2),
    # StableLM: LayerNorms with biases, a quarter of each head rotated, q/k/v biases
    "stablelm": dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96,
                     vocab=170, max_positions=64),
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
    # Pythia: head_dim 16, rotary_pct 0.25: 4 rotated features per head
    "gpt_neox": dict(layers=3, hidden=64, heads=4, intermediate=128, vocab=200, max_positions=64,
                     rotary_pct=0.25, use_parallel_residual=True),
    # Gemma 2B's multi-query attention; heads · head_dim = 64 != hidden 48, as Gemma 7B has it
    "gemma": dict(layers=2, hidden=48, heads=4, kv_heads=1, head_dim=16, intermediate=96,
                  vocab=180, max_positions=64),
    # 3 layers: 0 and 2 sliding, 1 global
    "gemma2": dict(layers=3, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128,
                   vocab=200, max_positions=64, sliding_window=4, query_pre_attn_scalar=32,
                   attn_logit_softcapping=8.0, final_logit_softcapping=5.0),
    # sliding_window_pattern 3 over 4 layers: 0, 1, 3 sliding, 2 global
    "gemma3_text": dict(layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128,
                        vocab=220, max_positions=64, sliding_window=4, sliding_window_pattern=3,
                        layer_types=None, query_pre_attn_scalar=24, rope_theta=1000000.0,
                        rope_local_base_freq=10000.0, attn_logit_softcapping=None,
                        final_logit_softcapping=None),
    "phi3": dict(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=170,
                 max_positions=64, sliding_window=4, partial_rotary_factor=1.0),
    "opt": dict(layers=2, hidden=48, heads=4, ffn=96, vocab=190, max_positions=64,
                do_layer_norm_before=True),
    # max_positions: the tokens a row may hold; config.json's max_position_embeddings is
    # max_positions + 2 (the padding_idx + 1 offset: 514 for 512), the table's rows
    "roberta": dict(layers=2, hidden=32, heads=4, intermediate=64, vocab=130, max_positions=64),
    "xlm-roberta": dict(layers=2, hidden=48, heads=4, intermediate=96, vocab=250, max_positions=64),
    # ViT: 32 x 24 images of 8-pixel patches, a 4 x 3 grid: 13 tokens with the CLS token
    "vit": dict(layers=2, hidden=32, heads=4, intermediate=64, image_height=32, image_width=24,
                patch_size=8, qkv_bias=True, prefixed=False),
    # DeiT: the same grid, 14 tokens with the CLS and distillation tokens; head "teacher"
    # (DeiTForImageClassificationWithTeacher: cls_classifier and distillation_classifier),
    # "classifier" (DeiTForImageClassification) or None (DeiTModel, with its pooler)
    "deit": dict(layers=2, hidden=32, heads=4, intermediate=64, image_height=32, image_width=24,
                 patch_size=8, qkv_bias=True, head="teacher"),
}
ROPE_SCALING = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")


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

    def gemma_norm(self, n):  # Gemma's stored w of (1 + w): around 0.3, neither 0 nor 1
        return (0.3 + 0.2 * self.rng.standard_normal(n)).astype(np.float32)

    def embed(self, n, d, scale):
        return (self.rng.standard_normal((n, d)) * scale).astype(np.float32)


def make(family, seed=0, prefixed=None, rope_scaling=None, **sizes):
    known = FAMILIES + IMAGE_FAMILIES + SEQ2SEQ_FAMILIES
    if family not in known:
        raise ValueError(f"family {family!r}: one of {', '.join(known)}")
    unknown = sorted(set(sizes) - set(DEFAULTS[family]))
    if unknown:
        raise ValueError(f"{family}: unknown size(s) {', '.join(unknown)}; "
                         f"known: {', '.join(DEFAULTS[family])}")
    if rope_scaling is not None and family not in ROPE_SCALING:
        raise ValueError(f"{family}: no rope_scaling variant (one of {', '.join(ROPE_SCALING)})")
    s = dict(DEFAULTS[family], **sizes)
    r = _Draw(seed)
    if family == "vit":
        return _vit(r, s if prefixed is None else dict(s, prefixed=bool(prefixed)))
    if family == "deit":
        if prefixed is not None:
            raise ValueError("deit: choose the head with head= (teacher, classifier or None)")
        return _vit(r, s, "deit")
    if family == "t5":
        return _t5(r, s)
    if family == "bart":
        return _bart(r, s)
    if family in ("bert", "roberta", "xlm-roberta"):
        return _bert(r, s, bool(prefixed), family)
    if family == "gpt2":
        return _gpt2(r, s, bool(prefixed))
    if family == "gpt_neox":
        return _gpt_neox(r, s, prefixed is not False)
    if family == "opt":
        return _opt(r, s, prefixed is not False)
    if prefixed:
        raise ValueError(f"{family}: no prefixed variant (its names already start with model.)")
    if family in ("gemma", "gemma2", "gemma3_text"):
        return _gemma(family, r, s, rope_scaling)
    if family == "phi3":
        return _phi3(r, s)
    return _llama(family, r, s, rope_scaling)


ROBERTA_ARCH = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta"}


def _bert(r, s, prefixed, family="bert"):
    """BERT, and RoBERTa / XLM-RoBERTa: BERT's layers and names; RoBERTa's position table has
    max_positions + 2 rows (padding_idx 1 + 1 offset), one token type, and its task prefix is
    roberta. with RobertaLMHead's lm_head.*."""
    E, I, V, P, L = s["hidden"], s["intermediate"], s["vocab"], s["max_positions"], s["layers"]
    roberta = family != "bert"
    rows, types = (P + 2, 1) if roberta else (P, 2)
    t = {"embeddings.word_embeddings.weight": r.embed(V, E, 0.5),
         "embeddings.position_embeddings.weight": r.embed(rows, E, 0.2),
         "embeddings.token_type_embeddings.weight": r.embed(types, E, 0.2),
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
    if prefixed and roberta:  # RobertaForMaskedLM: no pooler; lm_head (decoder tied, not stored)
        t = {"roberta." + k: v for k, v in t.items()}
        t["lm_head.bias"] = r.bias(V)
        t["lm_head.dense.weight"], t["lm_head.dense.bias"] = r.linear(E, E), r.bias(E)
        t["lm_head.layer_norm.weight"], t["lm_head.layer_norm.bias"] = r.norm(E), r.bias(E)
    elif prefixed:  # BertForMaskedLM: no pooler; the MLM head (decoder.weight tied to the embeddings)
        t = {"bert." + k: v for k, v in t.items()}
        t["cls.predictions.bias"] = r.bias(V)
        t["cls.predictions.transform.dense.weight"] = r.linear(E, E)
        t["cls.predictions.transform.dense.bias"] = r.bias(E)
        t["cls.predictions.transform.LayerNorm.weight"] = r.norm(E)
        t["cls.predictions.transform.LayerNorm.bias"] = r.bias(E)
    else:  # BertModel / RobertaModel: the pooler, which the forward does not use
        t["pooler.dense.weight"], t["pooler.dense.bias"] = r.linear(E, E), r.bias(E)
    if roberta:
        arch = ROBERTA_ARCH[family] + ("ForMaskedLM" if prefixed else "Model")
    else:
        arch = "BertForMaskedLM" if prefixed else "BertModel"
    config = {
        "architectures": [arch],
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
    if roberta:  # as roberta-base / xlm-roberta-base ship it
        config.update({"bos_token_id": 0, "eos_token_id": 2, "layer_norm_eps": 1e-05,
                       "max_position_embeddings": rows, "model_type": family, "pad_token_id": 1,
                       "type_vocab_size": 1})
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
        "qwen3": "Qwen3ForCausalLM", "stablelm": "StableLmForCausalLM"}
# tie_word_embeddings as the small public models of each family ship it (Qwen2-0.5B, Qwen3-0.6B
# tie; LLaMA and Mistral do not), so both lm_head paths are held
TIED = {"llama": False, "mistral": False, "qwen2": True, "qwen3": True, "stablelm": False}


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
        if family == "stablelm":
            t[p + "input_layernorm.bias"] = r.bias(E)
        t[p + "self_attn.q_proj.weight"] = r.linear(h * d, E, 1.5)
        t[p + "self_attn.k_proj.weight"] = r.linear(kv * d, E, 1.5)
        t[p + "self_attn.v_proj.weight"] = r.linear(kv * d, E)
        t[p + "self_attn.o_proj.weight"] = r.linear(E, h * d)
        if family in ("qwen2", "stablelm"):  # q/k/v biases (not o)
            t[p + "self_attn.q_proj.bias"] = r.bias(h * d, 0.3)
            t[p + "self_attn.k_proj.bias"] = r.bias(kv * d, 0.3)
            t[p + "self_attn.v_proj.bias"] = r.bias(kv * d, 0.3)
        if family == "qwen3":  # RMSNorm over each head's head_dim features
            t[p + "self_attn.q_norm.weight"] = r.norm(d)
            t[p + "self_attn.k_norm.weight"] = r.norm(d)
        t[p + "post_attention_layernorm.weight"] = r.norm(E)
        if family == "stablelm":
            t[p + "post_attention_layernorm.bias"] = r.bias(E)
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
    if family == "stablelm":  # StableLmConfig's keys: LayerNorm, partial rotary, use_qkv_bias
        t["model.norm.bias"] = r.bias(E)
        del c["rms_norm_eps"], c["head_dim"]
        c.update({"layer_norm_eps": 1e-05, "partial_rotary_factor": 0.25, "use_qkv_bias": True,
                  "qk_layernorm": False, "use_parallel_residual": False, "rope_theta": 10000})
    elif family == "llama":
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


def _gpt_neox(r, s, prefixed):
    """GPTNeoXForCausalLM (gpt_neox.* + embed_out.weight) or GPTNeoXModel; query_key_value's rows
    interleaved per head, (heads, 3, head_dim): each head's q, k, v rows together. No
    attention.bias / masked_bias / rotary_emb.inv_freq buffers (older Pythia files carry them;
    newer transformers neither save nor need them)."""
    E, I, V, P, L, h = s["hidden"], s["intermediate"], s["vocab"], s["max_positions"], s["layers"], s["heads"]
    d = E // h
    t = {"embed_in.weight": r.embed(V, E, 1.0),
         "final_layer_norm.weight": r.norm(E), "final_layer_norm.bias": r.bias(E)}
    for n in range(L):
        p = f"layers.{n}."
        t[p + "input_layernorm.weight"], t[p + "input_layernorm.bias"] = r.norm(E), r.bias(E)
        t[p + "post_attention_layernorm.weight"] = r.norm(E)
        t[p + "post_attention_layernorm.bias"] = r.bias(E)
        q, k, v = r.linear(E, E, 1.5), r.linear(E, E, 1.5), r.linear(E, E)
        t[p + "attention.query_key_value.weight"] = np.stack(
            [w.reshape(h, d, E) for w in (q, k, v)], 1).reshape(3 * E, E)
        t[p + "attention.query_key_value.bias"] = r.bias(3 * E, 0.3)
        t[p + "attention.dense.weight"], t[p + "attention.dense.bias"] = r.linear(E, E), r.bias(E)
        t[p + "mlp.dense_h_to_4h.weight"], t[p + "mlp.dense_h_to_4h.bias"] = r.linear(I, E), r.bias(I)
        t[p + "mlp.dense_4h_to_h.weight"], t[p + "mlp.dense_4h_to_h.bias"] = r.linear(E, I), r.bias(E)
    if prefixed:
        t = {"gpt_neox." + k: v for k, v in t.items()}
        t["embed_out.weight"] = r.embed(V, E, 0.3)
    c = {  # GPTNeoXConfig 4.4x writes the old keys and the new ones (partial_rotary_factor, rope_theta)
        "architectures": ["GPTNeoXForCausalLM" if prefixed else "GPTNeoXModel"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "classifier_dropout": 0.1,
        "eos_token_id": 0,
        "hidden_act": "gelu",
        "hidden_dropout": 0.0,
        "hidden_size": E,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": P,
        "model_type": "gpt_neox",
        "num_attention_heads": h,
        "num_hidden_layers": L,
        "partial_rotary_factor": s["rotary_pct"],
        "rope_scaling": None,
        "rope_theta": 10000,
        "rotary_emb_base": 10000,
        "rotary_pct": s["rotary_pct"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "use_parallel_residual": s["use_parallel_residual"],
        "vocab_size": V,
    }
    return c, t


GEMMA_ARCH = {"gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}


def _gemma(family, r, s, rope_scaling):
    """Gemma, Gemma 2, Gemma 3 (text): LLaMA's names without biases, norm weights stored as the w
    of (1 + w); Gemma 2/3 add pre_/post_feedforward_layernorm, Gemma 3 q_norm / k_norm; the LM
    head tied to the embeddings (no lm_head.weight), as every Gemma ships."""
    E, I, V, P, L = s["hidden"], s["intermediate"], s["vocab"], s["max_positions"], s["layers"]
    h, kv, d = s["heads"], s["kv_heads"], s["head_dim"]
    t = {"model.embed_tokens.weight": r.embed(V, E, 0.15), "model.norm.weight": r.gemma_norm(E)}
    for n in range(L):
        p = f"model.layers.{n}."
        t[p + "input_layernorm.weight"] = r.gemma_norm(E)
        t[p + "self_attn.q_proj.weight"] = r.linear(h * d, E)
        t[p + "self_attn.k_proj.weight"] = r.linear(kv * d, E)
        t[p + "self_attn.v_proj.weight"] = r.linear(kv * d, E)
        t[p + "self_attn.o_proj.weight"] = r.linear(E, h * d)
        if family == "gemma3_text":
            t[p + "self_attn.q_norm.weight"] = r.gemma_norm(d)
            t[p + "self_attn.k_norm.weight"] = r.gemma_norm(d)
        t[p + "post_attention_layernorm.weight"] = r.gemma_norm(E)
        if family != "gemma":
            t[p + "pre_feedforward_layernorm.weight"] = r.gemma_norm(E)
            t[p + "post_feedforward_layernorm.weight"] = r.gemma_norm(E)
        t[p + "mlp.gate_proj.weight"] = r.linear(I, E)
        t[p + "mlp.up_proj.weight"] = r.linear(I, E)
        t[p + "mlp.down_proj.weight"] = r.linear(E, I)
    c = {
        "architectures": [GEMMA_ARCH[family]],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "head_dim": d,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": E,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": P,
        "model_type": family,
        "num_attention_heads": h,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-06,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": V,
    }
    if family in ("gemma", "gemma2"):
        # hidden_act too, both gelu_pytorch_tanh: GemmaMLP reads hidden_activation in 4.38-4.4x,
        # the newest modular_gemma hidden_act; the two agree here
        c.update({"hidden_act": "gelu_pytorch_tanh", "rope_theta": 10000.0})
    if family == "gemma":
        c["transformers_version"] = "4.42.4"
    elif family == "gemma2":
        c.update({"attn_logit_softcapping": s["attn_logit_softcapping"], "cache_implementation": "hybrid",
                  "final_logit_softcapping": s["final_logit_softcapping"],
                  "query_pre_attn_scalar": s["query_pre_attn_scalar"], "sliding_window": s["sliding_window"],
                  "transformers_version": "4.44.2"})
    else:
        c.update({"attn_logit_softcapping": s["attn_logit_softcapping"], "cache_implementation": "hybrid",
                  "final_logit_softcapping": s["final_logit_softcapping"],
                  "query_pre_attn_scalar": s["query_pre_attn_scalar"],
                  "rope_local_base_freq": s["rope_local_base_freq"], "rope_scaling": rope_scaling,
                  "rope_theta": s["rope_theta"], "sliding_window": s["sliding_window"],
                  "sliding_window_pattern": s["sliding_window_pattern"], "transformers_version": "4.50.0"})
        if s["layer_types"] is not None:
            if len(s["layer_types"]) != L:
                raise ValueError(f"gemma3_text: layer_types has {len(s['layer_types'])} entries for {L} layers")
            c["layer_types"] = list(s["layer_types"])
    return c, t


def _phi3(r, s):
    """Phi-3: LLaMA's layer with fused projections, qkv_proj rows q | k | v and gate_up_proj rows
    gate | up; no biases; lm_head untied."""
    E, I, V, P, L = s["hidden"], s["intermediate"], s["vocab"], s["max_positions"], s["layers"]
    h, kv = s["heads"], s["kv_heads"]
    d = E // h
    t = {"model.embed_tokens.weight": r.embed(V, E, 1.0), "model.norm.weight": r.norm(E),
         "lm_head.weight": r.embed(V, E, 0.3)}
    for n in range(L):
        p = f"model.layers.{n}."
        t[p + "input_layernorm.weight"] = r.norm(E)
        t[p + "self_attn.qkv_proj.weight"] = np.concatenate(
            [r.linear(h * d, E, 1.5), r.linear(kv * d, E, 1.5), r.linear(kv * d, E)], 0)
        t[p + "self_attn.o_proj.weight"] = r.linear(E, h * d)
        t[p + "post_attention_layernorm.weight"] = r.norm(E)
        t[p + "mlp.gate_up_proj.weight"] = np.concatenate([r.linear(I, E), r.linear(I, E)], 0)
        t[p + "mlp.down_proj.weight"] = r.linear(E, I)
    c = {
        "architectures": ["Phi3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "embd_pdrop": 0.0,
        "eos_token_id": V - 1,
        "hidden_act": "silu",
        "hidden_size": E,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": P,
        "model_type": "phi3",
        "num_attention_heads": h,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "original_max_position_embeddings": P,
        "pad_token_id": V - 1,
        "partial_rotary_factor": s["partial_rotary_factor"],
        "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "sliding_window": s["sliding_window"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "vocab_size": V,
    }
    return c, t


def _opt(r, s, prefixed):
    """OPTForCausalLM (model.decoder.*; lm_head tied, not stored) or OPTModel (decoder.*); the
    position table has max_positions + 2 rows (OPT's offset 2); final_layer_norm only with
    do_layer_norm_before."""
    E, F, V, P, L = s["hidden"], s["ffn"], s["vocab"], s["max_positions"], s["layers"]
    pre = s["do_layer_norm_before"]
    t = {"decoder.embed_tokens.weight": r.embed(V, E, 0.3),
         "decoder.embed_positions.weight": r.embed(P + 2, E, 0.3)}
    if pre:
        t["decoder.final_layer_norm.weight"] = r.norm(E)
        t["decoder.final_layer_norm.bias"] = r.bias(E)
    for n in range(L):
        p = f"decoder.layers.{n}."
        for w, gain in (("q", 1.5), ("k", 1.5), ("v", 1.0), ("out", 1.0)):
            t[p + f"self_attn.{w}_proj.weight"] = r.linear(E, E, gain)
            t[p + f"self_attn.{w}_proj.bias"] = r.bias(E)
        t[p + "self_attn_layer_norm.weight"], t[p + "self_attn_layer_norm.bias"] = r.norm(E), r.bias(E)
        t[p + "fc1.weight"], t[p + "fc1.bias"] = r.linear(F, E), r.bias(F)
        t[p + "fc2.weight"], t[p + "fc2.bias"] = r.linear(E, F), r.bias(E)
        t[p + "final_layer_norm.weight"], t[p + "final_layer_norm.bias"] = r.norm(E), r.bias(E)
    if prefixed:
        t = {"model." + k: v for k, v in t.items()}
    c = {
        "_remove_final_layer_norm": False,
        "activation_dropout": 0.0,
        "activation_function": "relu",
        "architectures": ["OPTForCausalLM" if prefixed else "OPTModel"],
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "do_layer_norm_before": pre,
        "dropout": 0.1,
        "enable_bias": True,
        "eos_token_id": 2,
        "ffn_dim": F,
        "hidden_size": E,
        "init_std": 0.02,
        "layer_norm_elementwise_affine": True,
        "layerdrop": 0.0,
        "max_position_embeddings": P,
        "model_type": "opt",
        "num_attention_heads": s["heads"],
        "num_hidden_layers": L,
        "pad_token_id": 1,
        "prefix": "</s>",
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "vocab_size": V,
        "word_embed_proj_dim": E,
    }
    return c, t


def _vit(r, s, family="vit"):
    """ViTModel (embeddings.*, encoder.layer.N.*, layernorm.*, pooler.*), or with
    prefixed=True ViTForImageClassification (vit.* without the pooler, classifier.*). The
    Conv2d's weight is (hidden, 3, p, p); the CLS token (1, 1, hidden) and the position table
    (1, N + 1, hidden) are nn.Parameters. family "deit": DeiT's names, with
    embeddings.distillation_token (1, 1, hidden) and N + 2 positions; s["head"] "teacher"
    (deit.*, cls_classifier.*, distillation_classifier.*), "classifier" (deit.*, classifier.*)
    or None (DeiTModel: unprefixed, with the pooler)."""
    E, I, L, p = s["hidden"], s["intermediate"], s["layers"], s["patch_size"]
    Hh, Ww = s["image_height"], s["image_width"]
    N = (Hh // p) * (Ww // p)
    deit = family == "deit"
    t = {"embeddings.cls_token": r.embed(1, E, 0.5)[None]}
    if deit:
        t["embeddings.distillation_token"] = r.embed(1, E, 0.5)[None]
    t.update({"embeddings.position_embeddings": r.embed(N + 1 + deit, E, 0.3)[None],
              "embeddings.patch_embeddings.projection.weight":
                  r.linear(E, 3 * p * p, 2.0).reshape(E, 3, p, p),
              "embeddings.patch_embeddings.projection.bias": r.bias(E),
              "layernorm.weight": r.norm(E), "layernorm.bias": r.bias(E)})
    for n in range(L):
        q = f"encoder.layer.{n}."
        t[q + "layernorm_before.weight"], t[q + "layernorm_before.bias"] = r.norm(E), r.bias(E)
        for w, gain in (("query", 1.5), ("key", 1.5), ("value", 1.0)):
            t[q + f"attention.attention.{w}.weight"] = r.linear(E, E, gain)
            if s["qkv_bias"]:
                t[q + f"attention.attention.{w}.bias"] = r.bias(E)
        t[q + "attention.output.dense.weight"] = r.linear(E, E)
        t[q + "attention.output.dense.bias"] = r.bias(E)
        t[q + "layernorm_after.weight"], t[q + "layernorm_after.bias"] = r.norm(E), r.bias(E)
        t[q + "intermediate.dense.weight"], t[q + "intermediate.dense.bias"] = r.linear(I, E), r.bias(I)
        t[q + "output.dense.weight"], t[q + "output.dense.bias"] = r.linear(E, I), r.bias(E)
    head = s["head"] if deit else ("classifier" if s["prefixed"] else None)
    if head:
        t = {family + "." + k: v for k, v in t.items()}
        for name in (("cls_classifier", "distillation_classifier") if head == "teacher"
                     else ("classifier",)):
            t[name + ".weight"], t[name + ".bias"] = r.linear(3, E), r.bias(3)
    else:
        t["pooler.dense.weight"], t["pooler.dense.bias"] = r.linear(E, E), r.bias(E)
    arch = {"classifier": "ForImageClassification", "teacher": "ForImageClassificationWithTeacher",
            None: "Model"}[head]
    config = {
        "architectures": [("DeiT" if deit else "ViT") + arch],
        "attention_probs_dropout_prob": 0.0,
        "encoder_stride": p,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "hidden_size": E,
        "image_size": [Hh, Ww] if Hh != Ww else Hh,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_norm_eps": 1e-12,
        "model_type": family,
        "num_attention_heads": s["heads"],
        "num_channels": 3,
        "num_hidden_layers": L,
        "patch_size": p,
        "qkv_bias": s["qkv_bias"],
        "torch_dtype": "float32",
        "transformers_version": "4.41.2",
    }
    if head:
        config["id2label"] = {"0": "cat", "1": "dog", "2": "car"}
        config["label2id"] = {"cat": 0, "dog": 1, "car": 2}
    return config, t


def preprocessor_config(height, width, resample=2, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                        crop=None, **extra):
    """preprocessor_config.json as ViTImageProcessor.save_pretrained writes it; with crop
    (height, width), DeiTImageProcessor's, which center-crops the resized image to crop_size."""
    c = {"do_normalize": True, "do_rescale": True, "do_resize": True,
         "image_mean": list(mean), "image_processor_type": "ViTImageProcessor",
         "image_std": list(std), "resample": resample, "rescale_factor": 1 / 255,
         "size": {"height": height, "width": width}}
    if crop is not None:
        c.update({"image_processor_type": "DeiTImageProcessor", "do_center_crop": True,
                  "crop_size": {"height": crop[0], "width": crop[1]}})
    return dict(c, **extra)


def write_preprocessor(directory, config):
    with open(os.path.join(directory, "preprocessor_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def _t5(r, s):
    """T5ForConditionalGeneration's state_dict as save_pretrained writes it: shared.weight (the
    encoder's and decoder's embed_tokens tied to it and dropped), each stack's blocks with the
    relative_attention_bias table in block 0 only, lm_head.weight only when untied."""
    E, H, K, I, V = s["hidden"], s["heads"], s["d_kv"], s["intermediate"], s["vocab"]
    inner = H * K
    t = {"shared.weight": r.embed(V, E, 1.0)}

    def attention(p):
        # unscaled logits (no d_kv**-0.5): q drawn as Mesh TensorFlow's init scales it
        t[p + "q.weight"] = r.linear(inner, E, 1.5 / np.sqrt(K))
        t[p + "k.weight"] = r.linear(inner, E, 1.0)
        t[p + "v.weight"] = r.linear(inner, E)
        t[p + "o.weight"] = r.linear(E, inner)

    def ffn(p):
        if s["gated"]:
            t[p + "DenseReluDense.wi_0.weight"] = r.linear(I, E, 1.5)
            t[p + "DenseReluDense.wi_1.weight"] = r.linear(I, E)
        else:
            t[p + "DenseReluDense.wi.weight"] = r.linear(I, E, 1.5)
        t[p + "DenseReluDense.wo.weight"] = r.linear(E, I)
        t[p + "layer_norm.weight"] = r.norm(E)

    for stack, n in (("encoder", s["layers"]), ("decoder", s["decoder_layers"])):
        for i in range(n):
            p = f"{stack}.block.{i}."
            attention(p + "layer.0.SelfAttention.")
            t[p + "layer.0.layer_norm.weight"] = r.norm(E)
            if i == 0:
                t[p + "layer.0.SelfAttention.relative_attention_bias.weight"] = r.embed(
                    s["buckets"], H, 1.0)
            if stack == "decoder":
                attention(p + "layer.1.EncDecAttention.")
                t[p + "layer.1.layer_norm.weight"] = r.norm(E)
            ffn(p + f"layer.{2 if stack == 'decoder' else 1}.")
        t[f"{stack}.final_layer_norm.weight"] = r.norm(E)
    if not s["tied"]:
        t["lm_head.weight"] = r.embed(V, E, 0.5)
    config = {
        "architectures": ["T5ForConditionalGeneration"],
        "d_ff": I, "d_kv": K, "d_model": E, "decoder_start_token_id": 0, "dropout_rate": 0.1,
        "eos_token_id": 1, "feed_forward_proj": "gated-gelu" if s["gated"] else "relu",
        "initializer_factor": 1.0, "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06,
        "model_type": "t5", "num_decoder_layers": s["decoder_layers"], "num_heads": H,
        "num_layers": s["layers"], "pad_token_id": 0,
        "relative_attention_max_distance": s["max_distance"],
        "relative_attention_num_buckets": s["buckets"], "tie_word_embeddings": s["tied"],
        "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V,
    }
    return config, t


def _bart(r, s):
    """BartForConditionalGeneration's state_dict as save_pretrained writes it: model.shared.weight
    (embed_tokens and lm_head tied to it and dropped), learned positions of max_position_embeddings
    + 2 rows per stack, final_logits_bias (1, vocab)."""
    E, H, I, V, P = s["hidden"], s["heads"], s["intermediate"], s["vocab"], s["max_positions"]
    t = {"model.shared.weight": r.embed(V, E, 0.5 if not s["scale_embedding"] else 0.1)}

    def attention(p):
        for w, gain in (("q_proj", 1.5), ("k_proj", 1.5), ("v_proj", 1.0), ("out_proj", 1.0)):
            t[p + w + ".weight"], t[p + w + ".bias"] = r.linear(E, E, gain), r.bias(E)

    for stack, n in (("encoder", s["layers"]), ("decoder", s["decoder_layers"])):
        p0 = f"model.{stack}."
        t[p0 + "embed_positions.weight"] = r.embed(P + 2, E, 0.2)
        t[p0 + "layernorm_embedding.weight"], t[p0 + "layernorm_embedding.bias"] = r.norm(E), r.bias(E)
        for i in range(n):
            p = f"{p0}layers.{i}."
            attention(p + "self_attn.")
            t[p + "self_attn_layer_norm.weight"], t[p + "self_attn_layer_norm.bias"] = r.norm(E), r.bias(E)
            if stack == "decoder":
                attention(p + "encoder_attn.")
                t[p + "encoder_attn_layer_norm.weight"] = r.norm(E)
                t[p + "encoder_attn_layer_norm.bias"] = r.bias(E)
            t[p + "fc1.weight"], t[p + "fc1.bias"] = r.linear(I, E, 1.5), r.bias(I)
            t[p + "fc2.weight"], t[p + "fc2.bias"] = r.linear(E, I), r.bias(E)
            t[p + "final_layer_norm.weight"], t[p + "final_layer_norm.bias"] = r.norm(E), r.bias(E)
    t["final_logits_bias"] = r.bias(V, 0.5)[None, :]
    config = {
        "activation_dropout": 0.1, "activation_function": s["activation"],
        "architectures": ["BartForConditionalGeneration"], "attention_dropout": 0.1,
        "bos_token_id": 0, "d_model": E, "decoder_attention_heads": H, "decoder_ffn_dim": I,
        "decoder_layerdrop": 0.0, "decoder_layers": s["decoder_layers"],
        "decoder_start_token_id": s["decoder_start_token_id"], "dropout": 0.1,
        "encoder_attention_heads": H, "encoder_ffn_dim": I, "encoder_layerdrop": 0.0,
        "encoder_layers": s["layers"], "eos_token_id": 2, "forced_eos_token_id": 2,
        "init_std": 0.02, "is_encoder_decoder": True, "max_position_embeddings": P,
        "model_type": "bart", "num_hidden_layers": s["layers"], "pad_token_id": 1,
        "scale_embedding": s["scale_embedding"], "transformers_version": "4.46.0",
        "use_cache": True, "vocab_size": V,
    }
    return config, t


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
