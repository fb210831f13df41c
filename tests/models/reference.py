#!/usr/bin/python3
"""Plain PyTorch reference forwards of whole Hugging Face-layout checkpoints, in float64, written
from the papers and the published reference code (Hugging Face transformers' modeling_bert,
modeling_gpt2, modeling_llama, modeling_mistral, modeling_qwen2, modeling_qwen3; not imported,
and not this tool's code):

  forward(config, state_dict, ids, lengths=None) -> {"hidden_states": (L+1, B, T, d),
      "attentions": [L × (B, h, T, T)], "output": (B, T, d), "logits": (B, T, V) or None}

config is the checkpoint's config.json as a dict, state_dict {name: array} with the checkpoint's
own names (a `bert.` / `transformer.` prefix is stripped), ids (B, T) integers, lengths (B) the
real tokens of each row (right padding; default T). Everything is computed in float64 from the
stored values (a bfloat16 file's values widened exactly); the results are NumPy float64 arrays.

Conventions, as transformers' eager attention computes them:
- attention: softmax(Q K^T / sqrt(head_dim) + mask), masked keys filled with float64's lowest
  value (HF's torch.finfo(dtype).min), so a row with no visible key would be uniform instead of
  NaN; padded keys (s >= length) are masked; positions are 0..T-1 in every row.
- causal models (gpt2, llama, mistral, qwen2, qwen3): key s visible to query t iff s <= t; with
  Mistral's sliding_window w also t - w < s (HF's sliding-window mask: the w most recent keys,
  the query's own included). Qwen2/Qwen3's sliding_window applies only with use_sliding_window
  true, and then on the layers from max_window_layers on (or those layer_types names).
- hidden_states as output_hidden_states: entry 0 the embeddings' output (the input of layer 0),
  entry i the output of layer i-1 for 0 < i < L, and entry L the final output: after the final
  norm (ln_f / model.norm) for the causal LMs; BERT has none, its last entry is its last layer's
  output. output = hidden_states[L].
- logits = output @ E^T with E the input embedding when tie_word_embeddings (default true for
  gpt2, false for llama/mistral/qwen2/qwen3, whose config classes default it so), else
  lm_head.weight. BERT: None.
- padded query rows (t >= length) are computed too but carry no meaning (HF's differ with the
  attention implementation); the tests compare rows t < length only.

Numerics per family:
- BERT: LayerNorm (biased variance, eps = layer_norm_eps), hidden_act "gelu" = the exact GELU,
  x·Φ(x) with erf (HF's ACT2FN["gelu"] = nn.functional.gelu); post-norm; token_type_ids 0.
- GPT-2: LayerNorm (eps = layer_norm_epsilon), activation_function "gelu_new" = the tanh
  approximation 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))); pre-norm; Conv1D (x @ W + b, W
  (in, out)); scale_attn_weights (default true) divides by sqrt(head_dim),
  scale_attn_by_inverse_layer_idx (default false) also by layer_idx + 1.
- LLaMA family: RMSNorm x·rsqrt(mean(x²) + eps)·weight (HF computes it in float32 and casts back;
  here float64 throughout, the same function); SwiGLU MLP down(silu(gate(x)) ⊙ up(x)); rotary
  embeddings in the "half" layout (rotate_half, cos/sin of cat(freqs, freqs)), inv_freq =
  rope_theta^(-2i/head_dim), computed in float64 here (HF: float32 inv_freq, whose rounding
  differs by ~1e-7 relative); rope_scaling type "linear" divides positions by factor (other
  types are refused); grouped-query heads (query head i uses key/value head i // (h / kv_heads),
  HF's repeat_kv); head_dim from config (else hidden_size / num_attention_heads); biases on any
  projection whose .bias tensor the checkpoint has (Qwen2: q/k/v). Qwen3: q_norm / k_norm,
  RMSNorm over head_dim of each head, after the projections and before the rotation.
"""
import math

import numpy as np
import torch

FAMILIES = ("bert", "gpt2", "llama", "mistral", "qwen2", "qwen3")
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
PREFIXES = {"bert": "bert.", "gpt2": "transformer."}
TIE_DEFAULT = {"gpt2": True, "llama": False, "mistral": False, "qwen2": False, "qwen3": False}
MIN = torch.finfo(torch.float64).min


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def strip_prefix(model_type, sd):
    """The names without the task model's prefix (bert. of BertFor*, transformer. of
    GPT2LMHeadModel); heads that are not part of the base model (cls.*) are kept as they are."""
    p = PREFIXES.get(model_type)
    if p and any(k.startswith(p) for k in sd):
        return {(k[len(p):] if k.startswith(p) else k): v for k, v in sd.items()}
    return dict(sd)


