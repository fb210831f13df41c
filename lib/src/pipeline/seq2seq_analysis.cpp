#include "mha/pipeline/seq2seq_analysis.hpp"

#include "mha/pipeline/site_hooks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/kernel/blas.hpp"
#include "mha/pipeline/attention_analysis.hpp"
#include "mha/pipeline/lens.hpp"

namespace mha {

namespace {

std::ptrdiff_t slot_of(const std::vector<std::size_t>& v, std::size_t x) {
  const auto it = std::lower_bound(v.begin(), v.end(), x);
  return it != v.end() && *it == x ? it - v.begin() : -1;
}

std::vector<std::size_t> up_to(std::size_t n) {
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  return all;
}

// A map kind's query and key lengths.
std::size_t queries_of(MapKind k, const PassInput& in) {
  return k == MapKind::encoder ? in.T : in.target_T;
}
std::size_t keys_of(MapKind k, const PassInput& in) {
  return k == MapKind::decoder ? in.target_T : in.T;
}

// The heads' mean of one layer's maps A (B, h, Lq, Lk): out (B, Lq, Lk), in
// float as attention_analysis.cpp's rollout takes it.
void heads_mean(const std::vector<float>& A, std::size_t B, std::size_t h, std::size_t Lq,
                std::size_t Lk, std::vector<float>& out, int threads) {
  out.assign(B * Lq * Lk, 0.0f);
  parallel_for(B * Lq, threads, [&](std::size_t bi, int) {
    const std::size_t b = bi / Lq, i = bi % Lq;
    float* m = out.data() + bi * Lk;
    for (std::size_t head = 0; head < h; ++head) {
      const float* a = A.data() + ((b * h + head) * Lq + i) * Lk;
      for (std::size_t j = 0; j < Lk; ++j) m[j] += a[j] / float(h);
    }
  });
}

}  // namespace

ForwardResult encoder_decoder_maps(const Checkpoint& model, const PassInput& in,
                                   const MapAnalysisOptions& o) {
  const ModelConfig& c = model.config();
  const std::size_t B = in.B, S = in.T, T = in.target_T, h = c.h;
  const std::size_t Le = c.num_layers, Ld = c.num_decoder_layers, Hs = o.heads.size();
  const int threads = resolve_threads(o.threads);
  const MapKind kinds[3] = {MapKind::encoder, MapKind::decoder, MapKind::cross};
  // One layer's maps of each kind (B, h, Lq, Lk) and value norms (B, h, Lk).
  std::vector<float> maps[3];
  std::vector<double> vnorms[3];
  for (MapKind k : kinds) maps[int(k)].assign(B * h * queries_of(k, in) * keys_of(k, in), 0.0f);
  // Rollouts: the encoder's R (B, S, S); the decoder's M = [Mt (B, T, T) | Ms (B, T, S)].
  std::vector<double> R(o.rollout ? B * S * S : 0), Mt(o.rollout ? B * T * T : 0),
      Ms(o.rollout ? B * T * S : 0);
  std::vector<float> mean, cross_mean, row;

  auto norms = [&](MapKind k, std::size_t l) {
    const std::ptrdiff_t ls = slot_of(o.layers, l);
    if (!o.norms || ls < 0) return;
    const std::size_t Lq = queries_of(k, in), Lk = keys_of(k, in);
    std::vector<std::vector<float>> scratch(static_cast<std::size_t>(threads),
                                            std::vector<float>(Lq * Lk));
    parallel_for(Hs, threads, [&](std::size_t hs, int thread) {
      const std::size_t head = o.heads[hs];
      float* weighted = scratch[std::size_t(thread)].data();
      for (std::size_t b = 0; b < B; ++b) {
        const float* A = maps[int(k)].data() + (b * h + head) * Lq * Lk;
        const double* f = vnorms[int(k)].data() + (b * h + head) * Lk;
        for (std::size_t i = 0; i < Lq; ++i)
          for (std::size_t j = 0; j < Lk; ++j)
            weighted[i * Lk + j] = static_cast<float>(A[i * Lk + j] * f[j]);
        if (o.norms_sink) o.norms_sink(k, std::size_t(ls), b, hs, weighted);
      }
    });
  };
  auto finish_encoder = [&](std::size_t l) {
    if (o.rollout) {
      heads_mean(maps[int(MapKind::encoder)], B, h, S, S, mean, threads);
      rollout_step(R, mean.data(), B, S, l == 0, threads);
      row.resize(S * S);
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t i = 0; i < S * S; ++i) row[i] = static_cast<float>(R[b * S * S + i]);
        if (o.rollout_sink) o.rollout_sink(MapKind::encoder, l, b, row.data());
      }
    }
    norms(MapKind::encoder, l);
  };
  auto finish_decoder = [&](std::size_t l) {
    if (o.rollout) {
      heads_mean(maps[int(MapKind::decoder)], B, h, T, T, mean, threads);
      heads_mean(maps[int(MapKind::cross)], B, h, T, S, cross_mean, threads);
      std::vector<double> A(T * T), nt(T * T), ns(T * S), C(T * S), Cm(T * S);
      for (std::size_t b = 0; b < B; ++b) {
        // Â = 0.5 A + 0.5 I, rows renormalised, as the encoder's
        for (std::size_t i = 0; i < T; ++i) {
          double sum = 0;
          for (std::size_t j = 0; j < T; ++j) {
            A[i * T + j] = 0.5 * mean[(b * T + i) * T + j] + (i == j ? 0.5 : 0.0);
            sum += A[i * T + j];
          }
          for (std::size_t j = 0; j < T; ++j) A[i * T + j] /= sum;
        }
        double* mt = Mt.data() + b * T * T;
        double* ms = Ms.data() + b * T * S;
        if (l == 0) {  // M = [I | 0]: Â M = [Â | 0]
          nt = A;
          std::fill(ns.begin(), ns.end(), 0.0);
        } else {
          // [nt | ns] (T, T + S) = Â (T, T) [Mt | Ms]
          gemm<double>(false, false, T, T, T, 1.0, A.data(), T, mt, T, 0.0, nt.data(), T);
          gemm<double>(false, false, T, S, T, 1.0, A.data(), T, ms, S, 0.0, ns.data(), S);
        }
        // C (T, S) = Ā_cross (T, S) R_enc (S, S)
        for (std::size_t i = 0; i < T * S; ++i) Cm[i] = cross_mean[b * T * S + i];
        gemm<double>(false, false, T, S, S, 1.0, Cm.data(), S, R.data() + b * S * S, S, 0.0,
                     C.data(), S);
        for (std::size_t i = 0; i < T * T; ++i) mt[i] = 0.5 * nt[i];
        for (std::size_t i = 0; i < T * S; ++i) ms[i] = 0.5 * ns[i] + 0.5 * C[i];
        row.resize(T * std::max(T, S));
        for (std::size_t i = 0; i < T * T; ++i) row[i] = static_cast<float>(mt[i]);
        if (o.rollout_sink) o.rollout_sink(MapKind::decoder, l, b, row.data());
        for (std::size_t i = 0; i < T * S; ++i) row[i] = static_cast<float>(ms[i]);
        if (o.rollout_sink) o.rollout_sink(MapKind::cross, l, b, row.data());
      }
    }
    norms(MapKind::decoder, l);
    norms(MapKind::cross, l);
  };

  ForwardOptions so;
  so.threads = threads;
  HookList hooks;
  MapHook maps_hook(h, up_to(std::max(Le, Ld)), {},
                    [&](MapKind k, std::size_t, std::size_t b, std::size_t head, std::size_t t0,
                        std::size_t rows, const float* block) {
                      const std::size_t Lq = queries_of(k, in), Lk = keys_of(k, in);
                      std::copy_n(block, rows * Lk,
                                  maps[int(k)].data() + ((b * h + head) * Lq + t0) * Lk);
                    });
  const TransformerLayer<float>* weights = nullptr;  // the layer the pass is in
  if (o.rollout || o.norms) {
    hooks.add(&maps_hook);
    so.on_layer = [&](Stack stack, std::size_t l, const TransformerLayer<float>& w) {
      weights = &w;
      if (stack == Stack::main && l > 0) finish_encoder(l - 1);
      if (stack == Stack::decoder && l == 0) finish_encoder(Le - 1);
      if (stack == Stack::decoder && l > 0) finish_decoder(l - 1);
    };
  }
  SiteFunctions values;  // each chosen layer's value projections, for the norms
  values.want = [&](const Site& s) {
    return (s.kind == SiteKind::v || s.kind == SiteKind::cross_v) &&
           slot_of(o.layers, s.layer) >= 0;
  };
  values.on_tensor = [&](const Site& s, float* V, std::size_t, std::size_t, std::size_t ld) {
    const MapKind k = s.kind == SiteKind::cross_v ? MapKind::cross
                      : s.stack == Stack::decoder ? MapKind::decoder
                                                  : MapKind::encoder;
    const Weights<float>& w = k == MapKind::cross ? weights->cross_attn : weights->self_attn;
    vnorms[int(k)] = value_norms(V, ld, B, keys_of(k, in), w, h, c.kv_heads, c.head_dim, threads);
  };
  if (o.norms) hooks.add(&values);
  so.hook = hooks.empty() ? nullptr : &hooks;
  ForwardResult r = forward(model, in.ids, B, S, in.lengths,
                            DecoderInput{in.decoder_ids, T, in.target_lengths}, so);
  if ((o.rollout || o.norms) && Ld > 0) finish_decoder(Ld - 1);
  return r;
}

