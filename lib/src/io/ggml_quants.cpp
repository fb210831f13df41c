#include "mha/io/ggml_quants.hpp"

#include <cstring>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"

// Each dequantizer is a transcription of ggml's dequantize_row_* of
// src/ggml-quants.c, reading the block's fields at their byte offsets in
// src/ggml-common.h's structs (little-endian, as GGUF stores them) instead of
// through the structs, so that no alignment or host byte order is assumed.
// Plain scalar loops: correctness first; a vectorized path, if one is ever
// needed, is held against these.

namespace mha {
namespace {

constexpr std::size_t kQK = 32;     // QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0
constexpr std::size_t kQK_K = 256;  // a k-quant super-block

// Indexed by type number; a null name marks a number that is not a type.
constexpr GgmlTypeInfo kTypes[] = {
    {"F32", 1, 4, true},          // 0
    {"F16", 1, 2, true},          // 1
    {"Q4_0", 32, 18, true},       // 2: d, qs[16]
    {"Q4_1", 32, 20, true},       // 3: d, m, qs[16]
    {nullptr, 0, 0, false},       // 4: Q4_2, removed
    {nullptr, 0, 0, false},       // 5: Q4_3, removed
    {"Q5_0", 32, 22, true},       // 6: d, qh[4], qs[16]
    {"Q5_1", 32, 24, true},       // 7: d, m, qh[4], qs[16]
    {"Q8_0", 32, 34, true},       // 8: d, qs[32]
    {"Q8_1", 32, 36, false},      // 9: d, s, qs[32]
    {"Q2_K", 256, 84, true},      // 10: scales[16], qs[64], d, dmin
    {"Q3_K", 256, 110, true},     // 11: hmask[32], qs[64], scales[12], d
    {"Q4_K", 256, 144, true},     // 12: d, dmin, scales[12], qs[128]
    {"Q5_K", 256, 176, true},     // 13: d, dmin, scales[12], qh[32], qs[128]
    {"Q6_K", 256, 210, true},     // 14: ql[128], qh[64], scales[16], d
    {"Q8_K", 256, 292, true},     // 15: float d, qs[256], bsums[16] (int16)
    {"IQ2_XXS", 256, 66, false},  // 16
    {"IQ2_XS", 256, 74, false},   // 17
    {"IQ3_XXS", 256, 98, false},  // 18
    {"IQ1_S", 256, 50, false},    // 19
    {"IQ4_NL", 32, 18, false},    // 20
    {"IQ3_S", 256, 110, false},   // 21
    {"IQ2_S", 256, 82, false},    // 22
    {"IQ4_XS", 256, 136, false},  // 23
    {"I8", 1, 1, false},          // 24
    {"I16", 1, 2, false},         // 25
    {"I32", 1, 4, false},         // 26
    {"I64", 1, 8, false},         // 27
    {"F64", 1, 8, false},         // 28
    {"IQ1_M", 256, 56, false},    // 29
    {"BF16", 1, 2, true},         // 30
    {nullptr, 0, 0, false},       // 31: Q4_0_4_4, removed
    {nullptr, 0, 0, false},       // 32: Q4_0_4_8, removed
    {nullptr, 0, 0, false},       // 33: Q4_0_8_8, removed
    {"TQ1_0", 256, 54, false},    // 34
    {"TQ2_0", 256, 66, false},    // 35
    {nullptr, 0, 0, false},       // 36: IQ4_NL_4_4, removed
    {nullptr, 0, 0, false},       // 37: IQ4_NL_4_8, removed
    {nullptr, 0, 0, false},       // 38: IQ4_NL_8_8, removed
    {"MXFP4", 32, 17, false},     // 39
    {"NVFP4", 64, 36, false},     // 40
    {"Q1_0", 128, 18, false},     // 41
    {"Q2_0", 64, 18, false},      // 42
};
constexpr std::uint32_t kTypeCount = sizeof kTypes / sizeof kTypes[0];

// The numbers ggml gave types it has since removed.
constexpr struct {
  std::uint32_t number;
  const char* name;
} kRemoved[] = {{4, "Q4_2"},      {5, "Q4_3"},        {31, "Q4_0_4_4"},   {32, "Q4_0_4_8"},
                {33, "Q4_0_8_8"}, {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}};

std::uint32_t u32_at(const unsigned char* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

// ggml_half (IEEE binary16) at p, exactly as float (GGML_FP16_TO_FP32).
float f16_at(const unsigned char* p) {
  return half_to_float(static_cast<std::uint16_t>(p[0] | p[1] << 8));
}

float f32_of_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The plain types, a value per "block".
void f32(const unsigned char* b, std::size_t n, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = f32_of_bits(u32_at(b + 4 * i));
}
void f16(const unsigned char* b, std::size_t n, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = f16_at(b + 2 * i);
}
void bf16(const unsigned char* b, std::size_t n, float* y) {  // float32's upper half: exact
  for (std::size_t i = 0; i < n; ++i)
    y[i] = f32_of_bits(std::uint32_t{b[2 * i]} << 16 | std::uint32_t{b[2 * i + 1]} << 24);
}

// Q4_0 (32 values, 18 bytes): y = (nibble - 8) * d; the low nibbles of qs
// are values 0..15, the high ones 16..31.
void q4_0(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 18, y += kQK) {
    const float d = f16_at(b);
    const unsigned char* qs = b + 2;
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + kQK / 2] = static_cast<float>(x1) * d;
    }
  }
}

