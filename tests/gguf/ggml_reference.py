#!/usr/bin/python3
"""NumPy dequantization of ggml's block types, written from the block structs of ggml's
src/ggml-common.h and the formulas they are documented with (x = d * q, x = d * q + m,
x = a * q + b for the k-quants), vectorised over blocks and values, not a line-by-line copy of
ggml-quants.c's loops. Every product and sum is a float32 operation, in the order ggml's
reference dequantize_row_* rounds them, so the C++ dequantizers are held to it bit for bit.

Block layouts (bytes, little-endian; ggml_half = IEEE float16):
  Q4_0 (32 values, 18 B)  d:half, qs[16]        x_j = (nibble_j - 8) * d
  Q4_1 (32, 20)           d, m:half, qs[16]     x_j = nibble_j * d + m
  Q5_0 (32, 22)           d, qh[4], qs[16]      x_j = ((nibble_j | bit_j(qh) << 4) - 16) * d
  Q5_1 (32, 24)           d, m, qh[4], qs[16]   x_j = (nibble_j | bit_j(qh) << 4) * d + m
  Q8_0 (32, 34)           d, qs:int8[32]        x_j = qs_j * d
    nibble_j is the low nibble of qs[j] for j < 16, the high nibble of qs[j - 16] after.
  Q2_K (256, 84)   scales[16], qs[64], d, dmin      x = (d * (sc & 15)) * q - dmin * (sc >> 4)
  Q3_K (256, 110)  hmask[32], qs[64], scales[12], d x = (d * (s6 - 32)) * (q - 4 * !hbit)
  Q4_K (256, 144)  d, dmin, scales[12], qs[128]     x = (d * s6) * q - dmin * m6
  Q5_K (256, 176)  d, dmin, scales[12], qh[32], qs[128]   Q4_K with a fifth bit from qh
  Q6_K (256, 210)  ql[128], qh[64], scales:int8[16], d   x = (d * sc) * (q - 32)
  Q8_K (256, 292)  d:float32, qs:int8[256], bsums:int16[16]   x = d * qs
  The k-quant super-blocks of 256 hold 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K: value v uses
  scale v // 16) or 8 of 32 (Q4_K, Q5_K: scale and min v // 32, 6 bits each, packed in 12
  bytes). Where the 2-bit quants of Q2_K/Q3_K sit: value v = 128 h + 32 j + 16 s + l takes
  bits 2j..2j+1 of qs[32 h + 16 s + l]; Q3_K's high bit is bit 4h + j of hmask[16 s + l].
  Q4_K/Q5_K: value v = 64 c + 32 t + l is the low (t = 0) or high (t = 1) nibble of
  qs[32 c + l]; Q5_K's fifth bit is bit 2c + t of qh[l]. Q6_K: value v = 128 h + 32 g + l has
  its low 4 bits in ql[64 h + 32 (g & 1) + l] (low nibble for g < 2, high after) and its high
  2 bits at bits 2g..2g+1 of qh[32 h + l].
"""
import numpy as np

BLOCKS = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20),
          "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34), "Q2_K": (256, 84),
          "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
          "Q8_K": (256, 292)}
F32 = np.float32


def half(b, at):
    """The float16 at byte `at` of each block (rows of b), as float32 column (nb, 1)."""
    return b[:, at:at + 2].copy().view("<f2").astype(F32)


