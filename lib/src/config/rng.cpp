#include "mha/config/rng.hpp"

#include <algorithm>
#include <cmath>

#include "mha/base/thread_pool.hpp"

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

// x_i of the stream with key `key` (rng.hpp), and its top bits as a uniform
// value on [0, 1). Free functions of plain values, so that fill_range's loop
// (which must not read through `this`) uses the same formula as bits().
inline std::uint64_t stream_bits(std::uint64_t key, std::uint64_t i) {
  return mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}
inline float unit_float(std::uint64_t x) {
  return static_cast<float>(x >> 40) * 0x1.0p-24f;
}
inline double unit_double(std::uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace

RandomStream::RandomStream(std::uint64_t seed, const std::string& name)
    : key_(mix64(seed ^ fnv1a64(name))) {}

std::uint64_t RandomStream::bits(std::uint64_t i) const {
  return stream_bits(key_, i);
}

float RandomStream::uniform_float(std::uint64_t i) const {
  return unit_float(bits(i));
}

double RandomStream::uniform_double(std::uint64_t i) const {
  return unit_double(bits(i));
}

namespace {

// out[i - begin] for i in [begin, end), as fill_uniform defines it. Every
// value is a parameter, so nothing in the loop can alias `out` and the loop
// vectorizes (AVX-512DQ multiplies 64-bit lanes; elsewhere it still runs
// without calls or branches).
template <class T>
void fill_range(std::uint64_t key, std::size_t begin, std::size_t end, T low, T width, T high,
                T below_high, T* __restrict out) {
  for (std::size_t i = begin; i < end; ++i) {
    const std::uint64_t x = stream_bits(key, i);
    T u;
    if constexpr (sizeof(T) == sizeof(float)) {
      u = unit_float(x);
    } else {
      u = unit_double(x);
    }
    const T v = low + width * u;
    out[i - begin] = v < high ? v : below_high;
  }
}

}  // namespace

template <class T>
void RandomStream::fill_uniform(T* out, std::size_t n, T low, T high, int threads) const {
  const T width = high - low;
  // low + width * u can round up to `high` for the largest u; keep [low, high).
  const T below_high = std::nextafter(high, low);
  // Chunks of 64 Ki elements, spread over the pool.
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  const std::uint64_t key = key_;
  parallel_for(chunks, resolve_threads(threads), [=](std::size_t c, int) {
    const std::size_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    fill_range<T>(key, begin, end, low, width, high, below_high, out + begin);
  });
}

template void RandomStream::fill_uniform<float>(float*, std::size_t, float, float, int) const;
template void RandomStream::fill_uniform<double>(double*, std::size_t, double, double, int) const;

double glorot_limit(std::size_t fan_in, std::size_t fan_out) {
  return std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
}

}  // namespace mha
