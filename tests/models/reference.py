#!/usr/bin/python3
"""Plain PyTorch reference forwards of whole Hugging Face-layout checkpoints, in float64, written
from the papers and the published reference code (Hugging Face transformers' modeling_bert,
modeling_gpt2, modeling_llama, modeling_mistral, modeling_qwen2, modeling_qwen3,
modeling_gpt_neox, modeling_gemma, modeling_gemma2, modeling_gemma3, modeling_phi3, modeling_opt,
modeling_roberta / modeling_xlm_roberta; not imported, and not this tool's code):

  forward(config, state_dict, ids, lengths=None, off=()) -> {"hidden_states": (L+1, B, T, d),
      "attentions": [L × (B, h, T, T)], "output": (B, T, d), "logits": (B, T, V) or None}

config is the checkpoint's config.json as a dict, state_dict {name: array} with the checkpoint's
own names (a task model's prefix, PREFIXES, is stripped), ids (B, T) integers, lengths (B) the
real tokens of each row (right padding; default T). Everything is computed in float64 from the
stored values (a bfloat16 file's values widened exactly); the results are NumPy float64 arrays.

record: a dict that forward() (and vit(), deit(), seq2seq()) fills with {site name: float64
array} at every activation site the model has, in the names and shapes of
lib/include/mha/kernel/site.hpp (TransformerLens's): hook_embed, hook_pos_embed (learned
positions only; ViT's the position table, hook_embed its CLS token(s) and patches),
blocks.{l}.hook_resid_pre, ln1.hook_normalized, attn.hook_q / hook_k / hook_v (B, T, heads, d)
as the scores use them (after QK-norm and RoPE; k and v with the key/value heads, not repeated;
BART's q before its scaling), attn.hook_attn_scores (B, h, T, S) scaled, soft-capped, with T5's
position bias, -inf where masked, attn.hook_pattern, attn.hook_z (B, T, h, d), hook_attn_out,
hook_resid_mid (none with GPT-NeoX's parallel residual), ln2.hook_normalized, mlp.hook_pre (a
gated MLP's gate pre-activation), mlp.hook_post (act(gate) * up), hook_mlp_out, hook_resid_post,
ln_final.hook_normalized (models with a final norm). Post-norm layers (BERT, RoBERTa, OPT-350m,
BART) as TransformerLens's HookedEncoder: hook_resid_mid = resid_pre + attn_out, ln1 its norm,
hook_resid_post the sum before the last norm (ln2; ln3 in a BART decoder layer), whose output is
the next layer's hook_resid_pre. Gemma 2/3: hook_attn_out and hook_mlp_out after the post-norms.
Encoder-decoders: "encoder." / "decoder." before every name; a decoder layer adds
cross_attn.hook_q ... hook_z (keys over the source), hook_cross_attn_out, hook_resid_mid_cross,
and its norms are ln1 (self), ln2 (cross), ln3 (MLP). Recording changes no output bit.

off: names of features to turn OFF (FEATURES[model_type] lists the ones a family has; another
name raises ValueError). Tests use them to show that each feature matters: the tool must match
the reference with everything on and must not match with a feature off.
  parallel_residual      gpt_neox: x + attn(ln1(x)), then + mlp(ln2(·)) (sequential)
  partial_rotary         gpt_neox, phi3: rotate the whole head, not its first fraction
  softcap                gemma2, gemma3_text: no tanh soft-capping (attention and final logits)
  sliding_window         mistral, qwen2, qwen3, gemma2, gemma3_text, phi3: no window on any layer
  local_rope             gemma3_text: the sliding layers rotate with rope_theta too
  post_norms             gemma2, gemma3_text: post_attention / post_feedforward norms skipped
  norm_offset            gemma*: RMSNorm weight w instead of 1 + w
  embed_scale            gemma*: embeddings not multiplied by sqrt(hidden_size)
  position_offset        opt, roberta, xlm-roberta: positions from 0 (no +2 / padding_idx + 1)
  query_pre_attn_scalar  gemma2, gemma3_text: scores scaled by head_dim^-0.5 instead
  qk_norm                qwen3, gemma3_text: q_norm / k_norm skipped

Conventions, as transformers' eager attention computes them:
- attention: softmax(Q K^T · scale + mask), masked keys filled with float64's lowest value (HF's
  torch.finfo(dtype).min), so a row with no visible key would be uniform instead of NaN; padded
  keys (s >= length) are masked; scale = head_dim^-0.5 unless a family says otherwise.
- causal models (gpt2, llama, mistral, qwen2, qwen3, gpt_neox, gemma*, phi3, opt): key s visible
  to query t iff s <= t; on a sliding-window layer with window w also t - s < w (HF's sliding
  mask: the w most recent keys, the query's own included). Which layers have a window: Mistral
  and Phi-3 every layer when sliding_window is not null; Qwen2/Qwen3 only with
  use_sliding_window, and then the layers config.layer_types calls "sliding_attention" (which
  Qwen2Config derives from max_window_layers as i >= max_window_layers); Gemma 2 / Gemma 3 below.
- positions 0..T-1 in every row, except OPT and RoBERTa (below).
- hidden_states as output_hidden_states: entry 0 the embeddings' output (the input of layer 0),
  entry i the output of layer i-1 for 0 < i < L, and entry L the final output: after the final
  norm (ln_f / model.norm / final_layer_norm) for the causal LMs; BERT and RoBERTa have none, nor
  has OPT with do_layer_norm_before false: there it is the last layer's output.
  output = hidden_states[L].
- logits = output @ E^T with E the input embedding when tie_word_embeddings (TIE_DEFAULT gives
  each config class's default), else the checkpoint's LM head (lm_head.weight; embed_out.weight
  for GPT-NeoX); None for the encoders and when the checkpoint has no head (a base model).
- padded query rows (t >= length) are computed too but carry no meaning (HF's differ with the
  attention implementation); the tests compare rows t < length only.

Numerics per family:
- BERT: LayerNorm (biased variance, eps = layer_norm_eps), hidden_act "gelu" = the exact GELU,
  x·Φ(x) with erf (HF's ACT2FN["gelu"] = nn.functional.gelu); post-norm; token_type_ids 0.
- RoBERTa, XLM-RoBERTa (modeling_roberta.py): BERT's layers and names (under `roberta.`);
  position ids from the ids as create_position_ids_from_input_ids makes them:
  padding_idx + cumsum(ids != padding_idx) · (ids != padding_idx), padding_idx = pad_token_id
  (default 1), so the first token sits at row padding_idx + 1 and a token equal to
  pad_token_id gets row padding_idx (the ids decide, not `lengths`); max_position_embeddings
  counts those rows (514 for 512 tokens); token type 0 of type_vocab_size 1.
- GPT-2: LayerNorm (eps = layer_norm_epsilon), activation_function "gelu_new" = the tanh
  approximation 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))); pre-norm; Conv1D (x @ W + b, W
  (in, out)); scale_attn_weights (default true) divides by sqrt(head_dim),
  scale_attn_by_inverse_layer_idx (default false) also by layer_idx + 1.
- LLaMA family: RMSNorm x·rsqrt(mean(x²) + eps)·weight (HF computes it in float32 and casts back;
  here float64 throughout, the same function); SwiGLU MLP down(silu(gate(x)) ⊙ up(x)); rotary
  embeddings in the "half" layout (rotate_half, cos/sin of cat(freqs, freqs)), inv_freq =
  rope_theta^(-2i/dim), computed in float64 here (HF: float32 inv_freq, whose rounding differs
  by ~1e-7 relative); rope_scaling type "linear" divides positions by factor (other types are
  refused); grouped-query heads (query head i uses key/value head i // (h / kv_heads), HF's
  repeat_kv); head_dim from config (else hidden_size / num_attention_heads); biases on any
  projection whose .bias tensor the checkpoint has (Qwen2: q/k/v). Qwen3: q_norm / k_norm,
  RMSNorm over head_dim of each head, after the projections and before the rotation.
- Phi-3 (modeling_phi3.py): the LLaMA layer with fused projections, split as Phi3Attention and
  Phi3MLP slice them: qkv_proj rows q (h·head_dim) | k (kv·head_dim) | v, gate_up_proj rows
  gate (intermediate_size) | up, MLP up ⊙ silu(gate); rms_norm_eps default 1e-5; partial
  rotary: the first int(head_dim · partial_rotary_factor) features of each head rotated
  (default 1.0), inv_freq over that dim; sliding_window as Mistral's on every layer (Phi3Model
  picks create_sliding_window_causal_mask whenever config.sliding_window is not None);
  rope_scaling "longrope" refused; lm_head untied by default.
- GPT-NeoX / Pythia (modeling_gpt_neox.py): names under `gpt_neox.` plus embed_out.weight;
  LayerNorm eps = layer_norm_eps (1e-5); query_key_value (3·d, d) with rows interleaved per
  head, viewed as (heads, 3, head_dim) = q, k, v of each head; partial rotary on the first
  rotary_ndims = int(head_dim · rotary_pct) features, rotate_half within that slice, inv_freq =
  base^(-2i/rotary_ndims); rotary_pct read as the 4.4x config class does (rotary_pct, else
  partial_rotary_factor, default 0.25), base likewise (rotary_emb_base, else rope_theta, default
  10000); hidden_act "gelu" = the exact GELU; use_parallel_residual (default true):
  x + attn(ln1(x)) + mlp(ln2(x)), else x = x + attn(ln1(x)); x = x + mlp(ln2(x)); final
  layer norm; embed_out untied by default.
- Gemma (modeling_gemma.py), Gemma 2 (modeling_gemma2.py), Gemma 3 text (modeling_gemma3.py):
  the LLaMA layer with RMSNorm x·rsqrt(mean(x²) + eps)·(1 + w); embeddings multiplied by
  sqrt(hidden_size) (HF rounds that factor to the compute dtype first; float64 here); GeGLU MLP
  down(act(gate(x)) ⊙ up(x)) with act = hidden_activation, which modeling_gemma's GemmaMLP
  falls back to gelu_pytorch_tanh when null (hidden_act is ignored: "`config.hidden_act` is
  ignored, you should use `config.hidden_activation` instead"), Gemma 2/3 read
  hidden_activation (default gelu_pytorch_tanh); tie_word_embeddings default true.
  Gemma: pre-norm like LLaMA (post_attention_layernorm is the MLP's input norm); scale
  head_dim^-0.5. Gemma 2 / Gemma 3: sandwich norms, h = x + post_attention_layernorm(attn(
  input_layernorm(x))); x = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
  scale query_pre_attn_scalar^-0.5 (default 256); attn_logit_softcapping c:
  scores = tanh(scores / c)·c after the scaling, before the mask; final_logit_softcapping on the
  logits the same way (Gemma 2 defaults 50 and 30, Gemma 3 null = none). Sliding layers:
  config.layer_types when given, else Gemma 2 the even layers (Gemma2Attention: "sliding_window
  if not bool(layer_idx % 2)"), Gemma 3 bool((i + 1) % sliding_window_pattern) (default 6);
  window sliding_window (default 4096). Gemma 3: q_norm / k_norm ((1 + w) RMSNorm over
  head_dim) before the rotation; sliding layers rotate with rope_local_base_freq (default 10000)
  and no rope scaling, the others with rope_theta (default 1e6) and rope_scaling.
- OPT (modeling_opt.py): names under `model.decoder.` (OPTForCausalLM; OPTModel's `decoder.`
  too); learned positions, ids (cumsum(mask) · mask - 1) + 2 into embed_positions
  (max_position_embeddings + 2 rows), mask the attention mask of `lengths`; embed_tokens not
  scaled; LayerNorm eps 1e-5; q/k/v/out_proj with biases; activation_function (default relu);
  do_layer_norm_before true: pre-norm and final_layer_norm (unless _remove_final_layer_norm);
  false: post-norm x = ln(x + attn(x)), x = ln(x + fc2(act(fc1(x)))), no final norm;
  word_embed_proj_dim must equal hidden_size (no project_in/out); lm_head tied by default.
"""
import math

