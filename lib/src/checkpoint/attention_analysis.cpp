#include "mha/checkpoint/attention_analysis.hpp"

#include <algorithm>
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

namespace {

// Dinic's max flow on a graph with double capacities.
class MaxFlow {
 public:
  explicit MaxFlow(std::size_t nodes) : adj_(nodes), level_(nodes), next_(nodes) {}
  void add(std::size_t from, std::size_t to, double cap) {
    adj_[from].push_back(edges_.size());
    edges_.push_back({to, cap});
    adj_[to].push_back(edges_.size());
    edges_.push_back({from, 0});
  }
  // Restores every capacity (flows from an earlier run undone).
  void reset() {
    for (std::size_t e = 0; e < edges_.size(); e += 2) {
      edges_[e].cap += edges_[e + 1].cap;
      edges_[e + 1].cap = 0;
    }
  }
  double run(std::size_t s, std::size_t t) {
    double total = 0;
    while (levels(s, t)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (const double f = push(s, t, std::numeric_limits<double>::infinity())) total += f;
    }
    return total;
  }

 private:
  struct Edge {
    std::size_t to;
    double cap;
  };
  static constexpr double kEps = 1e-15;
  bool levels(std::size_t s, std::size_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<std::size_t> queue = {s};
    level_[s] = 0;
    for (std::size_t q = 0; q < queue.size(); ++q)
      for (std::size_t e : adj_[queue[q]])
        if (edges_[e].cap > kEps && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[queue[q]] + 1;
          queue.push_back(edges_[e].to);
        }
    return level_[t] >= 0;
  }
  double push(std::size_t u, std::size_t t, double f) {
    if (u == t) return f;
    for (std::size_t& i = next_[u]; i < adj_[u].size(); ++i) {
      Edge& e = edges_[adj_[u][i]];
      if (e.cap <= kEps || level_[e.to] != level_[u] + 1) continue;
      if (const double got = push(e.to, t, std::min(f, e.cap))) {
        e.cap -= got;
        edges_[adj_[u][i] ^ 1].cap += got;
        return got;
      }
    }
    return 0;
  }
  std::vector<Edge> edges_;
  std::vector<std::vector<std::size_t>> adj_;
  std::vector<int> level_;
  std::vector<std::size_t> next_;
};

}  // namespace

std::vector<double> attention_flow(const std::vector<std::vector<double>>& layers, std::size_t n) {
  const std::size_t L = layers.size();
  MaxFlow g((L + 1) * n);
  for (std::size_t l = 1; l <= L; ++l) {
    const std::vector<double>& A = layers[l - 1];
    for (std::size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (std::size_t j = 0; j < n; ++j) sum += 0.5 * A[i * n + j] + (i == j ? 0.5 : 0.0);
      for (std::size_t j = 0; j < n; ++j) {
        const double cap = (0.5 * A[i * n + j] + (i == j ? 0.5 : 0.0)) / sum;
        if (cap > 0) g.add((l - 1) * n + j, l * n + i, cap);
      }
    }
  }
  std::vector<double> flow(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      g.reset();
      flow[i * n + j] = g.run(j, L * n + i);
    }
  return flow;
}

std::vector<double> value_norms(const float* x, std::size_t B, std::size_t T,
                                const Weights<float>& w, std::size_t h, std::size_t kv_heads,
                                std::size_t head_dim, int /*threads: BLAS's own*/) {
  const std::size_t d = w.W_v.shape()[0], dv = head_dim, kdv = kv_heads * dv, rows = B * T;
  const std::size_t d_out = w.W_o.shape()[1];
  // ||v W_o^h||^2 = v G_h v^T with G_h = W_o^h W_o^h^T (dv, dv), in double
  std::vector<double> Wo(w.W_o.data(), w.W_o.data() + h * dv * d_out), G(h * dv * dv);
  for (std::size_t head = 0; head < h; ++head)  // G_h (dv, dv) = Wo_h (dv, d_out) Wo_h^T
    gemm<double>(false, true, dv, dv, d_out, 1.0, Wo.data() + head * dv * d_out, d_out,
                 Wo.data() + head * dv * d_out, d_out, 0.0, G.data() + head * dv * dv, dv);
  // V (rows, kv_heads * dv) = x W_v + b_v
  std::vector<float> V(rows * kdv);
  gemm<float>(false, false, rows, kdv, d, 1.0f, x, d, w.W_v.data(), kdv, 0.0f, V.data(), kdv);
  if (w.b_v.size())
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < kdv; ++i) V[r * kdv + i] += w.b_v(i);
  std::vector<double> out(B * h * T);
  const std::size_t group = h / kv_heads;
  // Per head: U (rows, dv) = V_g G_h, then ||f||^2 = the row-wise dot of U and V_g.
  const std::vector<double> Vd(V.begin(), V.end());
  std::vector<double> U(rows * dv);
  for (std::size_t head = 0; head < h; ++head) {
    const double* Vg = Vd.data() + (head / group) * dv;  // rows of stride kdv
    gemm<double>(false, false, rows, dv, dv, 1.0, Vg, kdv, G.data() + head * dv * dv, dv, 0.0,
                 U.data(), dv);
    for (std::size_t r = 0; r < rows; ++r) {
      double s = 0;
      for (std::size_t a = 0; a < dv; ++a) s += U[r * dv + a] * Vg[r * kdv + a];
      out[((r / T) * h + head) * T + r % T] = std::sqrt(std::max(s, 0.0));
    }
  }
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