// Q4_1 (32 values, 20 bytes): y = nibble * d + m.
void q4_1(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 20, y += kQK) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const unsigned char* qs = b + 4;
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      const int x0 = qs[j] & 0x0F;
      const int x1 = qs[j] >> 4;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kQK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

// Q5_0 (32 values, 22 bytes): y = (nibble | fifth bit << 4) - 16) * d; bit j
// of qh is value j's fifth bit.
void q5_0(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 22, y += kQK) {
    const float d = f16_at(b);
    const std::uint32_t qh = u32_at(b + 2);
    const unsigned char* qs = b + 6;
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      const std::uint32_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const std::uint32_t xh_1 = (qh >> (j + 12)) & 0x10;
      const int x0 = static_cast<int>((qs[j] & 0x0Fu) | xh_0) - 16;
      const int x1 = static_cast<int>((qs[j] >> 4) | xh_1) - 16;
      y[j] = static_cast<float>(x0) * d;
      y[j + kQK / 2] = static_cast<float>(x1) * d;
    }
  }
}

// Q5_1 (32 values, 24 bytes): y = (nibble | fifth bit << 4) * d + m.
void q5_1(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 24, y += kQK) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const std::uint32_t qh = u32_at(b + 4);
    const unsigned char* qs = b + 8;
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      const std::uint32_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const std::uint32_t xh_1 = (qh >> (j + 12)) & 0x10;
      const int x0 = static_cast<int>((qs[j] & 0x0Fu) | xh_0);
      const int x1 = static_cast<int>((qs[j] >> 4) | xh_1);
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kQK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

// Q8_0 (32 values, 34 bytes): y = int8 * d.
void q8_0(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 34, y += kQK) {
    const float d = f16_at(b);
    for (std::size_t j = 0; j < kQK; ++j)
      y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
  }
}

