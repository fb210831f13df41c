"""The Python module `mha` (docs/python.md) against the CLI, real PyTorch, and itself.

    PYTHONPATH=build/python MHA_BIN=build/bin/mha python3 -m pytest tests/python
"""
import io
import json
import os
import re
import resource
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
STUB = os.path.join(os.path.dirname(mha.__file__), "mha.pyi")


def test_shape_and_version():
    out, att = mha.attention(np.random.rand(2, 5, 16).astype("f4"), h=4)
    assert out.shape == (2, 5, 16) and out.dtype == np.float32 and att is None
    cli = subprocess.run([MHA, "--version"], capture_output=True, text=True).stdout
    assert cli.strip() == "mha " + mha.__version__


def test_same_bytes_as_the_cli(tmp_path):
    q = np.random.default_rng(1).random((2, 6, 16), dtype=np.float32)
    np.save(tmp_path / "q.npy", q)
    config = {"h": 4, "causal": "bottom-right", "key_lengths": [6, 4], "save_attention": True,
              "seed": 3}
    flags = []
    for k, v in config.items():
        flags += [f"--{k}", ",".join(map(str, v)) if isinstance(v, list) else str(v).lower()]
    p = subprocess.run([MHA, "run", "--query", str(tmp_path / "q.npy"), "--out_dir",
                        str(tmp_path / "cli"), "-q"] + flags, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    report = mha.run(dict(config, query=q, out_dir=str(tmp_path / "py")))
    assert report["status"] == "complete"
    for f in ("output.npy", "attention.npy"):
        assert (tmp_path / "cli" / f).read_bytes() == (tmp_path / "py" / f).read_bytes(), f
    out, att = mha.attention(q, **config)
    assert np.array_equal(out, np.load(tmp_path / "cli" / "output.npy"))
    assert np.array_equal(att, np.load(tmp_path / "cli" / "attention.npy"))


def test_against_torch_multihead_attention():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x, mem = torch.rand(2, 7, 32), torch.rand(2, 9, 32)
    with torch.no_grad():
        want, want_maps = m(x, mem, mem, need_weights=True, average_attn_weights=False)
    out, maps = mha.attention(x, mem, mem, weights=m.state_dict(), h=4, save_attention=True)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(maps, want_maps.numpy(), rtol=1e-5, atol=1e-6)


def test_against_torch_transformer_encoder_layer():
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                             norm_first=True, activation="gelu").eval()
    x = torch.rand(2, 6, 32, dtype=torch.float64)
    layer = layer.double()
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    with torch.no_grad():
        want = layer(x, src_key_padding_mask=pad)
    out, _ = mha.attention(x, layer="encoder", weights=layer.state_dict(), h=4, norm_first=True,
                           activation="gelu", key_lengths=[6, 4], dtype="float64")
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-10, atol=1e-10)


def test_errors_carry_the_cli_messages(tmp_path):
    x = np.random.rand(2, 5, 16).astype("f4")
    with pytest.raises(ValueError, match=r"^mha.attention: key 'hh': unknown key \(did you mean 'h'\?\)$"):
        mha.attention(x, hh=4)
    with pytest.raises(ValueError, match="d_model = 16 is not divisible by h = 3"):
        mha.attention(x, h=3)
    with pytest.raises(ValueError, match="query: arrays of dtype complex64 are not read"):
        mha.attention(x.astype(np.complex64), h=4)
    with pytest.raises(ValueError, match=r"attention\(\) writes no files"):
        mha.attention(x, h=4, out_dir="o")
    with pytest.raises(ValueError, match="expected 'native', 'torch' or 'keras'"):
        mha.convert_weights({"W_q": np.zeros((4, 4), "f4")}, to="onnx")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        mha.run({"h": 2, "d_model": 8, "seq_len": 3, "out_dir": str(blocker / "out")})
    with pytest.raises(ValueError, match="cannot be a config value"):
        mha.attention(x, h=4, causal=object())


def test_threads_give_the_same_arrays():
    x = np.random.default_rng(2).random((3, 150, 64), dtype=np.float32)
    outs = [mha.attention(x, h=4, causal=True, save_attention=True, threads=t) for t in (1, 2, 3)]
    for out, att in outs[1:]:
        assert np.array_equal(out, outs[0][0]) and np.array_equal(att, outs[0][1])