MapAnalysisResult analyze_maps(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                               std::size_t T, const std::vector<std::size_t>& lengths,
                               const MapAnalysisOptions& o) {
  const ModelConfig& c = model.config();
  const std::size_t L = c.num_layers, h = c.h, Ls = o.layers.size(), Hs = o.heads.size();
  const bool maps = o.rollout || o.norms || o.detectors || o.flow || o.maps_sink;
  // flow: every layer's heads' mean over each row's real tokens, (n_b, n_b)
  std::vector<std::vector<std::vector<double>>> flow_maps(o.flow ? B : 0);
  std::vector<float> layer_maps(maps ? B * h * T * T : 0), row(T * T), mean(B * T * T);
  std::vector<double> R(o.rollout ? B * T * T : 0), vnorms;  // vnorms (B, h, T)
  const auto& dets = all_detectors();
  MapAnalysisResult result;
  result.head_scores.assign(o.detectors ? dets.size() * Ls * Hs : 0, 0.0);
  std::vector<std::vector<unsigned char>> patterns;  // [detector * B + b]: (n_b, n_b)
  if (o.detectors)
    for (Detector det : dets)
      for (std::size_t b = 0; b < B; ++b)
        patterns.push_back(detection_pattern(det, ids + b * T, lengths[b]));
  auto slot_of = [](const std::vector<std::size_t>& v, std::size_t x) -> std::ptrdiff_t {
    auto it = std::lower_bound(v.begin(), v.end(), x);
    return it != v.end() && *it == x ? it - v.begin() : -1;
  };
  // Layer l's maps are complete: fold them into each method's arrays.
  auto finish_layer = [&](std::size_t l) {
    if (o.flow)
      for (std::size_t b = 0; b < B; ++b) {
        const std::size_t n = lengths[b];
        std::vector<double> m(n * n, 0.0);
        for (std::size_t head = 0; head < h; ++head)
          for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < n; ++j)
              m[i * n + j] += layer_maps[((b * h + head) * T + i) * T + j] / double(h);
        flow_maps[b].push_back(std::move(m));
      }
    if (o.rollout) {
      std::fill(mean.begin(), mean.end(), 0.0f);
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t head = 0; head < h; ++head)
          for (std::size_t i = 0; i < T * T; ++i)
            mean[b * T * T + i] += layer_maps[(b * h + head) * T * T + i] / float(h);
      rollout_step(R, mean.data(), B, T, l == 0);
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t i = 0; i < T * T; ++i) row[i] = static_cast<float>(R[b * T * T + i]);
        if (o.rollout_sink) o.rollout_sink(l, b, row.data());
      }
    }
    if (o.maps_sink)
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t head = 0; head < h; ++head)
          o.maps_sink(l, b, head, layer_maps.data() + (b * h + head) * T * T);
    const std::ptrdiff_t ls = slot_of(o.layers, l);
    if (ls >= 0)
      for (std::size_t hs = 0; hs < Hs; ++hs) {
        const std::size_t head = o.heads[hs];
        for (std::size_t b = 0; b < B; ++b) {
          const float* A = layer_maps.data() + (b * h + head) * T * T;
          if (o.norms) {
            const double* f = vnorms.data() + (b * h + head) * T;
            for (std::size_t i = 0; i < T; ++i)
              for (std::size_t j = 0; j < T; ++j)
                row[i * T + j] = static_cast<float>(A[i * T + j] * f[j]);
            if (o.norms_sink) o.norms_sink(std::size_t(ls), b, hs, row.data());
          }
          if (o.detectors)
            for (std::size_t k = 0; k < dets.size(); ++k)  // TransformerLens: the mean over rows
              result.head_scores[(k * Ls + std::size_t(ls)) * Hs + hs] +=
                  detector_score(A, T, patterns[k * B + b], lengths[b]) / double(B);
        }
      }
    if (o.layer_done) o.layer_done(l);
  };
  ForwardOptions fo;
  fo.threads = o.threads;
  fo.hidden_sink = o.hidden_sink;
  fo.layers = o.layers_read;
  if (maps) {
    for (std::size_t l = 0; l < L; ++l) fo.map_layers.push_back(l);
    for (std::size_t i = 0; i < h; ++i) fo.map_heads.push_back(i);
    fo.attention_sink = [&](std::size_t, std::size_t b, std::size_t head, std::size_t t0,
                            std::size_t rows, const float* block) {
      std::copy_n(block, rows * T, layer_maps.data() + ((b * h + head) * T + t0) * T);
    };
    fo.on_layer = [&](std::size_t l) {
      if (l > 0) finish_layer(l - 1);
    };
  }
  if (o.norms)
    fo.attention_input = [&](std::size_t l, const float* x, const TransformerLayer<float>& layer) {
      if (slot_of(o.layers, l) >= 0)
        vnorms = value_norms(x, B, T, layer.self_attn, h, c.kv_heads, c.head_dim, o.threads);
    };
  result.forward = forward(model, ids, B, T, lengths, fo);
  if (maps && L > 0) finish_layer(L - 1);
  if (o.flow) {
    result.flow.assign(B * T * T, 0.0f);
    for (std::size_t b = 0; b < B; ++b) {
      const std::size_t n = lengths[b];
      const std::vector<double> f = attention_flow(flow_maps[b], n);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j)
          result.flow[(b * T + i) * T + j] = static_cast<float>(f[i * n + j]);
    }
  }
  return result;
}

}  // namespace mha
