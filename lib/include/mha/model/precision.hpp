// Reduced precisions of a run: float16 for written files (output_dtype; the
// float16 type itself is io/float16.hpp) and bfloat16 for GEMM operands
// (dtype bfloat16). Every conversion rounds to nearest, ties to even, as
// NumPy's astype and IEEE 754 do.
//
//   mha::float16 h = mha::to_float16(0.1);      // bits 0x2e66, value 0.0999755859375
//   double x = mha::to_double(h);                // exact
//   float b = mha::round_to_bfloat16(0.1f);      // 0.10009765625: 8 significant bits
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "mha/io/float16.hpp"
#include "mha/io/npy.hpp"
#include "mha/model/config.hpp"

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

// The .npy dtype an output_dtype writes.
constexpr DType npy_dtype(OutputType type) {
  return type == OutputType::float16   ? DType::f2
         : type == OutputType::float32 ? DType::f4
                                       : DType::f8;
}

// n values of `data` (C order, `shape`) converted to U (float16, float or
// double), rounding to nearest even. A finite value that the conversion turns
// into inf (beyond float16's 65504 or float32's 3.4e38) throws mha::Error
// (invalid_input) naming `name`, the index and output_dtype, unless
// `allow_overflow`.
template <class U, class T>
std::vector<U> convert_for_output(const T* data, std::size_t n,
                                  const std::vector<std::size_t>& shape, const std::string& name,
                                  bool allow_overflow);

// Calls write(const U* values) with `data` as output_dtype `type`: `data`
// itself when U is T, else a converted copy (see convert_for_output).
template <class T, class F>
void with_output_dtype(const T* data, std::size_t n, const std::vector<std::size_t>& shape,
                       OutputType type, const std::string& name, bool allow_overflow, F&& write) {
  auto as = [&](auto* tag) {
    using U = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<U, T>) {
      write(data);
    } else {
      const std::vector<U> converted = convert_for_output<U>(data, n, shape, name, allow_overflow);
      write(converted.data());
    }
  };
  if (type == OutputType::float16)
    as(static_cast<float16*>(nullptr));
  else if (type == OutputType::float32)
    as(static_cast<float*>(nullptr));
  else
    as(static_cast<double*>(nullptr));
}

}  // namespace mha
