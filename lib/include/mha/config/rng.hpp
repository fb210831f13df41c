// The project's own random stream, so that one seed gives bit-identical
// inputs and weights on every machine and standard library (xt::random and
// std::*_distribution do not promise that).
//
// Counter-based: element i of the stream named `name` under `seed` is
//   x_i = mix64(key + (i + 1) * 0x9E3779B97F4A7C15),
//   key = mix64(seed ^ fnv1a64(name)),
// with mix64 the SplitMix64 finalizer. Each tensor ("query", "W_q", ...) has
// its own stream, so loading one tensor from a file never shifts another's
// random values, and element i does not depend on how many came before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mha {

class RandomStream {
 public:
  RandomStream(std::uint64_t seed, const std::string& name);
  std::uint64_t bits(std::uint64_t i) const;  // x_i above

  // Uniform on [0, 1): 24 random bits for float, 53 for double, so the value
  // is exact in T and never rounds up to 1.
  float uniform_float(std::uint64_t i) const;
  double uniform_double(std::uint64_t i) const;

  // Fills out[0..n) with uniform values on [low, high): low + (high - low) * u.
  // Large fills are spread over `threads` threads (0: default_threads());
  // element i is the same whoever computes it.
  template <class T>
  void fill_uniform(T* out, std::size_t n, T low, T high, int threads = 0) const;

 private:
  std::uint64_t key_;
};

// Glorot (Xavier) uniform limit sqrt(6 / (fan_in + fan_out)) for a
// (fan_in, fan_out) kernel, as in Keras' default initializer.
double glorot_limit(std::size_t fan_in, std::size_t fan_out);

}  // namespace mha
