#!/usr/bin/python3
"""Keras' own weight files end to end (docs/conventions.md, "Keras files"): .weights.h5 (Keras 3),
.keras zips and tf.keras .h5 (save_weights and model.save), written here with h5py in the layouts
Keras writes (tests/cli/keras_files.py, not by this tool), run through the real binary against the
.npz keras route; `weights convert` to and from them; hostile files refused in one line, exit 2,
nothing written, in bounded memory. One ctest test per TestCase class.

  /usr/bin/python3 tests/cli/test_keras_files.py [Class]   (MHA_BIN = path to mha)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_files as kf  # noqa: E402

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_keras_")
        self.rng = np.random.default_rng(7)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def mha(self, args, code=0):
        p = subprocess.run([MHA] + args + ["-q"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, code, p.stderr)
        return p

    def inputs(self, d_model, kdim=None, vdim=None, T=5, S=7):
        q, k, v = self.path("q.npy"), self.path("k.npy"), self.path("v.npy")
        np.save(q, self.rng.standard_normal((2, T, d_model)).astype(np.float32))
        np.save(k, self.rng.standard_normal((2, S, kdim or d_model)).astype(np.float32))
        np.save(v, self.rng.standard_normal((2, S, vdim or d_model)).astype(np.float32))
        return ["--query", q, "--key", k, "--value", v]

    def run_out(self, weights, args, name, extra=()):
        out = self.path("out_" + name)
        self.mha(["run", "--weights", weights, "--out_dir", out] + args + list(extra))
        return np.load(os.path.join(out, "output.npy"))

    def assertClose(self, a, b):
        self.assertEqual(a.shape, b.shape)
        self.assertLessEqual(float(np.max(np.abs(a - b))), 1e-6)


class Attention(Base):
    """One MultiHeadAttention, d_model != h*key_dim, value_dim != key_dim, kdim/vdim/d_out free:
    every layout gives the .npz keras route's output."""

    def test_every_layout(self):
        a = kf.mha_arrays(self.rng, 16, 2, 6, 5, kdim=12, vdim=10, d_out=9)
        args = self.inputs(16, 12, 10)
        np.savez(self.path("keras.npz"), **a)
        ref = self.run_out(self.path("keras.npz"), args, "npz")
        files = {"weights.h5": lambda p: kf.write_keras3(p, mhas=[("mha", a)], inputs=3),
                 "keras300.weights.h5": lambda p: kf.write_keras3(p, mhas=[("mha", a)], names=False,
                                                                  old_names=True),
                 "model.keras": lambda p: kf.write_dot_keras(p, mhas=[("mha", a)]),
                 "save_weights.h5": lambda p: kf.write_tf_keras(p, mhas=[("mha", a)]),
                 "model_save.h5": lambda p: kf.write_tf_keras(p, mhas=[("mha", a)], saved_model=True)}
        for name, write in files.items():
            with self.subTest(name):
                write(self.path(name))
                self.assertClose(self.run_out(self.path(name), args, name), ref)

    def test_float64_and_no_bias(self):
        a = kf.mha_arrays(self.rng, 8, 4, 3, 2, bias=False, dtype=np.float64)
        args = self.inputs(8)
        np.savez(self.path("keras.npz"), **a)
        kf.write_keras3(self.path("w.weights.h5"), mhas=[("mha", a)])
        ref = self.run_out(self.path("keras.npz"), args, "npz", ["--dtype", "float64"])
        self.assertClose(self.run_out(self.path("w.weights.h5"), args, "h5", ["--dtype", "float64"]),
                         ref)