// Q2_K (256 values, 84 bytes): 16 sub-blocks of 16, each with a 4-bit scale
// (low nibble of scales[is]) and a 4-bit min (high nibble); y = d * scale *
// q - dmin * min, q two bits of qs. Values 0..127 take bits 0-1, 2-3, 4-5,
// 6-7 of qs[0..31] in turn (16 values per sub-block), 128..255 of qs[32..63].
void q2_k(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 84) {
    const unsigned char* scales = b;
    const unsigned char* q = b + 16;
    const float d = f16_at(b + 80), min = f16_at(b + 82);
    int is = 0;
    for (std::size_t n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        unsigned sc = scales[is++];
        float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
        sc = scales[is++];
        dl = d * static_cast<float>(sc & 0xF);
        ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

// Q3_K (256 values, 110 bytes): 16 sub-blocks of 16 with 6-bit scales packed
// in 12 bytes (low 4 bits in scales[0..7]'s nibbles, high 2 bits in
// scales[8..11]); y = d * (scale - 32) * (q - 4 * !hbit), q two bits of qs
// (walked as in Q2_K) and hbit a bit of hmask (bit 0 for values 0..31 and
// 128..159, then bit 1, ...).
void q3_k(const unsigned char* b, std::size_t nb, float* y) {
  constexpr std::uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  for (std::size_t i = 0; i < nb; ++i, b += 110) {
    const unsigned char* hm = b;
    const unsigned char* q = b + 32;
    const float d_all = f16_at(b + 108);
    std::uint32_t aux[4] = {u32_at(b + 96), u32_at(b + 100), u32_at(b + 104), 0};
    const std::uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int scales[16];  // the reference reads aux's bytes in memory order: little-endian
    for (int k = 0; k < 16; ++k)
      scales[k] = static_cast<std::int8_t>((aux[k / 4] >> (8 * (k % 4))) & 0xFF);
    unsigned m = 1;
    int is = 0;
    for (std::size_t n = 0; n < kQK_K; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m <<= 1;
      }
      q += 32;
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K block
// (ggml's get_scale_min_k4): j < 4 in the low 6 bits of q[j] and q[j + 4];
// j >= 4 in q[j + 4]'s nibbles, with the top 2 bits from q[j - 4] and q[j].
void scale_min_k4(int j, const unsigned char* q, unsigned& d, unsigned& m) {
  if (j < 4) {
    d = q[j] & 63u;
    m = q[j + 4] & 63u;
  } else {
    d = (q[j + 4] & 0xFu) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// Q4_K (256 values, 144 bytes): 8 sub-blocks of 32; y = d * scale * q -
// dmin * min, q the low nibbles of qs[0..31] for values 0..31, the high
// nibbles for 32..63, then qs[32..63], ...
void q4_k(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 144) {
    const float d = f16_at(b), min = f16_at(b + 2);
    const unsigned char* scales = b + 4;
    const unsigned char* q = b + 16;
    int is = 0;
    unsigned sc, m;
    for (std::size_t j = 0; j < kQK_K; j += 64) {
      scale_min_k4(is + 0, scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, scales, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// Q5_K (256 values, 176 bytes): Q4_K's layout plus a fifth bit per value in
// qh (bit 2k for the low nibbles of the k-th 64 values, bit 2k + 1 for the
// high ones).
void q5_k(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 176) {
    const float d = f16_at(b), min = f16_at(b + 2);
    const unsigned char* scales = b + 4;
    const unsigned char* qh = b + 16;
    const unsigned char* ql = b + 48;
    int is = 0;
    unsigned sc, m;
    unsigned u1 = 1, u2 = 2;
    for (std::size_t j = 0; j < kQK_K; j += 64) {
      scale_min_k4(is + 0, scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, scales, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

// Q6_K (256 values, 210 bytes): 16 sub-blocks of 16 with int8 scales; y =
// d * scale * (q - 32), q a nibble of ql with two high bits from qh.
void q6_k(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 210) {
    const float d = f16_at(b + 208);
    const unsigned char* ql = b;
    const unsigned char* qh = b + 128;
    const unsigned char* sc = b + 192;
    for (std::size_t n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        auto scale = [&](int k) { return static_cast<float>(static_cast<std::int8_t>(sc[k])); };
        y[l + 0] = d * scale(is + 0) * static_cast<float>(q1);
        y[l + 32] = d * scale(is + 2) * static_cast<float>(q2);
        y[l + 64] = d * scale(is + 4) * static_cast<float>(q3);
        y[l + 96] = d * scale(is + 6) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// Q8_K (256 values, 292 bytes): y = d * int8, d a float32 (bsums unused).
void q8_k(const unsigned char* b, std::size_t nb, float* y) {
  for (std::size_t i = 0; i < nb; ++i, b += 292) {
    const float d = f32_of_bits(u32_at(b));
    for (std::size_t j = 0; j < kQK_K; ++j)
      *y++ = d * static_cast<float>(static_cast<std::int8_t>(b[4 + j]));
  }
}

// What dequantize() reads: exactly the types kTypes marks `dequantized`
// (tests/test_gguf.cpp holds the two to each other).
constexpr struct {
  GgmlType type;
  void (*read)(const unsigned char* blocks, std::size_t n_blocks, float* out);
} kReaders[] = {{GgmlType::F32, f32},   {GgmlType::F16, f16},   {GgmlType::BF16, bf16},
                {GgmlType::Q4_0, q4_0}, {GgmlType::Q4_1, q4_1}, {GgmlType::Q5_0, q5_0},
                {GgmlType::Q5_1, q5_1}, {GgmlType::Q8_0, q8_0}, {GgmlType::Q2_K, q2_k},
                {GgmlType::Q3_K, q3_k}, {GgmlType::Q4_K, q4_k}, {GgmlType::Q5_K, q5_k},
                {GgmlType::Q6_K, q6_k}, {GgmlType::Q8_K, q8_k}};

}  // namespace

const GgmlTypeInfo* ggml_type_info(std::uint32_t number) {
  return number < kTypeCount && kTypes[number].name ? &kTypes[number] : nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<std::uint32_t>(type));
  if (!info)
    fail_input("ggml type " + std::to_string(static_cast<std::uint32_t>(type)) +
               " is not a type ggml defines");
  return *info;
}

std::string ggml_type_label(std::uint32_t number) {
  const std::string n = std::to_string(number);
  if (const GgmlTypeInfo* info = ggml_type_info(number)) return info->name + (" (" + n + ")");
  for (const auto& removed : kRemoved)
    if (removed.number == number) return n + " (" + removed.name + ", removed from ggml)";
  return n + " (not a ggml type)";
}

void dequantize(GgmlType type, const void* blocks, std::size_t n, float* out) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  for (const auto& reader : kReaders) {
    if (reader.type != type) continue;
    if (n % info.block_elements != 0)
      fail_input("dequantize: " + std::to_string(n) + " values of type " + info.name +
                 " are not whole blocks of " + std::to_string(info.block_elements));
    return reader.read(static_cast<const unsigned char*>(blocks), n / info.block_elements, out);
  }
  fail_input("dequantize: type " + ggml_type_label(static_cast<std::uint32_t>(type)) +
             " is not one mha reads");
}

}  // namespace mha
