#!/usr/bin/python3
"""Seed inputs for the fuzz targets, made by NumPy (and zipfile for archives
NumPy would not write).

    /usr/bin/python3 tests/fuzz/make_seeds.py OUTDIR

writes OUTDIR/npy/, OUTDIR/npz/, OUTDIR/config/ and OUTDIR/image/ (PNGs made here, JPEGs by
PIL when it is installed); `--image-regressions DIR` writes the image target's regressions. The seeds are not
committed as they are: the fuzzers start from them and the committed corpora
(tests/fuzz/corpus/) are the -merge=1 minimisation of seeds plus findings;
see README.md. Every seed is small (arrays of a few elements) so that it fits
the fuzzers' -max_len (4096 for npy and config, 16384 for npz).
"""

import io
import json
import os
import struct
import sys
import warnings
import zipfile
import zlib

import numpy as np
from numpy.lib import format as npformat

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# Fixed timestamp for the archives made with zipfile, so they are reproducible.
DATE = (2024, 1, 1, 0, 0, 0)
# zip_duplicate_member is a duplicate on purpose.
warnings.filterwarnings("ignore", "Duplicate name")
rng = np.random.default_rng(20240101)


def npy_bytes(array, version=None):
    buf = io.BytesIO()
    npformat.write_array(buf, array, version=version, allow_pickle=True)
    return buf.getvalue()


def raw_npy(header, data=b"", version=1, pad=True):
    """A .npy file with `header` as the dict text verbatim (for headers NumPy
    would never write). With pad, spaces and a newline align the data to 64."""
    header = header.encode("latin1") if isinstance(header, str) else header
    len_size = 2 if version == 1 else 4
    if pad:
        total = 6 + 2 + len_size + len(header) + 1
        header += b" " * ((64 - total % 64) % 64) + b"\n"
    fmt = "<H" if version == 1 else "<I"
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack(fmt, len(header)) + header + data


def small(dtype, shape=(2, 3)):
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        values = np.arange(n) % 3 == 0
    elif dt.kind == "f":
        values = rng.standard_normal(n) * 10
    elif dt.kind == "u":
        values = np.arange(n) * 37 % 256
    else:
        values = np.arange(n) * 37 % 256 - 128
    return np.asarray(values).astype(dt).reshape(shape)