class Choice(Base):
    """Several MultiHeadAttention layers in one file: keras_layer chooses; without it the error
    lists them."""

    def test_choose_by_name(self):
        a = kf.mha_arrays(self.rng, 8, 2, 4, 3)
        b = kf.mha_arrays(self.rng, 8, 2, 4, 3)
        args = self.inputs(8)
        np.savez(self.path("a.npz"), **a)
        np.savez(self.path("b.npz"), **b)
        ref_a = self.run_out(self.path("a.npz"), args, "a")
        ref_b = self.run_out(self.path("b.npz"), args, "b")
        self.assertFalse(np.allclose(ref_a, ref_b))
        kf.write_keras3(self.path("two.weights.h5"), mhas=[("self_att", a), ("cross_att", b)])
        kf.write_dot_keras(self.path("two.keras"), mhas=[("self_att", a), ("cross_att", b)])
        kf.write_tf_keras(self.path("two.h5"), mhas=[("self_att", a), ("cross_att", b)])
        for f in ("two.weights.h5", "two.keras", "two.h5"):
            with self.subTest(f):
                p = self.mha(["run", "--weights", self.path(f), "--out_dir", self.path("x")] + args, 2)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn("self_att", p.stderr)
                self.assertIn("cross_att", p.stderr)
                self.assertIn("keras_layer", p.stderr)
                self.assertFalse(os.path.exists(self.path("x")))
                self.assertClose(self.run_out(self.path(f), args, f + "a", ["--keras_layer", "self_att"]),
                                 ref_a)
                self.assertClose(self.run_out(self.path(f), args, f + "b", ["--keras_layer", "cross_att"]),
                                 ref_b)
                p = self.mha(["run", "--weights", self.path(f), "--keras_layer", "nope", "--out_dir",
                              self.path("x")] + args, 2)
                self.assertIn("cross_att", p.stderr)
        # by the group's path part, as Keras 3 names it
        self.assertClose(self.run_out(self.path("two.weights.h5"), args, "part",
                                      ["--keras_layer", "multi_head_attention_1"]), ref_b)
        # keras_layer on a file that is not Keras'
        p = self.mha(["run", "--weights", self.path("a.npz"), "--keras_layer", "x", "--out_dir",
                      self.path("x")] + args, 2)
        self.assertIn("keras_layer", p.stderr)


class Encoder(Base):
    """Encoder blocks (the TensorFlow tutorial's EncoderLayer, keras.io's TransformerBlock) as
    layer: encoder, against the native .npz route."""

    def check(self, files, blocks, h, extra=()):
        d_model = blocks[0]["ffn"][0].shape[0]
        x = self.path("x.npy")
        np.save(x, self.rng.standard_normal((2, 6, d_model)).astype(np.float32))
        np.savez(self.path("native.npz"), **kf.blocks_to_native(blocks))
        args = ["--layer", "encoder", "--h", str(h), "--layer_norm_eps", "1e-6", "--query", x]
        ref = self.run_out(self.path("native.npz"), args, "native", extra)
        for name in files:
            with self.subTest(name):
                self.assertClose(self.run_out(self.path(name), args, name, extra), ref)
        return args

    def test_stacks(self):
        blocks = [kf.block_arrays(self.rng, 8, 2, 6, 12) for _ in range(2)]  # h*key_dim != d_model
        kf.write_keras3(self.path("enc.weights.h5"), blocks=[("enc0", blocks[0]), ("enc1", blocks[1])])
        kf.write_dot_keras(self.path("enc.keras"), blocks=[("enc0", blocks[0]), ("enc1", blocks[1])])
        kf.write_tf_keras(self.path("enc.h5"), blocks=[("enc0", blocks[0]), ("enc1", blocks[1])])
        args = self.check(["enc.weights.h5", "enc.keras", "enc.h5"], blocks, 2)
        # h comes from the blocks' query kernels (d_model, h, key_dim): without --h the same
        # output, and a different --h is refused, naming both.
        without_h = [a for i, a in enumerate(args) if a != "--h" and (i == 0 or args[i - 1] != "--h")]
        self.assertClose(self.run_out(self.path("enc.h5"), without_h, "no_h"),
                         self.run_out(self.path("enc.h5"), args, "with_h"))
        p = self.mha(["run", "--weights", self.path("enc.weights.h5"), "--out_dir", self.path("bad_h"),
                      "--h", "4"] + without_h, 2)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("h mismatch: h = 4 in the config, but ", p.stderr)
        self.assertIn("enc.weights.h5 (its kernels hold h heads) implies h = 2", p.stderr)
        self.assertFalse(os.path.exists(self.path("bad_h")))

    def test_keras_io_block_and_choice(self):
        blocks = [kf.block_arrays(self.rng, 8, 2, 4, 16) for _ in range(2)]
        with h5py.File(self.path("att.weights.h5"), "w") as f:  # keras.io's TransformerBlock: att
            s = kf.Keras3Store(f)
            kf.keras3_block(s, "layers/transformer_block", blocks[0], "transformer_block", "att")
        self.check(["att.weights.h5"], blocks[:1], 2)
        kf.write_keras3(self.path("two.weights.h5"), blocks=[("enc0", blocks[0]), ("enc1", blocks[1])])
        x = self.path("x.npy")
        args = ["--layer", "encoder", "--h", "2", "--layer_norm_eps", "1e-6", "--query", x]
        np.savez(self.path("one.npz"), **kf.blocks_to_native(blocks[1:]))
        self.assertClose(self.run_out(self.path("two.weights.h5"), args, "k", ["--keras_layer", "enc1"]),
                         self.run_out(self.path("one.npz"), args, "one"))
        # the attention inside a block alone, as layer: attention
        np.savez(self.path("att.npz"), **blocks[1]["mha"])
        self.inputs(8)
        qa = ["--query", self.path("q.npy")]
        self.assertClose(self.run_out(self.path("two.weights.h5"), qa, "inner",
                                      ["--keras_layer", "layers/encoder_layer_1/mha"]),
                         self.run_out(self.path("att.npz"), qa, "attnpz"))


