// A plain reference multi-head attention (llm.c style): nested loops in
// double precision, no BLAS and no xtensor math, written straight from the
// definition in docs/config.md / attention.hpp so that the kernel can be held
// against something that shares none of its code. In particular the mask is
// built here from the causal / explicit-mask / key_lengths rules, not by
// mha::Mask::apply.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

#include "mha/config/config.hpp"  // only for the Causal and MaskedRows enum labels

namespace ref {

struct Sizes {
  std::size_t B = 1, T = 1, S = 1, h = 1;
  std::size_t d_model = 1, d_k = 1, d_v = 1, kdim = 1, vdim = 1, d_out = 1;
  std::size_t kv_heads = 0;  // key/value heads; 0 = h
  std::size_t kvh() const { return kv_heads ? kv_heads : h; }
};

// Projection weights, row-major (x @ W):
//   W_q (d_model, h*d_k)  b_q (h*d_k) or empty
//   W_k (kdim,    kvh*d_k)  b_k (kvh*d_k) or empty   (kvh = kv_heads, h unless GQA)
//   W_v (vdim,    kvh*d_v)  b_v (kvh*d_v) or empty
//   W_o (h*d_v,   d_out)  b_o (d_out) or empty
struct Params {
  std::vector<double> W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o;
};

// Every way a key can be hidden from a query, in the form the user gives it.
//   causal       none, top-left (s <= t) or bottom-right (s <= t + S - T)
//   shape/values an explicit mask of rank 2 (T,S), 3 (B',T,S) or 4 (B',h',T,S)
//                with B' in {1,B}, h' in {1,h} (size-1 axes broadcast); empty
//                shape = none. is_float: values are added to the scaled
//                logits; else nonzero = may attend.
//   key_lengths  B lengths, keys s >= key_lengths[b] hidden; empty = none
// and the variants that reshape the logits:
//   window       keys with |t' - s| < window only (t' = t + S - T under
//                bottom-right causality, else t); 0 = none
//   alibi        adds -m_head * |t' - s|, m from the ALiBi paper's recipe
//   bias_shape/bias_values  a float bias broadcast (NumPy rules) to (B,h,T,S)
//   softcap      logits <- c tanh(logits / c) on the scaled logits, before
//                any mask or bias; 0 = none
struct MaskSpec {
  mha::Causal causal = mha::Causal::none;
  std::vector<std::size_t> shape;
  std::vector<double> values;
  bool is_float = false;
  std::vector<std::int64_t> key_lengths;
  std::size_t window = 0;
  bool alibi = false;
  std::vector<std::size_t> bias_shape;
  std::vector<double> bias_values;
  double softcap = 0;

  long long aligned(const Sizes& z, std::size_t t) const {
    return static_cast<long long>(t) +
           (causal == mha::Causal::bottom_right
                ? static_cast<long long>(z.S) - static_cast<long long>(z.T)
                : 0);
  }

  // ALiBi slopes (Press et al.): 2^(-8i/n) for n a power of two; otherwise
  // those of the power of two below h, then every other slope of twice it.
  static std::vector<double> alibi_slopes(std::size_t h) {
    auto pow2 = [](std::size_t n) {
      std::vector<double> m(n);
      const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
      for (std::size_t i = 0; i < n; ++i) m[i] = std::pow(start, static_cast<double>(i + 1));
      return m;
    };
    std::size_t closest = 1;
    while (closest * 2 <= h) closest *= 2;
    std::vector<double> m = pow2(closest);
    const std::vector<double> more = pow2(2 * closest);
    for (std::size_t i = 0; m.size() < h; i += 2) m.push_back(more[i]);
    return m;
  }

  // The broadcast bias entry for (b, head, t, s).
  double position_bias(const Sizes& z, std::size_t b, std::size_t head, std::size_t t,
                       std::size_t s) const {
    if (bias_shape.empty()) return 0.0;
    const std::size_t idx[4] = {b, head, t, s}, full[4] = {z.B, z.h, z.T, z.S};
    std::size_t flat = 0;
    const std::size_t r = bias_shape.size();
    for (std::size_t k = 0; k < r; ++k) {
      const std::size_t axis = 4 - r + k, n = bias_shape[k];
      if (n != 1 && n != full[axis]) throw std::logic_error("bias does not broadcast");
      flat = flat * n + (n == 1 ? 0 : idx[axis]);
    }
    return bias_values[flat];
  }

  // The explicit mask entry that applies to (b, head, t, s).
  double entry(const Sizes& z, std::size_t b, std::size_t head, std::size_t t,
               std::size_t s) const {
    std::size_t mb = 0, mh = 0;
    if (shape.size() == 3) {
      mb = shape[0] == 1 ? 0 : b;
    } else if (shape.size() == 4) {
      mb = shape[0] == 1 ? 0 : b;
      mh = shape[1] == 1 ? 0 : head;
    } else if (shape.size() != 2) {
      throw std::logic_error("reference mask must have rank 2, 3 or 4");
    }
    const std::size_t nh = shape.size() == 4 ? shape[1] : 1;
    return values[((mb * nh + mh) * z.T + t) * z.S + s];
  }

  // May query t of (b, head) see key s? (before any float bias)
  bool allowed(const Sizes& z, std::size_t b, std::size_t head, std::size_t t,
               std::size_t s) const {
    const long long tt = static_cast<long long>(t), ss = static_cast<long long>(s);
    if (causal == mha::Causal::top_left && ss > tt) return false;
    if (causal == mha::Causal::bottom_right &&
        ss > tt + static_cast<long long>(z.S) - static_cast<long long>(z.T))
      return false;
    if (!key_lengths.empty() && ss >= key_lengths[b]) return false;
    if (window > 0 && std::llabs(aligned(z, t) - ss) >= static_cast<long long>(window))
      return false;
    if (!shape.empty() && !is_float && entry(z, b, head, t, s) == 0.0) return false;
    return true;
  }