def npy_seeds():
    s = {}
    # Every supported dtype, both byte orders.
    for kind in ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"]:
        for order in "<>":
            if kind[1] == "1" and order == ">":
                continue
            a = small(order + kind)
            s[f"{kind}_{'le' if order == '<' else 'be'}_2x3"] = npy_bytes(a)
    # Special float values: NaN (with payload), infinities, -0, subnormals.
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -2.5, 65504.0, 70000.0, 1e-7, 6e-8,
                1e-40, 1e-310, 3.4e38, 1e300]
    for kind in ["f2", "f4", "f8"]:
        with np.errstate(over="ignore", under="ignore"):
            s[f"{kind}_specials"] = npy_bytes(np.array(specials, dtype="<" + kind))
            s[f"{kind}_specials_be"] = npy_bytes(np.array(specials, dtype=">" + kind))
    s["f2_all_exponents"] = npy_bytes(np.arange(0, 65536, 1021, dtype="<u2").view("<f2"))
    s["f4_nan_payload"] = npy_bytes(np.array([0x7FC00001, 0xFFA00000], dtype="<u4").view("<f4"))
    # Fortran order, including shapes where it is the same layout as C order.
    s["f4_fortran_2x3x4"] = npy_bytes(np.asfortranarray(small("<f4", (2, 3, 4))))
    s["i2_be_fortran_3x2"] = npy_bytes(np.asfortranarray(small(">i2", (3, 2))))
    s["f8_fortran_2x1x3"] = npy_bytes(np.asfortranarray(small("<f8", (2, 1, 3))))
    s["b1_fortran_4x3"] = npy_bytes(np.asfortranarray(small("|b1", (4, 3))))
    s["f2_fortran_2x2x2x2"] = npy_bytes(np.asfortranarray(small("<f2", (2, 2, 2, 2))))
    s["u1_fortran_1x5"] = npy_bytes(np.asfortranarray(small("|u1", (1, 5))))
    s["f4_fortran_empty_3x0x2"] = npy_bytes(np.asfortranarray(np.zeros((3, 0, 2), "<f4")))
    # 0-d, empty and degenerate shapes.
    s["f4_0d"] = npy_bytes(np.array(1.5, dtype="<f4"))
    s["b1_0d"] = npy_bytes(np.array(True))
    s["i8_0d_be"] = npy_bytes(np.array(-7, dtype=">i8"))
    s["f4_empty_0"] = npy_bytes(np.zeros((0,), "<f4"))
    s["f8_empty_0x3"] = npy_bytes(np.zeros((0, 3), "<f8"))
    s["i4_empty_2x0"] = npy_bytes(np.zeros((2, 0), "<i4"))
    s["f4_1x1x1x1x1x1x1x1"] = npy_bytes(np.ones((1,) * 8, "<f4"))
    s["f4_32_dims"] = npy_bytes(np.ones((1,) * 32, "<f4"))
    s["f4_attention_like_2x4x3x3"] = npy_bytes(small("<f4", (2, 4, 3, 3)))
    s["f4_long_200"] = npy_bytes(small("<f4", (200,)))
    # Format versions 2.0 and 3.0 (3.0 allows utf-8 in the header).
    s["f4_v2"] = npy_bytes(small("<f4"), version=(2, 0))
    s["f8_be_fortran_v2"] = npy_bytes(np.asfortranarray(small(">f8")), version=(2, 0))
    s["f4_v3"] = npy_bytes(small("<f4"), version=(3, 0))
    s["b1_v3_0d"] = npy_bytes(np.array(False), version=(3, 0))
    # Dtypes that must be refused (with their specific messages).
    s["c8_complex"] = npy_bytes(np.array([1 + 2j, 3 - 4j], dtype="<c8"))
    s["U3_strings"] = npy_bytes(np.array(["ab", "xyz"], dtype="<U3"))
    s["S2_bytes"] = npy_bytes(np.array([b"ab", b"c"], dtype="S2"))
    s["O_object"] = npy_bytes(np.array([1, "x", None], dtype=object))
    s["structured"] = npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")]))
    s["structured_v3_utf8"] = npy_bytes(np.zeros(2, dtype=[("\u00e9", "<f4")]), version=(3, 0))
    s["M8_datetime"] = npy_bytes(np.array(["2024-01-01"], dtype="datetime64[D]"))
    s["m8_timedelta"] = npy_bytes(np.array([5], dtype="timedelta64[s]"))
    s["V4_void"] = npy_bytes(np.zeros(2, dtype="V4"))
    s["f16_longdouble"] = npy_bytes(np.zeros(2, dtype=np.longdouble))
    # Headers NumPy would not write but Python would evaluate to the same dict.
    f4 = small("<f4").tobytes()
    s["hand_double_quotes"] = raw_npy('{"descr": "<f4", "fortran_order": False, "shape": (2, 3)}', f4)
    s["hand_key_order"] = raw_npy("{'shape': (2, 3), 'descr': '<f4', 'fortran_order': False, }", f4)
    s["hand_no_padding"] = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,3)}",
                                   f4, pad=False)
    s["hand_whitespace"] = raw_npy("\t{ 'descr' :'<f4' ,\n'fortran_order':False,'shape':( 2 , 3 , ) }",
                                   f4)
    s["hand_native_order"] = raw_npy("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }", f4)
    s["hand_pipe_u1"] = raw_npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", b"\x01\x02\x03\x04")
    s["hand_pipe_f4_refused"] = raw_npy("{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", b"\0" * 4)
    s["hand_bool_nonzero_bytes"] = raw_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", b"\x00\x02\xff\x01")
    s["hand_fortran_true"] = raw_npy("{'descr': '>i4', 'fortran_order': True, 'shape': (2, 2, 2), }",
                                     np.arange(8, dtype=">i4").tobytes())
    s["hand_shape_not_tuple"] = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", f4)
    s["hand_shape_empty_tuple"] = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f4[:4])
    s["hand_shape_huge"] = raw_npy("{'descr': '<f8', 'fortran_order': False, "
                                   "'shape': (4294967296, 4294967296, 0), }")
    s["hand_shape_overflow"] = raw_npy("{'descr': '<f8', 'fortran_order': False, "
                                       "'shape': (18446744073709551615, 2), }")
    s["hand_shape_digits_overflow"] = raw_npy("{'descr': '<f4', 'fortran_order': False, "
                                              "'shape': (99999999999999999999999,), }")
    s["hand_shape_claims_1gib"] = raw_npy("{'descr': '<f4', 'fortran_order': False, "
                                          "'shape': (16384, 16384), }", f4)
    s["hand_shape_float_dim"] = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3), }", f4)
    s["hand_shape_negative"] = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", f4)
    s["hand_list_descr"] = raw_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", f4[:8])
    s["hand_extra_key"] = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", f4)
    s["hand_duplicate_key"] = raw_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", f4)
    s["hand_missing_shape"] = raw_npy("{'descr': '<f4', 'fortran_order': False}", f4)
    s["hand_escape_in_string"] = raw_npy("{'descr': '<f\\4', 'fortran_order': False, 'shape': (6,)}", f4)
    s["hand_bool_lowercase"] = raw_npy("{'descr': '<f4', 'fortran_order': false, 'shape': (6,)}", f4)
    s["hand_nul_in_header"] = raw_npy(b"{'descr': '<f4',\0'fortran_order': False, 'shape': (6,)}", f4)
    s["hand_data_short"] = npy_bytes(small("<f8"))[:-3]
    s["hand_data_long"] = npy_bytes(small("<i2")) + b"\0\0"
    s["hand_header_past_end"] = npy_bytes(small("<f4"))[:40]
    s["hand_version_1_1"] = b"\x93NUMPY\x01\x01" + npy_bytes(small("<f4"))[8:]
    s["hand_version_4"] = b"\x93NUMPY\x04\x00" + npy_bytes(small("<f4"))[8:]
    s["hand_v2_huge_header_len"] = b"\x93NUMPY\x02\x00\xff\xff\xff\x7f{}"
    s["hand_magic_only"] = b"\x93NUMPY"
    s["hand_bad_magic"] = b"\x93NUMPZ\x01\x00" + npy_bytes(small("<f4"))[8:]
    s["hand_empty_file"] = b""
    return s