class Convert(Base):
    """weights convert: .npz (any layout) -> .weights.h5 -> .npz bit for bit; Keras files -> .npz."""

    def test_round_trip(self):
        a = kf.mha_arrays(self.rng, 16, 2, 6, 5, kdim=12, vdim=10, d_out=9)
        np.savez(self.path("keras.npz"), **a)
        native, _ = kf.keras_to_native(a)
        np.savez(self.path("native.npz"), **native)
        out = self.path("o", "m.weights.h5")
        self.mha(["weights", "convert", self.path("native.npz"), "--to", "keras", "--h", "2", "-o", out])
        self.assertEqual(os.listdir(self.path("o")), ["m.weights.h5"])  # no temporary left
        with h5py.File(out, "r") as f:
            for role, sub in kf.ROLES:
                g = f["layers/multi_head_attention/" + sub + "/vars"]
                self.assertEqual(sorted(g.keys()), ["0", "1"])
                self.assertEqual(g["0"].shape, a[role + "/kernel"].shape)
                self.assertTrue(np.array_equal(g["0"][()], a[role + "/kernel"]))
                self.assertTrue(np.array_equal(g["1"][()], a[role + "/bias"]))
        self.mha(["weights", "convert", out, "--to", "native", "-o", self.path("back.npz")])
        back = np.load(self.path("back.npz"))
        self.assertEqual(sorted(back.files), sorted(native))
        for k in native:
            self.assertEqual(back[k].tobytes(), native[k].tobytes(), k)
        # from the keras layout and from .keras / tf.keras .h5 to the keras .npz layout
        self.mha(["weights", "convert", self.path("keras.npz"), "--to", "keras", "-o",
                  self.path("k2.weights.h5")])
        kf.write_dot_keras(self.path("m.keras"), mhas=[("mha", a)])
        kf.write_tf_keras(self.path("t.h5"), mhas=[("mha", a)])
        for src in ("k2.weights.h5", "m.keras", "t.h5"):
            with self.subTest(src):
                self.mha(["weights", "convert", self.path(src), "--to", "keras", "-o",
                          self.path(src + ".npz")])
                k = np.load(self.path(src + ".npz"))
                for name in a:
                    self.assertEqual(k[name].tobytes(), a[name].tobytes(), name)

    def test_torch_layout_and_layers(self):
        self.mha(["run", "--h", "4", "--d_model", "16", "--seq_len", "3", "--save_weights", "torch",
                  "--save_inputs", "--out_dir", self.path("ref")])
        self.mha(["weights", "convert", self.path("ref", "weights.npz"), "--to", "keras", "--h", "4",
                  "-o", self.path("t.weights.h5")])
        self.mha(["weights", "convert", self.path("t.weights.h5"), "--to", "torch", "-o",
                  self.path("t.npz")])
        ref, back = np.load(self.path("ref", "weights.npz")), np.load(self.path("t.npz"))
        for k in ref.files:
            self.assertEqual(ref[k].tobytes(), back[k].tobytes(), k)
        # encoder blocks: native layers -> .weights.h5 -> native, bit for bit
        blocks = [kf.block_arrays(self.rng, 8, 2, 4, 12) for _ in range(2)]
        native = kf.blocks_to_native(blocks)
        np.savez(self.path("layers.npz"), **native)
        self.mha(["weights", "convert", self.path("layers.npz"), "--to", "keras", "--h", "2", "-o",
                  self.path("enc.weights.h5")])
        with h5py.File(self.path("enc.weights.h5"), "r") as f:
            self.assertEqual(f["layers/encoder_layer_1/ffn/layers/dense/vars/0"].shape, (8, 12))
            self.assertEqual(f["layers/encoder_layer/mha/query_dense/vars/0"].shape, (8, 2, 4))
            self.assertEqual(f["layers/encoder_layer/layernorm2/vars/1"].shape, (8,))
        self.mha(["weights", "convert", self.path("enc.weights.h5"), "--to", "native", "-o",
                  self.path("layers_back.npz")])
        back = np.load(self.path("layers_back.npz"))
        self.assertEqual(sorted(back.files), sorted(native))
        for k in native:
            self.assertEqual(back[k].tobytes(), native[k].tobytes(), k)
        # a .h5 or .keras output name is refused before anything is read
        p = self.mha(["weights", "convert", self.path("layers.npz"), "--to", "keras", "--h", "2", "-o",
                      self.path("x.h5")], 2)
        self.assertIn(".weights.h5", p.stderr)
        self.assertFalse(os.path.exists(self.path("x.h5")))


