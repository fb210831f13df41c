"""Keras weight files written with h5py in the layouts Keras' saving code writes, without Keras
(tests/cli/test_keras_files.py uses them). The layouts, from Keras' sources:

- Keras 3 .weights.h5 (keras/src/saving/saving_lib.py, H5IOStore): one group per object by
  attribute path ("layers/<class in snake case>[_N]", sublayers by attribute name), the object's
  variables as datasets vars/0, vars/1, ... (Layer.save_own_variables; EinsumDense and Dense:
  kernel then bias; LayerNormalization: gamma then beta); Keras >= 3.6 stores the layer's name
  as the string attribute "name" of each vars group. MultiHeadAttention's sublayers are
  query_dense, key_dense, value_dense, output_dense (its public properties, walked before the
  private _query_dense ... since Keras 3.0.3); Keras 3.0.0-3.0.2 wrote _query_dense, ....
- .keras: a zip of metadata.json, config.json and model.weights.h5 (saving_lib.py,
  _save_model_to_fileobj; members stored uncompressed by zipfile's default).
- tf.keras 2 .h5 (keras/saving/legacy/hdf5_format.py, save_weights_to_hdf5_group): attribute
  layer_names (bytes), backend, keras_version on the root (save_weights) or on group
  "model_weights" (model.save, whose root also has model_config); per layer (sorted by name) a
  group with attribute weight_names and a dataset at each name ("mha/query/kernel:0"), in the
  order of layer.weights; empty lists stored as NumPy's np.asarray([]) (float64).
"""
import io
import json
import zipfile

import h5py
import numpy as np

ROLES = [("query", "query_dense"), ("key", "key_dense"), ("value", "value_dense"),
         ("attention_output", "output_dense")]


def mha_arrays(rng, d_model, h, key_dim, value_dim, kdim=None, vdim=None, d_out=None,
               bias=True, dtype=np.float32):
    """One MultiHeadAttention's variables in the keras layout (query/kernel, ...)."""
    kdim, vdim, d_out = kdim or d_model, vdim or d_model, d_out or d_model
    a = {"query/kernel": rng.standard_normal((d_model, h, key_dim)) * 0.3,
         "key/kernel": rng.standard_normal((kdim, h, key_dim)) * 0.3,
         "value/kernel": rng.standard_normal((vdim, h, value_dim)) * 0.3,
         "attention_output/kernel": rng.standard_normal((h, value_dim, d_out)) * 0.3}
    if bias:
        a.update({"query/bias": rng.standard_normal((h, key_dim)) * 0.1,
                  "key/bias": rng.standard_normal((h, key_dim)) * 0.1,
                  "value/bias": rng.standard_normal((h, value_dim)) * 0.1,
                  "attention_output/bias": rng.standard_normal((d_out,)) * 0.1})
    return {k: v.astype(dtype) for k, v in a.items()}


def block_arrays(rng, d_model, h, key_dim, d_ff):
    """An encoder block: mha (keras layout), ffn W_1/b_1/W_2/b_2, norm1/norm2 gamma/beta."""
    b = {"mha": mha_arrays(rng, d_model, h, key_dim, key_dim)}
    b["ffn"] = [(rng.standard_normal((d_model, d_ff)) * 0.3).astype(np.float32),
                (rng.standard_normal(d_ff) * 0.1).astype(np.float32),
                (rng.standard_normal((d_ff, d_model)) * 0.3).astype(np.float32),
                (rng.standard_normal(d_model) * 0.1).astype(np.float32)]
    b["norms"] = [(1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32),
                  (0.1 * rng.standard_normal(d_model)).astype(np.float32),
                  (1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32),
                  (0.1 * rng.standard_normal(d_model)).astype(np.float32)]
    return b


class Keras3Store:
    """H5IOStore in write mode: make(path, name) then variables in order."""

    def __init__(self, f, names=True):
        self.f, self.names = f, names

    def make(self, path, name=None, variables=()):
        if not variables and not (self.names and name):
            return  # Keras creates no group for an object with no variables and no metadata
        g = self.f.create_group(path + "/vars" if path else "vars")
        if self.names and name:
            g.attrs["name"] = name  # an h5py str: variable-length UTF-8, as Keras stores it
        for i, v in enumerate(variables):
            g[str(i)] = v


def keras3_mha(store, path, arrays, name="multi_head_attention", old_names=False):
    store.make(path, name)
    for role, attr in ROLES:
        sub = "_" + attr if old_names else attr
        vs = [arrays[role + "/kernel"]] + ([arrays[role + "/bias"]] if role + "/bias" in arrays else [])
        store.make(path + "/" + sub, role, vs)
    store.make(path + "/_softmax", "softmax")
    store.make(path + "/_dropout_layer", "dropout")


def keras3_block(store, path, block, name="encoder_layer", attention="mha"):
    store.make(path, name)
    for n in ("dropout1", "dropout2"):
        store.make(path + "/" + n, n)
    store.make(path + "/ffn", "sequential")
    w1, b1, w2, b2 = block["ffn"]
    store.make(path + "/ffn/layers/dense", "dense", [w1, b1])
    store.make(path + "/ffn/layers/dense_1", "dense_1", [w2, b2])
    g1, be1, g2, be2 = block["norms"]
    store.make(path + "/layernorm1", "layer_normalization", [g1, be1])
    store.make(path + "/layernorm2", "layer_normalization_1", [g2, be2])
    keras3_mha(store, path + "/" + attention, block["mha"])


