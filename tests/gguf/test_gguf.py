#!/usr/bin/python3
"""mha::GgufFile against an independent writer and reference: GGUF files written by
gguf_writer.py (from ggml's docs/gguf.md), read by the C++ reader through gguf_dump, held to
what was written and, for every type mha dequantizes, bit for bit (float32 bit patterns) to the
NumPy dequantization of ggml_reference.py (from ggml's block structs) on random blocks.

  GGUF_DUMP=build/bin/gguf_dump /usr/bin/python3 tests/gguf/test_gguf.py [Group]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ggml_reference  # noqa: E402
import gguf_writer  # noqa: E402

GGUF_DUMP = os.environ.get("GGUF_DUMP", "gguf_dump")

# Per type, tensors of these dims (innermost first) in units of the block's values: one row of
# one block, rows of several blocks, and 3-D.
DIMS_IN_BLOCKS = [[1], [3, 4], [2, 3, 2], [5, 1, 1, 2]]


def dims_for(type_name):
    n = ggml_reference.BLOCKS[type_name][0]
    scale = 7 if n == 1 else n  # plain types: rows of 7, 21, ... values
    return [[d[0] * scale] + d[1:] for d in DIMS_IN_BLOCKS]


def elements(dims):
    return int(np.prod(dims))


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mha_gguf_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def dump(self, *args):
        return subprocess.run([GGUF_DUMP] + [str(a) for a in args], capture_output=True,
                              encoding="utf-8", errors="replace", timeout=120)

    def info(self, path):
        p = self.dump(path)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def read(self, path, name, *rows):
        out = self.path("out.npy")
        p = self.dump(path, name, out, *rows)
        self.assertEqual(p.returncode, 0, p.stderr)
        return np.load(out)

    def assertBits(self, got, want, what):
        self.assertEqual(got.dtype, np.float32, what)
        self.assertEqual(got.size, want.size, what)
        g, w = got.reshape(-1).view(np.uint32), want.reshape(-1).view(np.uint32)
        if not np.array_equal(g, w):
            i = int(np.flatnonzero(g != w)[0])
            self.fail(f"{what}: element {i} of {g.size} is {got.reshape(-1)[i]!r} "
                      f"(0x{g[i]:08x}), the reference {want.reshape(-1)[i]!r} (0x{w[i]:08x})")


def typed_tensors(rng, types):
    """[(name, type name, dims, raw bytes)], several tensors of each type."""
    out = []
    for t in types:
        for k, dims in enumerate(dims_for(t)):
            raw = ggml_reference.random_blocks(t, elements(dims), rng)
            out.append((f"blk.{k}.{t.lower()}.weight", t, dims, raw))
    return out


def write_tensors(path, tensors, **kw):
    gguf_writer.write(path, metadata=[("general.architecture", "string", "test")],
                      tensors=[(n, gguf_writer.TYPES[t], d, raw) for n, t, d, raw in tensors],
                      **kw)


class Dequantize(Base):
    """Every type mha reads, several tensors each (one block; rows of several blocks; 3-D and
    4-D), in files of each version and several alignments: the values bit for bit."""

    def check_file(self, tensors, **kw):
        path = self.path("t.gguf")
        write_tensors(path, tensors, **kw)
        info = self.info(path)
        self.assertEqual([t["name"] for t in info["tensors"]], [t[0] for t in tensors])
        for name, t, dims, raw in tensors:
            got = self.read(path, name)
            self.assertEqual(got.shape, tuple(reversed(dims)), name)
            self.assertBits(got, ggml_reference.dequantize(t, raw), f"{name} ({t}, dims {dims})")

    def test_every_type(self):
        rng = np.random.default_rng(1)
        self.check_file(typed_tensors(rng, list(ggml_reference.BLOCKS)))

    def test_versions_and_alignments(self):
        rng = np.random.default_rng(2)
        for version, alignment in ((2, None), (3, 1), (2, 8), (3, 64), (3, 4096)):
            with self.subTest(version=version, alignment=alignment):
                types = ["Q4_0", "Q5_1", "Q3_K", "Q6_K", "F16", "BF16"]
                self.check_file(typed_tensors(rng, types), version=version, alignment=alignment)

    def test_many_blocks(self):
        # Rows longer than the reader's 1 MiB chunk: blocks cross its reads.
        rng = np.random.default_rng(3)
        tensors = []
        for t in ("Q4_K", "Q8_0", "F32"):
            n, size = ggml_reference.BLOCKS[t]
            dims = [n * (1 + (1 << 20) // size), 2]
            raw = ggml_reference.random_blocks(t, elements(dims), rng)
            tensors.append((f"big.{t}", t, dims, raw))
        self.check_file(tensors)

    def test_reference_on_known_blocks(self):
        # The reference itself on blocks worked by hand from the structs' comments.
        d = np.float16(0.5).tobytes()
        q8 = d + bytes(range(256 - 16, 256)) + bytes(range(16))  # int8 -16..15
        self.assertEqual(ggml_reference.dequantize("Q8_0", q8).tolist(),
                         [x * 0.5 for x in range(-16, 16)])
        q4 = d + bytes([0x10 * (15 - j) + j for j in range(16)])  # low nibbles 0..15, high 15..0
        self.assertEqual(ggml_reference.dequantize("Q4_0", q4).tolist(),
                         [(j - 8) * 0.5 for j in range(16)] + [(7 - j) * 0.5 for j in range(16)])
        m = np.float16(-1.0).tobytes()
        q5 = d + m + struct.pack("<I", 0x80000001) + bytes([0x21] * 16)
        want = [1 * 0.5 - 1.0] * 16 + [2 * 0.5 - 1.0] * 16
        want[0] = (1 + 16) * 0.5 - 1.0
        want[31] = (2 + 16) * 0.5 - 1.0
        self.assertEqual(ggml_reference.dequantize("Q5_1", q5).tolist(), want)


class Rows(Base):
    """read_rows: any range of rows (the product of the dims after the first) is the same as
    those rows of the whole tensor."""

    def test_row_ranges(self):
        rng = np.random.default_rng(4)
        tensors = typed_tensors(rng, ["Q4_K", "Q5_0", "Q2_K", "F16", "Q8_K"])
        path = self.path("rows.gguf")
        write_tensors(path, tensors)
        for name, t, dims, raw in tensors:
            row_size = dims[0]
            rows = elements(dims) // row_size
            ref = ggml_reference.dequantize(t, raw).reshape(rows, row_size)
            for row0, n in ((0, rows), (rows - 1, 1), (rows // 2, rows - rows // 2), (0, 0)):
                got = self.read(path, name, row0, n)
                self.assertEqual(got.shape, (n, row_size))
                self.assertBits(got, ref[row0:row0 + n], f"{name} rows {row0} + {n}")

    def test_rows_out_of_range(self):
        rng = np.random.default_rng(5)
        path = self.path("rows.gguf")
        tensors = typed_tensors(rng, ["Q6_K"])
        write_tensors(path, tensors)
        name, _, dims, _ = tensors[1]  # dims [768, 4]: 4 rows
        p = self.dump(path, name, self.path("o.npy"), 3, 2)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f'tensor "{name}" has 4 rows, not 3 + 2', p.stderr)


# Every value type as a scalar and as an array; JSON holds what the reader saw.
METADATA = [
    ("general.architecture", "string", "llama"),
    ("t.uint8", "uint8", 255), ("t.int8", "int8", -128), ("t.uint16", "uint16", 65535),
    ("t.int16", "int16", -32768), ("t.uint32", "uint32", 4294967295),
    ("t.int32", "int32", -2147483648), ("t.float32", "float32", 0.1),
    ("t.bool_true", "bool", True), ("t.bool_false", "bool", False),
    ("t.string", "string", "h\u00e9llo \U0001f600\n\"quoted\""), ("t.empty_string", "string", ""),
    ("t.uint64", "uint64", 2**64 - 1), ("t.int64", "int64", -2**63),
    ("t.float64", "float64", -1.0000000000000002e-300),
    ("a.uint8", ("array", "uint8"), [0, 1, 255]), ("a.int8", ("array", "int8"), [-128, 0, 127]),
    ("a.uint16", ("array", "uint16"), [0, 65535]), ("a.int16", ("array", "int16"), [-1, 1]),
    ("a.uint32", ("array", "uint32"), [7] * 1000), ("a.int32", ("array", "int32"), [-5, 5]),
    ("a.float32", ("array", "float32"), [1.5, -0.0, 3.4028234663852886e38, 1e-45]),
    ("a.bool", ("array", "bool"), [True, False, True]),
    ("a.string", ("array", "string"), ["<s>", "", "\u2581the", "a\u0000b", "x" * 3000]),
    ("a.uint64", ("array", "uint64"), [2**64 - 1, 0]),
    ("a.int64", ("array", "int64"), [-2**63, 2**63 - 1]),
    ("a.float64", ("array", "float64"), [0.1, -2.5e300]),
    ("a.empty", ("array", "int32"), []), ("a.empty_strings", ("array", "string"), []),
]


class Metadata(Base):
    """Every metadata value type, scalar and array, as the writer wrote it; the tensor infos
    (types, dims, offsets, bytes) and the data section's start."""

    def test_every_value_type(self):
        path = self.path("m.gguf")
        gguf_writer.write(path, metadata=METADATA)
        info = self.info(path)
        self.assertEqual(info["version"], 3)
        self.assertEqual(info["alignment"], 32)
        self.assertEqual(len(info["metadata"]), len(METADATA))
        for got, (key, kind, value) in zip(info["metadata"], METADATA):
            array = isinstance(kind, tuple)
            element = kind[1] if array else kind
            self.assertEqual((got["key"], got["type"], got["array"]), (key, element, array))
            want = value if array else [value]
            have = got["value"] if array else [got["value"]]
            if element == "float32":
                want = np.array(want, dtype=np.float32)
                self.assertBits(np.array(have, dtype=np.float32), want, key)
            else:
                self.assertEqual(have, want, key)

    def test_tensor_infos(self):
        rng = np.random.default_rng(6)
        tensors = typed_tensors(rng, ["Q4_1", "Q8_0", "F32"])
        for alignment in (None, 16, 128):
            path = self.path("i.gguf")
            write_tensors(path, tensors, alignment=alignment)
            info = self.info(path)
            align = alignment or 32
            self.assertEqual(info["alignment"], align)
            self.assertEqual(info["data_offset"] % align, 0)
            at = 0
            for got, (name, t, dims, raw) in zip(info["tensors"], tensors):
                n = elements(dims)
                self.assertEqual(got["name"], name)
                self.assertEqual(got["type"], t)
                self.assertEqual(got["dims"], dims)
                self.assertEqual(got["shape"], dims[::-1])
                self.assertEqual(got["bytes"], len(raw))
                self.assertEqual(got["offset"], at)
                self.assertEqual((got["rows"], got["row_size"]), (n // dims[0], dims[0]))
                at += len(raw) + (-len(raw)) % align
            # The data section ends with the last tensor's padding.
            self.assertEqual(info["data_offset"] + at, os.path.getsize(path))

    def test_no_tensors(self):
        path = self.path("empty.gguf")
        gguf_writer.write(path, version=2)
        info = self.info(path)
        self.assertEqual((info["version"], info["metadata"], info["tensors"]), (2, [], []))


class Refusals(Base):
    """Through the process: one line on stderr naming the file and the tensor or key, exit 2."""

    def refused(self, path, *args, fragment):
        p = self.dump(path, *args)
        self.assertEqual(p.returncode, 2, (p.stdout, p.stderr))
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn(path, p.stderr)
        self.assertIn(fragment, p.stderr)

    def test_types_listed_but_not_read(self):
        rng = np.random.default_rng(7)
        path = self.path("iq.gguf")
        # Sizes from ggml-common.h: block_iq2_xxs (256 values, 66 bytes), block_iq4_nl (32, 18),
        # block_tq2_0 (256, 66).
        tensors = [(name, gguf_writer.TYPES[t], [n * 2, 3],
                    rng.integers(0, 256, size=6 * size, dtype=np.uint8).tobytes())
                   for name, t, (n, size) in (("iq", "IQ2_XXS", (256, 66)),
                                              ("nl", "IQ4_NL", (32, 18)),
                                              ("tq", "TQ2_0", (256, 66)))]
        tensors.append(("ok", gguf_writer.TYPES["Q8_0"], [32], ggml_reference.random_blocks(
            "Q8_0", 32, rng)))
        gguf_writer.write(path, tensors=tensors)
        info = self.info(path)
        self.assertEqual([(t["name"], t["type"]) for t in info["tensors"]],
                         [("iq", "IQ2_XXS"), ("nl", "IQ4_NL"), ("tq", "TQ2_0"), ("ok", "Q8_0")])
        for name, label in (("iq", "IQ2_XXS (16)"), ("nl", "IQ4_NL (20)"), ("tq", "TQ2_0 (35)")):
            self.refused(path, name, self.path("o.npy"),
                         fragment=f'tensor "{name}" has type {label}, which mha does not read')
        self.assertEqual(self.read(path, "ok").shape, (32,))

    def test_hostile_headers(self):
        good = gguf_writer.encode(metadata=[("k", "uint32", 1)],
                                  tensors=[("w", gguf_writer.TYPES["F32"], [8], bytes(32))])
        cases = {
            "v1": (good[:4] + struct.pack("<I", 1) + good[8:], "GGUF version 1"),
            "big_endian": (good[:4] + struct.pack(">I", 3) + good[8:], "big-endian"),
            "truncated": (good[:-1], 'tensor "w": its 32 bytes at offset 0 run past the end'),
            "huge_string": (gguf_writer.encode()[:16] + struct.pack("<Q", 1) +
                            gguf_writer.gguf_string("k") + struct.pack("<IQ", 8, 2**63),
                            'metadata key "k" (a string of 9223372036854775808 bytes) runs past'),
            "huge_array": (gguf_writer.encode()[:16] + struct.pack("<Q", 1) +
                           gguf_writer.gguf_string("k") + struct.pack("<IIQ", 9, 0, 2**40),
                           'metadata key "k": an array of 1099511627776 uint8 needs'),
            "huge_tensor_count": (b"GGUF" + struct.pack("<IQQ", 3, 2**60, 0) + bytes(64),
                                  "tensor_count 1152921504606846976"),
        }
        for name, (data, fragment) in cases.items():
            with self.subTest(name):
                path = self.path(name + ".gguf")
                with open(path, "wb") as f:
                    f.write(data)
                self.refused(path, fragment=fragment)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
