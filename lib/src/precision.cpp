#include "mha/precision.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "mha/error.hpp"
#include "mha/npy.hpp"

namespace mha {
namespace {

template <class To, class From>
To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

// Index of element i of a C-order tensor of `shape`, as NumPy prints it.
std::string index_str(std::size_t i, const std::vector<std::size_t>& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = shape[k] ? i % shape[k] : 0;
    i = shape[k] ? i / shape[k] : 0;
  }
  return shape_str(index);
}

template <class U>
const char* range_of() {
  return std::is_same_v<U, float16> ? "float16's range (+-65504)" : "float32's range (+-3.4e38)";
}

}  // namespace

float16 to_float16(double x) {
  std::uint64_t u = bit_cast<std::uint64_t>(x);
  const auto sign = static_cast<std::uint16_t>((u >> 48) & 0x8000u);
  u &= 0x7fffffffffffffffull;
  std::uint16_t h;
  if (u >= 0x40f0000000000000ull) {  // |x| >= 2^16: inf, NaN or overflow
    if (u > 0x7ff0000000000000ull) {
      // NaN: the payload's top 10 bits, but never 0 (which would read as inf).
      h = static_cast<std::uint16_t>(0x7c00u | ((u >> 42) & 0x3ffu));
      if (h == 0x7c00u) h = 0x7c01u;
    } else {
      h = 0x7c00u;
    }
  } else if (u < 0x3f10000000000000ull) {
    // Below 2^-14: a subnormal k * 2^-24 (or 0, or 2^-14 after rounding up).
    // Adding 2^28, whose ulp is 2^-24, lets the FPU's round-to-nearest-even
    // pick k; k is then the sum's low mantissa bits.
    const double sum = bit_cast<double>(u) + 268435456.0;
    h = static_cast<std::uint16_t>(bit_cast<std::uint64_t>(sum) - 0x41b0000000000000ull);
  } else {
    // Normal: rebias the exponent (1023 -> 15) and drop 42 mantissa bits,
    // rounding half to even. A carry out of the mantissa bumps the exponent,
    // which is also how 65520 and above become inf (0x7c00).
    const std::uint64_t odd = (u >> 42) & 1u;
    u -= std::uint64_t{1023 - 15} << 52;
    u += (std::uint64_t{1} << 41) - 1 + odd;
    h = static_cast<std::uint16_t>(u >> 42);
  }
  return float16{static_cast<std::uint16_t>(h | sign)};
}

double to_double(float16 f) {
  return half_to_float(f.bits);  // every float16 is exact in float
}

template <class U, class T>
std::vector<U> convert_for_output(const T* data, std::size_t n,
                                  const std::vector<std::size_t>& shape, const std::string& name,
                                  bool allow_overflow) {
  std::vector<U> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = to_double(data[i]);
    if constexpr (std::is_same_v<U, float16>)
      out[i] = to_float16(x);
    else
      out[i] = static_cast<U>(x);  // double -> float: the FPU rounds to nearest even
    if (!allow_overflow && std::isinf(to_double(out[i])) && std::isfinite(x)) {
      char value[32];
      std::snprintf(value, sizeof value, "%.9g", x);
      fail_input(name + ": value " + value + " at index " + index_str(i, shape) + " is beyond " +
                 range_of<U>() + "; output_dtype " +
                 (std::is_same_v<U, float16> ? "float16" : "float32") +
                 " would write it as inf (use a wider output_dtype, or allow_nonfinite to write "
                 "inf)");
    }
  }
  return out;
}

#define MHA_INSTANTIATE(U, T)                       \
  template std::vector<U> convert_for_output<U, T>( \
      const T*, std::size_t, const std::vector<std::size_t>&, const std::string&, bool);
MHA_INSTANTIATE(float16, float)
MHA_INSTANTIATE(float16, double)
MHA_INSTANTIATE(float, double)
MHA_INSTANTIATE(double, float)
#undef MHA_INSTANTIATE

}  // namespace mha
