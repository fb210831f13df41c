#!/usr/bin/python3
"""Model directories as untrusted input (docs/failures.md): hostile config.json, safetensors
headers, shard indexes, tokenizer files, out_dirs and per-call options, run through the real
binary (and mha.Model, class PythonCalls). Each refusal is exit 2 with one short line of valid
UTF-8 on stderr naming the file, in bounded memory (peak RSS under 200 MB), with nothing of the
checkpoint lost. Valid checkpoints that used to be refused run.

    MHA_BIN=build/bin/mha /usr/bin/python3 tests/models/test_hostile.py [TestCase ...]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints  # noqa: E402
import tokenizer_files  # noqa: E402

MHA = os.environ.get("MHA_BIN", os.path.join(HERE, "..", "..", "build", "bin", "mha"))
MAX_RSS_MB = 200
RELEASE_BASELINE_MB = 9  # `mha --version`'s peak RSS, release build
BASELINE_MB = None  # this binary's, measured once (Hostile.growth)
MAX_LINE = 300 + len("mha: error: ")


def run(args, timeout=60):
    """(exit code, stdout, stderr, peak RSS in MB) of `mha ARGS`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([MHA] + args, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        # A safety net, not a measure: a command that hangs (a FIFO read) is killed and fails.
        killer = threading.Timer(timeout, p.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)  # the child's own peak RSS
        finally:
            killer.cancel()
            p.returncode = 0
        out.seek(0)
        err.seek(0)
        code = os.waitstatus_to_exitcode(status)
        return code, out.read().decode("utf-8", "replace"), err.read(), usage.ru_maxrss / 1024


def load(path):
    with open(path) as f:
        return json.load(f)


def dump(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def nested(depth, leaf="1"):
    return "[" * depth + leaf + "]" * depth


def write_json_text(path, text):
    with open(path, "w" if isinstance(text, str) else "wb") as f:
        f.write(text)


def safetensors_raw(path, header_bytes, data=b""):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)


class Hostile(unittest.TestCase):
    TEXTS = ["the cat sat on the mat", "hello world"]

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_hostile_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def model(self, family="gpt2", name=None, tokenizer=False, **sizes):
        d = self.path(name or family)
        config, t = checkpoints.make(family, **sizes)
        checkpoints.write(d, config, t)
        if tokenizer:
            tok, _, _ = tokenizer_files.byte_level_bpe(self.TEXTS)
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                json.dump(tok, f)
        return d, config

    def ids_file(self, ids):
        p = self.path("ids.npy")
        np.save(p, np.asarray(ids, dtype=np.int64))
        return p

    @staticmethod
    def growth(rss):
        """The peak RSS a case adds over `mha --version`'s own: 200 MB for the release binary
        (whose --version peaks near 9 MB) is 191 MB over it, and a sanitized binary's larger
        start (AddressSanitizer's shadow and allocator, about 130 MB) is not counted against
        the case."""
        global BASELINE_MB
        if BASELINE_MB is None:
            BASELINE_MB = run(["--version"])[3]
        return rss - BASELINE_MB

    def refused(self, args, *names, code=2):
        """The command exits `code` with one clean line naming `names`, in bounded memory."""
        rc, _, err, rss = run(args)
        self.assertEqual(rc, code, err)
        text = err.decode("utf-8")  # strict: the line is valid UTF-8
        lines = text.rstrip("\n").split("\n")
        self.assertEqual(len(lines), 1, text)
        line = lines[0]
        self.assertTrue(line.startswith("mha: error: "), line)
        self.assertLessEqual(len(line), MAX_LINE, line)
        self.assertFalse(any(ord(c) < 0x20 or ord(c) == 0x7f for c in line), repr(line))
        for n in names:
            self.assertIn(n, line)
        self.assertLess(self.growth(rss), MAX_RSS_MB - RELEASE_BASELINE_MB,
                        f"peak RSS {rss:.0f} MB: {line}")
        if os.environ.get("MHA_HOSTILE_REPORT"):  # the figures of the hardening notes
            print(f"\n  {self.id().split('.', 1)[1]}: {rss:.0f} MB: {line[:160]}", file=sys.stderr)
        return line

    def run_model(self, d, *extra, ids=(1, 2, 3)):
        return ["run", "--model", d, "--tokens", self.ids_file(ids), "--out_dir", self.path("out"),
                "-q"] + list(extra)

    def edit_config(self, d, **changes):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        c.update(changes)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f)
        return c

    def config_text(self, d, text):
        write_json_text(os.path.join(d, "config.json"), text)


