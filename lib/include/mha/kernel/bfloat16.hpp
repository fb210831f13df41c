// bfloat16 GEMM operands (dtype bfloat16, blas.hpp's gemm with bf16): float32
// values rounded to bfloat16, to nearest, ties to even, as NumPy's astype and
// IEEE 754 do.
//
//   float b = mha::round_to_bfloat16(0.1f);  // 0.10009765625: 8 significant bits
#pragma once

#include <cstdint>
#include <cstring>

namespace mha {

// bfloat16 (float32's top 16 bits: 8 exponent, 8 significant bits): x
// rounded to nearest, ties to even; from 3.3962e38 (halfway past bfloat16's
// largest, 3.3895e38) becomes inf; NaN stays NaN, made quiet. Branch-free and
// inline so that the GEMM operand loops (blas.cpp) vectorize.
inline std::uint16_t bfloat16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  // Adding 0x7fff (+1 when the kept part is odd) carries into bit 16 exactly
  // when the dropped half is above one half (or equal, and the kept part odd).
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
// The same rounding, returned as the float32 it represents exactly.
inline float round_to_bfloat16(float x) {
  const std::uint32_t u = std::uint32_t{bfloat16_bits(x)} << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

}  // namespace mha