def activation(name):
    if name == "gelu":
        return lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        c = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return torch.relu
    if name in ("silu", "swish"):
        return lambda x: x * torch.sigmoid(x)
    raise NotImplementedError(f"activation {name!r}")


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def key_mask(lengths, T, causal, window=None):
    """(B, 1, T, T) bool, True = key s visible to query t."""
    s = torch.arange(T)
    t = s[:, None]
    m = (s[None, :] < torch.as_tensor(lengths)[:, None])[:, None, None, :].expand(-1, 1, T, T)
    if causal:
        m = m & (s[None, :] <= t)
        if window is not None:
            m = m & (s[None, :] > t - window)
    return m


def attend(q, k, v, mask, scale):
    """q (B, h, T, d), k/v (B, h, S, d), mask (B, 1, T, S) bool: HF's eager attention."""
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, MIN)
    a = torch.softmax(scores, -1)
    return a @ v, a


def split_heads(x, n, d):
    B, T, _ = x.shape
    return x.reshape(B, T, n, d).transpose(1, 2)


def merge_heads(x):
    B, n, T, d = x.shape
    return x.transpose(1, 2).reshape(B, T, n * d)


def rope_cos_sin(T, dim, theta, scaling=None):
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    pos = torch.arange(T, dtype=torch.float64)
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "linear":
            pos = pos / float(scaling["factor"])
        elif kind != "default":
            raise NotImplementedError(f"rope_scaling type {kind!r}")
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def linear(sd, name, x):
    """nn.Linear: x W^T (+ b when the checkpoint has the bias)."""
    y = x @ sd[name + ".weight"].T
    if name + ".bias" in sd:
        y = y + sd[name + ".bias"]
    return y


def conv1d(sd, name, x):
    """GPT-2's Conv1D: x W + b, W (in, out)."""
    return x @ sd[name + ".weight"] + sd[name + ".bias"]


def num_layers(config):
    return int(config.get("num_hidden_layers", config.get("n_layer", 0)))


def forward(config, state_dict, ids, lengths=None):
    mt = config["model_type"]
    if mt not in FAMILIES:
        raise ValueError(f"model_type {mt!r}: one of {', '.join(FAMILIES)}")
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    if ids.ndim == 1:
        ids = ids[None]
    B, T = ids.shape
    lengths = [T] * B if lengths is None else [int(n) for n in lengths]
    sd = {k: _t(v) for k, v in strip_prefix(mt, state_dict).items()}
    with torch.no_grad():
        if mt == "bert":
            hs, maps = _bert(config, sd, ids, lengths)
            logits = None
        else:
            fn = _gpt2 if mt == "gpt2" else _llama
            hs, maps, embed = fn(config, sd, ids, lengths)
            tie = config.get("tie_word_embeddings", TIE_DEFAULT[mt])
            head = embed if tie else sd["lm_head.weight"]
            logits = hs[-1] @ head.T
    return {"hidden_states": torch.stack(hs).numpy(), "attentions": [a.numpy() for a in maps],
            "output": hs[-1].numpy(), "logits": None if logits is None else logits.numpy()}


def _bert(c, sd, ids, lengths):
    B, T = ids.shape
    E, h = c["hidden_size"], c["num_attention_heads"]
    d, eps = E // h, c.get("layer_norm_eps", 1e-12)
    act = activation(c.get("hidden_act", "gelu"))
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise NotImplementedError("position_embedding_type " + c["position_embedding_type"])
    e = "embeddings."
    x = (sd[e + "word_embeddings.weight"][ids] + sd[e + "position_embeddings.weight"][:T][None]
         + sd[e + "token_type_embeddings.weight"][0])
    x = layer_norm(x, sd[e + "LayerNorm.weight"], sd[e + "LayerNorm.bias"], eps)
    mask = key_mask(lengths, T, causal=False)
    hs, maps = [x], []
    for n in range(num_layers(c)):
        p = f"encoder.layer.{n}."
        q, k, v = (split_heads(linear(sd, p + "attention.self." + w, x), h, d)
                   for w in ("query", "key", "value"))
        ctx, a = attend(q, k, v, mask, 1.0 / math.sqrt(d))
        y = linear(sd, p + "attention.output.dense", merge_heads(ctx))
        x1 = layer_norm(y + x, sd[p + "attention.output.LayerNorm.weight"],
                        sd[p + "attention.output.LayerNorm.bias"], eps)
        y = linear(sd, p + "output.dense", act(linear(sd, p + "intermediate.dense", x1)))
        x = layer_norm(y + x1, sd[p + "output.LayerNorm.weight"], sd[p + "output.LayerNorm.bias"], eps)
        hs.append(x)
        maps.append(a)
    return hs, maps