std::vector<double> target_token_loss(const Checkpoint& model, const float* output,
                                      const PassInput& in, int threads) {
  const std::size_t T = in.target_T, V = model.config().vocab_size;
  std::vector<double> loss(in.B * T, std::numeric_limits<double>::quiet_NaN());
  seq2seq_logits(
      model, output, in.B * T,
      [&](std::size_t r0, std::size_t n, const float* logits) {
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t r = r0 + i, b = r / T, t = r % T;
          if (t >= in.target_lengths[b]) continue;
          const float* z = logits + i * V;
          const std::int32_t label = in.labels[r];
          if (label < 0 || std::size_t(label) >= V)
            fail_input("target: token id " + std::to_string(label) + " at [" + std::to_string(b) +
                       ", " + std::to_string(t) + "] is outside the vocabulary (vocab_size " +
                       std::to_string(V) + " in config.json)");
          loss[r] = -softmax_of(z, V).log_p(z[label]);
        }
      },
      threads);
  return loss;
}

namespace {

// The metric of a pass's decoder output, per row; kl's reference
// distribution (B, V) at each row's last target position kept from the
// clean pass.
class TargetProbe {
 public:
  TargetProbe(const Checkpoint& model, const PassInput& in, const InterventionOptions& o)
      : model_(model), in_(in), o_(o) {
    const ModelConfig& c = model.config();
    if (!c.has_lm_head())
      fail_input(model.dir() + ": a " + c.model_type +
                 " has no LM head; ablation measures the target's predictions");
    if (o.metric == Metric::logit_diff &&
        (o.target < 0 || o.foil < 0 || std::size_t(o.target) >= c.vocab_size ||
         std::size_t(o.foil) >= c.vocab_size))
      fail_input("--metric logit_diff: expected --target and --foil tokens in the vocabulary");
  }

