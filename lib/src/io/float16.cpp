#include "mha/io/float16.hpp"

#include <cstring>

namespace mha {
namespace {

template <class To, class From>
To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
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

}  // namespace mha