def _gpt2(c, sd, ids, lengths):
    B, T = ids.shape
    E, h = c["n_embd"], c["n_head"]
    d, eps = E // h, c.get("layer_norm_epsilon", 1e-5)
    act = activation(c.get("activation_function", "gelu_new"))
    x = sd["wte.weight"][ids] + sd["wpe.weight"][:T][None]
    mask = key_mask(lengths, T, causal=True)
    hs, maps = [x], []
    L = num_layers(c)
    for n in range(L):
        p = f"h.{n}."
        a_in = layer_norm(x, sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], eps)
        q, k, v = conv1d(sd, p + "attn.c_attn", a_in).split(E, -1)
        q, k, v = split_heads(q, h, d), split_heads(k, h, d), split_heads(v, h, d)
        scale = 1.0 / math.sqrt(d) if c.get("scale_attn_weights", True) else 1.0
        if c.get("scale_attn_by_inverse_layer_idx", False):
            scale /= n + 1
        ctx, a = attend(q, k, v, mask, scale)
        x = x + conv1d(sd, p + "attn.c_proj", merge_heads(ctx))
        m_in = layer_norm(x, sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], eps)
        x = x + conv1d(sd, p + "mlp.c_proj", act(conv1d(sd, p + "mlp.c_fc", m_in)))
        hs.append(x)
        maps.append(a)
    hs[-1] = layer_norm(x, sd["ln_f.weight"], sd["ln_f.bias"], eps)  # replaces the last layer's raw output
    return hs, maps, sd["wte.weight"]


def _llama(c, sd, ids, lengths):
    B, T = ids.shape
    mt = c["model_type"]
    E, h = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or h
    d = c.get("head_dim") or E // h
    eps = c.get("rms_norm_eps", 1e-6)
    act = activation(c.get("hidden_act", "silu"))
    L = num_layers(c)
    # The layers with a sliding window, as modeling_mistral.py and modeling_qwen2.py decide:
    # Mistral every layer; Qwen2 (and Qwen3) only with use_sliding_window, and then the layers
    # config.layer_types calls "sliding_attention", which Qwen2Config derives from
    # max_window_layers (default 28) as i >= max_window_layers when the file does not list them.
    window, windowed = None, [False] * L
    if mt == "mistral":
        window, windowed = c.get("sliding_window"), [True] * L
    elif c.get("use_sliding_window", False):
        window = c.get("sliding_window")
        types = c.get("layer_types") or ["sliding_attention" if i >= c.get("max_window_layers", 28)
                                         else "full_attention" for i in range(L)]
        windowed = [t == "sliding_attention" for t in types]
    cos, sin = rope_cos_sin(T, d, float(c.get("rope_theta", 10000.0)), c.get("rope_scaling"))
    x = sd["model.embed_tokens.weight"][ids]
    full = key_mask(lengths, T, causal=True, window=None)
    local = key_mask(lengths, T, causal=True, window=window)
    hs, maps = [x], []
    for n in range(L):
        mask = local if windowed[n] else full
        p = f"model.layers.{n}."
        a_in = rms_norm(x, sd[p + "input_layernorm.weight"], eps)
        q = linear(sd, p + "self_attn.q_proj", a_in).reshape(B, T, h, d)
        k = linear(sd, p + "self_attn.k_proj", a_in).reshape(B, T, kv, d)
        v = linear(sd, p + "self_attn.v_proj", a_in).reshape(B, T, kv, d)
        if mt == "qwen3":
            q = rms_norm(q, sd[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, sd[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1)
        ctx, a = attend(q, k, v, mask, d ** -0.5)
        x = x + linear(sd, p + "self_attn.o_proj", merge_heads(ctx))
        m_in = rms_norm(x, sd[p + "post_attention_layernorm.weight"], eps)
        x = x + linear(sd, p + "mlp.down_proj",
                       act(linear(sd, p + "mlp.gate_proj", m_in)) * linear(sd, p + "mlp.up_proj", m_in))
        hs.append(x)
        maps.append(a)
    hs[-1] = rms_norm(x, sd["model.norm.weight"], eps)
    return hs, maps, sd["model.embed_tokens.weight"]


def top_k(logits, lengths, k):
    """Per batch row, the k most probable next tokens after the last real token:
    [[(id, p), ...], ...], p the softmax of the logits (float64), highest first."""
    out = []
    for b, n in enumerate(lengths):
        z = np.asarray(logits[b, int(n) - 1], dtype=np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        order = np.argsort(-p, kind="stable")[:k]
        out.append([(int(i), float(p[i])) for i in order])
    return out