import numpy as np
import torch

FAMILIES = ("bert", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gpt_neox", "gemma", "gemma2",
            "gemma3_text", "phi3", "opt", "roberta", "xlm-roberta", "stablelm")
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "phi3", "stablelm")
GEMMA = ("gemma", "gemma2", "gemma3_text")
ENCODERS = ("bert", "roberta", "xlm-roberta")
PREFIXES = {"bert": "bert.", "gpt2": "transformer.", "gpt_neox": "gpt_neox.", "opt": "model.",
            "roberta": "roberta.", "xlm-roberta": "roberta."}
TIE_DEFAULT = {"gpt2": True, "llama": False, "mistral": False, "qwen2": False, "qwen3": False,
               "gpt_neox": False, "gemma": True, "gemma2": True, "gemma3_text": True, "phi3": False,
               "opt": True, "stablelm": False}
_GEMMA_OFF = ("norm_offset", "embed_scale")
_GEMMA23_OFF = _GEMMA_OFF + ("softcap", "sliding_window", "post_norms", "query_pre_attn_scalar")
FEATURES = {
    "bert": (), "gpt2": (), "llama": (), "mistral": ("sliding_window",), "qwen2": ("sliding_window",),
    "qwen3": ("sliding_window", "qk_norm"),
    "gpt_neox": ("parallel_residual", "partial_rotary"),
    "stablelm": ("partial_rotary",),
    "gemma": _GEMMA_OFF,
    "gemma2": _GEMMA23_OFF,
    "gemma3_text": _GEMMA23_OFF + ("local_rope", "qk_norm"),
    "phi3": ("partial_rotary", "sliding_window"),
    "opt": ("position_offset",), "roberta": ("position_offset",), "xlm-roberta": ("position_offset",),
}
ALL_FEATURES = tuple(sorted({f for names in FEATURES.values() for f in names}))
MIN = torch.finfo(torch.float64).min


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def strip_prefix(model_type, sd):
    """The names without the task model's prefix (bert. of BertFor*, transformer. of
    GPT2LMHeadModel, gpt_neox. of GPTNeoXForCausalLM, model. of OPTForCausalLM, roberta. of
    RobertaFor*); heads that are not part of the base model (cls.*, lm_head.*, embed_out.*) are
    kept as they are."""
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


_QK = None  # forward(record_qk=True): each layer's (q, k) as attend takes them
_REC = None  # forward(record=dict) / seq2seq / vit: the activations at the named sites
_STACK = ""  # the site names' prefix while recording an encoder-decoder's stack


def _rec(name, x):
    """Records x (a tensor) as site `name` (the stack's prefix added) when recording."""
    if _REC is not None:
        _REC[_STACK + name] = x.detach().numpy().astype(np.float64, copy=True)


def _rec_heads(name, x):
    """Records a (B, heads, T, d) tensor in the sites' (B, T, heads, d) layout."""
    _rec(name, x.transpose(1, 2))


def _rec_attention(site, scores, mask, a, ctx):
    """attn.hook_attn_scores (-inf where masked), hook_pattern, hook_z under `site`."""
    if _REC is not None and site is not None:
        _rec(site + "hook_attn_scores", scores.masked_fill(~mask, -math.inf))
        _rec(site + "hook_pattern", a)
        _rec_heads(site + "hook_z", ctx)