def test_the_gil_is_released_during_a_call(tmp_path):
    """A handshake, not a clock: the call blocks inside the library reading its query from a FIFO
    that only this (main) thread writes, which it can do only while the call has released the
    GIL. Held, the two would wait on each other; the join's timeout is a safety net."""
    fifo = tmp_path / "query.npy"
    os.mkfifo(fifo)
    result = {}

    def work():
        try:
            result["run"] = mha.run({"h": 2, "d_model": 8, "query": str(fifo),
                                     "out_dir": str(tmp_path / "out")})
        except Exception as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=work)
    t.start()
    data = io.BytesIO()
    np.save(data, np.ones((1, 3, 8), dtype=np.float32))
    with open(fifo, "wb") as f:  # blocks until the call opens the FIFO, then feeds it
        f.write(data.getvalue())
    t.join(timeout=120)
    assert not t.is_alive(), "the call still holds the FIFO: did it keep the GIL?"
    assert "error" not in result, result.get("error")
    assert result["run"]["status"] == "complete"


def test_no_leak_over_10000_calls():
    x = np.random.rand(1, 3, 8).astype("f4")
    w = mha.convert_weights(mha.run({"h": 2, "d_model": 8, "seq_len": 3, "save_weights": True,
                                     "out_dir": "/tmp/mha_pytest_leak"}) and
                            np.load("/tmp/mha_pytest_leak/weights.npz"), to="native")
    refs = (sys_refcount(x), sys_refcount(w["W_q"]))
    grew = leaks.growth_kib(lambda: mha.attention(x, h=2, weights=w, threads=1))
    assert (sys_refcount(x), sys_refcount(w["W_q"])) == refs
    assert grew < leaks.MAX_GROWTH_KIB, f"peak RSS grew by {grew} KiB over 10000 warm calls"


def sys_refcount(o):
    import sys
    return sys.getrefcount(o)


def test_stub_lists_every_config_key():
    text = subprocess.run([MHA, "run", "--help"], capture_output=True, text=True).stdout
    keys = {m for m in re.findall(r"^  --([a-z_0-9]+)", text, re.M)} - {"config", "json", "help"}
    with open(STUB) as f:
        stub = f.read()
    in_stub = set(re.findall(r"^    ([a-z_0-9]+): ", stub, re.M))
    assert keys - {"out_dir"} <= in_stub, sorted(keys - in_stub)


RSS_SCRIPT = """
import mha, numpy as np, sys
# The peak RSS of this process's memory (KiB): VmHWM starts afresh at exec, whereas
# getrusage's ru_maxrss keeps the parent's peak (pytest's, with torch loaded).
def peak():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM:")).split()[1])
# 32 MiB, filled a slice at a time so that no temporary raises the peak before `base`;
# the Fortran-order one must be copied to C order.
x = np.empty((64, 128, 1024), dtype=np.float32, order=sys.argv[1])
rng = np.random.default_rng(0)
for i in range(64):
    x[i] = rng.random((128, 1024), dtype=np.float32)
base = peak()
mha.attention(x, h=8, threads=2)
print(peak() - base)
"""


def test_a_c_contiguous_float32_input_is_not_copied():
    def growth_kib(order):
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(mha.__file__)))
        p = subprocess.run([sys_executable(), "-c", RSS_SCRIPT, order], capture_output=True,
                           text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        return int(p.stdout)
    borrowed, copied = growth_kib("C"), growth_kib("F")
    # the Fortran-order input costs at least one more copy of its 32 MiB at the peak
    assert copied - borrowed >= 24 * 1024, (borrowed, copied)


def sys_executable():
    import sys
    return sys.executable


def test_repeat_in_run_not_in_layers(tmp_path):
    # mha.run times the compute `repeat` times (docs/config.md); a Layer or attention() call
    # writes and times nothing, so they refuse the key rather than ignore it.
    r = mha.run({"h": 2, "d_model": 8, "seq_len": 4, "repeat": 3, "out_dir": str(tmp_path / "o")})
    rep = r["timings_ms"]["compute_repeat"]
    assert rep["repeat"] == 3 and len(rep["samples"]) == 3
    assert rep["min"] <= rep["median"] <= rep["max"]
    with pytest.raises(ValueError, match="repeat: a Layer times nothing"):
        mha.Layer(h=2, d_model=8, repeat=3)
    with pytest.raises(ValueError, match="repeat: give it as mha.run's config"):
        mha.attention(np.ones((1, 3, 8), "f4"), h=2, repeat=3)
