#!/usr/bin/python3
"""A GPT-2 checkpoint in Hugging Face's layout (config.json, model.safetensors, float32) written in
the file format ggml's GPT-2 example reads (examples/gpt-2/main-backend.cpp's gpt2_model_load, as
its converter examples/gpt-2/convert-h5-to-ggml.py writes it): the magic 0x67676d6c, n_vocab,
n_ctx, n_embd, n_head, n_layer and ftype as int32, the vocabulary (int32 length, bytes), then each
tensor (n_dims, name length, type; its sizes fastest first; the name; the data).

Each matrix is stored as ggml's mul_mat reads it, ne0 = the input features: Conv1D weights
(in, out) transposed to (out, in). With --f16, two-dimensional weights are float16 (ftype 1), the
rest float32. The vocabulary: token i is the byte i for i < 256 (so that a prompt of letters
tokenizes to one token per letter), then "<i>".

  /usr/bin/python3 bench/ggml/convert.py CHECKPOINT_DIR OUT.bin [--f16]
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{name}: expected F32, got {t['dtype']}"
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], np.float32).reshape(t["shape"])
    return out


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    src, dst, f16 = argv[0], argv[1], "--f16" in argv[2:]
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    t = read_safetensors(os.path.join(src, "model.safetensors"))
    t = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in t.items()}
    V, E = t["wte.weight"].shape
    with open(dst, "wb") as out:
        out.write(struct.pack("iiiiiii", 0x67676D6C, V, c["n_positions"], c["n_embd"], c["n_head"],
                              c["n_layer"], 1 if f16 else 0))
        out.write(struct.pack("i", V))
        for i in range(V):
            token = bytes([i]) if i < 256 else f"<{i}>".encode()
            out.write(struct.pack("i", len(token)) + token)

        def tensor(name, a, transpose=False):
            a = np.ascontiguousarray(a.T if transpose else a)
            ftype = 1 if f16 and a.ndim == 2 and name not in ("model/wpe",) else 0
            a = a.astype(np.float16 if ftype else np.float32)
            key = name.encode()
            out.write(struct.pack("iii", a.ndim, len(key), ftype))
            for d in reversed(a.shape):
                out.write(struct.pack("i", d))
            out.write(key)
            a.tofile(out)

        tensor("model/ln_f/g", t["ln_f.weight"])
        tensor("model/ln_f/b", t["ln_f.bias"])
        tensor("model/wte", t["wte.weight"])
        tensor("model/wpe", t["wpe.weight"])
        for i in range(c["n_layer"]):
            p, q = f"h.{i}.", f"model/h{i}/"
            tensor(q + "ln_1/g", t[p + "ln_1.weight"])
            tensor(q + "ln_1/b", t[p + "ln_1.bias"])
            tensor(q + "ln_2/g", t[p + "ln_2.weight"])
            tensor(q + "ln_2/b", t[p + "ln_2.bias"])
            tensor(q + "attn/c_attn/w", t[p + "attn.c_attn.weight"], transpose=True)
            tensor(q + "attn/c_attn/b", t[p + "attn.c_attn.bias"])
            tensor(q + "attn/c_proj/w", t[p + "attn.c_proj.weight"], transpose=True)
            tensor(q + "attn/c_proj/b", t[p + "attn.c_proj.bias"])
            tensor(q + "mlp/c_fc/w", t[p + "mlp.c_fc.weight"], transpose=True)
            tensor(q + "mlp/c_fc/b", t[p + "mlp.c_fc.bias"])
            tensor(q + "mlp/c_proj/w", t[p + "mlp.c_proj.weight"], transpose=True)
            tensor(q + "mlp/c_proj/b", t[p + "mlp.c_proj.bias"])


if __name__ == "__main__":
    main(sys.argv[1:])