def savez_bytes(compressed, *args, **kwargs):
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, *args, **kwargs)
    return buf.getvalue()


def zip_bytes(members, compression=zipfile.ZIP_STORED, force_zip64=False):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=DATE)
            info.compress_type = compression
            with zf.open(info, "w", force_zip64=force_zip64) as f:
                f.write(data)
    return buf.getvalue()


def raw_zip(name, data, method=8, declared=None, zip64=False):
    """A one-member archive written by hand, declaring `declared` bytes
    uncompressed (default: the truth), with the sizes in a zip64 extra field
    if asked; for the size checks zipfile will not let us reach."""
    name = name.encode()
    body = zlib.compress(data)[2:-4] if method == 8 else data
    crc = zlib.crc32(data)
    usize = len(data) if declared is None else declared
    if zip64:
        extra = struct.pack("<HHQQ", 1, 16, usize, len(body))
        us, cs = 0xFFFFFFFF, 0xFFFFFFFF
    else:
        extra, us, cs = b"", usize, len(body)
    ver = 45 if zip64 else 20
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, ver, 0, method, 0, 0x5821, crc, cs, us,
                        len(name), len(extra)) + name + extra + body
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, ver, ver, 0, method, 0, 0x5821, crc,
                          cs, us, len(name), len(extra), 0, 0, 0, 0, 0) + name + extra
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local), 0)
    return local + central + eocd


