// Reduced precisions of a run: float16 for written files (output_dtype; the
// float16 type itself is io/float16.hpp) and bfloat16 for GEMM operands
// (dtype bfloat16; the rounding itself is kernel/bfloat16.hpp's). Every
// conversion rounds to nearest, ties to even, as NumPy's astype and IEEE 754 do.
//
//   mha::float16 h = mha::to_float16(0.1);      // bits 0x2e66, value 0.0999755859375
//   double x = mha::to_double(h);                // exact
//   float b = mha::round_to_bfloat16(0.1f);      // 0.10009765625: 8 significant bits
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "mha/config/config.hpp"
#include "mha/io/float16.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/bfloat16.hpp"

namespace mha {

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
