// float16 as .npy files store it ('<f2'): the value type, its exact
// conversions, and the .npy dtype of a buffer element. Rounding to float16
// is to nearest, ties to even, as NumPy's astype(np.float16).
//
//   mha::float16 h = mha::to_float16(0.1);      // bits 0x2e66, value 0.0999755859375
//   double x = mha::to_double(h);                // exact
#pragma once

#include <cstdint>
#include <type_traits>

#include "mha/io/npy.hpp"

namespace mha {

// An IEEE binary16 value held as its bits (native byte order): the element
// type of float16 buffers, so that a template over the written type can tell
// it from an integer.
struct float16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(float16) == 2, "float16 must be two bytes: it is written to .npy as is");

// x rounded to the nearest float16, ties to even: |x| >= 65520 becomes inf,
// values below 2^-14 become subnormals (multiples of 2^-24), NaN stays NaN
// with the top bits of its payload (as NumPy's npy_double_to_half). One
// rounding from double, so a float64 tensor written as float16 matches
// NumPy's astype(np.float16) of it, not of its float32 rounding.
float16 to_float16(double x);
// The float16's value, exactly.
double to_double(float16 h);
inline double to_double(float x) {
  return x;
}
inline double to_double(double x) {
  return x;
}

// The .npy dtype of a buffer element: f2, f4 or f8 (u1 for 8-bit images).
template <class T>
constexpr DType npy_dtype() {
  return std::is_same_v<T, float16>        ? DType::f2
         : std::is_same_v<T, float>        ? DType::f4
         : std::is_same_v<T, std::uint8_t> ? DType::u1
                                           : DType::f8;
}

}  // namespace mha
