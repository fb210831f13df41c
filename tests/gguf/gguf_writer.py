#!/usr/bin/python3
"""A small GGUF writer, following ggml's docs/gguf.md (the "File Structure" section), not this
tool's reader. Little-endian throughout:

  uint32 magic "GGUF", uint32 version (2 or 3), uint64 tensor_count, uint64 metadata_kv_count
  metadata_kv_count x (string key, uint32 value_type, value)
  tensor_count x (string name, uint32 n_dimensions, uint64 dimensions[n], uint32 ggml_type,
                  uint64 offset)
  0x00 padding to a multiple of ALIGNMENT (general.alignment, 32 when absent)
  tensor_data: each tensor at its offset (relative to here), a multiple of ALIGNMENT; the space
  between tensors padded with 0x00 to ALIGNMENT

A string is a uint64 byte length and the UTF-8 bytes (no terminator); an array is a uint32
element type, a uint64 element count and the elements. dimensions[0] is the innermost axis (the
row length): a NumPy array of shape (out, in) has dimensions [in, out].

  write(path, metadata=[("general.architecture", "string", "llama"),
                        ("tokens", ("array", "string"), ["a", "b"])],
        tensors=[("w", TYPES["Q4_0"], [64, 3], raw_bytes)])
"""
import struct

# gguf_metadata_value_type
VALUE_TYPES = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5,
               "float32": 6, "bool": 7, "string": 8, "array": 9, "uint64": 10, "int64": 11,
               "float64": 12}
SCALAR_FORMATS = {"uint8": "<B", "int8": "<b", "uint16": "<H", "int16": "<h", "uint32": "<I",
                  "int32": "<i", "float32": "<f", "bool": "<B", "uint64": "<Q", "int64": "<q",
                  "float64": "<d"}

# ggml_type (docs/gguf.md's enum): number, values per block, bytes per block (ggml-common.h)
TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9,
         "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15, "IQ2_XXS": 16,
         "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22,
         "IQ4_XS": 23, "I8": 24, "I16": 25, "I32": 26, "I64": 27, "F64": 28, "IQ1_M": 29,
         "BF16": 30, "TQ1_0": 34, "TQ2_0": 35, "MXFP4": 39}
BLOCKS = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20),
          "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34), "Q2_K": (256, 84),
          "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
          "Q8_K": (256, 292), "IQ2_XXS": (256, 66), "IQ4_NL": (32, 18), "TQ2_0": (256, 66)}


def gguf_string(s):
    b = s if isinstance(s, bytes) else s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def scalar(kind, v):
    if kind == "string":
        return gguf_string(v)
    if kind == "bool":
        return struct.pack("<B", 1 if v else 0)
    return struct.pack(SCALAR_FORMATS[kind], v)


def value(kind, v):
    """The bytes of a value of `kind`: "uint32", ..., or ("array", element kind)."""
    if isinstance(kind, tuple):
        _, element = kind
        return (struct.pack("<I", VALUE_TYPES[element]) + struct.pack("<Q", len(v)) +
                b"".join(scalar(element, x) for x in v))
    return scalar(kind, v)


def kv(key, kind, v):
    type_number = VALUE_TYPES["array"] if isinstance(kind, tuple) else VALUE_TYPES[kind]
    return gguf_string(key) + struct.pack("<I", type_number) + value(kind, v)


def pad_to(n, alignment):
    return (alignment - n % alignment) % alignment


def encode(metadata=(), tensors=(), version=3, alignment=None):
    """The bytes of a GGUF file. metadata: [(key, kind, value)]; tensors: [(name, ggml type
    number, dims innermost first, raw bytes)], laid out in this order at aligned offsets.
    alignment: written as general.alignment (uint32) when given, else the default 32."""
    metadata = list(metadata)
    if alignment is not None:
        metadata.append(("general.alignment", "uint32", alignment))
    align = 32 if alignment is None else alignment
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, kind, v in metadata:
        out += kv(key, kind, v)
    offsets, at = [], 0
    for _, _, _, raw in tensors:
        offsets.append(at)
        at += len(raw) + pad_to(len(raw), align)
    for (name, type_number, dims, raw), offset in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", type_number, offset)
    if tensors:
        out += b"\0" * pad_to(len(out), align)
    for _, _, _, raw in tensors:
        out += raw + b"\0" * pad_to(len(raw), align)
    return bytes(out)


def write(path, metadata=(), tensors=(), version=3, alignment=None):
    data = encode(metadata, tensors, version, alignment)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)
