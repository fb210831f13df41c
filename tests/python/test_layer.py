"""mha.Layer (docs/python.md): the same bytes as `mha run` for every variant, PyTorch's modules
through from_torch, threads, and no file system work per call.

    PYTHONPATH=build/python MHA_BIN=build/bin/mha python3 -m pytest tests/python/test_layer.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import mha

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import leaks  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
RNG = np.random.default_rng(7)
B, T, S, D = 2, 6, 7, 16


def rand(*shape):
    return RNG.random(shape, dtype=np.float32)


def qk_norm_weights(h, d_model):
    d_k = d_model // h
    w = {n: (RNG.random((d_model, d_model)) - 0.5).astype(np.float32)
         for n in ("W_q", "W_k", "W_v", "W_o")}
    w.update({n: (RNG.random(d_model) - 0.5).astype(np.float32)
              for n in ("b_q", "b_k", "b_v", "b_o")})
    w["q_norm"] = (RNG.random(d_k) + 0.5).astype(np.float32)
    w["k_norm"] = (RNG.random(d_k) + 0.5).astype(np.float32)
    return w


# name: (config, inputs). Inputs are arrays the call takes (query, key, value, memory); config
# values that are arrays are files for the CLI and arrays for the Layer.
CASES = {
    "plain": ({"h": 4}, {"query": rand(B, T, D)}),
    "causal+lengths": ({"h": 4, "causal": "bottom-right", "key_lengths": [6, 4]},
                       {"query": rand(B, T, D)}),
    "bool mask": ({"h": 4, "mask": RNG.random((T, T)) > 0.3}, {"query": rand(B, T, D)}),
    "float mask": ({"h": 4, "mask": -5 * rand(B, 1, T, T)}, {"query": rand(B, T, D)}),
    "key_padding_mask": ({"h": 4, "key_padding_mask": np.array([[0] * 5 + [1] * 2, [0] * 7],
                                                               dtype=bool)},
                         {"query": rand(B, T, D), "key": rand(B, S, 8), "value": rand(B, S, 12)}),
    "cross": ({"h": 4, "d_out": 10}, {"query": rand(B, T, D), "value": rand(B, S, D)}),
    "gqa": ({"h": 4, "kv_heads": 2, "causal": True}, {"query": rand(B, T, D)}),
    "rope": ({"h": 4, "rope": "half", "causal": True, "position_offset": 3},
             {"query": rand(B, T, D)}),
    "rope interleaved": ({"h": 2, "rope": "interleaved", "rope_dim": 4},
                         {"query": rand(B, T, D)}),
    "qk_norm": ({"h": 4, "weights": qk_norm_weights(4, D), "qk_norm_eps": 1e-5},
                {"query": rand(B, T, D)}),
    "window": ({"h": 4, "causal": True, "window": 3}, {"query": rand(B, T, D)}),
    "alibi": ({"h": 4, "causal": True, "alibi": True}, {"query": rand(B, T, D)}),
    "softcap+bias": ({"h": 4, "softcap": 2.0, "bias": rand(1, 4, T, T)},
                     {"query": rand(B, T, D)}),
    "average_heads": ({"h": 4, "average_heads": True}, {"query": rand(B, T, D)}),
    "float64": ({"h": 4, "dtype": "float64", "causal": True},
                {"query": RNG.random((B, T, D))}),
    "bfloat16": ({"h": 4, "dtype": "bfloat16"}, {"query": rand(B, T, D)}),
    "attention_axes": ({"h": 2, "attention_axes": [1, 2]}, {"query": rand(2, 3, 4, D)}),
    "encoder stack": ({"h": 4, "layer": "encoder", "num_layers": 2, "norm_first": True,
                       "activation": "gelu", "causal": True}, {"query": rand(B, T, D)}),
    "decoder": ({"h": 4, "layer": "decoder", "memory_key_lengths": [7, 3]},
                {"query": rand(B, T, D), "memory": rand(B, S, D)}),
}


def cli_run(tmp, config, inputs):
    """`mha run` with every array as a .npy file (weights as .npz); returns its out_dir."""
    cfg = {}
    for k, v in list(config.items()) + list(inputs.items()):
        if isinstance(v, dict):
            np.savez(tmp / f"{k}.npz", **v)
            cfg[k] = str(tmp / f"{k}.npz")
        elif isinstance(v, np.ndarray):
            np.save(tmp / f"{k}.npy", v)
            cfg[k] = str(tmp / f"{k}.npy")
        else:
            cfg[k] = v
    cfg.update(save_attention=True, out_dir=str(tmp / "out"))
    (tmp / "config.json").write_text(json.dumps(cfg))
    p = subprocess.run([MHA, "run", "--config", str(tmp / "config.json"), "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return tmp / "out"


@pytest.mark.parametrize("name", list(CASES))
def test_layer_gives_the_bytes_of_mha_run(tmp_path, name):
    config, inputs = CASES[name]
    out_dir = cli_run(tmp_path, config, inputs)
    memory = {"memory": inputs["memory"]} if "memory" in inputs else {}
    if "attention_axes" in config:  # planned on the query's N-D shape: a one-shot call
        out, att = mha.attention(inputs["query"], **config, save_attention=True)
        layer = None
    else:
        # The sizes a query file gives `mha run` are keys of a Layer built before its calls.
        sizes = {"d_model": inputs["query"].shape[-1]}
        for name, key in (("key", "kdim"), ("value", "vdim")):
            if name in inputs:
                sizes[key] = inputs[name].shape[-1]
        if "value" in inputs and "key" not in inputs:
            sizes["kdim"] = sizes["vdim"]
        layer = mha.Layer(**config, **sizes, save_attention=True)
        out, att, *cross = layer(inputs["query"], inputs.get("key"), inputs.get("value"),
                                 **memory)
        if cross:  # a decoder's cross-attention maps
            want_cross = np.load(out_dir / "cross_attention.npy")
            assert cross[0].tobytes() == want_cross.tobytes()
    want = np.load(out_dir / "output.npy")
    assert out.dtype == want.dtype and out.shape == want.shape
    assert out.tobytes() == want.tobytes(), name
    maps = "self_attention.npy" if "layer" in config else "attention.npy"
    want_maps = np.load(out_dir / maps)
    assert att.shape == want_maps.shape and att.tobytes() == want_maps.tobytes(), name
    if layer:  # a second call reuses the built layer and gives the same bytes
        again = layer(inputs["query"], inputs.get("key"), inputs.get("value"), **memory)[0]
        assert again.tobytes() == want.tobytes()


def test_layer_without_maps_gives_the_bytes_of_mha_run(tmp_path):
    config, inputs = CASES["causal+lengths"]
    np.save(tmp_path / "q.npy", inputs["query"])
    p = subprocess.run([MHA, "run", "--query", str(tmp_path / "q.npy"), "--h", "4", "--causal",
                        "bottom-right", "--key_lengths", "6,4", "--out_dir", str(tmp_path / "o"),
                        "-q"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out, att = mha.Layer(**config, d_model=D)(inputs["query"])  # the fused kernel: no maps
    assert att is None and out.tobytes() == np.load(tmp_path / "o" / "output.npy").tobytes()


def test_one_layer_takes_any_batch_and_length():
    layer = mha.Layer(h=4, d_model=D, causal=True, seed=5)
    x = rand(3, 9, D)
    out, _ = layer(x)
    assert out.shape == (3, 9, D)
    # each batch element alone gives the rows it has in the batch (the GEMMs' pieces follow
    # the shape, so the last bit may differ)
    for b in range(3):
        one, _ = layer(x[b])
        assert one.shape == (1, 9, D)
        np.testing.assert_allclose(one[0], out[b], rtol=1e-6, atol=1e-6)


def test_per_call_keys_and_their_limits(tmp_path):
    layer = mha.Layer(h=4, d_model=D, seed=1)
    x = rand(B, T, D)
    plain, _ = layer(x)
    causal, att = layer(x, causal=True, save_attention=True)
    assert att.shape == (B, 4, T, T) and np.all(np.triu(att[0, 0], 1) == 0)
    assert not np.array_equal(plain, causal)
    assert np.array_equal(layer(x)[0], plain)  # the call's keys do not stay
    with pytest.raises(ValueError, match="h.*the layer's own"):
        layer(x, h=2)
    with pytest.raises(ValueError, match=r"query: expected shape \(B, L, 16\)"):
        layer(rand(2, 3, 8))
    with pytest.raises(ValueError, match="key: batch 1 is not the query's 2"):
        layer(x, rand(1, 4, D))
    with pytest.raises(ValueError, match="query: give it to the call"):
        mha.Layer(h=4, query=x)
    with pytest.raises(ValueError, match="non-finite"):
        layer(np.full((1, 2, D), np.nan, dtype=np.float32))


def assert_torch_close(got, want):
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_from_torch_multihead_attention(batch_first):
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first, kdim=24, vdim=20).eval()
    shape = (2, 7) if batch_first else (7, 2)
    x, k, v = torch.rand(*shape, 32), torch.rand(shape[0] + 2, shape[1], 24)[:shape[0]], None
    k = torch.rand(*((2, 9) if batch_first else (9, 2)), 24)
    v = torch.rand(*((2, 9) if batch_first else (9, 2)), 20)
    layer = mha.Layer.from_torch(m, save_attention=True)
    with torch.no_grad():
        want, want_maps = m(x, k, v, need_weights=True, average_attn_weights=False)
    out, maps = layer(x, k, v)
    assert_torch_close(out, want)
    assert_torch_close(maps, want_maps)


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_from_torch_encoder_layer(norm_first, activation):
    torch.manual_seed(1)
    m = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first,
                                         activation=activation).eval()
    x = torch.rand(3, 11, 32)
    with torch.no_grad():
        want = m(x)
    assert_torch_close(mha.Layer.from_torch(m)(x)[0], want)


def test_from_torch_decoder_layer():
    torch.manual_seed(2)
    m = torch.nn.TransformerDecoderLayer(32, 4, 48, batch_first=False).eval()
    tgt, memory = torch.rand(5, 2, 32), torch.rand(8, 2, 32)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    with torch.no_grad():
        want = m(tgt, memory)
        want_causal = m(tgt, memory, tgt_mask=causal)
    layer = mha.Layer.from_torch(m)
    assert_torch_close(layer(tgt, memory=memory)[0], want)
    out, att, cross = mha.Layer.from_torch(m, save_attention=True)(tgt, memory=memory)
    assert att.shape == (1, 2, 4, 5, 5) and cross.shape == (1, 2, 4, 5, 8)
    assert_torch_close(layer(tgt, memory=memory, causal=True)[0], want_causal)


def test_from_torch_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="add_bias_kv"):
        mha.Layer.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="expected nn.MultiheadAttention"):
        mha.Layer.from_torch(torch.nn.Linear(3, 3))


def test_four_threads_on_one_layer_give_the_sequential_bytes():
    layer = mha.Layer(h=8, d_model=64, causal=True, save_attention=True, seed=4)
    xs = [rand(2, 40 + 7 * i, 64) for i in range(8)]
    want = [layer(x) for x in xs]
    got = [None] * len(xs)

    def work(i):
        for j in range(i, len(xs), 4):
            for _ in range(3):
                got[j] = layer(xs[j])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (o, a), (wo, wa) in zip(got, want):
        assert o.tobytes() == wo.tobytes() and a.tobytes() == wa.tobytes()


def test_torch_tensors_in_and_out_without_copies():
    layer = mha.Layer(h=4, d_model=D, seed=2)
    x = torch.rand(2, 5, D)
    out, _ = layer(x)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, D)
    assert np.array_equal(out.numpy(), layer(x.numpy())[0])


def test_calls_keep_refcounts_and_memory_flat():
    layer = mha.Layer(h=2, d_model=8, seed=3)
    x = rand(1, 3, 8)
    refs = sys.getrefcount(x), sys.getrefcount(layer)
    grew = leaks.growth_kib(lambda: layer(x, causal=True))
    out, _ = layer(x, causal=True)
    assert (sys.getrefcount(x), sys.getrefcount(layer)) == refs
    assert sys.getrefcount(out) == 2
    assert grew < leaks.MAX_GROWTH_KIB, f"peak RSS grew by {grew} KiB over 10000 warm calls"


STRACE_SCRIPT = """
import os, sys, numpy as np, torch, mha
x = np.random.default_rng(0).random((2, 5, 16), dtype=np.float32)
sd = torch.nn.MultiheadAttention(16, 4, batch_first=True).state_dict()
layer = mha.Layer(h=4, d_model=16)
for _ in range(3):
    mha.attention(x, h=4, weights=sd, save_attention=True, causal=True)
    layer(x, causal=True)
