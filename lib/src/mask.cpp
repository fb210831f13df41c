#include "mha/mask.hpp"

#include <limits>

#include "mha/error.hpp"
#include "mha/npy.hpp"

namespace mha {

template <class T>
void Mask<T>::apply(const Dims& d, std::size_t b, std::size_t head, std::size_t t0, std::size_t t1,
                    T* logits, std::size_t ld) const {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::size_t S = d.S;
  // Key padding and causality cut each row at a key index; beyond it is -inf.
  std::size_t pad_end = S;
  if (!key_lengths.empty()) pad_end = static_cast<std::size_t>(key_lengths[b]);
  const std::size_t mb = mask_B == 1 ? 0 : b, mh = mask_h == 1 ? 0 : head;
  const std::size_t mask_offset = ((mb * mask_h + mh) * d.T) * S;
  for (std::size_t t = t0; t < t1; ++t) {
    T* row = logits + (t - t0) * ld;
    std::size_t end = pad_end;
    if (causal == Causal::top_left) {
      end = std::min(end, t + 1);
    } else if (causal == Causal::bottom_right) {
      // s <= t + S - T, i.e. s < t + 1 + S - T (none when T > S + t).
      end = t + 1 + S >= d.T ? std::min(end, t + 1 + S - d.T) : 0;
    }
    for (std::size_t s = end; s < S; ++s) row[s] = neg_inf;
    if (!allow.empty()) {
      const unsigned char* a = allow.data() + mask_offset + t * S;
      for (std::size_t s = 0; s < end; ++s)
        if (!a[s]) row[s] = neg_inf;
    } else if (!bias.empty()) {
      const T* m = bias.data() + mask_offset + t * S;
      for (std::size_t s = 0; s < end; ++s) row[s] += m[s];
    }
  }
}

template <class T>
Mask<T> load_mask(const Config& c, const Dims& d) {
  Mask<T> m;
  m.causal = c.causal;
  if (c.mask) {
    const std::string& path = *c.mask;
    NpyArray a = read_npy(path);
    const auto& s = a.shape;
    const std::string expected = "(T, S), (B, T, S) or (B or 1, h or 1, T, S) = " +
                                 shape_str(std::vector<std::size_t>{d.T, d.S}) + ", " +
                                 shape_str(std::vector<std::size_t>{d.B, d.T, d.S}) + " or " +
                                 shape_str(std::vector<std::size_t>{d.B, d.h, d.T, d.S});
    bool ok = s.size() >= 2 && s.size() <= 4 && s[s.size() - 2] == d.T && s.back() == d.S;
    if (ok && s.size() == 2) {
      m.mask_B = m.mask_h = 1;
    } else if (ok && s.size() == 3) {
      m.mask_B = s[0];
      m.mask_h = 1;
    } else if (ok) {
      m.mask_B = s[0];
      m.mask_h = s[1];
    }
    ok = ok && (m.mask_B == 1 || m.mask_B == d.B) && (m.mask_h == 1 || m.mask_h == d.h);
    if (!ok)
      fail_input(path + ": mask of shape " + shape_str(s) + " does not fit; expected " + expected);
    const std::size_t n = a.size();
    if (a.dtype == DType::b1 || is_integer(a.dtype)) {
      // Any nonzero byte pattern of the element means "may attend".
      const std::size_t w = itemsize(a.dtype);
      m.allow.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        unsigned char any = 0;
        for (std::size_t k = 0; k < w; ++k) any |= a.data[i * w + k];
        m.allow[i] = any != 0;
      }
    } else {
      m.bias.resize(n);
      convert(a, m.bias.data(), path);
    }
  }
  if (c.key_lengths || c.key_lengths_file) {
    std::string where = "key_lengths";
    if (c.key_lengths) {
      m.key_lengths = *c.key_lengths;
    } else {
      where = *c.key_lengths_file;
      NpyArray a = read_npy(where);
      if (!is_integer(a.dtype) || a.shape.size() != 1)
        fail_input(where + ": expected a 1-D integer array of B = " + std::to_string(d.B) +
                   " key lengths, got " + a.describe());
      const std::size_t w = itemsize(a.dtype);
      for (std::size_t i = 0; i < a.size(); ++i) {
        std::int64_t v = 0;
        const unsigned char* p = a.data.data() + i * w;
        switch (a.dtype) {
          case DType::i1:
            v = *reinterpret_cast<const std::int8_t*>(p);
            break;
          case DType::u1:
            v = *p;
            break;
          case DType::i2:
            v = *reinterpret_cast<const std::int16_t*>(p);
            break;
          case DType::u2:
            v = *reinterpret_cast<const std::uint16_t*>(p);
            break;
          case DType::i4:
            v = *reinterpret_cast<const std::int32_t*>(p);
            break;
          case DType::u4:
            v = *reinterpret_cast<const std::uint32_t*>(p);
            break;
          case DType::i8:
            v = *reinterpret_cast<const std::int64_t*>(p);
            break;
          default: {
            const std::uint64_t u = *reinterpret_cast<const std::uint64_t*>(p);
            if (u > static_cast<std::uint64_t>(d.S))
              fail_input(where + ": key length " + std::to_string(u) + " at index " +
                         std::to_string(i) + " is outside [0, S = " + std::to_string(d.S) + "]");
            v = static_cast<std::int64_t>(u);
          }
        }
        m.key_lengths.push_back(v);
      }
    }
    if (m.key_lengths.size() != d.B)
      fail_input(where + ": expected B = " + std::to_string(d.B) + " key lengths, got " +
                 std::to_string(m.key_lengths.size()));
    for (std::size_t b = 0; b < d.B; ++b)
      if (m.key_lengths[b] < 0 || static_cast<std::size_t>(m.key_lengths[b]) > d.S)
        fail_input(where + ": key length " + std::to_string(m.key_lengths[b]) + " at index " +
                   std::to_string(b) + " is outside [0, S = " + std::to_string(d.S) + "]");
  }
  return m;
}

template struct Mask<float>;
template struct Mask<double>;
template Mask<float> load_mask<float>(const Config&, const Dims&);
template Mask<double> load_mask<double>(const Config&, const Dims&);

}  // namespace mha
