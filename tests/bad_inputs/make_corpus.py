#!/usr/bin/python3
"""Writes the input files of the bad-input corpus (tests/bad_inputs/files/).

    /usr/bin/python3 tests/bad_inputs/make_corpus.py          # (re)write files/
    /usr/bin/python3 tests/bad_inputs/make_corpus.py --check  # compare, write nothing

Every file is small (the largest are two archives of about 128 KiB, the
deflate stream of a 128 MiB array of zeros, which git stores in 2 KiB) and
deterministic: NumPy
arrays from a fixed seed, .npy headers and zip archives assembled byte by
byte (so that they can say what no writer would: a header length of
0xFFFFFFF0, a member declaring 5 GiB, ...). cases.json says which case uses
which file and what the binary must answer; run_corpus.py runs them.

The shared sizes: query (B, T, d_model) = (2, 4, 8), key/value S = 6, h = 2,
so d_k = d_v = 4 and every weight is 8 x 8.
"""

import base64
import io
import json
import os
import struct
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "files")
MAGIC = b"\x93NUMPY"
B, T, S, D = 2, 4, 6, 8

rng = np.random.default_rng(20240611)


# ---------------------------------------------------------------------------
# .npy building blocks


def header_text(descr="'<f4'", fortran="False", shape=(B, T, D)):
    shape_s = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_s)


def npy(header, data=b"", version=(1, 0), align=64, length=None):
    """A .npy file with `header` (dict text) verbatim, padded with spaces and a
    newline so that the data starts on an `align`-byte boundary (align=None:
    no padding, no newline). `length` overrides the header-length field."""
    h = header.encode("latin1") if isinstance(header, str) else header
    len_size = 2 if version[0] == 1 else 4
    if align:
        total = len(MAGIC) + 2 + len_size + len(h) + 1
        h += b" " * ((align - total % align) % align) + b"\n"
    n = len(h) if length is None else length
    fmt = "<H" if len_size == 2 else "<I"
    return MAGIC + bytes(version) + struct.pack(fmt, n) + h + data


def npy_of(a, version=(1, 0), align=64):
    """`a` as NumPy writes it, but with a header we control the bytes of."""
    a = np.asarray(a)
    descr = a.dtype.str
    fortran = a.flags.f_contiguous and not a.flags.c_contiguous
    data = a.tobytes(order="F" if fortran else "C")
    return npy(header_text("'%s'" % descr, str(bool(fortran)), a.shape), data, version, align)


def np_save(a):
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# zip building blocks: every size and offset field is ours to set.


class Member:
    def __init__(self, name, data, method=0, declared_size=None, declared_csize=None,
                 crc=None, zip64=False, payload=None, flags=0):
        self.name = name.encode()
        self.data = data  # what the member is meant to hold
        self.method = method  # 0 stored, 8 deflated
        if payload is None:
            if method == 8:
                c = zlib.compressobj(9, zlib.DEFLATED, -15)
                payload = c.compress(data) + c.flush()
            else:
                payload = data
        self.payload = payload  # the bytes actually in the archive
        self.size = len(data) if declared_size is None else declared_size
        self.csize = len(payload) if declared_csize is None else declared_csize
        self.crc = zlib.crc32(data) if crc is None else crc
        self.zip64 = zip64
        self.flags = flags


def zip_bytes(members):
    """A zip archive with fixed timestamps (2024-01-01). zip64 members carry
    their sizes in a zip64 extra field, in both headers."""
    dos_time, dos_date = 0, ((2024 - 1980) << 9) | (1 << 5) | 1
    out = bytearray()
    central = bytearray()
    for m in members:
        offset = len(out)
        if m.zip64:
            extra_local = struct.pack("<HHQQ", 1, 16, m.size, m.csize)
            size32 = csize32 = 0xFFFFFFFF
            version = 45
        else:
            extra_local = b""
            size32, csize32 = m.size, m.csize
            version = 20
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, version, m.flags, m.method, dos_time,
                           dos_date, m.crc, csize32, size32, len(m.name), len(extra_local))
        out += m.name + extra_local + m.payload
        extra_central = struct.pack("<HHQQ", 1, 16, m.size, m.csize) if m.zip64 else b""
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, version, version, m.flags,
                               m.method, dos_time, dos_date, m.crc, csize32, size32, len(m.name),
                               len(extra_central), 0, 0, 0, 0, offset)
        central += m.name + extra_central
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                       cd_offset, 0)
    return bytes(out)


# ---------------------------------------------------------------------------
# The shared valid inputs


def uniform(shape, lo=-1.0, hi=1.0, dtype="<f4"):
    return rng.uniform(lo, hi, shape).astype(dtype)


query = uniform((B, T, D))
key = uniform((B, S, D))
value = uniform((B, S, D))
weights = {
    "W_q": uniform((D, D), -0.5, 0.5),
    "b_q": uniform((D,), -0.1, 0.1),
    "W_k": uniform((D, D), -0.5, 0.5),
    "b_k": uniform((D,), -0.1, 0.1),
    "W_v": uniform((D, D), -0.5, 0.5),
    "b_v": uniform((D,), -0.1, 0.1),
    "W_o": uniform((D, D), -0.5, 0.5),
    "b_o": uniform((D,), -0.1, 0.1),
}