os.write(2, b"MARK-BEGIN\\n")
for _ in range(20):
    mha.attention(x, h=4, weights=sd, save_attention=True, causal=True)
    layer(x, causal=True)
os.write(2, b"MARK-END\\n")
"""


def test_calls_make_no_file_system_calls(tmp_path):
    assert shutil.which("strace"), "strace is missing: scripts/setup.sh --test installs it"
    log = tmp_path / "strace.log"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(mha.__file__)))
    p = subprocess.run(["strace", "-f", "-e", "trace=%file,%desc", "-o", str(log), sys.executable,
                        "-c", STRACE_SCRIPT], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    lines = log.read_text().splitlines()
    begin = next(i for i, l in enumerate(lines) if "MARK-BEGIN" in l)
    end = next(i for i, l in enumerate(lines) if "MARK-END" in l)
    # %desc also traces mmap and munmap, which the allocator makes for memory (MAP_ANONYMOUS,
    # no file); those are not file system calls.
    def on_a_file(line):
        if not re.search(r"\b[a-z_0-9]+\(", line) or re.search(r"\b(munmap|mremap)\(", line):
            return False
        return "MAP_ANONYMOUS" not in line if re.search(r"\bmmap\(", line) else True

    calls = [l for l in lines[begin + 1:end] if on_a_file(l)]
    assert calls == [], "system calls on files during the calls:\n" + "\n".join(calls[:20])


def test_attention_sees_weights_changed_in_place_and_new_modules():
    torch.manual_seed(3)
    x = torch.rand(2, 5, 16)
    m = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    for step in range(3):
        with torch.no_grad():
            want = m(x, x, x, need_weights=False)[0]
        out, _ = mha.attention(x, h=4, weights=m.state_dict())  # NumPy out, as it always was
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)
        with torch.no_grad():  # an in-place update, as an optimizer step makes
            m.in_proj_weight.mul_(1.5)
            m.out_proj.bias.add_(0.25)
    for seed in range(4):  # new modules, whose memory may be where the last one's was
        torch.manual_seed(10 + seed)
        m = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
        with torch.no_grad():
            want = m(x, x, x, need_weights=False)[0]
        np.testing.assert_allclose(mha.attention(x, h=4, weights=m.state_dict())[0], want.numpy(),
                                   rtol=1e-5, atol=1e-5)
    w = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    first, _ = mha.attention(x.numpy(), h=4, weights=w)
    w["in_proj_weight"] *= 2  # NumPy weights carry no version: every call converts them
    second, _ = mha.attention(x.numpy(), h=4, weights=w)
    assert not np.allclose(first, second)
    with pytest.raises(ValueError, match="without 'value'"):
        mha.attention(x, x, None, h=4, weights=m.state_dict())