def attend(q, k, v, mask, scale, softcap=None, site=None):
    """q (B, h, T, d), k/v (B, h, S, d), mask (B, 1, T, S) bool: HF's eager attention (with
    Gemma 2's soft-capping of the scaled scores when softcap is given). `site` (e.g.
    "blocks.3.attn.") names the layer's sites when recording."""
    if _QK is not None:
        _QK.append((q.numpy().copy(), k.numpy().copy()))
    scores = (q @ k.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    a = torch.softmax(scores.masked_fill(~mask, MIN), -1)
    ctx = a @ v
    _rec_attention(site, scores, mask, a, ctx)
    return ctx, a


def _rec_qkv(site, q, k, v):
    """attn.hook_q, hook_k, hook_v from (B, heads, T, d) tensors (k and v with their own
    key/value heads, before any repetition over a group)."""
    _rec_heads(site + "hook_q", q)
    _rec_heads(site + "hook_k", k)
    _rec_heads(site + "hook_v", v)


def _rec_mlp(b, pre, post, out):
    _rec(b + "mlp.hook_pre", pre)
    _rec(b + "mlp.hook_post", post)
    _rec(b + "hook_mlp_out", out)


def split_heads(x, n, d):
    B, T, _ = x.shape
    return x.reshape(B, T, n, d).transpose(1, 2)


def merge_heads(x):
    B, n, T, d = x.shape
    return x.transpose(1, 2).reshape(B, T, n * d)


def rope_cos_sin(T, dim, theta, scaling=None):
    """cos, sin (T, dim) of the "half" layout: cat(freqs, freqs), inv_freq = theta^(-2i/dim)."""
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


def apply_rope(x, cos, sin):
    """Rotates the first cos.shape[-1] features of each head (all of them, or a partial rotary
    dimension as GPT-NeoX and Phi-3 have); the rest pass through."""
    n = cos.shape[-1]
    rot, rest = x[..., :n], x[..., n:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), -1)


def linear(sd, name, x):
    """nn.Linear: x W^T (+ b when the checkpoint has the bias)."""
    y = x @ sd[name + ".weight"].T
    if name + ".bias" in sd:
        y = y + sd[name + ".bias"]
    return y


def norm_layer(sd, name, x, eps):
    """nn.LayerNorm by the checkpoint's name (weight 1, bias 0 when it has none)."""
    return layer_norm(x, sd.get(name + ".weight", 1.0), sd.get(name + ".bias", 0.0), eps)


def conv1d(sd, name, x):
    """GPT-2's Conv1D: x W + b, W (in, out)."""
    return x @ sd[name + ".weight"] + sd[name + ".bias"]


def num_layers(config):
    return int(config.get("num_hidden_layers", config.get("n_layer", 0)))


def softcap(x, cap):
    return x if cap is None else torch.tanh(x / cap) * cap


def _first(c, keys, default):
    """The value of the first of keys the config has (not null), else default."""
    for k in keys:
        if c.get(k) is not None:
            return c[k]
    return default


def _check_off(mt, off):
    if off is None:
        off = ()
    elif isinstance(off, str):
        off = (off,)
    off = frozenset(off)
    unknown = sorted(off - set(ALL_FEATURES))
    if unknown:
        raise ValueError(f"off: unknown feature(s) {', '.join(unknown)}; known: {', '.join(ALL_FEATURES)}")
    foreign = sorted(off - set(FEATURES[mt]))
    if foreign:
        raise ValueError(f"off: {', '.join(foreign)} not a feature of {mt} "
                         f"(its features: {', '.join(FEATURES[mt]) or 'none'})")
    return off


def lm_head(config, sd, embed, head_name):
    """The LM head's weight (V, d): the input embedding when tied, else the checkpoint's head
    tensor, None when the checkpoint has none (a base model's names)."""
    if config.get("tie_word_embeddings", TIE_DEFAULT[config["model_type"]]):
        return embed
    return sd.get(head_name)


def forward(config, state_dict, ids, lengths=None, off=(), record_qk=False, record=None):
    """record: a dict, filled with {site name: float64 array} at every site the model has, in
    the names and shapes of lib/include/mha/kernel/site.hpp (see record_sites)."""
    global _QK, _REC
    mt = config["model_type"]
    if mt not in FAMILIES:
        raise ValueError(f"model_type {mt!r}: one of {', '.join(FAMILIES)}")
    off = _check_off(mt, off)
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    if ids.ndim == 1:
        ids = ids[None]
    B, T = ids.shape
    lengths = [T] * B if lengths is None else [int(n) for n in lengths]
    sd = {k: _t(v) for k, v in strip_prefix(mt, state_dict).items()}
    with torch.no_grad():
        if mt in ENCODERS:
            fn = _bert
        elif mt == "gpt2":
            fn = _gpt2
        elif mt == "gpt_neox":
            fn = _gpt_neox
        elif mt in GEMMA:
            fn = _gemma
        elif mt == "opt":
            fn = _opt
        else:
            fn = _llama
        _QK = [] if record_qk else None
        _REC = record
        try:
            hs, maps, logits = fn(config, sd, ids, lengths, off)
            qk = _QK
        finally:
            _QK = _REC = None
    out = {"hidden_states": torch.stack(hs).numpy(), "attentions": [a.numpy() for a in maps],
           "output": hs[-1].numpy(), "logits": None if logits is None else logits.numpy()}
    if record_qk:  # per layer, (B, h, T, d) each, k repeated over each key group's heads
        out["q"], out["k"] = [q for q, _ in qk], [k for _, k in qk]
    return out


def _bert(c, sd, ids, lengths, off):
    """BERT, and RoBERTa / XLM-RoBERTa, whose only difference here is the position ids."""
    B, T = ids.shape
    E, h = c["hidden_size"], c["num_attention_heads"]
    d, eps = E // h, c.get("layer_norm_eps", 1e-12)
    act = activation(c.get("hidden_act", "gelu"))
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise NotImplementedError("position_embedding_type " + c["position_embedding_type"])
    if c["model_type"] == "bert":
        pos = torch.arange(T)[None].expand(B, T)
    else:  # RoBERTa's create_position_ids_from_input_ids
        pad = c.get("pad_token_id", 1)
        real = (ids != pad).long()
        if "position_offset" in off:
            pos = (torch.cumsum(real, 1) * real - 1).clamp(min=0)
        else:
            pos = torch.cumsum(real, 1) * real + pad
    e = "embeddings."
    word, posv = sd[e + "word_embeddings.weight"][ids], sd[e + "position_embeddings.weight"][pos]
    _rec("hook_embed", word)
    _rec("hook_pos_embed", posv)
    x = word + posv + sd[e + "token_type_embeddings.weight"][0]
    x = layer_norm(x, sd[e + "LayerNorm.weight"], sd[e + "LayerNorm.bias"], eps)
    mask = key_mask(lengths, T, causal=False)
    hs, maps = [x], []
    for n in range(num_layers(c)):
        p, b = f"encoder.layer.{n}.", f"blocks.{n}."
        _rec(b + "hook_resid_pre", x)
        q, k, v = (split_heads(linear(sd, p + "attention.self." + w, x), h, d)
                   for w in ("query", "key", "value"))
        _rec_qkv(b + "attn.", q, k, v)
        ctx, a = attend(q, k, v, mask, 1.0 / math.sqrt(d), site=b + "attn.")
        y = linear(sd, p + "attention.output.dense", merge_heads(ctx))
        _rec(b + "hook_attn_out", y)
        _rec(b + "hook_resid_mid", y + x)  # post-norm, as TransformerLens's HookedEncoder
        x1 = layer_norm(y + x, sd[p + "attention.output.LayerNorm.weight"],
                        sd[p + "attention.output.LayerNorm.bias"], eps)
        _rec(b + "ln1.hook_normalized", x1)
        pre = linear(sd, p + "intermediate.dense", x1)
        post = act(pre)
        y = linear(sd, p + "output.dense", post)
        _rec_mlp(b, pre, post, y)
        _rec(b + "hook_resid_post", y + x1)
        x = layer_norm(y + x1, sd[p + "output.LayerNorm.weight"], sd[p + "output.LayerNorm.bias"], eps)
        _rec(b + "ln2.hook_normalized", x)
        hs.append(x)
        maps.append(a)
    return hs, maps, None