  std::vector<double> operator()(const std::vector<float>& output, bool keep) {
    const std::size_t B = in_.B, T = in_.target_T, d = model_.config().d_model,
                      V = model_.config().vocab_size;
    std::vector<double> out(B, 0.0);
    if (o_.metric == Metric::loss) {
      const std::vector<double> loss = target_token_loss(model_, output.data(), in_, o_.threads);
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < in_.target_lengths[b]; ++t) out[b] += loss[b * T + t];
        out[b] /= double(in_.target_lengths[b]);
      }
      return out;
    }
    std::vector<float> last(B * d);  // each row's last target position
    for (std::size_t b = 0; b < B; ++b)
      std::copy_n(output.data() + (b * T + in_.target_lengths[b] - 1) * d, d, last.data() + b * d);
    if (keep) clean_logp_.assign(B * V, 0.0);
    seq2seq_logits(
        model_, last.data(), B,
        [&](std::size_t r0, std::size_t n, const float* z) {
          for (std::size_t i = 0; i < n; ++i) {
            const std::size_t b = r0 + i;
            const float* row = z + i * V;
            if (o_.metric == Metric::logit_diff) {
              out[b] = double(row[o_.target]) - double(row[o_.foil]);
              continue;
            }
            const Softmax sm = softmax_of(row, V);
            double kl = 0;
            for (std::size_t v = 0; v < V; ++v) {
              const double lp = sm.log_p(row[v]);
              if (keep) clean_logp_[b * V + v] = lp;
              const double lq = clean_logp_[b * V + v];
              kl += std::exp(lq) * (lq - lp);
            }
            out[b] = kl;
          }
        },
        o_.threads);
    return out;
  }

 private:
  const Checkpoint& model_;
  const PassInput& in_;
  const InterventionOptions& o_;
  std::vector<double> clean_logp_;
};

}  // namespace

