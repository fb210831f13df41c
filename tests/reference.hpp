// A plain reference multi-head attention (llm.c style): nested loops in
// double precision, no BLAS and no xtensor math, written straight from the
// definition in README / attention.hpp so that the kernel can be held
// against something that shares none of its code. In particular the mask is
// built here from the causal / explicit-mask / key_lengths rules, not by
// mha::Mask::apply.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "mha/config.hpp"  // only for the Causal and MaskedRows enum labels

namespace ref {

struct Sizes {
  std::size_t B = 1, T = 1, S = 1, h = 1;
  std::size_t d_model = 1, d_k = 1, d_v = 1, kdim = 1, vdim = 1, d_out = 1;
};

// Projection weights, row-major (x @ W):
//   W_q (d_model, h*d_k)  b_q (h*d_k) or empty
//   W_k (kdim,    h*d_k)  b_k (h*d_k) or empty
//   W_v (vdim,    h*d_v)  b_v (h*d_v) or empty
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
struct MaskSpec {
  mha::Causal causal = mha::Causal::none;
  std::vector<std::size_t> shape;
  std::vector<double> values;
  bool is_float = false;
  std::vector<std::int64_t> key_lengths;

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
    if (!shape.empty() && !is_float && entry(z, b, head, t, s) == 0.0) return false;
    return true;
  }

  double bias(const Sizes& z, std::size_t b, std::size_t head, std::size_t t, std::size_t s) const {
    return !shape.empty() && is_float ? entry(z, b, head, t, s) : 0.0;
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

  // Projections: Q (B, T, h*d_k), K (B, S, h*d_k), V (B, S, h*d_v).
  const std::vector<double> Q = affine(X_q, B * T, z.d_model, p.W_q, p.b_q, hdk);
  const std::vector<double> K = affine(X_k, B * S, z.kdim, p.W_k, p.b_k, hdk);
  const std::vector<double> V = affine(X_v, B * S, z.vdim, p.W_v, p.b_v, hdv);

  Result r;
  r.attention.assign(B * h * T * S, 0.0);
  std::vector<double> context(B * T * hdv, 0.0);  // concat_i(A_i V_i)
  std::vector<double> logits(S);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t i = 0; i < h; ++i) {
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
            dot += Q[(b * T + t) * hdk + i * d_k + e] * K[(b * S + s) * hdk + i * d_k + e];
          logits[s] = scale * dot + mask.bias(z, b, i, t, s);
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
          for (std::size_t s = 0; s < S; ++s) acc += att[s] * V[(b * S + s) * hdv + i * d_v + e];
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
