#include "mha/rng.hpp"

#include <cmath>

namespace mha {
namespace {

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace

RandomStream::RandomStream(std::uint64_t seed, const std::string& name)
    : key_(mix64(seed ^ fnv1a64(name))) {}

std::uint64_t RandomStream::bits(std::uint64_t i) const {
  return mix64(key_ + (i + 1) * 0x9E3779B97F4A7C15ull);
}

float RandomStream::uniform_float(std::uint64_t i) const {
  return static_cast<float>(bits(i) >> 40) * 0x1.0p-24f;
}

double RandomStream::uniform_double(std::uint64_t i) const {
  return static_cast<double>(bits(i) >> 11) * 0x1.0p-53;
}

template <class T>
void RandomStream::fill_uniform(T* out, std::size_t n, T low, T high) const {
  const T width = high - low;
  for (std::size_t i = 0; i < n; ++i) {
    T u;
    if constexpr (sizeof(T) == sizeof(float)) {
      u = uniform_float(i);
    } else {
      u = uniform_double(i);
    }
    // low + width * u can round up to `high` for the largest u; keep [low, high).
    const T x = low + width * u;
    out[i] = x < high ? x : std::nextafter(high, low);
  }
}

template void RandomStream::fill_uniform<float>(float*, std::size_t, float, float) const;
template void RandomStream::fill_uniform<double>(double*, std::size_t, double, double) const;

double glorot_limit(std::size_t fan_in, std::size_t fan_out) {
  return std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
}

}  // namespace mha