def nibbles(qs):
    """(nb, 16) bytes -> (nb, 32): the low nibbles, then the high ones."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def bits_of(qh):
    """(nb, 4) bytes, a little-endian uint32 each -> (nb, 32) bits, bit j first."""
    word = qh.copy().view("<u4").astype(np.uint64)  # (nb, 1)
    return ((word >> np.arange(32, dtype=np.uint64)) & 1).astype(np.int32)


def q4_0(b):
    return (nibbles(b[:, 2:18]) - 8).astype(F32) * half(b, 0)


def q4_1(b):
    return nibbles(b[:, 4:20]).astype(F32) * half(b, 0) + half(b, 2)


def q5_0(b):
    return ((nibbles(b[:, 6:22]) | bits_of(b[:, 2:6]) << 4) - 16).astype(F32) * half(b, 0)


def q5_1(b):
    return (nibbles(b[:, 8:24]) | bits_of(b[:, 4:8]) << 4).astype(F32) * half(b, 0) + half(b, 2)


def q8_0(b):
    return b[:, 2:34].copy().view(np.int8).astype(F32) * half(b, 0)


def two_bit_quants(qs):
    """(nb, 64) bytes -> (nb, 256) 2-bit values in the Q2_K/Q3_K order above."""
    v = np.arange(256)
    h, j, s, l = v // 128, (v % 128) // 32, (v % 32) // 16, v % 16
    return ((qs[:, 32 * h + 16 * s + l] >> (2 * j)) & 3).astype(np.int32)


def q2_k(b):
    sc = b[:, 0:16].astype(np.int32)
    d, dmin = half(b, 80), half(b, 82)
    scale = np.repeat(d * (sc & 15).astype(F32), 16, axis=1)
    minimum = np.repeat(dmin * (sc >> 4).astype(F32), 16, axis=1)
    return scale * two_bit_quants(b[:, 16:80]).astype(F32) - minimum


def q3_k_scales(s):
    """(nb, 12) bytes -> (nb, 16) 6-bit scales: low 4 bits from the nibbles of bytes 0-7 (low
    nibbles for scales 0-7, high for 8-15), high 2 bits from bits 2(k // 4) of byte 8 + k % 4."""
    k = np.arange(16)
    low = np.where(k < 8, s[:, k % 8] & 0x0F, s[:, k % 8] >> 4)
    high = (s[:, 8 + k % 4] >> (2 * (k // 4))) & 3
    return (low | high << 4).astype(np.int32)


def q3_k(b):
    hm, qs, scales, d = b[:, 0:32], b[:, 32:96], b[:, 96:108], half(b, 108)
    v = np.arange(256)
    h, j, s, l = v // 128, (v % 128) // 32, (v % 32) // 16, v % 16
    hbit = (hm[:, 16 * s + l] >> (4 * h + j)) & 1
    q = two_bit_quants(qs) - np.where(hbit == 1, 0, 4)
    scale = np.repeat(d * (q3_k_scales(scales) - 32).astype(F32), 16, axis=1)
    return scale * q.astype(F32)


def k4_scales_mins(s):
    """(nb, 12) bytes -> two (nb, 8) arrays of 6-bit scales and mins: sub-blocks 0-3 in the
    low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in the nibbles of bytes 8-11 with
    their top 2 bits in the top bits of bytes 0-3 (scales) and 4-7 (mins)."""
    s = s.astype(np.int32)
    lo_sc, lo_m = s[:, 0:4] & 63, s[:, 4:8] & 63
    hi_sc = (s[:, 8:12] & 0x0F) | (s[:, 0:4] >> 6) << 4
    hi_m = (s[:, 8:12] >> 4) | (s[:, 4:8] >> 6) << 4
    return np.concatenate([lo_sc, hi_sc], axis=1), np.concatenate([lo_m, hi_m], axis=1)


def four_bit_quants(qs):
    """(nb, 128) bytes -> (nb, 256): value 64c + 32t + l is nibble t of qs[32c + l]."""
    v = np.arange(256)
    c, t, l = v // 64, (v % 64) // 32, v % 32
    return ((qs[:, 32 * c + l] >> (4 * t)) & 0x0F).astype(np.int32)


def k4_affine(b, q, d, dmin, scales):
    sc, m = k4_scales_mins(scales)
    scale = np.repeat(d * sc.astype(F32), 32, axis=1)
    minimum = np.repeat(dmin * m.astype(F32), 32, axis=1)
    return scale * q.astype(F32) - minimum


def q4_k(b):
    return k4_affine(b, four_bit_quants(b[:, 16:144]), half(b, 0), half(b, 2), b[:, 4:16])


def q5_k(b):
    qh = b[:, 16:48]
    v = np.arange(256)
    bit = (qh[:, v % 32] >> (v // 32)) & 1  # bit 2c + t = v // 32
    q = four_bit_quants(b[:, 48:176]) + 16 * bit.astype(np.int32)
    return k4_affine(b, q, half(b, 0), half(b, 2), b[:, 4:16])


def q6_k(b):
    ql, qh = b[:, 0:128], b[:, 128:192]
    sc = b[:, 192:208].copy().view(np.int8).astype(F32)
    d = half(b, 208)
    v = np.arange(256)
    h, g, l = v // 128, (v % 128) // 32, v % 32
    low = (ql[:, 64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0x0F
    high = (qh[:, 32 * h + l] >> (2 * g)) & 3
    q = (low | high << 4).astype(np.int32) - 32
    return np.repeat(d * sc, 16, axis=1) * q.astype(F32)


def q8_k(b):
    d = b[:, 0:4].copy().view("<f4").astype(F32)
    return d * b[:, 4:260].copy().view(np.int8).astype(F32)


BLOCK_DEQUANTIZERS = {"Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1, "Q8_0": q8_0,
                      "Q2_K": q2_k, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k,
                      "Q8_K": q8_k}


def dequantize(type_name, raw):
    """The float32 values (flat, in the file's order) held by `raw`, bytes of `type_name`."""
    if type_name == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(F32)
    if type_name == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(F32)
    if type_name == "BF16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(F32)
    n, size = BLOCKS[type_name]
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)
    out = BLOCK_DEQUANTIZERS[type_name](b)
    assert out.dtype == F32 and out.shape == (b.shape[0], n), (type_name, out.dtype, out.shape)
    return out.reshape(-1)


# Where each block type keeps its float16 scales (byte offsets), and Q8_K its float32 one.
HALF_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
               "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def finite_halves(rng, n):
    """n random float16 bit patterns that are finite (any sign, subnormals included)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    exponent = (bits >> 10) & 0x1F
    bits = np.where(exponent == 0x1F, bits & ~np.uint32(0x4000), bits)  # exponent 31 -> 15
    return bits.astype("<u2")


def random_blocks(type_name, n_values, rng):
    """Bytes of n_values values of `type_name`: random bits everywhere (dequantization is defined
    for any), the scales random finite float16 (Q8_K: a finite float32); F16/BF16/F32 values
    random finite bit patterns."""
    if type_name == "F32":
        return rng.standard_normal(n_values).astype("<f4").tobytes()
    if type_name == "F16":
        return finite_halves(rng, n_values).tobytes()
    if type_name == "BF16":
        bits = rng.integers(0, 1 << 16, size=n_values, dtype=np.uint32)
        exponent = (bits >> 7) & 0xFF
        bits = np.where(exponent == 0xFF, bits & ~np.uint32(0x4000), bits)
        return bits.astype("<u2").tobytes()
    n, size = BLOCKS[type_name]
    assert n_values % n == 0, (type_name, n_values)
    b = rng.integers(0, 256, size=(n_values // n, size), dtype=np.uint8)
    for at in HALF_FIELDS.get(type_name, []):
        b[:, at:at + 2] = finite_halves(rng, b.shape[0]).view(np.uint8).reshape(-1, 2)
    if type_name == "Q8_K":
        d = (rng.standard_normal(b.shape[0]) * 0.01).astype("<f4")
        b[:, 0:4] = d.view(np.uint8).reshape(-1, 4)
    return b.tobytes()
