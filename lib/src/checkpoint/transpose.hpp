// A block of a stored matrix transposed into the kernel's layout, in 64 x 64
// tiles. Internal to checkpoint/.
#pragma once

#include <algorithm>
#include <cstddef>

namespace mha {

// src (count, in; rows `in` apart) transposed into dst's columns:
// dst[i * ld + j] = src[j * in + i].
inline void transpose_into(const float* src, std::size_t count, std::size_t in, float* dst,
                           std::size_t ld) {
  constexpr std::size_t kTile = 64;
  for (std::size_t o0 = 0; o0 < count; o0 += kTile)
    for (std::size_t i0 = 0; i0 < in; i0 += kTile)
      for (std::size_t o = o0; o < std::min(count, o0 + kTile); ++o)
        for (std::size_t i = i0; i < std::min(in, i0 + kTile); ++i)
          dst[i * ld + o] = src[o * in + i];
}

}  // namespace mha