def npz_of(arrays, method=0):
    return zip_bytes([Member(n + ".npy", np_save(a), method) for n, a in arrays.items()])


def with_(base, **changes):
    d = dict(base)
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


files = {}


def add(name, data):
    assert name not in files, name
    files[name] = data if isinstance(data, bytes) else data.encode()


def add_json(name, obj_or_text):
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text, indent=2)
    add(name, text if text.endswith("\n") else text + "\n")


add("q.npy", np_save(query))
add("k.npy", np_save(key))
add("w.npz", npz_of(weights))
add("w_deflated.npz", npz_of(weights, method=8))

# ---------------------------------------------------------------------------
# .npy: malformed preambles

qdata = query.tobytes()
good_header = header_text()
add("npy_empty.npy", b"")
add("npy_5_bytes.npy", MAGIC[:5])
add("npy_magic_only.npy", MAGIC)
add("npy_wrong_magic.npy", b"\x93NUMPZ" + npy(good_header, qdata)[6:])
add("npy_text.npy", b"0.5 0.25 0.125\n")
for major, minor in [(0, 0), (1, 1), (2, 2), (255, 255)]:
    add("npy_version_%d_%d.npy" % (major, minor), npy(good_header, qdata, version=(major, minor)))
add("npy_v1_no_header_length.npy", MAGIC + b"\x01\x00\x76")
add("npy_v2_no_header_length.npy", MAGIC + b"\x02\x00\x76\x00")
add("npy_header_past_eof.npy", npy(good_header, b"", length=1000))
add("npy_v2_header_0xfffffff0.npy", MAGIC + b"\x02\x00" + struct.pack("<I", 0xFFFFFFF0))
add("npy_v3_header_2MiB.npy", MAGIC + b"\x03\x00" + struct.pack("<I", 2 << 20) + b"{" * 64)

# .npy: malformed header dicts
add("npy_header_list.npy", npy("[('descr', '<f4'), ('fortran_order', False)]", qdata))
add("npy_header_empty_dict.npy", npy("{}", qdata))
add("npy_header_unterminated.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 8)", qdata))
add("npy_header_missing_descr.npy", npy("{'fortran_order': False, 'shape': (2, 4, 8), }", qdata))
add("npy_header_missing_shape.npy", npy("{'descr': '<f4', 'fortran_order': False, }", qdata))
add("npy_header_extra_key.npy",
    npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 8), 'align': True, }", qdata))
add("npy_header_duplicate_key.npy",
    npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 8), 'shape': (2, 4, 8), }", qdata))
add("npy_header_nul_byte.npy", npy(good_header[:-1] + "\0}", qdata))
# A descr holding a newline-free terminal escape and a carriage return: the
# message must show them escaped, on one line.
add("npy_header_control_chars.npy", npy(header_text(descr="'<f4\x1b[2J\r'"), qdata))
add("npy_header_unknown_key_control.npy",
    npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 8), 'a\x0bb\x0c': 1}", qdata))
add("npy_fortran_order_int.npy", npy(header_text(fortran="0"), qdata))
add("npy_fortran_order_string.npy", npy(header_text(fortran="'False'"), qdata))
add("npy_fortran_order_lowercase.npy", npy(header_text(fortran="false"), qdata))
add("npy_shape_negative.npy", npy(header_text(shape=("-2", 4, 8)), qdata))
add("npy_shape_float.npy", npy(header_text(shape=("2.0", 4, 8)), qdata))
add("npy_shape_list.npy", npy(good_header.replace("(2, 4, 8)", "[2, 4, 8]"), qdata))
add("npy_shape_not_tuple.npy", npy(header_text(shape=(64,)).replace("(64,)", "(64)"), qdata))
add("npy_shape_dim_too_large.npy", npy(header_text(shape=(2, 4, 10**30)), qdata))
# 2^40 * 2^40 * 4 bytes: the element count alone overflows 64 bits.
add("npy_shape_product_overflow.npy", npy(header_text(shape=(2**40, 2**40, 8)), qdata))
# 2^61 float32 elements: the count fits 64 bits, count x itemsize does not.
add("npy_shape_bytes_overflow.npy", npy(header_text(shape=(2**61, 1, 1)), qdata))
# 2^40 elements (4 TiB) in a 300-byte file: refused by size, nothing allocated.
add("npy_shape_huge_claims.npy", npy(header_text(shape=(2**20, 2**12, 2**8)), qdata))

# .npy: data that disagrees with the header
add("npy_data_one_byte_short.npy", npy(good_header, qdata[:-1]))
add("npy_data_trailing_bytes.npy", npy(good_header, qdata + b"\0"))
add("npy_data_missing.npy", npy(good_header, b""))