def _gpt2(c, sd, ids, lengths, off):
    B, T = ids.shape
    E, h = c["n_embd"], c["n_head"]
    d, eps = E // h, c.get("layer_norm_epsilon", 1e-5)
    act = activation(c.get("activation_function", "gelu_new"))
    x = sd["wte.weight"][ids] + sd["wpe.weight"][:T][None]
    _rec("hook_embed", sd["wte.weight"][ids])
    _rec("hook_pos_embed", sd["wpe.weight"][:T][None].expand(B, T, E))
    mask = key_mask(lengths, T, causal=True)
    hs, maps = [x], []
    L = num_layers(c)
    for n in range(L):
        p, b = f"h.{n}.", f"blocks.{n}."
        _rec(b + "hook_resid_pre", x)
        a_in = layer_norm(x, sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], eps)
        _rec(b + "ln1.hook_normalized", a_in)
        q, k, v = conv1d(sd, p + "attn.c_attn", a_in).split(E, -1)
        q, k, v = split_heads(q, h, d), split_heads(k, h, d), split_heads(v, h, d)
        _rec_qkv(b + "attn.", q, k, v)
        scale = 1.0 / math.sqrt(d) if c.get("scale_attn_weights", True) else 1.0
        if c.get("scale_attn_by_inverse_layer_idx", False):
            scale /= n + 1
        ctx, a = attend(q, k, v, mask, scale, site=b + "attn.")
        y = conv1d(sd, p + "attn.c_proj", merge_heads(ctx))
        _rec(b + "hook_attn_out", y)
        x = x + y
        _rec(b + "hook_resid_mid", x)
        m_in = layer_norm(x, sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], eps)
        _rec(b + "ln2.hook_normalized", m_in)
        pre = conv1d(sd, p + "mlp.c_fc", m_in)
        post = act(pre)
        y = conv1d(sd, p + "mlp.c_proj", post)
        _rec_mlp(b, pre, post, y)
        x = x + y
        _rec(b + "hook_resid_post", x)
        hs.append(x)
        maps.append(a)
    hs[-1] = layer_norm(x, sd["ln_f.weight"], sd["ln_f.bias"], eps)  # replaces the last layer's raw output
    _rec("ln_final.hook_normalized", hs[-1])
    head = lm_head(c, sd, sd["wte.weight"], "lm_head.weight")
    return hs, maps, None if head is None else hs[-1] @ head.T


def _unfuse_phi3(c, sd):
    """Phi-3's fused qkv_proj and gate_up_proj split into LLaMA's names, as Phi3Attention slices
    qkv (q | k | v rows) and Phi3MLP chunks gate_up (gate | up rows)."""
    h = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or h
    d = c.get("head_dim") or c["hidden_size"] // h
    I = c["intermediate_size"]
    sd = dict(sd)
    for n in range(num_layers(c)):
        p = f"model.layers.{n}."
        qkv = sd.pop(p + "self_attn.qkv_proj.weight")
        sd[p + "self_attn.q_proj.weight"] = qkv[:h * d]
        sd[p + "self_attn.k_proj.weight"] = qkv[h * d:(h + kv) * d]
        sd[p + "self_attn.v_proj.weight"] = qkv[(h + kv) * d:]
        gate_up = sd.pop(p + "mlp.gate_up_proj.weight")
        sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"] = gate_up[:I], gate_up[I:]
    return sd


