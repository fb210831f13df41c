#include "mha/pipeline/attention_analysis.hpp"
#include "mha/pipeline/seq2seq_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/base/thread_pool.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/kernel/packed_weights.hpp"
#include "mha/pipeline/site_hooks.hpp"

namespace mha {

void rollout_step(std::vector<double>& R, const float* mean, std::size_t B, std::size_t T,
                  bool first, int threads) {
  // Scratch kept from call to call (a pass calls once per layer, at one size);
  // the tasks below use this thread's, through these references.
  thread_local std::vector<double> kept_A, kept_next;
  std::vector<double>& A = kept_A;
  std::vector<double>& next = kept_next;
  A.resize(T * T);
  next.resize(first ? 0 : T * T);
  // Row blocks of the product, one task each (OpenBLAS runs one thread per call).
  const std::size_t block = 64, blocks = (T + block - 1) / block;
  for (std::size_t b = 0; b < B; ++b) {
    double* r = R.data() + b * T * T;
    // Causal maps: Â and every R so far lower triangular, so row block [i0, i1)
    // of the product needs only columns and inner indices below i1 (a third
    // of the multiply-adds; the rest is exactly 0).
    std::vector<unsigned char> upper(blocks, 0);  // a block's Â rows reach above the diagonal
    parallel_for(blocks, threads, [&](std::size_t k, int) {
      const std::size_t i0 = k * block, rows = std::min(block, T - i0);
      // Â = 0.5 A + 0.5 I, rows renormalised (a fully masked row, all zeros, becomes I's)
      for (std::size_t i = i0; i < i0 + rows; ++i) {
        double sum = 0;
        for (std::size_t j = 0; j < T; ++j) {
          A[i * T + j] = 0.5 * mean[(b * T + i) * T + j] + (i == j ? 0.5 : 0.0);
          sum += A[i * T + j];
          if (j > i && A[i * T + j] != 0.0) upper[k] = 1;
        }
        for (std::size_t j = 0; j < T; ++j) A[i * T + j] /= sum;
      }
    });
    bool lower = std::none_of(upper.begin(), upper.end(), [](unsigned char u) { return u; });
    for (std::size_t i = 0; lower && !first && i < T; ++i)
      for (std::size_t j = i + 1; lower && j < T; ++j) lower = r[i * T + j] == 0.0;
    if (!first)
      parallel_for(blocks, threads, [&](std::size_t k, int) {
        const std::size_t i0 = k * block, rows = std::min(block, T - i0);
        const std::size_t n = lower ? i0 + rows : T;  // inner size and columns computed
        double* out = next.data() + i0 * T;
        // next rows [i0, i0 + rows) (rows, n) = Â (rows, n) R (n, n); columns past n are 0
        gemm<double>(false, false, rows, n, n, 1.0, A.data() + i0 * T, T, r, T, 0.0, out, T);
        for (std::size_t i = 0; i < rows; ++i) std::fill(out + i * T + n, out + (i + 1) * T, 0.0);
      });
    std::copy(first ? A.begin() : next.begin(), first ? A.end() : next.end(), r);
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

std::vector<double> value_norms(const float* V, std::size_t ld, std::size_t B, std::size_t T,
                                const Weights<float>& w, std::size_t h, std::size_t kv_heads,
                                std::size_t head_dim, int threads) {
  // A bfloat16 pass's layer read packed (Checkpoint::layer) holds W_o as the
  // bfloat16 values its GEMM multiplies by: those, exactly.
  const Tensor<float, 2> unpacked = w.W_o.size() ? Tensor<float, 2>() : unpack_bf16(w.packed_o);
  const Tensor<float, 2>& W_o = w.W_o.size() ? w.W_o : unpacked;
  const std::size_t dv = head_dim, rows = B * T, d_out = W_o.shape()[1];
  const std::size_t group = h / kv_heads;
  std::vector<double> out(B * h * T);
  // Per head, in double: G_h (dv, dv) = W_o^h W_o^h^T, U (rows, dv) = V_g G_h,
  // then ||v W_o^h||^2 = v G_h v^T, the row-wise dot of U and V_g.
  parallel_for(h, threads, [&](std::size_t head, int) {
    const float* Wo = W_o.data() + head * dv * d_out;  // (dv, d_out)
    std::vector<double> Woh(Wo, Wo + dv * d_out), G(dv * dv), Vg(rows * dv), U(rows * dv);
    gemm<double>(false, true, dv, dv, d_out, 1.0, Woh.data(), d_out, Woh.data(), d_out, 0.0,
                 G.data(), dv);
    const std::size_t col = (head / group) * dv;
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(V + r * ld + col, dv, Vg.data() + r * dv);
    gemm<double>(false, false, rows, dv, dv, 1.0, Vg.data(), dv, G.data(), dv, 0.0, U.data(), dv);
    for (std::size_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (std::size_t a = 0; a < dv; ++a) sum += U[r * dv + a] * Vg[r * dv + a];
      out[((r / T) * h + head) * T + r % T] = std::sqrt(std::max(sum, 0.0));
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

namespace {

MapAnalysisResult one_stack_maps(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
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
  // Each thread's (T, T) rows of norms, kept for every layer.
  std::vector<std::vector<float>> scratch(
      o.norms ? static_cast<std::size_t>(resolve_threads(o.threads)) : 0,
      std::vector<float>(T * T));
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
      // mean (B, T, T): the heads' mean, each query row a task
      parallel_for(B * T, o.threads, [&](std::size_t bi, int) {
        const std::size_t b = bi / T, i = bi % T;
        float* m = mean.data() + (b * T + i) * T;
        std::fill(m, m + T, 0.0f);
        for (std::size_t head = 0; head < h; ++head) {
          const float* a = layer_maps.data() + ((b * h + head) * T + i) * T;
          for (std::size_t j = 0; j < T; ++j) m[j] += a[j] / float(h);
        }
      });
      rollout_step(R, mean.data(), B, T, l == 0, o.threads);
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t i = 0; i < T * T; ++i) row[i] = static_cast<float>(R[b * T * T + i]);
        if (o.rollout_sink) o.rollout_sink(MapKind::encoder, l, b, row.data());
      }
    }
    if (o.maps_sink)
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t head = 0; head < h; ++head)
          o.maps_sink(l, b, head, layer_maps.data() + (b * h + head) * T * T);
    const std::ptrdiff_t ls = slot_of(o.layers, l);
    // Each chosen head a task: its norms rows (to their sink, which takes
    // concurrent writes) and its detector scores (its own entries).
    if (ls >= 0 && (o.norms || o.detectors))
      parallel_for(Hs, o.threads, [&](std::size_t hs, int thread) {
        const std::size_t head = o.heads[hs];
        float* weighted = o.norms ? scratch[std::size_t(thread)].data() : nullptr;
        for (std::size_t b = 0; b < B; ++b) {
          const float* A = layer_maps.data() + (b * h + head) * T * T;
          if (o.norms) {
            const double* f = vnorms.data() + (b * h + head) * T;
            for (std::size_t i = 0; i < T; ++i)
              for (std::size_t j = 0; j < T; ++j)
                weighted[i * T + j] = static_cast<float>(A[i * T + j] * f[j]);
            if (o.norms_sink) o.norms_sink(MapKind::encoder, std::size_t(ls), b, hs, weighted);
          }
          if (o.detectors)
            for (std::size_t k = 0; k < dets.size(); ++k)  // TransformerLens: the mean over rows
              result.head_scores[(k * Ls + std::size_t(ls)) * Hs + hs] +=
                  detector_score(A, T, patterns[k * B + b], lengths[b]) / double(B);
        }
      });
    if (o.layer_done) o.layer_done(l);
  };
  ForwardOptions fo;
  fo.threads = o.threads;
  fo.layers = o.layers_read;
  fo.first_hidden = o.embeddings;
  HookList hooks;
  HiddenHook hidden(model, [&](Stack, std::size_t i, const float* x) { o.hidden_sink(i, x); });
  if (o.hidden_sink) hooks.add(&hidden);
  std::vector<std::size_t> all_layers(L);
  for (std::size_t l = 0; l < L; ++l) all_layers[l] = l;
  MapHook map_hook(h, all_layers, {},
                   [&](MapKind, std::size_t, std::size_t b, std::size_t head, std::size_t t0,
                       std::size_t rows, const float* block) {
                     std::copy_n(block, rows * T,
                                 layer_maps.data() + ((b * h + head) * T + t0) * T);
                   });
  const TransformerLayer<float>* weights = nullptr;  // the layer the pass is in
  fo.on_layer = [&](Stack, std::size_t l, const TransformerLayer<float>& w) {
    weights = &w;
    if (maps && l > 0) finish_layer(l - 1);
  };
  if (maps) hooks.add(&map_hook);
  SiteFunctions values;  // each chosen layer's value projection, for the norms
  values.want = [&](const Site& s) {
    return s.kind == SiteKind::v && slot_of(o.layers, s.layer) >= 0;
  };
  values.on_tensor = [&](const Site&, float* V, std::size_t, std::size_t, std::size_t ld) {
    vnorms = value_norms(V, ld, B, T, weights->self_attn, h, c.kv_heads, c.head_dim, o.threads);
  };
  if (o.norms) hooks.add(&values);
  fo.hook = hooks.empty() ? nullptr : &hooks;
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

}  // namespace

MapAnalysisResult analyze_maps(const Checkpoint& model, const PassInput& in,
                               const MapAnalysisOptions& o) {
  if (!in.has_decoder()) return one_stack_maps(model, in.ids, in.B, in.T, in.lengths, o);
  MapAnalysisResult r;
  r.forward = encoder_decoder_maps(model, in, o);
  return r;
}

}  // namespace mha