# .npy: dtypes we do not read
add("npy_dtype_object.npy", npy(header_text(descr="'|O'"), b"\x80\x03N." * 64))
add("npy_dtype_structured.npy",
    npy(header_text(descr="[('a', '<f4'), ('b', '<f4')]", shape=(B, T, 4)), qdata))
add("npy_dtype_unicode.npy", npy(header_text(descr="'<U8'", shape=(2,)), b"\0" * 64))
add("npy_dtype_bytes.npy", npy(header_text(descr="'|S4'", shape=(2,)), b"\0" * 8))
add("npy_dtype_complex.npy", npy(header_text(descr="'<c8'", shape=(B, T, 4)), qdata))
add("npy_dtype_garbage.npy", npy(header_text(descr="'xyz'"), qdata))
add("npy_dtype_f3.npy", npy(header_text(descr="'<f3'"), qdata))
add("npy_dtype_float128.npy", npy(header_text(descr="'<f16'", shape=(B, T, 2)), qdata))
add("npy_dtype_datetime.npy", npy(header_text(descr="'<M8[s]'", shape=(B, T, 4)), qdata))
add("npy_dtype_int32_query.npy", np_save(np.arange(B * T * D, dtype="<i4").reshape(B, T, D)))
add("npy_dtype_bool_query.npy", np_save(np.ones((B, T, D), dtype=bool)))

# .npy: oddities that are valid and must be accepted
add("npy_ok_unsorted_keys.npy",
    npy("{'shape': (2, 4, 8), 'fortran_order': False, 'descr': '<f4'}", qdata))
add("npy_ok_double_quotes.npy",
    npy('{"descr": "<f4", "fortran_order": False, "shape": (2, 4, 8)}', qdata))
add("npy_ok_align16.npy", npy(good_header, qdata, align=16))
add("npy_ok_no_padding.npy", npy(good_header, qdata, align=None))
# Recent NumPy (1.24 here, and 2.x) pads the dict with 21 spaces so that axis 0
# can grow in place, then aligns to 64.
add("npy_ok_growth_padding.npy", npy(good_header + " " * 21, qdata))
add("npy_ok_version_2.npy", npy(good_header, qdata, version=(2, 0)))
add("npy_ok_version_3.npy", npy(good_header, qdata, version=(3, 0)))
add("npy_ok_big_endian.npy", npy_of(query.astype(">f4")))
add("npy_ok_fortran.npy", npy_of(np.asfortranarray(query)))
add("npy_ok_float16.npy", npy_of(query.astype("<f2")))
add("npy_ok_float64_be_fortran.npy", npy_of(np.asfortranarray(query.astype(">f8"))))
add("npy_ok_2d.npy", np_save(query[0]))
add("npy_ok_numpy_save.npy", np_save(query))

# .npy: shapes that parse but no input can have
add("npy_0d.npy", np_save(np.float32(1.5)))
add("npy_empty_batch.npy", np_save(np.zeros((0, T, D), dtype="<f4")))
add("npy_empty_features.npy", np_save(np.zeros((T, 0), dtype="<f4")))
add("npy_1d.npy", np_save(np.arange(D, dtype="<f4")))
add("npy_4d.npy", np_save(query.reshape(1, B, T, D)))
add("npy_empty_1d.npy", np_save(np.zeros((0,), dtype="<f4")))
add("npy_empty_1d_b.npy", np_save(np.zeros((0,), dtype="<f4")))
add("npy_0d_b.npy", np_save(np.float32(1.5)))
# mha compare: NaN at the same index in both (not close unless --equal_nan, as numpy.allclose).
add("npy_compare_nan_a.npy", np_save(np.array([1.0, np.nan, 3.0], dtype="<f4")))
add("npy_compare_nan_b.npy", np_save(np.array([1.0, np.nan, 3.0], dtype="<f4")))

# ---------------------------------------------------------------------------
# .npz

wbytes = {n: np_save(a) for n, a in weights.items()}


def members(arrays=weights, method=0):
    return [Member(n + ".npy", np_save(a), method) for n, a in arrays.items()]


full = npz_of(weights)
add("npz_empty_file.npz", b"")
add("npz_not_a_zip.npz", b"this is not a zip archive, just text\n" * 4)
add("npz_truncated.npz", full[: len(full) // 2])
add("npz_bad_central_directory.npz",
    full.replace(b"PK\x01\x02", b"PK\x01\x07", 1))
add("npz_empty_archive.npz", zip_bytes([]))
add("npz_member_missing.npz", npz_of(with_(weights, W_o=None)))
add("npz_member_not_npy.npz",
    zip_bytes(members() + [Member("README.txt", b"these are weights\n")]))
add("npz_member_bad_npy.npz",
    zip_bytes([m if m.name != b"W_k.npy" else Member("W_k.npy", b"\x93NUMPY\x09\x00")
               for m in members()]))
add("npz_member_truncated_npy.npz",
    zip_bytes([m if m.name != b"W_v.npy" else Member("W_v.npy", wbytes["W_v"][:-3])
               for m in members()]))
add("npz_duplicate_member.npz", zip_bytes(members() + [Member("W_q.npy", wbytes["W_q"])]))
add("npz_unknown_tensor.npz", npz_of(with_(weights, extra=np.zeros(3, dtype="<f4"))))


def replace_member(name, member, arrays=weights):
    return zip_bytes([m if m.name != name.encode() else member for m in members(arrays)])


# Declared sizes larger than the data: stored (the payload ends early) and
# deflated (the stream inflates to less than declared).
add("npz_stored_size_too_large.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], declared_size=len(wbytes["W_q"]) + 100,
                                     declared_csize=len(wbytes["W_q"]) + 100)))