class DeepJson(Hostile):
    """1. Values nested a million deep: refused at level 65, no crash."""

    def test_config_value(self):
        d, _ = self.model()
        c = load(os.path.join(d, "config.json"))
        text = json.dumps(dict(c, n_layer="__DEEP__")).replace('"__DEEP__"', nested(1000000))
        self.config_text(d, text)
        self.refused(self.run_model(d), "config.json", "nested more than 64 levels")

    def test_rope_scaling(self):
        d, _ = self.model("llama")
        c = load(os.path.join(d, "config.json"))
        self.config_text(d, json.dumps(dict(c, rope_scaling="__DEEP__")).replace('"__DEEP__"', nested(1000000)))
        self.refused(self.run_model(d), "config.json", "nested more than 64 levels")

    def test_safetensors_shape(self):
        d, _ = self.model()
        header = '{"wte.weight": {"dtype": "F32", "shape": %s, "data_offsets": [0, 4]}}' % nested(1000000)
        safetensors_raw(os.path.join(d, "model.safetensors"), header.encode(), b"\0" * 4)
        self.refused(self.run_model(d), "model.safetensors", "nested more than 64 levels")

    def test_index_weight_map(self):
        d, _ = self.model()
        os.remove(os.path.join(d, "model.safetensors"))
        index = '{"weight_map": {"wte.weight": %s}}' % nested(1000000, '"a.safetensors"')
        write_json_text(os.path.join(d, "model.safetensors.index.json"), index)
        self.refused(self.run_model(d), "model.safetensors.index.json", "nested more than 64 levels")

    def test_tokenizer_deep_unused_key(self):
        # 24 MB: one unused key nested 12 million deep before a valid tokenizer.
        d, _ = self.model(tokenizer=True)
        path = os.path.join(d, "tokenizer.json")
        tok = load(path)
        text = json.dumps(dict(tok, unused="__DEEP__")).replace('"__DEEP__"', nested(12000000))
        write_json_text(path, text)
        self.refused(["tokenize", d, "--text", "hi"], "tokenizer.json", "nested more than 64 levels")


class Bounded(Hostile):
    """2 and 3. No hang, and no allocation before the check."""

    def test_tokenizer_fifo(self):
        d = self.path("fifo_dir")
        os.mkdir(d)
        os.mkfifo(os.path.join(d, "tokenizer.json"))
        self.refused(["tokenize", os.path.join(d, "tokenizer.json"), "--text", "hi"],
                     "tokenizer.json", "not a regular file")
        self.refused(["tokenize", d, "--text", "hi"], "tokenizer.json", "not a regular file")

    def test_many_layers(self):
        for layers in (1000000, 1000000000):
            d, _ = self.model(name=f"layers{layers}")
            self.edit_config(d, n_layer=layers)
            self.refused(self.run_model(d), "config.json", str(layers))

    def test_head_product_wraps(self):
        d, _ = self.model("llama")
        self.edit_config(d, num_attention_heads=2 ** 32, num_key_value_heads=2 ** 32, head_dim=2 ** 32)
        self.refused(self.run_model(d), "config.json", "2^40 parameters")

    def test_gigabyte_of_nul(self):
        d, _ = self.model()
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.truncate(1 << 30)  # sparse: 1 GiB of NUL bytes
        self.refused(self.run_model(d), "config.json", "over the limit of 4194304")

    def test_header_of_brackets(self):
        d, _ = self.model()
        safetensors_raw(os.path.join(d, "model.safetensors"), b"[" * (20 << 20))
        self.refused(self.run_model(d), "model.safetensors", "nested more than 64 levels")

    def test_texts_from_dev_zero(self):
        d, _ = self.model(tokenizer=True)
        self.refused(["tokenize", d, "--texts", "/dev/zero"], "/dev/zero", "the limit")


