#include "mha/config/mask_file.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"

namespace mha {

namespace {

using Warn = std::function<void(const std::string&)>;

// Bool or integer array -> one byte per element, 1 where the element is
// nonzero (any nonzero byte pattern), flipped when `invert`.
std::vector<unsigned char> nonzero_bytes(const NpyArray& a, bool invert) {
  const std::size_t w = itemsize(a.dtype), n = a.size();
  std::vector<unsigned char> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char any = 0;
    for (std::size_t k = 0; k < w; ++k) any |= a.data[i * w + k];
    out[i] = (any != 0) != invert;
  }
  return out;
}

// A float mask may hold -inf (masked) but not NaN or +inf, which would turn
// whole rows into NaN.
template <class T>
void check_float_mask(const std::vector<T>& values, const std::string& path) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (std::isnan(values[i]) || values[i] == std::numeric_limits<T>::infinity())
      fail_input(path + ": float mask holds " + std::to_string(values[i]) + " at flat index " +
                 std::to_string(i) + "; expected finite values or -inf");
}

// A float mask of only 0 and 1 is almost always a bool mask saved as float,
// which masks nothing: `how` says what to do instead.
template <class T>
void warn_if_zero_one(const std::vector<T>& values, const std::string& path, const char* how,
                      const Warn& warn) {
  if (!warn || values.empty()) return;
  for (T v : values)
    if (v != T(0) && v != T(1)) return;
  warn(path + ": float mask holds only 0 and 1, which are added to the logits and mask nothing; " +
       how);
}

// mask: (T, S), (B, T, S) or (B or 1, h or 1, T, S) into m.allow (bool or
// integer; `invert` under mask_true_means = ignore) or m.bias (float).
template <class T>
void read_mask(Mask<T>& m, const std::string& path, const Dims& d, bool invert, const Warn& warn) {
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
  // PyTorch's 3-D attn_mask is (B*h, T, S); say how to bring it over.
  const bool torch_3d = s.size() == 3 && d.h > 1 && s[0] == d.B * d.h;
  if (!ok)
    fail_input(path + ": mask of shape " + shape_str(s) + " does not fit; expected " + expected +
               (torch_3d ? " (a PyTorch (B*h, T, S) mask? reshape it to (B, h, T, S))" : ""));
  if (a.dtype == DType::b1 || is_integer(a.dtype)) {
    m.allow = nonzero_bytes(a, invert);
  } else {
    m.bias.resize(a.size());
    convert(a, m.bias.data(), path);
    check_float_mask(m.bias, path);
    warn_if_zero_one(m.bias, path,
                     "to mask, pass it as bool (numpy: mask.astype(bool)); true means attend, "
                     "or ignore with mask_true_means = ignore",
                     warn);
  }
}

// key_padding_mask (B, S) into m.pad_allow (bool or integer, true = padding)
// or m.pad_bias (float).
template <class T>
void read_key_padding_mask(Mask<T>& m, const std::string& path, const Dims& d, const Warn& warn) {
  NpyArray a = read_npy(path);
  const std::vector<std::size_t> expected{d.B, d.S};
  if (a.shape != expected)
    fail_input(path + ": key_padding_mask has shape " + shape_str(a.shape) +
               ", expected (B, S) = " + shape_str(expected));
  if (a.dtype == DType::b1 || is_integer(a.dtype)) {
    m.pad_allow = nonzero_bytes(a, /*invert=*/true);  // true = padding = may not attend
  } else {
    m.pad_bias.resize(a.size());
    convert(a, m.pad_bias.data(), path);
    check_float_mask(m.pad_bias, path);
    warn_if_zero_one(m.pad_bias, path,
                     "to mark padding, pass it as bool (numpy: mask.astype(bool)), true = padding",
                     warn);
  }
}

