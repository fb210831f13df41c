#include "mha/checkpoint/attention_analysis.hpp"

#include <cmath>
#include <limits>

#include "mha/base/thread_pool.hpp"
#include "mha/kernel/blas.hpp"

namespace mha {

void rollout_step(std::vector<double>& R, const float* mean, std::size_t B, std::size_t T,
                  bool first) {
  std::vector<double> A(T * T), next(T * T);
  for (std::size_t b = 0; b < B; ++b) {
    // Â = 0.5 A + 0.5 I, rows renormalised (a fully masked row, all zeros, becomes I's)
    for (std::size_t i = 0; i < T; ++i) {
      double sum = 0;
      for (std::size_t j = 0; j < T; ++j) {
        A[i * T + j] = 0.5 * mean[(b * T + i) * T + j] + (i == j ? 0.5 : 0.0);
        sum += A[i * T + j];
      }
      for (std::size_t j = 0; j < T; ++j) A[i * T + j] /= sum;
    }
    double* r = R.data() + b * T * T;
    if (first) {
      std::copy(A.begin(), A.end(), r);
      continue;
    }
    // next (T, T) = Â (T, T) R (T, T)
    gemm<double>(false, false, T, T, T, 1.0, A.data(), T, r, T, 0.0, next.data(), T);
    std::copy(next.begin(), next.end(), r);
  }
}

std::vector<double> value_norms(const float* x, std::size_t B, std::size_t T,
                                const Weights<float>& w, std::size_t h, std::size_t kv_heads,
                                std::size_t head_dim, int threads) {
  const std::size_t d = w.W_v.shape()[0], dv = head_dim, kdv = kv_heads * dv, rows = B * T;
  const std::size_t d_out = w.W_o.shape()[1];
  // ||v W_o^h||^2 = v G_h v^T with G_h = W_o^h W_o^h^T (dv, dv), in double
  std::vector<double> G(h * dv * dv, 0.0);
  parallel_for(h, threads, [&](std::size_t head, int) {
    const float* Wo = w.W_o.data() + head * dv * d_out;  // rows [head*dv, (head+1)*dv)
    for (std::size_t a = 0; a < dv; ++a)
      for (std::size_t c = 0; c <= a; ++c) {
        double s = 0;
        for (std::size_t o = 0; o < d_out; ++o) s += double(Wo[a * d_out + o]) * Wo[c * d_out + o];
        G[(head * dv + a) * dv + c] = G[(head * dv + c) * dv + a] = s;
      }
  });
  // V (rows, kv_heads * dv) = x W_v + b_v
  std::vector<float> V(rows * kdv);
  gemm<float>(false, false, rows, kdv, d, 1.0f, x, d, w.W_v.data(), kdv, 0.0f, V.data(), kdv);
  if (w.b_v.size())
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < kdv; ++i) V[r * kdv + i] += w.b_v(i);
  std::vector<double> out(B * h * T);
  const std::size_t group = h / kv_heads;
  parallel_for(rows, threads, [&](std::size_t r, int) {
    const std::size_t b = r / T, t = r % T;
    for (std::size_t head = 0; head < h; ++head) {
      const float* v = V.data() + r * kdv + (head / group) * dv;
      const double* g = G.data() + head * dv * dv;
      double s = 0;
      for (std::size_t a = 0; a < dv; ++a) {
        double row = 0;
        for (std::size_t c = 0; c < dv; ++c) row += g[a * dv + c] * v[c];
        s += v[a] * row;
      }
      out[(b * h + head) * T + t] = std::sqrt(std::max(s, 0.0));
    }
  });
  return out;
}

const std::vector<Detector>& all_detectors() {
  static const std::vector<Detector> all = {Detector::previous_token, Detector::duplicate_token,
                                            Detector::induction};
  return all;
}

const char* to_string(Detector d) {
  switch (d) {
    case Detector::previous_token:
      return "previous_token";
    case Detector::duplicate_token:
      return "duplicate_token";
    case Detector::induction:
      return "induction";
  }
  return "?";
}

std::vector<unsigned char> detection_pattern(Detector d, const std::int32_t* ids, std::size_t n) {
  std::vector<unsigned char> P(n * n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      bool on = false;
      if (d == Detector::previous_token) on = j + 1 == i;
      if (d == Detector::duplicate_token) on = j < i && ids[j] == ids[i];
      // the duplicate pattern shifted one key to the right: key j follows an earlier copy of
      // query i's token
      if (d == Detector::induction) on = j >= 1 && j - 1 < i && ids[j - 1] == ids[i];
      P[i * n + j] = on;
    }
  return P;
}

double detector_score(const float* A, std::size_t T, const std::vector<unsigned char>& P,
                      std::size_t n) {
  double hit = 0, all = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      all += A[i * T + j];
      if (P[i * n + j]) hit += A[i * T + j];
    }
  return all > 0 ? hit / all : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace mha