def _llama(c, sd, ids, lengths, off):
    B, T = ids.shape
    mt = c["model_type"]
    if mt == "phi3":
        sd = _unfuse_phi3(c, sd)
    E, h = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or h
    d = c.get("head_dim") or E // h
    eps = c.get("rms_norm_eps", 1e-5 if mt == "phi3" else 1e-6)
    if mt == "stablelm":  # modeling_stablelm.py: nn.LayerNorm (weight and bias) for every norm
        eps = c.get("layer_norm_eps", 1e-5)

        def norm(v, name):
            return layer_norm(v, sd[name + ".weight"], sd[name + ".bias"], eps)
    else:
        def norm(v, name):
            return rms_norm(v, sd[name + ".weight"], eps)
    act = activation(c.get("hidden_act", "silu"))
    L = num_layers(c)
    # The layers with a sliding window, as modeling_mistral.py, modeling_phi3.py and
    # modeling_qwen2.py decide: Mistral and Phi-3 every layer; Qwen2 (and Qwen3) only with
    # use_sliding_window, and then the layers config.layer_types calls "sliding_attention", which
    # Qwen2Config derives from max_window_layers (default 28) as i >= max_window_layers when the
    # file does not list them.
    window, windowed = None, [False] * L
    if mt in ("mistral", "phi3"):
        window, windowed = c.get("sliding_window"), [True] * L
    elif c.get("use_sliding_window", False):
        window = c.get("sliding_window")
        types = c.get("layer_types") or ["sliding_attention" if i >= c.get("max_window_layers", 28)
                                         else "full_attention" for i in range(L)]
        windowed = [t == "sliding_attention" for t in types]
    if "sliding_window" in off:
        window = None
    rot = d
    if mt in ("phi3", "stablelm") and "partial_rotary" not in off:
        rot = int(d * c.get("partial_rotary_factor", 1.0 if mt == "phi3" else 0.25))
    scaling = c.get("rope_scaling")
    if mt == "phi3" and scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        raise NotImplementedError(f"phi3 rope_scaling {scaling!r}")
    cos, sin = rope_cos_sin(T, rot, float(c.get("rope_theta", 10000.0)), scaling)
    x = sd["model.embed_tokens.weight"][ids]
    _rec("hook_embed", x)
    full = key_mask(lengths, T, causal=True, window=None)
    local = key_mask(lengths, T, causal=True, window=window)
    hs, maps = [x], []
    for n in range(L):
        mask = local if windowed[n] else full
        p, b = f"model.layers.{n}.", f"blocks.{n}."
        _rec(b + "hook_resid_pre", x)
        a_in = norm(x, p + "input_layernorm")
        _rec(b + "ln1.hook_normalized", a_in)
        q = linear(sd, p + "self_attn.q_proj", a_in).reshape(B, T, h, d)
        k = linear(sd, p + "self_attn.k_proj", a_in).reshape(B, T, kv, d)
        v = linear(sd, p + "self_attn.v_proj", a_in).reshape(B, T, kv, d)
        if mt == "qwen3" and "qk_norm" not in off:
            q = rms_norm(q, sd[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, sd[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        _rec_qkv(b + "attn.", q, k, v)
        k, v = k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1)
        ctx, a = attend(q, k, v, mask, d ** -0.5, site=b + "attn.")
        y = linear(sd, p + "self_attn.o_proj", merge_heads(ctx))
        _rec(b + "hook_attn_out", y)
        x = x + y
        _rec(b + "hook_resid_mid", x)
        m_in = norm(x, p + "post_attention_layernorm")
        _rec(b + "ln2.hook_normalized", m_in)
        pre = linear(sd, p + "mlp.gate_proj", m_in)
        post = act(pre) * linear(sd, p + "mlp.up_proj", m_in)
        y = linear(sd, p + "mlp.down_proj", post)
        _rec_mlp(b, pre, post, y)
        x = x + y
        _rec(b + "hook_resid_post", x)
        hs.append(x)
        maps.append(a)
    hs[-1] = norm(x, "model.norm")
    _rec("ln_final.hook_normalized", hs[-1])
    head = lm_head(c, sd, sd["model.embed_tokens.weight"], "lm_head.weight")
    return hs, maps, None if head is None else hs[-1] @ head.T


def _gpt_neox(c, sd, ids, lengths, off):
    B, T = ids.shape
    E, h = c["hidden_size"], c["num_attention_heads"]
    d, eps = E // h, c.get("layer_norm_eps", 1e-5)
    act = activation(c.get("hidden_act", "gelu"))
    # GPTNeoXConfig (4.4x) sets partial_rotary_factor = rotary_pct and rope_theta =
    # rotary_emb_base from its arguments, so the old keys win when a file has both
    pct = _first(c, ("rotary_pct", "partial_rotary_factor"), 0.25)
    base = float(_first(c, ("rotary_emb_base", "rope_theta"), 10000.0))
    rot = d if "partial_rotary" in off else int(d * pct)
    cos, sin = rope_cos_sin(T, rot, base, c.get("rope_scaling"))
    parallel = c.get("use_parallel_residual", True) and "parallel_residual" not in off
    x = sd["embed_in.weight"][ids]
    _rec("hook_embed", x)
    mask = key_mask(lengths, T, causal=True)
    hs, maps = [x], []
    for n in range(num_layers(c)):
        p, b = f"layers.{n}.", f"blocks.{n}."
        _rec(b + "hook_resid_pre", x)
        a_in = norm_layer(sd, p + "input_layernorm", x, eps)
        _rec(b + "ln1.hook_normalized", a_in)
        qkv = linear(sd, p + "attention.query_key_value", a_in).reshape(B, T, h, 3, d)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # (B, h, T, d) each
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        _rec_qkv(b + "attn.", q, k, v)
        ctx, a = attend(q, k, v, mask, d ** -0.5, site=b + "attn.")
        attn = linear(sd, p + "attention.dense", merge_heads(ctx))
        _rec(b + "hook_attn_out", attn)

        def mlp(y):
            _rec(b + "ln2.hook_normalized", y)
            pre = linear(sd, p + "mlp.dense_h_to_4h", y)
            post = act(pre)
            out = linear(sd, p + "mlp.dense_4h_to_h", post)
            _rec_mlp(b, pre, post, out)
            return out

        if parallel:  # no hook_resid_mid
            x = x + attn + mlp(norm_layer(sd, p + "post_attention_layernorm", x, eps))
        else:
            x = x + attn
            _rec(b + "hook_resid_mid", x)
            x = x + mlp(norm_layer(sd, p + "post_attention_layernorm", x, eps))
        _rec(b + "hook_resid_post", x)
        hs.append(x)
        maps.append(a)
    hs[-1] = norm_layer(sd, "final_layer_norm", x, eps)
    _rec("ln_final.hook_normalized", hs[-1])
    head = lm_head(c, sd, sd["embed_in.weight"], "embed_out.weight")
    return hs, maps, None if head is None else hs[-1] @ head.T


def _gemma(c, sd, ids, lengths, off):
    B, T = ids.shape
    mt = c["model_type"]
    E, h = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or h
    d = c.get("head_dim") or E // h
    eps = c.get("rms_norm_eps", 1e-6)
    act = activation(c.get("hidden_activation") or "gelu_pytorch_tanh")
    L = num_layers(c)
    one = 0.0 if "norm_offset" in off else 1.0

    def norm(x, name):  # GemmaRMSNorm: x·rsqrt(mean(x²) + eps)·(1 + w)
        return rms_norm(x, one + sd[name + ".weight"], eps)

    defaults = {"gemma": (None, None, None), "gemma2": (50.0, 30.0, 256), "gemma3_text": (None, None, 256)}
    attn_cap, final_cap, qpas = defaults[mt]
    attn_cap = c.get("attn_logit_softcapping", attn_cap)
    final_cap = c.get("final_logit_softcapping", final_cap)
    if "softcap" in off:
        attn_cap = final_cap = None
    scale = d ** -0.5
    if mt != "gemma" and "query_pre_attn_scalar" not in off:
        scale = c.get("query_pre_attn_scalar", qpas) ** -0.5
    # sliding layers: layer_types when the file has them, else each version's rule
    if mt == "gemma" or "sliding_window" in off:
        sliding = [False] * L
    elif c.get("layer_types"):
        sliding = [t == "sliding_attention" for t in c["layer_types"]]
    elif mt == "gemma2":
        sliding = [i % 2 == 0 for i in range(L)]
    else:
        sliding = [bool((i + 1) % c.get("sliding_window_pattern", 6)) for i in range(L)]
    full = key_mask(lengths, T, causal=True)
    local = key_mask(lengths, T, causal=True, window=c.get("sliding_window", 4096))
    theta = float(c.get("rope_theta", 1e6 if mt == "gemma3_text" else 10000.0))
    global_rope = rope_cos_sin(T, d, theta, c.get("rope_scaling"))
    local_rope = global_rope
    if mt == "gemma3_text":  # rotary_emb_local: rope_local_base_freq, rope_scaling "default"
        local_theta = theta if "local_rope" in off else float(c.get("rope_local_base_freq", 10000.0))
        local_rope = rope_cos_sin(T, d, local_theta)
    x = sd["model.embed_tokens.weight"][ids]
    if "embed_scale" not in off:
        x = x * math.sqrt(E)
    _rec("hook_embed", x)
    hs, maps = [x], []
    for n in range(L):
        p, b = f"model.layers.{n}.", f"blocks.{n}."
        _rec(b + "hook_resid_pre", x)
        mask, (cos, sin) = (local, local_rope) if sliding[n] else (full, global_rope)
        a_in = norm(x, p + "input_layernorm")
        _rec(b + "ln1.hook_normalized", a_in)
        q = linear(sd, p + "self_attn.q_proj", a_in).reshape(B, T, h, d)
        k = linear(sd, p + "self_attn.k_proj", a_in).reshape(B, T, kv, d)
        v = linear(sd, p + "self_attn.v_proj", a_in).reshape(B, T, kv, d)
        if mt == "gemma3_text" and "qk_norm" not in off:
            q, k = norm(q, p + "self_attn.q_norm"), norm(k, p + "self_attn.k_norm")
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        _rec_qkv(b + "attn.", q, k, v)
        k, v = k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1)
        ctx, a = attend(q, k, v, mask, scale, attn_cap, site=b + "attn.")
        y = linear(sd, p + "self_attn.o_proj", merge_heads(ctx))

        def mlp(m_in):
            _rec(b + "ln2.hook_normalized", m_in)
            pre = linear(sd, p + "mlp.gate_proj", m_in)
            post = act(pre) * linear(sd, p + "mlp.up_proj", m_in)
            out = linear(sd, p + "mlp.down_proj", post)
            _rec(b + "mlp.hook_pre", pre)
            _rec(b + "mlp.hook_post", post)
            return out

        if mt == "gemma":  # LLaMA's order: post_attention_layernorm is the MLP's input norm
            _rec(b + "hook_attn_out", y)
            x = x + y
            _rec(b + "hook_resid_mid", x)
            m = mlp(norm(x, p + "post_attention_layernorm"))
            _rec(b + "hook_mlp_out", m)
            x = x + m
        else:  # sandwich norms: hook_attn_out and hook_mlp_out after the post-norms
            if "post_norms" not in off:
                y = norm(y, p + "post_attention_layernorm")
            _rec(b + "hook_attn_out", y)
            x = x + y
            _rec(b + "hook_resid_mid", x)
            m = mlp(norm(x, p + "pre_feedforward_layernorm"))
            if "post_norms" not in off:
                m = norm(m, p + "post_feedforward_layernorm")
            _rec(b + "hook_mlp_out", m)
            x = x + m
        _rec(b + "hook_resid_post", x)
        hs.append(x)
        maps.append(a)
    hs[-1] = norm(x, "model.norm")
    _rec("ln_final.hook_normalized", hs[-1])
    head = lm_head(c, sd, sd["model.embed_tokens.weight"], "lm_head.weight")
    return hs, maps, None if head is None else softcap(hs[-1] @ head.T, final_cap)


def _opt(c, sd, ids, lengths, off):
    B, T = ids.shape
    E, h = c["hidden_size"], c["num_attention_heads"]
    d, eps = E // h, 1e-5  # nn.LayerNorm's default eps
    if c.get("word_embed_proj_dim", E) != E:
        raise NotImplementedError("OPT word_embed_proj_dim != hidden_size (project_in / project_out)")
    act = activation(c.get("activation_function", "relu"))
    pre = c.get("do_layer_norm_before", True)
    # OPTLearnedPositionalEmbedding: (cumsum(mask) · mask - 1) + offset 2
    real = (torch.arange(T)[None, :] < torch.as_tensor(lengths)[:, None]).long()
    pos = torch.cumsum(real, 1) * real - 1
    pos = pos.clamp(min=0) if "position_offset" in off else pos + 2
    x = sd["decoder.embed_tokens.weight"][ids] + sd["decoder.embed_positions.weight"][pos]
    _rec("hook_embed", sd["decoder.embed_tokens.weight"][ids])
    _rec("hook_pos_embed", sd["decoder.embed_positions.weight"][pos])
    mask = key_mask(lengths, T, causal=True)
    hs, maps = [x], []
    for n in range(num_layers(c)):
        p, b = f"decoder.layers.{n}.", f"blocks.{n}."
        _rec(b + "hook_resid_pre", x)
        a_in = norm_layer(sd, p + "self_attn_layer_norm", x, eps) if pre else x
        if pre:
            _rec(b + "ln1.hook_normalized", a_in)
        q, k, v = (split_heads(linear(sd, p + f"self_attn.{w}_proj", a_in), h, d) for w in "qkv")
        _rec_qkv(b + "attn.", q, k, v)
        ctx, a = attend(q, k, v, mask, d ** -0.5, site=b + "attn.")
        y = linear(sd, p + "self_attn.out_proj", merge_heads(ctx))
        _rec(b + "hook_attn_out", y)
        x = x + y
        _rec(b + "hook_resid_mid", x)
        if not pre:  # post-norm, as BERT
            x = norm_layer(sd, p + "self_attn_layer_norm", x, eps)
            _rec(b + "ln1.hook_normalized", x)
        m_in = norm_layer(sd, p + "final_layer_norm", x, eps) if pre else x
        if pre:
            _rec(b + "ln2.hook_normalized", m_in)
        mp = linear(sd, p + "fc1", m_in)
        post = act(mp)
        y = linear(sd, p + "fc2", post)
        _rec_mlp(b, mp, post, y)
        x = x + y
        _rec(b + "hook_resid_post", x)
        if not pre:
            x = norm_layer(sd, p + "final_layer_norm", x, eps)
            _rec(b + "ln2.hook_normalized", x)
        hs.append(x)
        maps.append(a)
    if pre and not c.get("_remove_final_layer_norm", False):
        hs[-1] = norm_layer(sd, "decoder.final_layer_norm", x, eps)
        _rec("ln_final.hook_normalized", hs[-1])
    head = lm_head(c, sd, sd["decoder.embed_tokens.weight"], "lm_head.weight")
    return hs, maps, None if head is None else hs[-1] @ head.T


def vit(config, state_dict, pixel_values, record=None):
    """ViTModel's forward (modeling_vit.py) on pixel_values (B, 3, H, W), in float64: the
    Conv2d patch embedding (kernel = stride = patch_size), the CLS token, the position table,
    pre-norm layers (layernorm_before, attention, residual; layernorm_after, GELU MLP,
    residual), the final layernorm. Returns {"hidden_states", "attentions", "output"} as
    forward() does, and with ViTForImageClassification's classifier.weight in the state dict
    "logits" (B, num_labels): classifier(sequence_output[:, 0, :]). The pooler is not run."""
    return _recording(record, _vit_encoder, config, state_dict, pixel_values, "vit.", distillation=False)


def deit(config, state_dict, pixel_values, record=None):
    """DeiTModel's forward (modeling_deit.py), in float64: ViT's, with DeiTEmbeddings'
    distillation token after the CLS token, x = cat(cls, distillation, patches) + the position
    table (N + 2 rows). "logits": DeiTForImageClassification's classifier(sequence_output[:, 0]),
    or DeiTForImageClassificationWithTeacher's (cls_classifier(sequence_output[:, 0]) +
    distillation_classifier(sequence_output[:, 1])) / 2, with "cls_logits" and
    "distillation_logits" beside it."""
    return _recording(record, _vit_encoder, config, state_dict, pixel_values, "deit.", distillation=True)


def _recording(record, fn, *args, **kwargs):
    """fn(*args, **kwargs) with the sites recorded into `record` (a dict, or None)."""
    global _REC
    _REC = record
    try:
        return fn(*args, **kwargs)
    finally:
        _REC = None


def _vit_encoder(config, state_dict, pixel_values, prefix, distillation):
    c = config
    sd = {k[len(prefix):] if k.startswith(prefix) else k: _t(v) for k, v in state_dict.items()}
    E, h = c["hidden_size"], c["num_attention_heads"]
    d, eps, p = E // h, c.get("layer_norm_eps", 1e-12), c["patch_size"]
    act = activation(c.get("hidden_act", "gelu"))
    with torch.no_grad():
        px = _t(pixel_values)
        B = px.shape[0]
        e = "embeddings."
        x = torch.nn.functional.conv2d(px, sd[e + "patch_embeddings.projection.weight"],
                                       sd[e + "patch_embeddings.projection.bias"], stride=p)
        x = x.flatten(2).transpose(1, 2)  # (B, N, E), patches row by row
        first = [sd[e + "cls_token"].expand(B, -1, -1)]
        if distillation:
            first.append(sd[e + "distillation_token"].expand(B, -1, -1))
        x = torch.cat(first + [x], 1)
        _rec("hook_embed", x)  # the CLS (and distillation) token(s), then the patches
        _rec("hook_pos_embed", sd[e + "position_embeddings"].expand(B, -1, -1))
        x = x + sd[e + "position_embeddings"]
        T = x.shape[1]
        mask = key_mask([T] * B, T, causal=False)
        hs, maps = [x], []
        for n in range(c["num_hidden_layers"]):
            q, b = f"encoder.layer.{n}.", f"blocks.{n}."
            _rec(b + "hook_resid_pre", x)
            y = layer_norm(x, sd[q + "layernorm_before.weight"], sd[q + "layernorm_before.bias"], eps)
            _rec(b + "ln1.hook_normalized", y)
            qh, kh, vh = (split_heads(linear(sd, q + "attention.attention." + w, y), h, d)
                          for w in ("query", "key", "value"))
            _rec_qkv(b + "attn.", qh, kh, vh)
            ctx, a = attend(qh, kh, vh, mask, 1.0 / math.sqrt(d), site=b + "attn.")
            o = linear(sd, q + "attention.output.dense", merge_heads(ctx))
            _rec(b + "hook_attn_out", o)
            x = o + x
            _rec(b + "hook_resid_mid", x)
            y = layer_norm(x, sd[q + "layernorm_after.weight"], sd[q + "layernorm_after.bias"], eps)
            _rec(b + "ln2.hook_normalized", y)
            pre = linear(sd, q + "intermediate.dense", y)
            post = act(pre)
            o = linear(sd, q + "output.dense", post)
            _rec_mlp(b, pre, post, o)
            x = o + x
            _rec(b + "hook_resid_post", x)
            hs.append(x)
            maps.append(a)
        out = layer_norm(x, sd["layernorm.weight"], sd["layernorm.bias"], eps)
        _rec("ln_final.hook_normalized", out)
        heads = {}
        if "classifier.weight" in sd:
            heads["logits"] = linear(sd, "classifier", out[:, 0, :])
        if "cls_classifier.weight" in sd:  # DeiTForImageClassificationWithTeacher
            heads["cls_logits"] = linear(sd, "cls_classifier", out[:, 0, :])
            heads["distillation_logits"] = linear(sd, "distillation_classifier", out[:, 1, :])
            heads["logits"] = (heads["cls_logits"] + heads["distillation_logits"]) / 2
    hs[-1] = out
    r = {"hidden_states": torch.stack(hs).numpy(), "attentions": [a.numpy() for a in maps],
         "output": out.numpy()}
    r.update({k: v.numpy() for k, v in heads.items()})
    return r


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


# Encoder-decoders (modeling_t5.py, modeling_bart.py), teacher-forced as transformers runs them
# given labels: the decoder reads the labels shifted right after decoder_start_token_id.
SEQ2SEQ = ("t5", "bart")


def shift_right(labels, start):
    """modeling_bart.shift_tokens_right / T5's _shift_right: (B, T) -> (B, T)."""
    labels = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    out = labels.new_zeros(labels.shape)
    out[:, 1:] = labels[:, :-1].clone()
    out[:, 0] = start
    return out


def t5_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5Attention._relative_position_bucket as transformers computes it (its log in float32)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (torch.log(relative_position.float() / max_exact)
                            / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact)).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