  // Everything added to the (soft-capped) logit of an allowed key.
  double bias(const Sizes& z, std::size_t b, std::size_t head, std::size_t t, std::size_t s) const {
    double sum = !shape.empty() && is_float ? entry(z, b, head, t, s) : 0.0;
    if (alibi)
      sum -= alibi_slopes(z.h)[head] *
             static_cast<double>(std::llabs(aligned(z, t) - static_cast<long long>(s)));
    return sum + position_bias(z, b, head, t, s);
  }
};

struct Result {
  std::vector<double> output;     // (B, T, d_out)
  std::vector<double> attention;  // (B, h, T, S)
};

// X (rows, in) @ W (in, out) + b (out, or empty for no bias), all row-major:
// the projections and the output layer.
inline std::vector<double> affine(const std::vector<double>& X, std::size_t rows, std::size_t in,
                                  const std::vector<double>& W, const std::vector<double>& b,
                                  std::size_t out) {
  std::vector<double> Y(rows * out);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < out; ++j) {
      double acc = b.empty() ? 0.0 : b[j];
      for (std::size_t c = 0; c < in; ++c) acc += X[r * in + c] * W[c * out + j];
      Y[r * out + j] = acc;
    }
  }
  return Y;
}

// X_q (B, T, d_model), X_k (B, S, kdim), X_v (B, S, vdim), all row-major.
inline Result multi_head_attention(const Sizes& z, const std::vector<double>& X_q,
                                   const std::vector<double>& X_k, const std::vector<double>& X_v,
                                   const Params& p, const MaskSpec& mask, double scale,
                                   mha::MaskedRows masked_rows) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::size_t B = z.B, T = z.T, S = z.S, h = z.h, d_k = z.d_k, d_v = z.d_v;
  const std::size_t hdk = h * d_k, hdv = h * d_v;
  const std::size_t kvh = z.kvh(), kdk = kvh * d_k, kdv = kvh * d_v;

  // Projections: Q (B, T, h*d_k), K (B, S, kvh*d_k), V (B, S, kvh*d_v).
  const std::vector<double> Q = affine(X_q, B * T, z.d_model, p.W_q, p.b_q, hdk);
  const std::vector<double> K = affine(X_k, B * S, z.kdim, p.W_k, p.b_k, kdk);
  const std::vector<double> V = affine(X_v, B * S, z.vdim, p.W_v, p.b_v, kdv);

  Result r;
  r.attention.assign(B * h * T * S, 0.0);
  std::vector<double> context(B * T * hdv, 0.0);  // concat_i(A_i V_i)
  std::vector<double> logits(S);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t i = 0; i < h; ++i) {
      const std::size_t j = i / (h / kvh);  // the key/value head query head i reads
      for (std::size_t t = 0; t < T; ++t) {
        double* att = &r.attention[((b * h + i) * T + t) * S];
        // logits[s] = scale * q . k + mask, -inf where the key is hidden
        double max = -inf;
        for (std::size_t s = 0; s < S; ++s) {
          if (!mask.allowed(z, b, i, t, s)) {
            logits[s] = -inf;
            continue;
          }
          double dot = 0.0;
          for (std::size_t e = 0; e < d_k; ++e)
            dot += Q[(b * T + t) * hdk + i * d_k + e] * K[(b * S + s) * kdk + j * d_k + e];
          double logit = scale * dot;
          if (mask.softcap > 0) logit = mask.softcap * std::tanh(logit / mask.softcap);
          logits[s] = logit + mask.bias(z, b, i, t, s);
          if (logits[s] > max) max = logits[s];
        }
        if (max == -inf) {
          // every key hidden: the masked_rows policy
          const double fill = masked_rows == mha::MaskedRows::zero      ? 0.0
                              : masked_rows == mha::MaskedRows::uniform ? 1.0 / double(S)
                                                                        : std::nan("");
          for (std::size_t s = 0; s < S; ++s) att[s] = fill;
        } else {
          double sum = 0.0;
          for (std::size_t s = 0; s < S; ++s) {
            att[s] = std::exp(logits[s] - max);  // exp(-inf) = 0
            sum += att[s];
          }
          for (std::size_t s = 0; s < S; ++s) att[s] /= sum;
        }
        for (std::size_t e = 0; e < d_v; ++e) {
          double acc = 0.0;
          for (std::size_t s = 0; s < S; ++s) acc += att[s] * V[(b * S + s) * kdv + j * d_v + e];
          context[(b * T + t) * hdv + i * d_v + e] = acc;
        }
      }
    }
  }

  r.output = affine(context, B * T, hdv, p.W_o, p.b_o, z.d_out);
  return r;
}

// attention (B, h, T, S) averaged over heads: (B, T, S).
inline std::vector<double> mean_over_heads(const Sizes& z, const std::vector<double>& attention) {
  std::vector<double> mean(z.B * z.T * z.S, 0.0);
  for (std::size_t b = 0; b < z.B; ++b)
    for (std::size_t i = 0; i < z.h; ++i)
      for (std::size_t ts = 0; ts < z.T * z.S; ++ts)
        mean[b * z.T * z.S + ts] += attention[(b * z.h + i) * z.T * z.S + ts] / double(z.h);
  return mean;
}

}  // namespace ref