AblationResult encoder_decoder_ablation(const Checkpoint& model, const PassInput& in, Ablation kind,
                                        const InterventionOptions& o) {
  const ModelConfig& c = model.config();
  TargetProbe probe(model, in, o);
  const std::size_t B = in.B, dv = c.head_dim, width = c.h * dv;
  AblationResult r;
  r.layers = o.layers.empty() ? up_to(std::max(c.num_layers, c.num_decoder_layers)) : o.layers;
  r.heads = o.heads.empty() ? up_to(c.h) : o.heads;
  const DecoderInput decoder{in.decoder_ids, in.target_T, in.target_lengths};
  auto run = [&](const ForwardOptions& so) {
    ++r.passes;
    return forward(model, in.ids, B, in.T, in.lengths, decoder, so);
  };
  ForwardOptions base;
  base.threads = o.threads;
  base.layers = o.layers_read;
  base.decoder_layers = o.decoder_layers_read;
  // The clean pass keeps each decoder layer's input: an intervention in
  // decoder layer l reruns the decoder from l on.
  const std::size_t n = B * in.target_T * c.d_model;
  std::vector<float> decoder_inputs(c.num_decoder_layers * n);
  ForwardOptions first = base;
  HiddenHook hidden(model, [&](Stack stack, std::size_t i, const float* x) {
    if (stack == Stack::decoder && i < c.num_decoder_layers)
      std::copy_n(x, n, decoder_inputs.begin() + static_cast<std::ptrdiff_t>(i * n));
  });
  first.hook = &hidden;
  const ForwardResult clean = run(first);
  r.clean = probe(clean.output, true);
  if (o.metric == Metric::kl) std::fill(r.clean.begin(), r.clean.end(), 0.0);
  const std::size_t H = r.heads.size();
  const MapKind kinds[3] = {MapKind::encoder, MapKind::decoder, MapKind::cross};
  std::size_t total = 0, done = 0;
  for (MapKind k : kinds) {
    const std::size_t stack = k == MapKind::encoder ? c.num_layers : c.num_decoder_layers;
    total +=
        std::size_t(std::lower_bound(r.layers.begin(), r.layers.end(), stack) - r.layers.begin()) *
        H;
  }
  for (MapKind k : kinds) {
    const std::size_t stack = k == MapKind::encoder ? c.num_layers : c.num_decoder_layers;
    const std::size_t Ls =
        std::size_t(std::lower_bound(r.layers.begin(), r.layers.end(), stack) - r.layers.begin());
    std::vector<double>& effect = k == MapKind::encoder   ? r.effect
                                  : k == MapKind::decoder ? r.decoder
                                                          : r.cross;
    effect.assign(B * Ls * H, 0.0);
    const std::size_t Lq = queries_of(k, in);
    const std::vector<std::size_t>& lengths =
        k == MapKind::encoder ? in.lengths : in.target_lengths;
    for (std::size_t li = 0; li < Ls; ++li)
      for (std::size_t hi = 0; hi < H; ++hi) {
        const std::size_t l = r.layers[li], head = r.heads[hi];
        ForwardOptions so = base;
        if (k != MapKind::encoder) {
          so.encoder_output = &clean.encoder_output;
          so.first_layer = l;
          so.first_hidden = decoder_inputs.data() + l * n;
        }
        // context (B*Lq, h*dv): the head's columns zeroed, or each row's set to
        // their mean over its real queries
        SiteFunctions edit;
        const Site at{k == MapKind::cross ? SiteKind::cross_z : SiteKind::z,
                      k == MapKind::encoder ? Stack::main : Stack::decoder, l};
        edit.want = [&](const Site& s) { return s == at; };
        edit.on_tensor = [&](const Site&, float* context, std::size_t, std::size_t, std::size_t) {
          for (std::size_t b = 0; b < B; ++b) {
            std::vector<float> fill(dv, 0.0f);
            if (kind == Ablation::mean) {
              for (std::size_t t = 0; t < lengths[b]; ++t)
                for (std::size_t i = 0; i < dv; ++i)
                  fill[i] += context[(b * Lq + t) * width + head * dv + i];
              for (float& v : fill) v /= float(lengths[b]);
            }
            for (std::size_t t = 0; t < Lq; ++t)
              std::copy(fill.begin(), fill.end(), context + (b * Lq + t) * width + head * dv);
          }
        };
        so.hook = &edit;
        const std::vector<double> m = probe(run(so).output, false);
        for (std::size_t b = 0; b < B; ++b) effect[(b * Ls + li) * H + hi] = m[b] - r.clean[b];
        if (o.progress) o.progress(++done, total);
      }
  }
  return r;
}

}  // namespace mha
