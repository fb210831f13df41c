#!/usr/bin/python3
"""Seeds for tests/fuzz/fuzz_hdf5.cpp, written with h5py in the layouts Keras writes
(tests/cli/keras_files.py): a Keras 3 .weights.h5 of one MultiHeadAttention, one of an encoder
block, a tf.keras .h5 (save_weights), and hostile ones mha refuses: a kernel with an empty dimension (d_model
0), 2^40 floats declared and never written, a gzip dataset declaring 1 GiB of fill value, a soft
link, an int32 kernel. Named by their SHA-1, as libFuzzer names corpus files.

  /usr/bin/python3 tests/fuzz/make_hdf5_seeds.py tests/fuzz/corpus/hdf5
"""
import hashlib
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import keras_files as kf  # noqa: E402

Q = "layers/multi_head_attention/query_dense/vars/0"


def replace(value=None, **kw):
    def mutate(f):
        del f[Q]
        if value is not None:
            f.create_dataset(Q, data=value)
        else:
            f.create_dataset(Q, **kw)
    return mutate


def seeds(tmp):
    rng = np.random.default_rng(0)
    a = kf.mha_arrays(rng, 4, 2, 2, 2)
    mutations = {
        "good": None,
        "zero_rows": replace(np.zeros((0, 2, 2), np.float32)),
        "int32": replace(np.zeros((4, 2, 2), np.int32)),
        "huge": replace(shape=(1 << 20, 1 << 20), dtype="f4", chunks=(1, 1024),
                        maxshape=(None, None)),
        "huge_deflate": replace(shape=(1 << 14, 1 << 14), dtype="f4", chunks=(1024, 1024),
                                compression="gzip", fillvalue=0.0),
        "soft_link": lambda f: (f.__delitem__(Q), f.__setitem__(Q, h5py.SoftLink("/nowhere"))),
    }
    for name, mutate in mutations.items():
        path = os.path.join(tmp, name + ".weights.h5")
        kf.write_keras3(path, mhas=[("mha", a)])
        if mutate:
            with h5py.File(path, "a") as f:
                mutate(f)
        yield path
    path = os.path.join(tmp, "block.weights.h5")
    kf.write_keras3(path, blocks=[("enc", kf.block_arrays(rng, 4, 2, 2, 8))])
    yield path
    path = os.path.join(tmp, "tf_keras.h5")
    kf.write_tf_keras(path, mhas=[("mha", a)])
    yield path


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for path in seeds(tmp):
            with open(path, "rb") as f:
                data = f.read()
            with open(os.path.join(out, hashlib.sha1(data).hexdigest()), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