def npz_with_zeros(path, name, shape, others):
    """An .npz whose member `name` is a float32 array of zeros of `shape`, deflated a chunk at a
    time (the array is never held), beside the small arrays `others`."""
    import zipfile
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, a in others.items():
            with z.open(n + ".npy", "w") as f:
                np.lib.format.write_array(f, a)
        with z.open(name + ".npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": shape})
            chunk = bytes(1 << 20)
            for _ in range(int(np.prod(shape)) * 4 // len(chunk)):
                f.write(chunk)


class NpzShapes(Hostile):
    """3. A weights member of a valid name and a huge shape no such layer has: refused from its
    header, before 256 MiB are inflated."""

    def test_huge_member(self):
        small = {n: np.zeros((8, 8), np.float32) for n in ("W_k", "W_v", "W_o")}
        for shape, fragment in (((1, 16384, 4096), "expected a matrix (d_model, h*d_k)"),
                                ((16384, 4096), "d_model mismatch: d_model = 8 in the config")):
            w = self.path("w.npz")
            npz_with_zeros(w, "W_q", shape, small)
            self.refused(["run", "--h", "2", "--d_model", "8", "--seq_len", "3", "--weights", w,
                          "--out_dir", self.path("out"), "-q"], "w.npz:W_q", fragment)


class Messages(Hostile):
    """4. Nothing a file holds is echoed whole, on two lines, or as invalid UTF-8."""

    def test_long_model_type(self):
        d, _ = self.model()
        self.edit_config(d, model_type="x" * 100000)
        line = self.refused(self.run_model(d), "config.json", "model_type", "(100000 bytes)")
        self.assertIn("expected one of", line)

    def test_newline_and_bytes_in_model_type(self):
        d, _ = self.model()
        self.edit_config(d, model_type="gpt3\nmha: error: forged")
        self.refused(self.run_model(d), "config.json", "\\n")
        c = load(os.path.join(d, "config.json"))
        text = json.dumps(dict(c, model_type="QQ")).encode().replace(b"QQ", b"\xff\xfe")
        write_json_text(os.path.join(d, "config.json"), text)
        self.refused(self.run_model(d), "config.json")

    def test_long_dtype_and_tensor_names(self):
        d, _ = self.model()
        header = json.dumps({"wte.weight": {"dtype": "F" * 5000, "shape": [1], "data_offsets": [0, 4]}})
        safetensors_raw(os.path.join(d, "model.safetensors"), header.encode(), b"\0" * 4)
        self.refused(self.run_model(d), "model.safetensors", "(5000 bytes)")
        header = json.dumps({"bad\nname": {"dtype": "X", "shape": [1], "data_offsets": [0, 4]}})
        safetensors_raw(os.path.join(d, "model.safetensors"), header.encode(), b"\0" * 4)
        self.refused(self.run_model(d), "model.safetensors", "bad\\nname")

    def test_long_shard_name(self):
        d, _ = self.model()
        os.remove(os.path.join(d, "model.safetensors"))
        write_json_text(os.path.join(d, "model.safetensors.index.json"),
                        json.dumps({"weight_map": {"wte.weight": "s" * 10000}}))
        self.refused(self.run_model(d), "model.safetensors.index.json", "(10000 bytes)")

    def test_long_unk_token_and_merge(self):
        d, _ = self.model(tokenizer=True)
        path = os.path.join(d, "tokenizer.json")
        tok = load(path)
        tok["model"]["unk_token"] = "u" * 10000
        dump(tok, path)
        self.refused(["tokenize", d, "--text", "hi"], "tokenizer.json", "(10000 bytes)")
        tok = load(path)
        tok["model"]["unk_token"] = None
        tok["model"]["merges"] = ["é" * 59 + "é\n" * 10]  # no space: not a merge; cut between characters
        dump(tok, path)
        line = self.refused(["tokenize", d, "--text", "hi"], "tokenizer.json", "merges[0]")
        self.assertNotIn("\ufffd", line)


class Outputs(Hostile):
    """5. A run never removes a file it read, nor one a run.json lists that is not what it recorded."""

    def test_out_dir_is_model_dir(self):
        d, _ = self.model(tokenizer=True)
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"outputs": ["config.json", "model.safetensors", "tokenizer.json"]}, f)
        before = sorted(os.listdir(d))
        args = ["run", "--model", d, "--tokens", self.ids_file([1, 2]), "--out_dir", d, "-q"]
        self.refused(args, "--out_dir", "model directory")
        self.assertEqual(sorted(os.listdir(d)), before)

    def test_listed_file_kept_unless_recorded(self):
        d, _ = self.model()
        out = self.path("out")
        os.mkdir(out)
        with open(os.path.join(out, "precious.txt"), "w") as f:
            f.write("keep me")
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump({"outputs": {"precious.txt": {"bytes": 7, "crc32": "00000000"}}}, f)
        rc, _, err, _ = run(self.run_model(d))
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(os.path.join(out, "precious.txt")))
        # With its true size and crc32 it is an earlier run's output, and goes.
        import zlib
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump({"outputs": {"precious.txt": {"bytes": 7, "crc32": "%08x" % zlib.crc32(b"keep me")}}}, f)
        rc, _, err, _ = run(self.run_model(d))
        self.assertEqual(rc, 0, err)
        self.assertFalse(os.path.exists(os.path.join(out, "precious.txt")))

    def test_dead_runs_temporaries_removed(self):
        d, _ = self.model()
        out = self.path("out")
        os.mkdir(out)
        dead = subprocess.Popen(["true"])
        dead.wait()  # its pid is free: a killed run's temporaries carry such a pid
        stale = os.path.join(out, ".self_attention.npy.tmp.%d.0" % dead.pid)
        live = os.path.join(out, ".output.npy.tmp.%d.0" % os.getpid())  # this process is alive
        other = os.path.join(out, ".notes.tmp.txt")
        for p in (stale, live, other):
            open(p, "wb").close()
        rc, _, err, _ = run(self.run_model(d))
        self.assertEqual(rc, 0, err)
        self.assertFalse(os.path.exists(stale))
        self.assertTrue(os.path.exists(live))
        self.assertTrue(os.path.exists(other))