def write_keras3(target, mhas=(), blocks=(), names=True, old_names=False, inputs=1):
    """A Functional model's .weights.h5: inputs, then the MultiHeadAttention layers (name, arrays)
    and encoder blocks (name, block) under layers/ by class name."""
    with h5py.File(target, "w") as f:
        s = Keras3Store(f, names)
        s.make("", "functional")
        for i in range(inputs):
            s.make("layers/input_layer" + ("_%d" % i if i else ""), "input_layer" + ("_%d" % i if i else ""))
        for i, (name, arrays) in enumerate(mhas):
            keras3_mha(s, "layers/multi_head_attention" + ("_%d" % i if i else ""), arrays, name,
                       old_names)
        for i, (name, block) in enumerate(blocks):
            keras3_block(s, "layers/encoder_layer" + ("_%d" % i if i else ""), block, name)


def write_dot_keras(path, **kw):
    """A .keras zip: metadata.json, config.json, model.weights.h5 (stored), as saving_lib writes."""
    buf = io.BytesIO()
    write_keras3(buf, **kw)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps({"keras_version": "3.8.0",
                                                 "date_saved": "2025-01-01@00:00:00"}))
        zf.writestr("config.json", json.dumps({"module": "keras", "class_name": "Functional",
                                               "config": {"name": "functional"}}))
        zf.writestr("model.weights.h5", buf.getvalue())


def _bytes_list(names):
    return np.asarray([n.encode("utf8") for n in names]) if names else np.asarray([])


def legacy_layer(group, weights):
    """save_subset_weights_to_hdf5_group: weight_names, then a dataset per name."""
    group.attrs["weight_names"] = _bytes_list([n for n, _ in weights])
    for n, v in weights:
        group.create_dataset(n, v.shape, dtype=v.dtype)[...] = v


def legacy_mha_weights(prefix, arrays):
    return [(prefix + "/" + role + "/" + kind + ":0", arrays[role + "/" + kind])
            for role, _ in ROLES for kind in ("kernel", "bias") if role + "/" + kind in arrays]


def write_tf_keras(path, mhas=(), blocks=(), saved_model=False):
    """tf.keras 2: save_weights('x.h5') (layer_names on the root) or model.save('x.h5')
    (under model_weights). Layers: input_1, the MultiHeadAttention layers, the encoder blocks."""
    layers = [("input_1", [])]
    for name, arrays in mhas:
        layers.append((name, legacy_mha_weights(name, arrays)))
    for name, block in blocks:
        w = legacy_mha_weights(name + "/multi_head_attention", block["mha"])
        w1, b1, w2, b2 = block["ffn"]
        g1, be1, g2, be2 = block["norms"]
        w += [(name + "/sequential/dense/kernel:0", w1), (name + "/sequential/dense/bias:0", b1),
              (name + "/sequential/dense_1/kernel:0", w2), (name + "/sequential/dense_1/bias:0", b2),
              (name + "/layer_normalization/gamma:0", g1), (name + "/layer_normalization/beta:0", be1),
              (name + "/layer_normalization_1/gamma:0", g2),
              (name + "/layer_normalization_1/beta:0", be2)]
        layers.append((name, w))
    with h5py.File(path, "w") as f:
        root = f
        if saved_model:
            f.attrs["keras_version"] = b"2.15.0"
            f.attrs["backend"] = b"tensorflow"
            f.attrs["model_config"] = json.dumps({"class_name": "Functional", "config": {}})
            root = f.create_group("model_weights")
        root.attrs["layer_names"] = _bytes_list([n for n, _ in layers])
        root.attrs["backend"] = b"tensorflow"
        root.attrs["keras_version"] = b"2.15.0"
        for name, weights in sorted(layers):
            legacy_layer(root.create_group(name), weights)
        legacy_layer(root.create_group("top_level_model_weights"), [])


def keras_to_native(arrays):
    """The keras layout as native W_q ... (reshapes), for reference .npz files."""
    q = arrays["query/kernel"]
    h = q.shape[1]
    out = {"W_q": q.reshape(q.shape[0], -1), "W_k": arrays["key/kernel"].reshape(arrays["key/kernel"].shape[0], -1),
           "W_v": arrays["value/kernel"].reshape(arrays["value/kernel"].shape[0], -1),
           "W_o": arrays["attention_output/kernel"].reshape(-1, arrays["attention_output/kernel"].shape[2])}
    if "query/bias" in arrays:
        out.update({"b_q": arrays["query/bias"].reshape(-1), "b_k": arrays["key/bias"].reshape(-1),
                    "b_v": arrays["value/bias"].reshape(-1), "b_o": arrays["attention_output/bias"]})
    return out, h


def blocks_to_native(blocks):
    out = {}
    for n, b in enumerate(blocks):
        att, _ = keras_to_native(b["mha"])
        for k, v in att.items():
            out["layers.%d.self_attn.%s" % (n, k)] = v
        for k, v in zip(("ffn.W_1", "ffn.b_1", "ffn.W_2", "ffn.b_2"), b["ffn"]):
            out["layers.%d.%s" % (n, k)] = v
        for k, v in zip(("norm1.gamma", "norm1.beta", "norm2.gamma", "norm2.beta"), b["norms"]):
            out["layers.%d.%s" % (n, k)] = v
    return out