add("npz_deflated_size_too_large.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], method=8,
                                     declared_size=len(wbytes["W_q"]) + 100)))
add("npz_deflated_size_too_small.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], method=8,
                                     declared_size=len(wbytes["W_q"]) - 100)))
add("npz_bad_crc.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], crc=zlib.crc32(wbytes["W_q"]) ^ 1)))
add("npz_bad_deflate_stream.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], method=8, payload=b"\xff" * 64)))
# Method 6 is PKWARE's "imploded", which no .npz writer uses.
add("npz_unknown_method.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], method=6)))
# Method 99 without its AES extra field: libzip calls the archive inconsistent.
add("npz_method_99_no_aes.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], method=99)))
add("npz_member_name_control.npz",
    zip_bytes(members() + [Member("W_x\r\n.npy", np_save(np.zeros(2, dtype="<f4")))]))
add("npz_encrypted.npz",
    replace_member("W_q.npy", Member("W_q.npy", wbytes["W_q"], flags=1)))

# Zip bombs, by declaration: 1 MiB of zeros deflates to ~1 KiB; the headers
# claim far more. One zip64 member claims 5 GiB (over the 4 GiB member cap);
# three plain members claim 3 GiB each (each under the member cap, 9 GiB in
# total: over the archive cap). Both must be refused before inflating.
zeros = b"\0" * (1 << 20)
add("npz_bomb_member_5GiB.npz",
    replace_member("W_q.npy", Member("W_q.npy", zeros, method=8, declared_size=5 << 30,
                                     zip64=True)))
add("npz_bomb_total_9GiB.npz",
    zip_bytes([Member(n + ".npy", zeros, method=8, declared_size=3 << 30)
               for n in ("W_q", "W_k", "W_v")]))
# The same three members honestly declared (1 MiB each) are accepted by the
# archive reader and refused for what they hold.
add("npz_zeros_honest.npz",
    zip_bytes([Member(n + ".npy", zeros, method=8) for n in ("W_q", "W_k", "W_v")]))

# Members whose .npy headers are read before anything is inflated. A real
# deflate stream of a 128 MiB float32 array of zeros (1, 8192, 4096), about
# 128 KiB, compressed a chunk at a time so the array is never held: named
# "attention" it is no weights layout, named W_q it is over a max_memory of
# 64 MiB; both are refused from the member's first bytes.
def zeros_member(name, shape):
    header = npy(header_text("'<f4'", "False", shape))
    n = 4
    for d in shape:
        n *= d
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload, crc = [c.compress(header)], zlib.crc32(header)
    chunk = b"\0" * (1 << 20)
    for _ in range(n // len(chunk)):
        payload.append(c.compress(chunk))
        crc = zlib.crc32(chunk, crc)
    payload.append(c.flush())
    return Member(name, b"", method=8, declared_size=len(header) + n, crc=crc,
                  payload=b"".join(payload))


huge_shape = (1, 8192, 4096)
add("npz_huge_not_weights.npz", zip_bytes([zeros_member("attention.npy", huge_shape)]))
add("npz_huge_wq.npz", replace_member("W_q.npy", zeros_member("W_q.npy", huge_shape[1:])))
# A header declaring (1, 32768, 16384) float32 (2 GiB) over 128 bytes of data,
# the member's size recorded honestly.
add("npz_header_declares_more.npz",
    replace_member("W_q.npy", Member("W_q.npy", npy(header_text("'<f4'", "False",
                                                                (1, 32768, 16384)),
                                                    b"\0" * 128))))

# Weights whose shapes are one off, a NaN and an Inf.
add("npz_wq_one_column_more.npz", npz_of(with_(weights, W_q=uniform((D, D + 1)))))
add("npz_wk_one_row_less.npz", npz_of(with_(weights, W_k=uniform((D - 1, D)))))
add("npz_bq_one_more.npz", npz_of(with_(weights, b_q=uniform((D + 1,)))))
add("npz_wo_3d.npz", npz_of(with_(weights, W_o=uniform((1, D, D)))))
# Weights of size 0: W_q's rows would make d_model 0, W_o's columns d_out 0.
add("npz_wq_zero_rows.npz", npz_of(with_(weights, W_q=uniform((0, D)))))
add("npz_wo_zero_columns.npz", npz_of(with_(weights, W_o=uniform((D, 0)))))
add("npz_bq_empty.npz", npz_of(with_(weights, b_q=uniform((0,)))))
add("npz_wq_int.npz", npz_of(with_(weights, W_q=np.ones((D, D), dtype="<i4"))))
add("npz_no_biases.npz", npz_of({n: a for n, a in weights.items() if n[0] == "W"}))
w_nan = weights["W_k"].copy()
w_nan[3, 5] = np.nan
add("npz_wk_nan.npz", npz_of(with_(weights, W_k=w_nan)))
b_inf = weights["b_o"].copy()
b_inf[6] = -np.inf
add("npz_bo_inf.npz", npz_of(with_(weights, b_o=b_inf)))
# Every tensor int32 (mha weights convert would move the values as they are).
add("npz_all_int32.npz", npz_of({n: np.round(a * 100).astype("<i4") for n, a in weights.items()}))

# A directory of NAME.npy weights with an empty directory beside it.
for n, a in weights.items():
    add("wdir/%s.npy" % n, np_save(a))
add("wdir_empty/README", "no weights here\n")

# ---------------------------------------------------------------------------
# Inputs that disagree with each other

add("k_batch3.npy", np_save(uniform((3, S, D))))
add("v_batch3.npy", np_save(uniform((3, S, D))))
add("v_len5.npy", np_save(uniform((B, 5, D))))
add("v_len2.npy", np_save(uniform((B, 2, D))))
add("mask_bool_4x4.npy", np_save(np.tril(np.ones((T, T), dtype=bool))))
add("mask_bool_4x5.npy", np_save(np.ones((T, 5), dtype=bool)))
add("mask_bool_3x4x4.npy", np_save(np.ones((3, T, T), dtype=bool)))
add("mask_float_nan.npy", np_save(np.where(np.eye(T, dtype=bool), np.nan, 0.0).astype("<f4")))
add("mask_float_posinf.npy", np_save(np.where(np.eye(T, dtype=bool), np.inf, 0.0).astype("<f4")))
add("kpm_2x5.npy", np_save(np.zeros((B, 5), dtype=bool)))
add("key_lengths_float.npy", np_save(np.array([4.0, 2.0], dtype="<f4")))
add("key_lengths_empty.npy", np_save(np.zeros((0,), dtype="<i8")))
add("key_lengths_3.npy", np_save(np.array([4, 2, 1], dtype="<i8")))
add("key_lengths_2d.npy", np_save(np.array([[4, 2]], dtype="<i8")))
add("key_lengths_negative.npy", np_save(np.array([4, -1], dtype="<i4")))
add("key_lengths_u8_huge.npy", np_save(np.array([4, 2**64 - 1], dtype="<u8")))
add("key_lengths_ok.npy", np_save(np.array([4, 0], dtype="<i2")))

# NaN and Inf in inputs
q_nan = query.copy()
q_nan[1, 2, 3] = np.nan
add("q_nan.npy", np_save(q_nan))
v_inf = value.copy()
v_inf[0, 5, 7] = np.inf
add("v_inf.npy", np_save(v_inf))
q_f16_inf = query.astype("<f2")
q_f16_inf[0, 0, 1] = np.inf
add("q_float16_inf.npy", np_save(q_f16_inf))
# float64 values beyond float32's range become inf when converted.
q_f64_big = query.astype("<f8")
q_f64_big[0, 3, 0] = 1e300
add("q_float64_1e300.npy", np_save(q_f64_big))

# ---------------------------------------------------------------------------
# Numerics that must work: logits around +-1e4 (h = 2, d_k = 4, identity
# weights, zero biases: logit(t, s) = x_t . x_s / 2 over each head's 4
# features). With entries of +-70 the logits are +-9800, and the softmax has
# to subtract the row maximum to stay finite.
eye = np.eye(D, dtype="<f4")
zero = np.zeros(D, dtype="<f4")
add("w_identity.npz", npz_of({"W_q": eye, "b_q": zero, "W_k": eye, "b_k": zero,
                              "W_v": eye, "b_v": zero, "W_o": eye, "b_o": zero}))
signs = np.array([[1, 1, 1, 1, 1, 1, 1, 1],
                  [-1, -1, -1, -1, -1, -1, -1, -1],
                  [1, -1, 1, -1, 1, -1, 1, -1],
                  [-1, 1, 1, -1, -1, 1, 1, -1]], dtype="<f4")
add("q_logits_1e4.npy", np_save((70 * signs)[None].astype("<f4")))
add("q_logits_1e4_f64.npy", np_save((70 * signs)[None].astype("<f8")))
# Entries of +-1e19 are finite, but their float32 logits (2e38 x 4 / 2) are not.
add("q_overflow.npy", np_save((1e19 * signs)[None].astype("<f4")))
# Every entry 1e20: with seed 0's random weights some heads' logits are all
# -inf in float32, which once passed for fully masked rows (zeros, exit 0).
add("q_1e20.npy", np_save(np.full((1, T, D), 1e20, dtype="<f4")))
# Position biases for the variant cases: heads on the wrong axis, an integer
# array, and +inf.
add("bias_bad_shape.npy", np_save(np.zeros((T, 2, T), dtype="<f4")))
add("bias_int.npy", np_save(np.zeros((T, T), dtype="<i4")))
add("bias_inf.npy", np_save(np.where(np.eye(T, dtype=bool), np.inf, 0.0).astype("<f4")))
# One row of the mask is all false: fully masked under every policy.
m = np.ones((T, T), dtype=bool)
m[1, :] = False
add("mask_row1_masked.npy", np_save(m))
m_add = np.zeros((T, T), dtype="<f4")
m_add[2, :] = -np.inf
add("mask_float_row2_neginf.npy", np_save(m_add))

# ---------------------------------------------------------------------------
# Configs (paths relative to tests/bad_inputs, where the cases run)

add_json("cfg_ok.json", {"query": "files/q.npy", "h": 2})
add_json("cfg_ok_comments.json",
         '// a hand-written config\n{\n  "query": "files/q.npy", /* the input */\n'
         '  "h": 2 // two heads\n}\n')
add_json("cfg_syntax_error.json", '{\n  "query": "files/q.npy",\n  "h" 2\n}\n')
add_json("cfg_trailing_comma.json", '{\n  "query": "files/q.npy",\n  "h": 2,\n}\n')
add_json("cfg_trailing_comma_list.json", '{"query": "files/q.npy", "h": 2, "key_lengths": [4, 2,]}\n')
add_json("cfg_duplicate_key.json", '{"query": "files/q.npy", "h": 2, "h": 4}\n')
add_json("cfg_unknown_key.json", {"query": "files/q.npy", "h": 2, "d_modle": 8})
add_json("cfg_unknown_key_far.json", {"query": "files/q.npy", "h": 2, "colour": "blue"})
add_json("cfg_h_string.json", {"query": "files/q.npy", "h": "2"})
add_json("cfg_h_float.json", '{"query": "files/q.npy", "h": 2.0}\n')
add_json("cfg_h_bool.json", {"query": "files/q.npy", "h": True})
add_json("cfg_h_negative.json", {"query": "files/q.npy", "h": -1})
add_json("cfg_h_zero.json", {"query": "files/q.npy", "h": 0})
add_json("cfg_h_3e9.json", '{"query": "files/q.npy", "h": 3e9}\n')
add_json("cfg_h_3000000000.json", '{"query": "files/q.npy", "h": 3000000000}\n')
add_json("cfg_h_1e400.json", '{"query": "files/q.npy", "h": 1e400}\n')
add_json("cfg_h_huge_int.json", '{"query": "files/q.npy", "h": 123456789012345678901234567890}\n')
add_json("cfg_not_object.json", '[{"h": 2}]\n')
add_json("cfg_empty.json", "")
add_json("cfg_no_h.json", {"query": "files/q.npy"})
add_json("cfg_no_seq_len.json", {"h": 2, "d_model": 8})
# Sweep files (mha sweep): grids whose runs are counted before any is expanded.
sweep_base = {"query": "files/q.npy", "h": 2}
add_json("sweep_grid_1000x1000.json", {"base": sweep_base, "grid": {"seed": list(range(1000)), "batch": list(range(1, 1001))}})
add("sweep_list_100001.json", '{"base": {"query": "files/q.npy", "h": 2}, "grid": {"seed": [' + ",".join(map(str, range(100001))) + "]}}\n")
add("sweep_base_list_x400.json", json.dumps({"base": dict(sweep_base, key_lengths=[1] * 100000), "grid": {"seed": list(range(400))}}) + "\n")
add_json("sweep_zip_500_grid_500.json", {"base": sweep_base, "grid": {"seed": list(range(500))}, "zip": [{"batch": list(range(1, 501)), "seq_len": list(range(1, 501))}]})
add_json("cfg_causal_word.json", {"query": "files/q.npy", "h": 2, "causal": "upper"})
add_json("cfg_bool_as_string.json", {"query": "files/q.npy", "h": 2, "save_attention": "yes"})
add_json("cfg_scale_zero.json", {"query": "files/q.npy", "h": 2, "scale": 0})
add_json("cfg_seed_negative.json", {"query": "files/q.npy", "h": 2, "seed": -1})
add_json("cfg_dtype_float16.json", {"query": "files/q.npy", "h": 2, "dtype": "float16"})
add_json("cfg_key_lengths_string_list.json", {"query": "files/q.npy", "h": 2,
                                               "key_lengths": ["4", "2"]})
add_json("cfg_repeat_zero.json", {"query": "files/q.npy", "h": 2, "repeat": 0})
add_json("cfg_repeat_negative.json", {"query": "files/q.npy", "h": 2, "repeat": -3})
add_json("cfg_repeat_float.json", '{"query": "files/q.npy", "h": 2, "repeat": 2.5}\n')
add_json("cfg_repeat_string.json", {"query": "files/q.npy", "h": 2, "repeat": "5"})
add_json("cfg_repeat_too_many.json", {"query": "files/q.npy", "h": 2, "repeat": 1001})
add_json("cfg_repeat_ok.json", {"query": "files/q.npy", "h": 2, "repeat": 3})
add_json("cfg_query_number.json", {"query": 5, "h": 2})
add_json("cfg_nested_duplicate.json", '{"query": "files/q.npy", "h": 2, "extra": {"a": 1, "a": 2}}\n')


# ---------------------------------------------------------------------------
# Transformer layers (docs/layers.md): a 2-layer encoder's native weights
# (d_model 8, h 2, d_ff 16), the same without one tensor, a decoder's, and a
# memory of the wrong width. Their own generator, so that the files above keep
# their bytes.

layer_rng = np.random.default_rng(20261124)


def layer_weights(layers, decoder=False, d=D, d_ff=16):
    w = {}
    for n in range(layers):
        L = "layers.%d." % n
        for block in ["self_attn."] + (["cross_attn."] if decoder else []):
            for name in ("W_q", "W_k", "W_v", "W_o"):
                w[L + block + name] = layer_rng.uniform(-0.5, 0.5, (d, d)).astype("<f4")
            for name in ("b_q", "b_k", "b_v", "b_o"):
                w[L + block + name] = np.zeros(d, "<f4")
        w[L + "ffn.W_1"] = layer_rng.uniform(-0.5, 0.5, (d, d_ff)).astype("<f4")
        w[L + "ffn.b_1"] = np.zeros(d_ff, "<f4")
        w[L + "ffn.W_2"] = layer_rng.uniform(-0.5, 0.5, (d_ff, d)).astype("<f4")
        w[L + "ffn.b_2"] = np.zeros(d, "<f4")
        for norm in ["norm1", "norm2"] + (["norm3"] if decoder else []):
            w[L + norm + ".gamma"] = np.ones(d, "<f4")
            w[L + norm + ".beta"] = np.zeros(d, "<f4")
    return w


add("layers_enc2.npz", npz_of(layer_weights(2)))
add("layers_enc2_missing_norm.npz", npz_of(with_(layer_weights(2), **{"layers.1.norm2.beta": None})))
add("layers_dec1.npz", npz_of(layer_weights(1, decoder=True)))
add("memory_width6.npy", np_save(layer_rng.uniform(0, 1, (B, S, 6)).astype("<f4")))


# ---------------------------------------------------------------------------
# .safetensors (mha/io/safetensors.hpp): a good file of the attention weights
# above, then hostile headers and offsets, each assembled byte by byte.


def safetensors(header, data=b"", length=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def st_tensors(arrays):
    header, blobs, at = {}, [], 0
    for name, a in arrays.items():
        raw = np.asarray(a, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    return header, b"".join(blobs)


st_header, st_data = st_tensors(weights)
add("st_good.safetensors", safetensors(st_header, st_data))
add("st_header_100GiB.safetensors", safetensors(b"{}", b"", length=100 << 30))
add("st_header_past_eof.safetensors", safetensors(b'{"W_q": {}}', b"", length=4096))
add("st_header_not_json.safetensors", safetensors(b"{W_q: 1}"))
add("st_header_list.safetensors", safetensors(b"[1, 2]"))
add("st_dtype_i8.safetensors", safetensors(with_(st_header, W_q=dict(st_header["W_q"], dtype="I8")), st_data))
add("st_offsets_past_data.safetensors",
    safetensors(with_(st_header, W_o=dict(st_header["W_o"], data_offsets=[st_header["W_o"]["data_offsets"][0], len(st_data) + 4])), st_data))
add("st_shape_disagrees.safetensors", safetensors(with_(st_header, W_q=dict(st_header["W_q"], shape=[8, 9])), st_data))
add("st_overlap.safetensors",
    safetensors(with_(st_header, W_k=dict(st_header["W_k"], data_offsets=st_header["W_q"]["data_offsets"])), st_data))
add("st_gap.safetensors", safetensors(st_header, st_data + b"\0" * 16))
add("st_too_short.safetensors", b"\x08\0\0")


# Tokenizers (mha tokenize): a small valid byte-level BPE tokenizer.json and broken ones.
tok_good = {
    "version": "1.0", "added_tokens": [{"id": 5, "content": "<|end|>", "special": True}],
    "normalizer": None, "post_processor": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4},
              "merges": ["a b", "\u0120 ab"]},
}
add_json("tok_good/tokenizer.json", tok_good)
add_json("tok_texts.json", ["ab ab<|end|>", "ba"])
add("tok_texts_not_json.json", "[\"ab\",]\n")
add_json("tok_texts_object.json", {"text": "ab"})
add_json("tok_texts_number.json", ["ab", 3])
add("tok_texts_not_utf8.json", b'["ab", "a\xffb"]\n')
add("tok_not_json.json", "{model: 1}\n")
add_json("tok_list.json", [1, 2])
# Unigram (SentencePiece's, T5's) and its precompiled character map: a valid one, then broken ones.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
import make_unigram  # noqa: E402  (the double-array encoder of the Unigram tests)
tok_unigram = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
               "post_processor": None,
               "model": {"type": "Unigram", "unk_id": 0,
                         "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -2.0], ["ab", -2.5]]}}
add_json("tok_unigram.json", tok_unigram)
uni_vocab = tok_unigram["model"]["vocab"]
add_json("tok_unigram_score_string.json", with_(tok_unigram, model=dict(tok_unigram["model"], vocab=uni_vocab + [["c", "-1"]])))
add_json("tok_unigram_entry_string.json", with_(tok_unigram, model=dict(tok_unigram["model"], vocab=uni_vocab + ["c"])))
add_json("tok_unigram_piece_number.json", with_(tok_unigram, model=dict(tok_unigram["model"], vocab=uni_vocab + [[3, -1.0]])))
add_json("tok_unigram_duplicate.json", with_(tok_unigram, model=dict(tok_unigram["model"], vocab=uni_vocab + [["a", -3.0]])))
add_json("tok_unigram_unk_id.json", with_(tok_unigram, model=dict(tok_unigram["model"], unk_id=4)))
add_json("tok_unigram_score_overflow.json",
         json.dumps(tok_unigram).replace('["b", -2.0]', '["b", -1e999]'))
assert "1e999" in files["tok_unigram_score_overflow.json"].decode()
charsmap = make_unigram.charsmap_blob({"a": "\u00e9", "b": ""})  # "" at byte 0, "é" at 1


def with_charsmap(blob_or_text):
    text = blob_or_text if isinstance(blob_or_text, str) else base64.b64encode(blob_or_text).decode()
    return with_(tok_unigram, normalizer={"type": "Precompiled", "precompiled_charsmap": text})


def charsmap_units(blob, change):
    """The blob with each unit u of its trie replaced by change(u)."""
    n = struct.unpack("<I", blob[:4])[0] // 4
    units = struct.unpack(f"<{n}I", blob[4:4 + 4 * n])
    return blob[:4] + struct.pack(f"<{n}I", *map(change, units)) + blob[4 + 4 * n:]


add_json("tok_precompiled_ok.json", with_charsmap(charsmap))
add_json("tok_precompiled_base64.json", with_charsmap("AAA*"))
add_json("tok_precompiled_truncated.json", with_charsmap(charsmap[:len(charsmap) // 2]))
add_json("tok_precompiled_trie_past_end.json", with_charsmap(struct.pack("<I", 1 << 20) + charsmap[4:]))
# The leaf of "a" (the only value that is not 0) points past the 4 bytes of normalized strings.
add_json("tok_precompiled_value_past_end.json",
         with_charsmap(charsmap_units(charsmap, lambda u: 1000 | 1 << 31 if u == 1 | 1 << 31 else u)))
# A node with a value whose offset sends its value's unit past the trie.
add_json("tok_precompiled_offset_past_end.json",
         with_charsmap(charsmap_units(charsmap, lambda u: (u & 0x3FF) | 0x1FFFFF << 10 if (u >> 8) & 1 and not u >> 31 else u)))
add_json("tok_precompiled_not_utf8.json", with_charsmap(charsmap[:-3] + b"\xe9\0"))
add_json("tok_no_vocab.json", with_(tok_good, model={"type": "BPE", "merges": []}))
add_json("tok_vocab_id_string.json", with_(tok_good, model=dict(tok_good["model"], vocab={"a": "0"})))
add_json("tok_bad_merge.json", with_(tok_good, model=dict(tok_good["model"], merges=["a b", 7])))
add_json("tok_precompiled.json", with_(tok_good, normalizer={"type": "Precompiled", "precompiled_charsmap": "AA=="}))
add_json("tok_bad_regex.json", with_(tok_good, pre_tokenizer={"type": "Split", "pattern": {"Regex": "(ab"}, "behavior": "Isolated"}))
add_json("tok_template_unknown.json", with_(tok_good, post_processor={"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}))
add_json("tok_added_no_id.json", with_(tok_good, added_tokens=[{"content": "<x>"}]))


def write_all(check):
    bad = []
    for name, data in sorted(files.items()):
        path = os.path.join(FILES, name)
        if check:
            try:
                with open(path, "rb") as f:
                    if f.read() != data:
                        bad.append(name + " differs")
            except OSError:
                bad.append(name + " is missing")
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    if check:
        known = set(files)
        for root, _, names in os.walk(FILES):
            for n in names:
                rel = os.path.relpath(os.path.join(root, n), FILES)
                if rel not in known:
                    bad.append(rel + " is not made by this script")
        for b in bad:
            print("make_corpus.py --check: " + b)
        return 1 if bad else 0
    total = sum(len(d) for d in files.values())
    print("wrote %d files (%d bytes) to %s" % (len(files), total, FILES))
    return 0


if __name__ == "__main__":
    sys.exit(write_all("--check" in sys.argv[1:]))
