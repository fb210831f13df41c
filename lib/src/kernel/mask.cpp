#include "mha/kernel/mask.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mha {

template <class T>
std::int64_t Mask<T>::aligned(const Dims& d, std::size_t t) const {
  const auto t_signed = static_cast<std::int64_t>(t);
  return causal == Causal::bottom_right
             ? t_signed + static_cast<std::int64_t>(d.S) - static_cast<std::int64_t>(d.T)
             : t_signed;
}

template <class T>
std::size_t Mask<T>::key_begin(const Dims& d, std::size_t t) const {
  if (window == 0) return 0;
  // s > t' - window
  const std::int64_t begin = aligned(d, t) - static_cast<std::int64_t>(window) + 1;
  return begin <= 0 ? 0 : std::min(static_cast<std::size_t>(begin), d.S);
}

template <class T>
std::size_t Mask<T>::key_end(const Dims& d, std::size_t b, std::size_t t) const {
  std::size_t end = key_lengths.empty() ? d.S : static_cast<std::size_t>(key_lengths[b]);
  if (window > 0) {
    // s < t' + window
    const std::int64_t w_end = aligned(d, t) + static_cast<std::int64_t>(window);
    end = w_end <= 0 ? 0 : std::min(end, static_cast<std::size_t>(w_end));
  }
  if (causal == Causal::top_left) {
    end = std::min(end, t + 1);
  } else if (causal == Causal::bottom_right) {
    // s <= t + S - T, i.e. s < t + 1 + S - T (no key at all when T > S + t).
    end = t + 1 + d.S >= d.T ? std::min(end, t + 1 + d.S - d.T) : 0;
  }
  return end;
}

template <class T>
void Mask<T>::apply(const Dims& d, std::size_t b, std::size_t head, std::size_t t0, std::size_t t1,
                    std::size_t s0, std::size_t s1, T* logits, std::size_t ld) const {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::size_t S = d.S;
  const std::size_t mb = mask_B == 1 ? 0 : b, mh = mask_h == 1 ? 0 : head;
  const std::size_t mask_offset = ((mb * mask_h + mh) * d.T) * S;
  for (std::size_t t = t0; t < t1; ++t) {
    // row[s - s0] is the logit of key s.
    T* row = logits + (t - t0) * ld - s0;
    // Key padding, causality and the window keep keys [begin, end) of each
    // row; the rest is -inf.
    const std::size_t end = std::clamp(key_end(d, b, t), s0, s1);
    const std::size_t begin = std::clamp(key_begin(d, t), s0, end);
    for (std::size_t s = s0; s < begin; ++s) row[s] = neg_inf;
    for (std::size_t s = end; s < s1; ++s) row[s] = neg_inf;
    if (!pad_allow.empty()) {
      const unsigned char* p = pad_allow.data() + b * S;
      for (std::size_t s = begin; s < end; ++s)
        if (!p[s]) row[s] = neg_inf;
    } else if (!pad_bias.empty()) {
      const T* p = pad_bias.data() + b * S;
      for (std::size_t s = begin; s < end; ++s) row[s] += p[s];
    }
    if (!allow.empty()) {
      const unsigned char* a = allow.data() + mask_offset + t * S;
      for (std::size_t s = begin; s < end; ++s)
        if (!a[s]) row[s] = neg_inf;
    } else if (!bias.empty()) {
      const T* m = bias.data() + mask_offset + t * S;
      for (std::size_t s = begin; s < end; ++s) row[s] += m[s];
    }
    if (!alibi_slopes.empty()) {
      // Computed here, never stored: O(1) memory however long the sequence.
      const T slope = alibi_slopes[head];
      const std::int64_t ta = aligned(d, t);
      for (std::size_t s = begin; s < end; ++s)
        row[s] -= slope * static_cast<T>(std::abs(ta - static_cast<std::int64_t>(s)));
    }
    if (!position_bias.empty()) {
      const T* p =
          position_bias.data() + b * bias_strides[0] + head * bias_strides[1] + t * bias_strides[2];
      const std::size_t ss = bias_strides[3];
      for (std::size_t s = begin; s < end; ++s) row[s] += p[s * ss];
    }
  }
}

std::vector<double> alibi_slopes(std::size_t h) {
  auto power_of_two = [](std::size_t n) {
    std::vector<double> s;
    for (std::size_t i = 1; i <= n; ++i) s.push_back(std::exp2(-8.0 * i / static_cast<double>(n)));
    return s;
  };
  std::size_t n = 1;
  while (n * 2 <= h) n *= 2;
  std::vector<double> slopes = power_of_two(n);
  if (n < h) {
    const std::vector<double> twice = power_of_two(2 * n);
    for (std::size_t i = 0; slopes.size() < h; i += 2) slopes.push_back(twice[i]);
  }
  return slopes;
}

template struct Mask<float>;
template struct Mask<double>;

}  // namespace mha