def npz_seeds():
    s = {}
    weights = {
        "W_q": small("<f4", (4, 4)), "W_k": small("<f4", (4, 4)),
        "W_v": small("<f4", (4, 4)), "W_o": small("<f4", (4, 4)),
        "b_q": small("<f4", (4,)), "b_o": small("<f4", (4,)),
    }
    s["savez_weights"] = savez_bytes(False, **weights)
    s["savez_compressed_weights"] = savez_bytes(True, **weights)
    s["savez_positional"] = savez_bytes(False, small("<f8"), small("|b1", (3,)))
    s["savez_empty"] = savez_bytes(False)
    s["savez_compressed_empty"] = savez_bytes(True)
    s["savez_dtypes"] = savez_bytes(False, f2=small("<f2"), f8be=small(">f8"), i8=small("<i8"),
                                    u2=small(">u2"), b=small("|b1"))
    s["savez_compressed_fortran"] = savez_bytes(True, a=np.asfortranarray(small("<f4", (2, 3, 2))),
                                                z=np.zeros((0, 2), "<f4"), s=np.array(2.0))
    s["savez_refused_dtype"] = savez_bytes(False, c=np.array([1j], dtype="<c8"))
    s["savez_unicode_name"] = savez_bytes(False, **{"\u00e9t\u00e9": small("<f4", (2,))})
    s["savez_odd_names"] = savez_bytes(False, **{"a.b": small("<f4", (1,)), "": small("<f4", (1,))})
    npy = npy_bytes(small("<f4"))
    s["zip_not_npy_member"] = zip_bytes([("a.npy", npy), ("readme.txt", b"hello")])
    s["zip_subdir_member"] = zip_bytes([("dir/", b""), ("dir/a.npy", npy)])
    s["zip_duplicate_member"] = zip_bytes([("a.npy", npy), ("a.npy", npy)])
    s["zip_bzip2"] = zip_bytes([("a.npy", npy)], zipfile.ZIP_BZIP2)
    s["zip_lzma"] = zip_bytes([("a.npy", npy)], zipfile.ZIP_LZMA)
    s["zip_deflated_2"] = zip_bytes([("a.npy", npy), ("b.npy", npy_bytes(small(">i4")))],
                                    zipfile.ZIP_DEFLATED)
    s["zip64"] = zip_bytes([("a.npy", npy)], force_zip64=True)
    s["zip_bad_member"] = zip_bytes([("a.npy", npy[:50])])
    s["zip_member_v2"] = zip_bytes([("a.npy", npy_bytes(small("<f4"), version=(2, 0)))])
    # cp437 (not utf-8 flagged) name with a high byte, as old zip tools write.
    cp = bytearray(zip_bytes([("x.npy", npy)]))
    for i in range(len(cp) - 4):
        if cp[i:i + 5] == b"x.npy":
            cp[i] = 0x82  # 'é' in cp437
    s["zip_cp437_name"] = bytes(cp)
    whole = savez_bytes(False, a=small("<f4"))
    s["zip_truncated"] = whole[:len(whole) // 2]
    member = npy_bytes(small("<f4", (25,)))
    s["raw_deflated"] = raw_zip("a.npy", member)
    s["raw_stored_zip64"] = raw_zip("a.npy", member, method=0, zip64=True)
    s["raw_declares_less"] = raw_zip("a.npy", member, declared=len(member) - 10)
    s["raw_declares_more"] = raw_zip("a.npy", member, declared=len(member) + 10)
    s["raw_declares_4gib"] = raw_zip("a.npy", member, declared=4 << 30, zip64=True)
    s["raw_declares_5gib"] = raw_zip("a.npy", member, declared=5 << 30, zip64=True)
    s["zip_eocd_only"] = b"PK\x05\x06" + b"\0" * 18
    s["zip_garbage"] = b"PK\x03\x04" + b"\xff" * 40
    s["empty_file"] = b""
    return s


CONFIG_VARIANTS = {
    "all_keys": {
        "h": 2, "d_model": 8, "d_k": 4, "d_v": 4, "kdim": 8, "vdim": 8, "d_out": 8,
        "batch": 2, "seq_len": 3, "kv_seq_len": 5, "use_bias": False, "scale": 0.5,
        "dtype": "float32", "seed": 7, "threads": 1, "query": "q.npy", "key": "k.npy",
        "value": "v.npy", "weights": "w.npz", "weights_format": "torch", "causal": "top-left",
        "mask": "m.npy", "mask_true_means": "ignore", "key_padding_mask": "p.npy",
        "key_lengths": [3, 5], "masked_rows": "uniform", "out_dir": "out/x",
        "save_attention": True, "average_heads": True, "save_weights": "keras",
        "save_inputs": True,
    },
    "all_null": {k: None for k in [
        "h", "d_model", "d_k", "d_v", "kdim", "vdim", "d_out", "batch", "seq_len", "kv_seq_len",
        "use_bias", "scale", "dtype", "seed", "threads", "query", "key", "value", "weights",
        "weights_format", "causal", "mask", "mask_true_means", "key_padding_mask", "key_lengths",
        "masked_rows", "out_dir", "save_attention", "average_heads", "save_weights",
        "save_inputs"]},
    "limits": {"h": 1073741824, "d_model": 1, "seed": 18446744073709551615, "threads": 1024,
               "scale": 1e308, "key_lengths": [0, 1073741824]},
    "over_limits": {"h": 1073741825},
    "int_too_big": {"seed": 18446744073709551616},
    "negative": {"d_model": -1},
    "zero_size": {"batch": 0},
    "threads_over": {"threads": 1025},
    "seed_negative": {"seed": -1},
    "float_for_int": {"h": 2.0},
    "string_for_int": {"h": "8"},
    "scale_zero": {"scale": 0},
    "scale_tiny": {"scale": 5e-324},
    "scale_int": {"scale": 3},
    "causal_false": {"causal": False},
    "causal_bottom_right": {"causal": "bottom-right"},
    "causal_bad": {"causal": "left"},
    "save_weights_true": {"save_weights": True},
    "save_weights_native": {"save_weights": "native"},
    "save_weights_number": {"save_weights": 1},
    "key_lengths_file": {"key_lengths": "lengths.npy"},
    "key_lengths_empty": {"key_lengths": []},
    "key_lengths_negative": {"key_lengths": [1, -1]},
    "key_lengths_nested": {"key_lengths": [[1]]},
    "weights_format_auto": {"weights_format": "auto"},
    "dtype_float64": {"dtype": "float64"},
    "dtype_bad": {"dtype": "float16"},
    "masked_rows_nan": {"masked_rows": "nan"},
    "out_dir_empty": {"out_dir": ""},
    "path_number": {"query": 3},
    "unicode_path": {"query": "d\u00e9j\u00e0/\U0001F600.npy"},
    "typo_key": {"d_modle": 8},
    "typo_dash": {"save-attention": True},
    "far_unknown_key": {"zzzzzzzzzzzzzzzzzzzz": 1},
    "future_keys": {"max_memory": "8GiB", "allow_nonfinite": True},
    "future_keys_2": {"max_memory": 1000000},
    "empty_object": {},
    "top_level_array": [1, 2],
    "top_level_string": "h",
    "nested_object": {"h": {"h": 1}},
}

CONFIG_TEXTS = {
    "comments": '// a comment\n{\n  "h": 4, /* block */ "d_model": 16\n}\n',
    "comment_unterminated": '{"h": 4} /* never closed',
    "trailing_comma_object": '{\n  "h": 4,\n  "d_model": 16,\n}\n',
    "trailing_comma_array": '{"key_lengths": [1, 2, ]}',
    "duplicate_key": '{"h": 4, "h": 8}',
    "duplicate_nested_key": '{"h": {"a": 1, "a": 2}}',
    "duplicate_in_sibling_objects": '[{"a": 1}, {"a": 2}]',
    "escapes": '{"query": "a\\\\b\\"c\\u00e9\\ud83d\\ude00.npy", "out_dir": "\\t\\n"}',
    "lone_surrogate": '{"query": "\\ud800.npy"}',
    "invalid_utf8": b'{"query": "\xff\xfe.npy"}',
    "bom": b'\xef\xbb\xbf{"h": 2}',
    "nul_byte": b'{"h": 2}\x00',
    "numbers": '{"scale": -0.0, "seed": 0, "h": 1e0}',
    "big_exponent": '{"scale": 1e400}',
    "deep_nesting": '{"h": ' + "[" * 300 + "]" * 300 + "}",
    "unclosed": '{"h": 4',
    "empty_text": "",
    "only_whitespace": " \n\t ",
    "two_values": '{"h": 1} {"h": 2}',
    "single_quotes": "{'h': 1}",
    "multiline_error": '{\n  "h": 4,\n  "d_model" 16\n}\n',
}


def config_seeds():
    s = {}
    configs = os.path.join(REPO, "configs")
    for name in sorted(os.listdir(configs)):
        if name.endswith(".json"):
            with open(os.path.join(configs, name), "rb") as f:
                s["repo_" + name[:-5]] = f.read()
    for name, obj in CONFIG_VARIANTS.items():
        s[name] = (json.dumps(obj, indent=2) + "\n").encode()
    for name, text in CONFIG_TEXTS.items():
        s[name] = text if isinstance(text, bytes) else text.encode()
    return s


def png(width, height, raw_rows, depth=8, color=2, extra=b"", interlace=0):
    """A PNG from its filtered rows (each starting with its filter byte), `extra` chunks
    after IHDR."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace))
            + extra + chunk(b"IDAT", zlib.compress(raw_rows)) + chunk(b"IEND", b""))


def png_chunk(t, d, length=None):
    return (struct.pack(">I", len(d) if length is None else length) + t + d
            + struct.pack(">I", zlib.crc32(t + d)))


def image_seeds():
    """Small PNGs of every colour type and depth (one interlaced), and JPEGs by PIL when it is
    there: baseline, greyscale, progressive, 4:4:4, optimised."""
    s = {}
    w, h = 5, 4
    rgb = rng.integers(0, 256, (h, w, 3)).astype(np.uint8)
    s["png_rgb8"] = png(w, h, b"".join(b"\0" + r.tobytes() for r in rgb))
    s["png_rgb8_filters"] = png(w, h, b"".join(bytes([y % 5]) + r.tobytes()
                                               for y, r in enumerate(rgb)))
    s["png_rgba16"] = png(w, h, b"".join(b"\0" + rng.integers(0, 65536, w * 4).astype(">u2").tobytes()
                                          for _ in range(h)), depth=16, color=6)
    for depth in (1, 2, 4, 8, 16):
        row = (w * depth + 7) // 8
        s[f"png_grey{depth}"] = png(w, h, b"".join(b"\0" + bytes(rng.integers(0, 256, row).tolist())
                                                   for _ in range(h)), depth=depth, color=0)
    s["png_grey_alpha"] = png(w, h, b"".join(b"\0" + bytes(rng.integers(0, 256, 2 * w).tolist())
                                             for _ in range(h)), color=4)
    s["png_palette_trns"] = png(w, h, b"".join(b"\0" + bytes(rng.integers(0, 4, w).tolist())
                                               for _ in range(h)), color=3,
                                extra=png_chunk(b"PLTE", bytes(range(12)))
                                + png_chunk(b"tRNS", b"\0\x80"))
    s["png_text"] = png(w, h, b"".join(b"\0" + r.tobytes() for r in rgb),
                        extra=png_chunk(b"tEXt", b"Comment\0seed")
                        + png_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"seed" * 8)))
    # Adam7: the 7 passes' subimages of an 8 x 8 image, one after the other
    a = rng.integers(0, 256, (8, 8, 3)).astype(np.uint8)
    raw = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                           (1, 0, 2, 2), (0, 1, 1, 2)):
        sub = a[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(b"\0" + r.tobytes() for r in sub)
    s["png_interlaced"] = png(8, 8, raw, interlace=1)
    try:
        from PIL import Image
    except ImportError:
        return s
    im = Image.fromarray(rng.integers(0, 256, (12, 10, 3)).astype(np.uint8))
    for name, kw in (("jpeg_baseline", {}), ("jpeg_progressive", {"progressive": True}),
                     ("jpeg_444", {"subsampling": 0}), ("jpeg_optimized", {"optimize": True})):
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=80, **kw)
        s[name] = buf.getvalue()
    buf = io.BytesIO()
    im.convert("L").save(buf, "JPEG", quality=80)
    s["jpeg_grey"] = buf.getvalue()
    return s


def image_regressions():
    """Headers that declare far more than the file holds (regressions/image/)."""
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 24, 32, 8, 2, 0, 0, 0))
    idat = png_chunk(b"IDAT", zlib.compress(bytes(32 * 73)))
    sig = b"\x89PNG\r\n\x1a\n"
    s = {
        "png_text_chunk_2g.png": sig + ihdr + struct.pack(">I", 2**31 - 1) + b"tEXt"
        + b"Comment\0hello" * 8,
        "png_chunk_length_4g.png": sig + ihdr + struct.pack(">I", 2**32 - 1) + b"IDAT" + bytes(64),
        "png_ihdr_2g_by_2g.png": sig + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2**31 - 1,
                                                                     2**31 - 1, 8, 2, 0, 0, 0))
        + idat + png_chunk(b"IEND", b""),
        "png_ihdr_60000_by_60000.png": sig + png_chunk(b"IHDR", struct.pack(
            ">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)) + idat + png_chunk(b"IEND", b""),
        "png_ztxt_inflates_to_64m.png": sig + ihdr + png_chunk(
            b"zTXt", b"Comment\0\0" + zlib.compress(bytes(64 << 20), 9)) + idat
        + png_chunk(b"IEND", b""),
    }
    try:
        from PIL import Image
    except ImportError:
        return s
    buf = io.BytesIO()
    Image.fromarray(np.zeros((32, 24, 3), np.uint8)).save(buf, "JPEG")
    sof = bytearray(buf.getvalue())
    at = sof.index(b"\xff\xc0")
    sof[at + 5:at + 9] = struct.pack(">HH", 65535, 65535)
    s["jpeg_sof_65535_by_65535.jpg"] = bytes(sof)
    sof[at + 5:at + 9] = struct.pack(">HH", 11000, 11000)  # over the replay's 4 MiB
    s["jpeg_sof_11000_by_11000.jpg"] = bytes(sof)
    return s


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--image-regressions":
        os.makedirs(sys.argv[2], exist_ok=True)
        for name, data in image_regressions().items():
            with open(os.path.join(sys.argv[2], name), "wb") as f:
                f.write(data)
        return
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTDIR")
    out = sys.argv[1]
    limits = {"npy": 4096, "npz": 16384, "config": 4096, "image": 4096}
    for target, seeds in [("npy", npy_seeds()), ("npz", npz_seeds()), ("config", config_seeds()),
                          ("image", image_seeds())]:
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            assert len(data) <= limits[target], (target, name, len(data))
            ext = {"npy": ".npy", "npz": ".npz", "config": ".json", "image": ""}[target]
            with open(os.path.join(d, name + ext), "wb") as f:
                f.write(data)
        print(f"{d}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")


if __name__ == "__main__":
    main()