class Valid(Hostile):
    """6. vocab_size padded past the tokenizer's vocabulary is normal."""

    def test_ids_past_the_tokenizer(self):
        d, config = self.model(tokenizer=True, vocab=400)
        tok = load(os.path.join(d, "tokenizer.json"))
        n = max(list(tok["model"]["vocab"].values()) + [a["id"] for a in tok["added_tokens"]]) + 1
        self.assertLess(n + 10, 400)
        out = self.path("out")
        rc, _, err, _ = run(self.run_model(d, "--top_k", "400", ids=[1, n + 5, 2]))
        self.assertEqual(rc, 0, err.decode())
        tokens = load(os.path.join(out, "tokens.json"))["tokens"][0]
        self.assertEqual(tokens[1], "<id %d>" % (n + 5))
        top = load(os.path.join(out, "run.json"))["top_k"]
        named = {e["id"]: e["token"] for row in top for e in row}
        self.assertEqual(len(named), 400)
        for i in range(n, 400):
            self.assertEqual(named[i], "<id %d>" % i)


class Nonsense(Hostile):
    """7. What no checkpoint means is refused."""

    def test_head_dim_zero(self):
        d, _ = self.model("llama")
        c = self.edit_config(d, hidden_size=2, num_attention_heads=4, num_key_value_heads=4)
        c.pop("head_dim", None)
        dump(c, os.path.join(d, "config.json"))
        self.refused(self.run_model(d), "config.json", "head_dim is 0")

    def test_duplicate_key(self):
        d, _ = self.model()
        text = read(os.path.join(d, "config.json")).decode().rstrip().rstrip("}") + ', "n_layer": 1}'
        self.config_text(d, text)
        self.refused(self.run_model(d), "config.json", 'duplicate key "n_layer"')

    def test_nul_and_garbage_after_the_document(self):
        d, _ = self.model()
        text = read(os.path.join(d, "config.json"))
        write_json_text(os.path.join(d, "config.json"), text + b"\0garbage")
        self.refused(self.run_model(d), "config.json", "NUL byte")
        d, _ = self.model(name="st")
        path = os.path.join(d, "model.safetensors")
        raw = read(path)
        (n,) = struct.unpack("<Q", raw[:8])
        header = raw[8:8 + n].rstrip(b" ")
        padded = header + b"\0x" + b" " * (n - len(header) - 2)
        write_json_text(path, raw[:8] + padded + raw[8 + n:])
        self.refused(self.run_model(d), "model.safetensors", "NUL byte")

    def test_tokenizer_id_twice_and_merge_out_of_vocabulary(self):
        d, _ = self.model(tokenizer=True)
        path = os.path.join(d, "tokenizer.json")
        tok = load(path)
        good = json.loads(json.dumps(tok))
        tok["model"]["vocab"]["twin"] = 0
        dump(tok, path)
        self.refused(["tokenize", d, "--text", "hi"], "tokenizer.json", "id 0 is already")
        tok = good
        a, b = tok["model"]["merges"][0].split(" ") if isinstance(tok["model"]["merges"][0], str) \
            else tok["model"]["merges"][0]
        del tok["model"]["vocab"][a + b]
        dump(tok, path)
        self.refused(["tokenize", d, "--text", "hi"], "tokenizer.json", "merges[0]",
                     "is not in the vocabulary")

    def test_options(self):
        d, _ = self.model()
        self.refused(self.run_model(d, "--top_k", "-1"), "--top_k")
        self.refused(self.run_model(d, "--save_attention", "--layer_indices", ""), "--layer_indices")
        self.refused(self.run_model(d, "--save_attention", "--layer_indices", "0,0"), "given twice")