class Hostile(Base):
    """Hostile files: one line naming the file, exit 2, nothing written, peak RSS under 200 MB."""

    def refused(self, path, expect, extra=(), convert=False):
        out = self.path("out")
        cmd = (["weights", "convert", path, "--to", "native", "-o", os.path.join(out, "w.npz")]
               if convert else ["run", "--weights", path, "--seq_len", "3", "--out_dir", out])
        p = subprocess.Popen([MHA] + cmd + ["-q"] + list(extra), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.close()
        err = p.stderr.read().decode()
        p.stderr.close()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = 0  # reaped by wait4
        self.assertEqual(os.waitstatus_to_exitcode(status), 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(path, err)
        self.assertIn(expect, err)
        self.assertFalse(os.path.exists(out) and os.listdir(out), err)
        self.assertLess(usage.ru_maxrss / 1024, 200, err)
        return err

    def base(self, path, mutate=None):
        a = kf.mha_arrays(self.rng, 8, 2, 4, 4)
        kf.write_keras3(path, mhas=[("mha", a)])
        if mutate:
            with h5py.File(path, "a") as f:
                mutate(f)

    def test_files(self):
        q = "layers/multi_head_attention/query_dense/vars/0"
        good = self.path("good.weights.h5")
        self.base(good)
        with open(good, "rb") as f:
            data = f.read()
        with open(self.path("trunc.weights.h5"), "wb") as f:
            f.write(data[:len(data) // 2])
        self.refused(self.path("trunc.weights.h5"), "HDF5")

        def replace(f, value, **kw):
            del f[q]
            f.create_dataset(q, data=value, **kw) if value is not None else None

        cases = {
            "int32": (lambda f: replace(f, np.zeros((8, 2, 4), np.int32)), "int32"),
            "string": (lambda f: replace(f, np.array([b"abc"] * 4)), "string"),
            # 2^40 float32 declared, chunked and never written: a file of a few KiB
            "huge": (lambda f: (f.__delitem__(q),
                                f.create_dataset(q, shape=(1 << 20, 1 << 20), dtype="f4",
                                                 chunks=(1, 1024), maxshape=(None, None))),
                     "max_memory"),
            "huge_deflate": (lambda f: (f.__delitem__(q),
                                        f.create_dataset(q, shape=(1 << 14, 1 << 14), dtype="f4",
                                                         chunks=(1024, 1024), compression="gzip",
                                                         fillvalue=0.0)), "chunks"),
            "fill_only": (lambda f: (f.__delitem__(q), f.create_dataset(q, shape=(8, 2, 4), dtype="f4")),
                          "never written"),
            "external_link": (lambda f: (f.__delitem__(q),
                                         f.__setitem__(q, h5py.ExternalLink("/etc/other.h5", "/x"))),
                              "external link"),
            "soft_link": (lambda f: (f.__delitem__(q), f.__setitem__(q, h5py.SoftLink("/nowhere/x"))),
                          "soft link"),
            "soft_link_inside": (lambda f: (f.__delitem__(q), f.__setitem__(
                q, h5py.SoftLink("/layers/multi_head_attention/key_dense/vars/0"))), "soft link"),
            # d_model 0 (which --d_model 0 refuses) ran, or not, by chance of the inputs
            "zero_rows": (lambda f: replace(f, np.zeros((0, 2, 4), np.float32)),
                          'dataset "/' + q + '" has shape (0, 2, 4); expected weights without '
                          "an empty dimension"),
            "zero_heads": (lambda f: replace(f, np.zeros((8, 0, 4), np.float32)),
                           "has shape (8, 0, 4); expected weights without an empty dimension"),
        }
        for name, (mutate, expect) in cases.items():
            with self.subTest(name):
                path = self.path(name + ".weights.h5")
                self.base(path, mutate)
                self.assertLess(os.path.getsize(path), 1 << 20)
                self.refused(path, expect)
                if name.startswith("huge"):  # convert has no max_memory: the reader's own bounds
                    self.refused(path, "bytes" if name == "huge" else "chunks", convert=True)
        # external storage: the data in a raw file beside it
        raw = self.path("raw.bin")
        np.zeros((8, 2, 4), np.float32).tofile(raw)
        path = self.path("external.weights.h5")
        self.base(path, lambda f: (f.__delitem__(q), f.create_dataset(
            q, shape=(8, 2, 4), dtype="f4", external=[(raw, 0, 256)])))
        self.refused(path, "external")

    def test_keras_zips(self):
        q = "layers/multi_head_attention/query_dense/vars/0"
        path = self.path("empty.keras")
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("config.json", "{}")
            zf.writestr("metadata.json", "{}")
        self.refused(path, "model.weights.h5")
        # a member that inflates past max_memory is refused before it is inflated
        path = self.path("bomb.keras")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("model.weights.h5", b"\0" * (64 << 20))
        self.assertLess(os.path.getsize(path), 1 << 20)
        self.refused(path, "max_memory", ["--max_memory", "16MiB"])
        # a 300 KB member inflating to 300 MiB without HDF5's signature, which is in its first
        # 8 bytes: refused from them (it was inflated whole first: 527 MB)
        path = self.path("not_hdf5.keras")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            with zf.open("model.weights.h5", "w", force_zip64=True) as f:
                for _ in range(300):
                    f.write(bytes(1 << 20))
        self.assertLess(os.path.getsize(path), 1 << 20)
        self.refused(path, "not_hdf5.keras:model.weights.h5: not an HDF5 file (no HDF5 signature "
                     "at its start)")
        # a .keras whose kernel has an empty dimension
        good = self.path("zero.weights.h5")
        self.base(good, lambda f: (f.__delitem__(q), f.create_dataset(
            q, data=np.zeros((0, 2, 4), np.float32))))
        path = self.path("zero.keras")
        with zipfile.ZipFile(path, "w") as zf:
            zf.write(good, "model.weights.h5")
        self.refused(path, "zero.keras:model.weights.h5: dataset \"/" + q + "\" has shape (0, 2, 4)")
        # a directory entry declaring 2 GiB - 1 bytes it does not hold
        small = self.path("small.keras")
        with zipfile.ZipFile(small, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("model.weights.h5", b"\0" * 4096)
        with open(small, "rb") as f:
            data = bytearray(f.read())
        for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            at = data.find(sig)
            data[at + off:at + off + 4] = (0x7FFFFFFF).to_bytes(4, "little")
        with open(self.path("liar.keras"), "wb") as f:
            f.write(bytes(data))
        self.refused(self.path("liar.keras"), "model.weights.h5")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
