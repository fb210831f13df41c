#!/usr/bin/python3
"""Transformer layers through the `mha` binary against real PyTorch 1.13: nn.TransformerEncoderLayer,
nn.TransformerDecoderLayer and 2-layer nn.TransformerEncoder / nn.TransformerDecoder, post- and
pre-norm, relu and gelu, with key padding (src_key_padding_mask / tgt_key_padding_mask), a causal
mask and memory padding (memory_key_padding_mask), from the modules' own state_dicts saved with
numpy.savez. Outputs at 1e-5 in float32 and 1e-10 in float64; layer 0's self-attention maps
against nn.MultiheadAttention on that block's input.

The references run with autograd on (no torch.no_grad()), which keeps PyTorch 1.13 off its
inference fast path: that path (and nested tensors in nn.TransformerEncoder) skips or zeroes
padded positions, where these checks compare every row.

    /usr/bin/python3 tests/interop/layers_crosscheck.py build/bin/mha [--keep] [--only CASE]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Failure, Harness, case_filter  # noqa: E402

D, H, DFF = 32, 4, 48
B, T, S = 3, 6, 8

CASES = {
    # name: (kind, layers, norm_first, activation, final_norm, dtype, masks)
    "encoder_layer_post_relu": ("encoder", 1, False, "relu", False, "float32", "pad"),
    "encoder_layer_pre_gelu": ("encoder", 1, True, "gelu", False, "float32", "pad"),
    "encoder_2_post_relu_pad": ("encoder", 2, False, "relu", False, "float32", "pad"),
    "encoder_2_pre_gelu_causal_norm": ("encoder", 2, True, "gelu", True, "float32", "causal"),
    "encoder_2_post_float64": ("encoder", 2, False, "gelu", False, "float64", "pad"),
    "decoder_layer_post_relu": ("decoder", 1, False, "relu", False, "float32", "pad"),
    "decoder_2_pre_gelu_norm": ("decoder", 2, True, "gelu", True, "float32", "pad"),
    "decoder_2_post_float64": ("decoder", 2, False, "relu", False, "float64", "pad"),
}


def build(kind, layers, norm_first, activation, final_norm, dtype):
    torch.manual_seed(len(kind) * 7 + layers * 3 + int(norm_first))
    cls = torch.nn.TransformerEncoderLayer if kind == "encoder" else torch.nn.TransformerDecoderLayer
    layer = cls(D, H, DFF, dropout=0.0, activation=activation, batch_first=True,
                norm_first=norm_first)
    if layers == 1:
        module = layer
    elif kind == "encoder":
        module = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False,
                                             norm=torch.nn.LayerNorm(D) if final_norm else None)
    else:
        module = torch.nn.TransformerDecoder(layer, layers,
                                             norm=torch.nn.LayerNorm(D) if final_norm else None)
    # LayerNorm parameters away from 1 and 0, so that a swapped norm shows
    for name, p in module.named_parameters():
        if "norm" in name:
            with torch.no_grad():
                p.add_(torch.rand_like(p) * 0.5 - 0.25)
    module = module.eval()
    return module.double() if dtype == "float64" else module


def check(hx, name):
    kind, layers, norm_first, activation, final_norm, dtype, masks = CASES[name]
    d = hx.case_dir(name)
    p = lambda f: os.path.join(d, f)  # noqa: E731
    module = build(kind, layers, norm_first, activation, final_norm, dtype)
    tdtype = torch.float64 if dtype == "float64" else torch.float32
    g = torch.Generator().manual_seed(11)
    x = torch.rand(B, T, D, generator=g, dtype=tdtype)
    mem = torch.rand(B, S, D, generator=g, dtype=tdtype)
    lengths, mem_lengths = [T, 4, 2], [S, 5, 3]
    pad = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]
    mem_pad = torch.arange(S)[None, :] >= torch.tensor(mem_lengths)[:, None]
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T).to(tdtype)
    config = {"layer": kind, "h": H, "activation": activation, "norm_first": norm_first,
              "dtype": dtype, "query": p("x.npy"), "weights": p("w.npz"), "save_attention": True,
              "out_dir": p("out")}
    if kind == "encoder":
        if masks == "pad":
            want = module(x, src_key_padding_mask=pad)
            config["key_lengths"] = lengths
        else:
            want = module(x, mask=causal) if layers > 1 else module(x, src_mask=causal)
            config["causal"] = True
    else:
        want = module(x, mem, tgt_mask=causal, tgt_key_padding_mask=pad,
                      memory_key_padding_mask=mem_pad)
        config.update(memory=p("mem.npy"), key_lengths=lengths, memory_key_lengths=mem_lengths)
    np.save(p("x.npy"), x.numpy())
    np.save(p("mem.npy"), mem.numpy())
    np.savez(p("w.npz"), **{k: v.detach().numpy() for k, v in module.state_dict().items()})
    np.save(p("want.npy"), want.detach().numpy())
    with open(p("config.json"), "w") as f:
        json.dump(config, f)
    hx.mha(["run", "--config", p("config.json"), "-q"], what=f"mha run ({name})")
    tol = 1e-10 if dtype == "float64" else 1e-5
    hx.compare(p("out/output.npy"), p("want.npy"), tol, tol, f"{name}: output")
    # layer 0's self-attention maps: nn.MultiheadAttention on that block's input
    first = module if layers == 1 else module.layers[0]
    y = first.norm1(x) if norm_first else x
    mask = causal if kind == "decoder" or masks == "causal" else None
    kpm = pad if masks == "pad" or kind == "decoder" else None
    _, maps = first.self_attn(y, y, y, attn_mask=mask, key_padding_mask=kpm, need_weights=True,
                              average_attn_weights=False)
    np.save(p("want_maps.npy"), maps.detach().numpy())
    got = np.load(p("out/self_attention.npy"))
    if got.shape != (layers, B, H, T, T):
        raise Failure(f"{name}: self_attention.npy has shape {got.shape}")
    np.save(p("got_maps0.npy"), got[0])
    hx.compare(p("got_maps0.npy"), p("want_maps.npy"), tol, tol, f"{name}: layer 0 maps")
    if kind == "decoder":
        cross = np.load(p("out/cross_attention.npy"))
        if cross.shape != (layers, B, H, T, S):
            raise Failure(f"{name}: cross_attention.npy has shape {cross.shape}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--only", action="append")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    want = case_filter(args, list(CASES))
    if want is None:
        return 0
    hx = Harness(args.binary, keep=args.keep, prefix="mha_layers_")
    t0 = time.time()
    for name in CASES:
        if want(name):
            hx.run_case(name, lambda: check(hx, name), describe=name)
    return hx.finish("layers_crosscheck", time.time() - t0)


if __name__ == "__main__":
    sys.exit(main())