class Refusals(Hostile):
    """Every config.json refusal (lib/src/checkpoint/model_config.cpp), every shard-index error and
    the attention options `--model` does not take: exit 2, one line naming the file and key."""

    CONFIG = [  # (family, changes, fragments); None removes the key
        ("gpt2", {"model_type": None}, ["key 'model_type' is missing"]),
        ("gpt2", {"n_layer": None}, ["key 'n_layer' is missing"]),
        ("gpt2", {"n_head": 0}, ["key 'n_head' is 0; expected a positive integer"]),
        ("gpt2", {"n_embd": 2 ** 33}, ["key 'n_embd' is 8589934592"]),
        ("gpt2", {"n_embd": "48"}, ["key 'n_embd' is \"48\"; expected a positive integer"]),
        ("gpt2", {"layer_norm_epsilon": -1}, ["key 'layer_norm_epsilon'", "positive number"]),
        ("gpt2", {"activation_function": "tanh"}, ["key 'activation_function' is \"tanh\""]),
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, ["scale_attn_by_inverse_layer_idx"]),
        ("gpt2", {"scale_attn_weights": False}, ["scale_attn_weights"]),
        ("gpt2", {"tie_word_embeddings": "yes"}, ["key 'tie_word_embeddings'", "true or false"]),
        ("gpt2", {"n_embd": 50}, ["hidden size 50 is not a multiple of 4 heads"]),
        ("bert", {"position_embedding_type": "relative_key"}, ["position_embedding_type"]),
        ("llama", {"attention_bias": True}, ["key 'attention_bias' is true"]),
        ("llama", {"mlp_bias": True}, ["key 'mlp_bias' is true"]),
        ("llama", {"num_key_value_heads": 3}, ["is not a multiple of num_key_value_heads 3"]),
        ("llama", {"head_dim": 15}, ["head_dim 15 is odd"]),
        ("llama", {"rope_scaling": 2}, ["key 'rope_scaling' is 2; expected an object"]),
        ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ["has type \"yarn\""]),
        ("llama", {"rope_scaling": {"rope_type": "linear"}}, ["rope_scaling.factor"]),
        ("llama", {"vocab_size": 2 ** 31}, ["vocab_size 2147483648 is over 2^31 - 1"]),
        ("qwen2", {"use_sliding_window": True, "layer_types": ["full_attention"]},
         ["key 'layer_types'", "one entry per layer"]),
        ("phi3", {"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
         ["key 'rope_scaling' has type \"longrope\""]),
        ("phi3", {"partial_rotary_factor": 2.0}, ["key 'partial_rotary_factor' is 2", "at most 1"]),
        ("opt", {"word_embed_proj_dim": 16}, ["key 'word_embed_proj_dim' is 16", "project_in/out"]),
        ("opt", {"enable_bias": False}, ["key 'enable_bias' is false"]),
        ("gpt_neox", {"rotary_pct": 0.01}, ["rotates 0 features"]),
        ("gpt_neox", {"attention_bias": False}, ["key 'attention_bias' is false"]),
        ("gemma2", {"attn_logit_softcapping": -1}, ["key 'attn_logit_softcapping'", "positive number"]),
        ("gemma2", {"query_pre_attn_scalar": 0}, ["key 'query_pre_attn_scalar'", "positive number"]),
        ("gemma3_text", {"layer_types": ["sliding_attention", 7, "full_attention", "full_attention"]},
         ["key 'layer_types' holds 7"]),
        ("gemma3_text", {"sliding_window_pattern": 0}, ["key 'sliding_window_pattern' is 0"]),
        ("roberta", {"pad_token_id": 1000}, ["key 'pad_token_id' is 1000"]),
    ]

    def test_config_json(self):
        for family, changes, fragments in self.CONFIG:
            with self.subTest(family=family, changes=changes):
                d, config = self.model(family, name="c")
                c = dict(config, **{k: v for k, v in changes.items() if v is not None})
                for k in [k for k, v in changes.items() if v is None]:
                    c.pop(k)
                dump(c, os.path.join(d, "config.json"))
                self.refused(self.run_model(d), "config.json", *fragments)
                shutil.rmtree(d)

    def index(self, d, weight_map):
        os.remove(os.path.join(d, "model.safetensors"))
        dump({"metadata": {}, "weight_map": weight_map}, os.path.join(d, "model.safetensors.index.json"))

    def test_shard_index(self):
        d, config = self.model(name="empty")
        self.index(d, {})
        self.refused(self.run_model(d), "model.safetensors.index.json", "weight_map is empty")
        for name, shard in (("outside", "../model.safetensors"), ("sub", "a/b.safetensors"),
                            ("dot", "..")):
            d, _ = self.model(name=name)
            self.index(d, {"wte.weight": shard})
            self.refused(self.run_model(d), "model.safetensors.index.json",
                         "expected a file name in the checkpoint's directory")
        # A tensor in two shards: both shards hold it.
        d, config = self.model(name="twice")
        _, t = checkpoints.make("gpt2")
        os.remove(os.path.join(d, "model.safetensors"))
        st = checkpoints.st
        st.save_file(os.path.join(d, "a.safetensors"),
                     {k: v for k, v in t.items() if k != "wpe.weight"}, "F32")
        st.save_file(os.path.join(d, "b.safetensors"),
                     {"wte.weight": t["wte.weight"], "wpe.weight": t["wpe.weight"]}, "F32")
        wm = {k: "a.safetensors" for k in t}
        wm["wpe.weight"] = "b.safetensors"
        dump({"weight_map": wm}, os.path.join(d, "model.safetensors.index.json"))
        self.refused(self.run_model(d), "tensor \"wte.weight\" is also in",
                     "expected each tensor in one shard")
        # Listed in a shard that does not hold it.
        wm["wte.weight"] = "b.safetensors"
        dump({"weight_map": dict(wm, **{"h.0.ln_1.weight": "b.safetensors"})},
             os.path.join(d, "model.safetensors.index.json"))
        os.remove(os.path.join(d, "b.safetensors"))
        st.save_file(os.path.join(d, "b.safetensors"), {"wpe.weight": t["wpe.weight"]}, "F32")
        self.refused(self.run_model(d), "model.safetensors.index.json")

    def test_attention_options_with_model(self):
        d, _ = self.model()
        for option in (["--h", "4"], ["--causal", "true"], ["--d_model", "64"], ["--window", "4"],
                       ["--dtype", "float64"], ["--weights", "w.npz"], ["--repeat", "3"]):
            with self.subTest(option=option):
                self.refused(self.run_model(d, *option), option[0])