def _t5_bias(c, table, L, bidirectional):
    """compute_bias: (1, h, L, L) from the (buckets, h) table."""
    pos = torch.arange(L, dtype=torch.long)
    rel = pos[None, :] - pos[:, None]  # memory_position - context_position
    buckets = t5_relative_position_bucket(rel, bidirectional, c.get("relative_attention_num_buckets", 32),
                                          c.get("relative_attention_max_distance", 128))
    return table[buckets].permute(2, 0, 1).unsqueeze(0)


def _additive(mask):
    """bool (B, 1, T, S) -> 0 / float64's lowest, as HF's extended attention masks."""
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, MIN)


def _rec_additive(site, scores, additive, a, ctx):
    """The attention sites of an encoder-decoder's layer: scores = the logits before the
    softmax with -inf where the additive mask holds float64's lowest value."""
    if _REC is not None:
        _rec_attention(site, scores, additive > MIN / 2, a, ctx)


def _stack(name):
    """Sets the site names' prefix ("encoder." / "decoder.")."""
    global _STACK
    _STACK = name


def _cross_mask(src_lengths, T, S):
    s = torch.arange(S)
    return (s[None, :] < torch.as_tensor(src_lengths)[:, None])[:, None, None, :].expand(-1, 1, T, S)


def _t5(c, sd, src, src_lengths, dec, tgt_lengths):
    norms = []  # every attention call's value-weighted norms, in call order
    E, H, K = c["d_model"], c["num_heads"], c["d_kv"]
    eps = c.get("layer_norm_epsilon", 1e-6)
    proj = c.get("feed_forward_proj", "relu")
    gated = proj.startswith("gated-")
    act = activation("gelu_new" if proj == "gated-gelu" else proj.split("-")[-1])
    B, S = src.shape
    T = dec.shape[1]

    def attention(p, x, kv, additive, site=None):
        q = split_heads(x @ sd[p + "q.weight"].T, H, K)
        k = split_heads(kv @ sd[p + "k.weight"].T, H, K)
        v = split_heads(kv @ sd[p + "v.weight"].T, H, K)
        scores = q @ k.transpose(-1, -2) + additive  # no 1/sqrt(d_kv)
        a = torch.softmax(scores, -1)
        norms.append(_value_weighted(a, v, sd[p + "o.weight"], H, K))
        ctx = a @ v
        out = merge_heads(ctx) @ sd[p + "o.weight"].T
        if site is not None:
            _rec_qkv(site, q, k, v)
            _rec_additive(site, scores, additive, a, ctx)
        return out, a

    def ffn(p, x, b, ln):
        h = rms_norm(x, sd[p + "layer_norm.weight"], eps)
        _rec(b + ln + ".hook_normalized", h)
        if gated:
            pre = h @ sd[p + "DenseReluDense.wi_0.weight"].T
            h = act(pre) * (h @ sd[p + "DenseReluDense.wi_1.weight"].T)
        else:
            pre = h @ sd[p + "DenseReluDense.wi.weight"].T
            h = act(pre)
        out = h @ sd[p + "DenseReluDense.wo.weight"].T
        _rec_mlp(b, pre, h, out)
        _rec(b + "hook_resid_post", x + out)
        return x + out

    def self_attention(p, x, additive, b):
        _rec(b + "hook_resid_pre", x)
        h = rms_norm(x, sd[p + "0.layer_norm.weight"], eps)
        _rec(b + "ln1.hook_normalized", h)
        o, a = attention(p + "0.SelfAttention.", h, h, additive, b + "attn.")
        _rec(b + "hook_attn_out", o)
        _rec(b + "hook_resid_mid", x + o)
        return x + o, a

    # the encoder: position bias (bidirectional) + padding, shared by every layer
    _stack("encoder.")
    x = sd["shared.weight"][src]
    _rec("hook_embed", x)
    bias = _t5_bias(c, sd["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], S, True)
    enc_bias = bias + _additive(key_mask(src_lengths, S, False))
    enc_maps, enc_states = [], []
    for i in range(c["num_layers"]):
        enc_states.append(x)  # T5Stack's all_hidden_states: each block's input
        p = f"encoder.block.{i}.layer."
        x, a = self_attention(p, x, enc_bias, f"blocks.{i}.")
        enc_maps.append(a)
        x = ffn(p + "1.", x, f"blocks.{i}.", "ln2")
    memory = rms_norm(x, sd["encoder.final_layer_norm.weight"], eps)
    _rec("ln_final.hook_normalized", memory)
    enc_states.append(memory)  # then final_layer_norm's output
    # the decoder: causal position bias (unidirectional) + causal and padding masks
    _stack("decoder.")
    y = sd["shared.weight"][dec]
    _rec("hook_embed", y)
    bias = _t5_bias(c, sd["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], T, False)
    dec_bias = bias + _additive(key_mask(tgt_lengths, T, True))
    cross_bias = _additive(_cross_mask(src_lengths, T, S))
    dec_maps, cross_maps, dec_states = [], [], []
    for i in range(c.get("num_decoder_layers") or c["num_layers"]):
        dec_states.append(y)
        p, b = f"decoder.block.{i}.layer.", f"blocks.{i}."
        y, a = self_attention(p, y, dec_bias, b)
        dec_maps.append(a)
        h = rms_norm(y, sd[p + "1.layer_norm.weight"], eps)
        _rec(b + "ln2.hook_normalized", h)
        o, a = attention(p + "1.EncDecAttention.", h, memory, cross_bias, b + "cross_attn.")
        _rec(b + "hook_cross_attn_out", o)
        y = y + o
        _rec(b + "hook_resid_mid_cross", y)
        cross_maps.append(a)
        y = ffn(p + "2.", y, b, "ln3")
    out = rms_norm(y, sd["decoder.final_layer_norm.weight"], eps)
    _rec("ln_final.hook_normalized", out)
    dec_states.append(out)
    if c.get("tie_word_embeddings", True):
        logits = (out * E ** -0.5) @ sd["shared.weight"].T
    else:
        logits = out @ sd["lm_head.weight"].T
    return enc_maps, dec_maps, cross_maps, out, logits, norms, enc_states, dec_states


def _bart(c, sd, src, src_lengths, dec, tgt_lengths):
    norms = []  # every attention call's value-weighted norms, in call order
    E, H = c["d_model"], c["encoder_attention_heads"]
    K = E // H
    eps = 1e-5
    act = activation(c.get("activation_function", "gelu"))
    scale = math.sqrt(E) if c.get("scale_embedding", False) else 1.0
    B, S = src.shape
    T = dec.shape[1]

    def lin(name, x):
        return x @ sd[name + ".weight"].T + sd[name + ".bias"]

    def ln(name, x):
        return layer_norm(x, sd[name + ".weight"], sd[name + ".bias"], eps)

    def attention(p, x, kv, additive, site):
        qp = lin(p + "q_proj", x)
        q = split_heads(qp * K ** -0.5, H, K)  # BartAttention: q * scaling
        k = split_heads(lin(p + "k_proj", kv), H, K)
        v = split_heads(lin(p + "v_proj", kv), H, K)
        scores = q @ k.transpose(-1, -2) + additive
        a = torch.softmax(scores, -1)
        norms.append(_value_weighted(a, v, sd[p + "out_proj.weight"], H, K))
        ctx = a @ v
        _rec_qkv(site, split_heads(qp, H, K), k, v)  # q as projected; the scale is the scores'
        _rec_additive(site, scores, additive, a, ctx)
        out = lin(p + "out_proj", merge_heads(ctx))
        cross = site.endswith("cross_attn.")
        _rec(site[:-len("cross_attn." if cross else "attn.")] + ("hook_cross_attn_out" if cross else "hook_attn_out"), out)
        return out, a

    def embed(stack, ids):
        L = ids.shape[1]
        pos = sd[f"model.{stack}.embed_positions.weight"][torch.arange(L) + 2]  # offset 2
        _stack(stack + ".")
        _rec("hook_embed", sd["model.shared.weight"][ids] * scale)
        _rec("hook_pos_embed", pos[None].expand(ids.shape[0], -1, -1))
        return ln(f"model.{stack}.layernorm_embedding", sd["model.shared.weight"][ids] * scale + pos)

    def post_norm(name, x, site, ln_site):  # post-norm, as TransformerLens's HookedEncoder
        _rec(site, x)
        y = ln(name, x)
        _rec(ln_site + ".hook_normalized", y)
        return y

    def mlp(p, x, b, ln_site):
        pre = lin(p + "fc1", x)
        post = act(pre)
        out = lin(p + "fc2", post)
        _rec_mlp(b, pre, post, out)
        return post_norm(p + "final_layer_norm", x + out, b + "hook_resid_post", b + ln_site)

    x = embed("encoder", src)
    enc_mask = _additive(key_mask(src_lengths, S, False))
    enc_maps, enc_states = [], []
    for i in range(c["encoder_layers"]):
        enc_states.append(x)  # encoder_states: each layer's input (0: after layernorm_embedding)
        p, b = f"model.encoder.layers.{i}.", f"blocks.{i}."
        _rec(b + "hook_resid_pre", x)
        o, a = attention(p + "self_attn.", x, x, enc_mask, b + "attn.")
        x = post_norm(p + "self_attn_layer_norm", x + o, b + "hook_resid_mid", b + "ln1")
        enc_maps.append(a)
        x = mlp(p, x, b, "ln2")
    memory = x
    enc_states.append(x)  # then the last layer's output (no final norm)
    y = embed("decoder", dec)
    dec_mask = _additive(key_mask(tgt_lengths, T, True))
    cross_mask = _additive(_cross_mask(src_lengths, T, S))
    dec_maps, cross_maps, dec_states = [], [], []
    for i in range(c["decoder_layers"]):
        dec_states.append(y)
        p, b = f"model.decoder.layers.{i}.", f"blocks.{i}."
        _rec(b + "hook_resid_pre", y)
        o, a = attention(p + "self_attn.", y, y, dec_mask, b + "attn.")
        y = post_norm(p + "self_attn_layer_norm", y + o, b + "hook_resid_mid", b + "ln1")
        dec_maps.append(a)
        o, a = attention(p + "encoder_attn.", y, memory, cross_mask, b + "cross_attn.")
        y = post_norm(p + "encoder_attn_layer_norm", y + o, b + "hook_resid_mid_cross", b + "ln2")
        cross_maps.append(a)
        y = mlp(p, y, b, "ln3")
    head = sd["lm_head.weight"] if not c.get("tie_word_embeddings", True) else sd["model.shared.weight"]
    logits = y @ head.T + sd["final_logits_bias"]
    dec_states.append(y)
    return enc_maps, dec_maps, cross_maps, y, logits, norms, enc_states, dec_states


def _value_weighted(a, v, Wo, H, K):
    """Kobayashi et al.'s ||a_ij f_h(x_j)||, f_h(x_j) = v_hj W_o^h: a (B, H, Lq, Lk), v (B, H,
    Lk, K), W_o (E, H*K) as nn.Linear stores it."""
    f = torch.stack([(v[:, h] @ Wo[:, h * K:(h + 1) * K].T).norm(dim=-1) for h in range(H)], 1)
    return a * f[:, :, None, :]


def seq2seq(config, state_dict, source, labels, source_lengths=None, target_lengths=None, record=None):
    """An encoder-decoder's forward with labels: {"encoder_attentions": [L_enc × (B, h, S, S)],
    "decoder_attentions": [L_dec × (B, h, T, T)], "cross_attentions": [L_dec × (B, h, T, S)],
    "output": (B, T, d) the decoder's final hidden states, "logits": (B, T, V),
    "decoder_input_ids": (B, T), "encoder_norms", "decoder_norms", "cross_norms": each map's
    value-weighted norms (_value_weighted), "encoder_hidden_states": [L_enc + 1 × (B, S, d)],
    "decoder_hidden_states": [L_dec + 1 × (B, T, d)] as output_hidden_states gives them (each
    stack's embeddings, after BART's layernorm_embedding; each layer's input; the stack's output
    after its final norm, T5's final_layer_norm)}. Padding (past each row's length) is masked as keys in every
    attention (attention_mask and decoder_attention_mask). record: a dict, filled with the
    sites (encoder.* and decoder.*) as forward() fills it."""
    mt = config["model_type"]
    if mt not in SEQ2SEQ:
        raise ValueError(f"model_type {mt!r}: one of {', '.join(SEQ2SEQ)}")
    src = torch.as_tensor(np.asarray(source, dtype=np.int64))
    B, S = src.shape
    T = np.asarray(labels).shape[1]
    src_lengths = [S] * B if source_lengths is None else [int(n) for n in source_lengths]
    tgt_lengths = [T] * B if target_lengths is None else [int(n) for n in target_lengths]
    start = config.get("decoder_start_token_id", 0 if mt == "t5" else 2)
    dec = shift_right(labels, start)
    sd = {k: _t(v) for k, v in state_dict.items()}
    with torch.no_grad():
        fn = _t5 if mt == "t5" else _bart
        try:
            enc, dmaps, cmaps, out, logits, norms, enc_states, dec_states = _recording(
                record, fn, config, sd, src, src_lengths, dec, tgt_lengths)
        finally:
            _stack("")
    # the norms in call order: the encoder's layers, then each decoder layer's self and cross
    Le = len(enc)
    return {"encoder_norms": [n.numpy() for n in norms[:Le]],
            "decoder_norms": [n.numpy() for n in norms[Le::2]],
            "cross_norms": [n.numpy() for n in norms[Le + 1::2]],
            "encoder_attentions": [a.numpy() for a in enc],
            "decoder_attentions": [a.numpy() for a in dmaps],
            "cross_attentions": [a.numpy() for a in cmaps], "output": out.numpy(),
            "logits": logits.numpy(), "decoder_input_ids": dec.numpy(),
            "encoder_hidden_states": [h.numpy() for h in enc_states],
            "decoder_hidden_states": [h.numpy() for h in dec_states]}
