#include "mha/attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "mha/blas.hpp"

namespace mha {
namespace {

// Y (rows, n) = X (rows, k) W (k, n) + b (n): the bias is broadcast into Y
// first so that one GEMM with beta = 1 adds the product.
template <class T>
void project(const T* X, std::size_t rows, std::size_t k, const xt::xtensor<T, 2>& W,
             const xt::xtensor<T, 1>& b, T* Y) {
  const std::size_t n = W.shape()[1];
  T beta = 0;
  if (b.size() > 0) {
    for (std::size_t r = 0; r < rows; ++r) std::copy(b.data(), b.data() + n, Y + r * n);
    beta = 1;
  }
  gemm<T>(false, false, rows, n, k, T(1), X, k, W.data(), n, beta, Y, n);
}

}  // namespace

template <class T>
void softmax_rows(T* x, std::size_t rows, std::size_t cols, std::size_t ld, MaskedRows policy) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = x + r * ld;
    T max = neg_inf;
    for (std::size_t c = 0; c < cols; ++c) max = std::max(max, row[c]);
    if (max == neg_inf) {
      // Every key masked: softmax is 0/0 here, so the policy decides.
      T fill = policy == MaskedRows::zero      ? T(0)
               : policy == MaskedRows::uniform ? T(1) / static_cast<T>(cols)
                                               : std::numeric_limits<T>::quiet_NaN();
      std::fill(row, row + cols, fill);
      continue;
    }
    T sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      row[c] = std::exp(row[c] - max);
      sum += row[c];
    }
    const T inv = T(1) / sum;
    for (std::size_t c = 0; c < cols; ++c) row[c] *= inv;
  }
}

template <class T>
void multi_head_attention(const Dims& d, const T* X_q, const T* X_k, const T* X_v,
                          const Weights<T>& w, const Mask<T>& mask, T scale, MaskedRows policy,
                          T* output, T* attention, T* attention_mean) {
  const std::size_t hdk = d.h * d.d_k, hdv = d.h * d.d_v;
  // Q (B*T, h*d_k), K (B*S, h*d_k), V (B*S, h*d_v): all rows in one GEMM each.
  std::vector<T> Q(d.B * d.T * hdk), K(d.B * d.S * hdk), V(d.B * d.S * hdv);
  project(X_q, d.B * d.T, d.d_model, w.W_q, w.b_q, Q.data());
  project(X_k, d.B * d.S, d.kdim, w.W_k, w.b_k, K.data());
  project(X_v, d.B * d.S, d.vdim, w.W_v, w.b_v, V.data());

  // context (B*T, h*d_v): head i's output A_i V_i in columns [i*d_v, (i+1)*d_v).
  std::vector<T> context(d.B * d.T * hdv);
  std::vector<T> scratch(attention ? 0 : d.T * d.S);
  if (attention_mean) std::fill(attention_mean, attention_mean + d.B * d.T * d.S, T(0));
  const T inv_h = T(1) / static_cast<T>(d.h);

  for (std::size_t b = 0; b < d.B; ++b) {
    for (std::size_t i = 0; i < d.h; ++i) {
      // Q_i (T, d_k) and K_i (S, d_k) are strided views: leading dimension h*d_k.
      const T* Q_i = Q.data() + b * d.T * hdk + i * d.d_k;
      const T* K_i = K.data() + b * d.S * hdk + i * d.d_k;
      const T* V_i = V.data() + b * d.S * hdv + i * d.d_v;
      T* A_i = attention ? attention + (b * d.h + i) * d.T * d.S : scratch.data();
      // A_i (T, S) = scale * Q_i K_i^T, then mask and softmax in place.
      gemm<T>(false, true, d.T, d.S, d.d_k, scale, Q_i, hdk, K_i, hdk, T(0), A_i, d.S);
      if (!mask.empty()) mask.apply(d, b, i, 0, d.T, A_i, d.S);
      softmax_rows(A_i, d.T, d.S, d.S, policy);
      // context[b, :, i*d_v:(i+1)*d_v] (T, d_v) = A_i V_i
      gemm<T>(false, false, d.T, d.d_v, d.S, T(1), A_i, d.S, V_i, hdv, T(0),
              context.data() + b * d.T * hdv + i * d.d_v, hdv);
      if (attention_mean) {
        T* mean = attention_mean + b * d.T * d.S;
        for (std::size_t j = 0; j < d.T * d.S; ++j) mean[j] += A_i[j] * inv_h;
      }
    }
  }
  // output (B*T, d_out) = context W_o + b_o
  project(context.data(), d.B * d.T, hdv, w.W_o, w.b_o, output);
}

#define MHA_INSTANTIATE(T)                                                                        \
  template void multi_head_attention<T>(const Dims&, const T*, const T*, const T*,                \
                                        const Weights<T>&, const Mask<T>&, T, MaskedRows, T*, T*, \
                                        T*);                                                      \
  template void softmax_rows<T>(T*, std::size_t, std::size_t, std::size_t, MaskedRows);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