// bias: a float array broadcastable to (B, h, T, S) into m.position_bias and
// its strides.
template <class T>
void read_bias(Mask<T>& m, const std::string& path, const Dims& d) {
  // NumPy broadcasting against (B, h, T, S): axes align from the right and
  // each must be 1 or the full size.
  NpyArray a = read_npy(path);
  const std::size_t full[4] = {d.B, d.h, d.T, d.S};
  const std::string target = "array broadcastable to (B, h, T, S) = " +
                             shape_str(std::vector<std::size_t>(full, full + 4)) +
                             ", such as (h, T, S), (1, h, T, S) or (T, S)";
  const std::string expected = "an " + target;
  if (!is_float(a.dtype))
    fail_input(path + ": bias is " + a.describe() + "; expected a float " + target);
  if (a.shape.empty() || a.shape.size() > 4)
    fail_input(path + ": bias of shape " + shape_str(a.shape) + "; expected " + expected);
  std::size_t stride = 1;
  for (std::size_t k = 0; k < a.shape.size(); ++k) {
    const std::size_t axis = a.shape.size() - 1 - k, target = 3 - k;
    if (a.shape[axis] != 1 && a.shape[axis] != full[target])
      fail_input(path + ": bias of shape " + shape_str(a.shape) + " does not broadcast; expected " +
                 expected);
    m.bias_strides[target] = a.shape[axis] == 1 ? 0 : stride;
    stride *= a.shape[axis];
  }
  m.position_bias.resize(a.size());
  convert(a, m.position_bias.data(), path);
  check_float_mask(m.position_bias, path);
}

// The key lengths of a 1-D integer .npy of any width and sign, as int64; a
// uint64 beyond S is refused here, before it could wrap.
std::vector<std::int64_t> read_key_lengths(const std::string& where, const Dims& d) {
  NpyArray a = read_npy(where);
  if (!is_integer(a.dtype) || a.shape.size() != 1)
    fail_input(where + ": expected a 1-D integer array of B = " + std::to_string(d.B) +
               " key lengths, got " + a.describe());
  std::vector<std::int64_t> lengths;
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
    lengths.push_back(v);
  }
  return lengths;
}

// B lengths, each in [0, S]; `where` (the key or the file) starts the message.
void check_key_lengths(const std::vector<std::int64_t>& lengths, const std::string& where,
                       const Dims& d) {
  if (lengths.size() != d.B)
    fail_input(where + ": expected B = " + std::to_string(d.B) + " key lengths, got " +
               std::to_string(lengths.size()));
  for (std::size_t b = 0; b < d.B; ++b)
    if (lengths[b] < 0 || static_cast<std::size_t>(lengths[b]) > d.S)
      fail_input(where + ": key length " + std::to_string(lengths[b]) + " at index " +
                 std::to_string(b) + " is outside [0, S = " + std::to_string(d.S) + "]");
}

}  // namespace

// Each source in the order its errors are reported: mask, key_padding_mask,
// bias, key_lengths.
template <class T>
Mask<T> load_mask(const Config& c, const Dims& d, const Warn& warn) {
  Mask<T> m;
  m.causal = c.causal;
  if (c.mask) read_mask(m, *c.mask, d, c.mask_true_means == MaskTrueMeans::ignore, warn);
  if (c.key_padding_mask) read_key_padding_mask(m, *c.key_padding_mask, d, warn);
  if (c.window) m.window = static_cast<std::size_t>(*c.window);
  if (c.alibi)
    for (double slope : alibi_slopes(d.h)) m.alibi_slopes.push_back(static_cast<T>(slope));
  if (c.bias) read_bias(m, *c.bias, d);
  if (c.key_lengths) {
    m.key_lengths = *c.key_lengths;
    check_key_lengths(m.key_lengths, "key_lengths", d);
  } else if (c.key_lengths_file) {
    m.key_lengths = read_key_lengths(*c.key_lengths_file, d);
    check_key_lengths(m.key_lengths, *c.key_lengths_file, d);
  }
  return m;
}

template Mask<float> load_mask<float>(const Config&, const Dims&,
                                      const std::function<void(const std::string&)>&);
template Mask<double> load_mask<double>(const Config&, const Dims&,
                                        const std::function<void(const std::string&)>&);

}  // namespace mha