class PythonCalls(Hostile):
    """8. mha.Model and mha.Layer refuse what the CLI refuses, with its words, as ValueError."""

    def call(self, code):
        p = subprocess.run([sys.executable, "-c", "import mha, numpy as np\n" + code],
                           capture_output=True, text=True, timeout=300)
        return p

    def refused_py(self, code, *names, error="ValueError"):
        p = self.call(code)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        lines = p.stderr.strip().splitlines()
        self.assertTrue(lines, f"no error raised: the interpreter ended with {p.returncode}")
        last = lines[-1]
        self.assertTrue(last.startswith(error + ": "), p.stderr[-2000:])
        for n in names:
            self.assertIn(n, last)
        return last

    def test_options_as_the_cli(self):
        d, _ = self.model()
        m = f"m = mha.Model({d!r})\n"
        self.refused_py(m + "m(np.array([1, 2]), threads=-5)", "--threads")
        self.refused_py(m + "m(np.array([1, 2]), threads=10**6)", "--threads")
        self.refused_py(m + "m(np.array([1, 2]), layer_indices=[0, 0])", "--layer_indices", "given twice")
        self.refused_py(m + "m(np.array([1, 2]), top_k=-1)", "--top_k")
        self.refused_py(m + "m(np.array([1, 10**12]))", "1000000000000")

    def test_lone_surrogate(self):
        d, _ = self.model(tokenizer=True)
        self.refused_py(f"mha.Model({d!r})('a\\ud800b')", "text #1", "surrogate")

    def test_nan_weights(self):
        d, config = self.model()
        _, t = checkpoints.make("gpt2")
        t["h.0.attn.c_proj.weight"][0, 0] = np.nan
        checkpoints.write(d, config, t)
        self.refused_py(f"mha.Model({d!r})(np.array([1, 2, 3]))", "non-finite")
        self.refused(self.run_model(d), "non-finite")

    def test_ids_past_the_tokenizer(self):
        d, _ = self.model(tokenizer=True, vocab=400)
        p = self.call(f"r = mha.Model({d!r})(np.array([1, 2]), top_k=400)\n"
                      "print(sorted(t for i, t, _ in r['top_k'][0] if i == 399))")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "['<id 399>']")

    def test_deep_config_json(self):
        d, config = self.model()
        text = json.dumps(dict(config, n_layer="__DEEP__")).replace('"__DEEP__"', nested(1000000))
        self.config_text(d, text)  # killed the interpreter before: a recursion per level
        self.refused_py(f"mha.Model({d!r})", "config.json", "nested more than 64 levels")

    def test_deep_key_lengths(self):
        self.refused_py("l = []\nfor _ in range(100000): l = [l]\n"
                        "mha.Layer(h=2, d_model=8, key_lengths=l)", "nested more than 64 levels")
        self.refused_py("l = []\nl.append(l)\nmha.Layer(h=2, d_model=8, key_lengths=l)",
                        "nested more than 64 levels")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
