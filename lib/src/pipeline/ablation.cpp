#include "mha/pipeline/ablation.hpp"
#include "mha/pipeline/seq2seq_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "mha/base/error.hpp"
#include "mha/pipeline/forward.hpp"
#include "mha/pipeline/lens.hpp"
#include "mha/pipeline/site_hooks.hpp"

namespace mha {

const char* to_string(Metric m) {
  return m == Metric::loss ? "loss" : m == Metric::logit_diff ? "logit_diff" : "kl";
}

const char* to_string(Ablation a) {
  return a == Ablation::zero ? "zero" : "mean";
}

namespace {

std::vector<std::size_t> all_or(const std::vector<std::size_t>& chosen, std::size_t n) {
  if (!chosen.empty()) return chosen;
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  return all;
}

}  // namespace

void check_intervention_head(const Checkpoint& model) {
  const ModelConfig& c = model.config();
  if (c.image_input() && !c.classifier)
    fail_input(model.dir() + ": a " + c.model_type +
               " has no classifier (no classifier.weight: a ViTModel or DeiTModel, not an "
               "image classifier); ablation on images measures the classifier's output");
  if (!c.image_input() && !c.has_lm_head())
    fail_input(model.dir() + ": a " + c.model_type +
               " has no LM head; ablation and patching measure next-token predictions");
}

namespace {

// The metric of a pass's final hidden states, per row; `clean_logp_` (B, V)
// holds the reference distribution after each row's last token (kl), and is
// filled when `keep`. An image classifier's distribution is over its classes,
// from each row's CLS token; `predicted_` (B) keeps the clean run's class
// (its loss is that class's cross-entropy).
class Probe {
 public:
  Probe(const Checkpoint& model, const std::int32_t* ids, std::size_t B, std::size_t T,
        const std::vector<std::size_t>& lengths, const InterventionOptions& o)
      : model_(model), ids_(ids), B_(B), T_(T), lengths_(lengths), o_(o) {
    const ModelConfig& c = model.config();
    check_intervention_head(model);
    const std::size_t classes = c.classifier ? c.num_labels : c.vocab_size;
    if (o.metric == Metric::logit_diff &&
        (o.target < 0 || o.foil < 0 || std::size_t(o.target) >= classes ||
         std::size_t(o.foil) >= classes))
      fail_input(
          c.classifier
              ? "--metric logit_diff: expected --target and --foil labels of the classifier"
              : "--metric logit_diff: expected --target and --foil tokens in the vocabulary");
  }

  // kl: the reference distributions of `other`'s rows, repeated `copies` times
  // (a batch of copies of the same rows); a classifier's predicted classes
  // and its weights too.
  void share_reference(const Probe& other, std::size_t copies) {
    clean_logp_.clear();
    predicted_.clear();
    for (std::size_t j = 0; j < copies; ++j) {
      clean_logp_.insert(clean_logp_.end(), other.clean_logp_.begin(), other.clean_logp_.end());
      predicted_.insert(predicted_.end(), other.predicted_.begin(), other.predicted_.end());
    }
    head_ = other.head_;
  }

  const std::vector<std::int32_t>& predicted() const { return predicted_; }

  std::vector<double> operator()(const float* output, bool keep) {
    if (model_.config().classifier) return classes(output, keep);
    const std::size_t d = model_.config().d_model, V = model_.config().vocab_size;
    if (o_.metric == Metric::loss) {
      const TokenLoss l = token_loss(model_, output, ids_, B_, T_, lengths_, o_.threads);
      std::vector<double> out(B_, 0.0);
      for (std::size_t b = 0; b < B_; ++b) {
        std::size_t n = 0;
        for (std::size_t t = 0; t + 1 < lengths_[b]; ++t) out[b] += l.loss[b * T_ + t], ++n;
        out[b] = n ? out[b] / double(n) : std::numeric_limits<double>::quiet_NaN();
      }
      return out;
    }
    std::vector<float> last(B_ * d);  // each row's last real token
    for (std::size_t b = 0; b < B_; ++b)
      std::copy_n(output + (b * T_ + lengths_[b] - 1) * d, d, last.data() + b * d);
    std::vector<double> out(B_);
    if (keep) clean_logp_.assign(B_ * V, 0.0);
    lm_logits(
        model_, last.data(), B_,
        [&](std::size_t r0, std::size_t n, const float* z) {
          for (std::size_t i = 0; i < n; ++i) out[r0 + i] = measure(z + i * V, V, r0 + i, keep);
        },
        o_.threads);
    return out;
  }

 private:
  // An image classifier's metric: the classifier on each row's CLS token (position 0; DeiT's
  // teacher head also on its distillation token, position 1).
  std::vector<double> classes(const float* output, bool keep) {
    const ModelConfig& c = model_.config();
    if (!head_) head_ = std::make_shared<const ClassifierHead>(model_.classifier());
    const std::size_t n = c.num_labels;
    const std::vector<float> z = classifier_logits(model_, *head_, output, B_, T_ * c.d_model);
    if (keep) {
      clean_logp_.assign(B_ * n, 0.0);
      predicted_.assign(B_, 0);
    }
    std::vector<double> out(B_);
    for (std::size_t b = 0; b < B_; ++b) out[b] = measure(z.data() + b * n, n, b, keep);
    return out;
  }

  // The metric of row b from its logits z (n entries): the next token's
  // distribution, or a classifier's classes.
  double measure(const float* z, std::size_t n, std::size_t b, bool keep) {
    if (keep && !predicted_.empty())  // the clean run's class: the largest logit (lower id on ties)
      predicted_[b] = static_cast<std::int32_t>(std::max_element(z, z + n) - z);
    if (o_.metric == Metric::logit_diff) return double(z[o_.target]) - double(z[o_.foil]);
    const Softmax sm = softmax_of(z, n);
    const double lse = sm.top + std::log(sm.sum);
    if (keep)
      for (std::size_t v = 0; v < n; ++v) clean_logp_[b * n + v] = double(z[v]) - lse;
    if (o_.metric == Metric::loss)  // a classifier's: the clean run's class's cross-entropy
      return lse - double(z[predicted_[b]]);
    double kl = 0;
    for (std::size_t v = 0; v < n; ++v) {
      const double lp = double(z[v]) - lse, lq = clean_logp_[b * n + v];
      kl += std::exp(lq) * (lq - lp);
    }
    return kl;
  }

  const Checkpoint& model_;
  const std::int32_t* ids_;
  std::size_t B_, T_;
  const std::vector<std::size_t>& lengths_;
  const InterventionOptions& o_;
  std::vector<double> clean_logp_;
  std::vector<std::int32_t> predicted_;
  std::shared_ptr<const ClassifierHead> head_;
};

// One full pass keeping every layer's input (hidden states 0..L-1) and every
// layer's heads' outputs (contexts), and its final output.
struct Pass {
  std::vector<float> hidden;   // (L, B, T, d)
  std::vector<float> context;  // (L, B*T, h*dv)
  std::vector<float> output;   // (B, T, d)
};

Pass full_pass(const Checkpoint& model, const std::int32_t* ids, std::size_t B, std::size_t T,
               const std::vector<std::size_t>& lengths, const InterventionOptions& o) {
  const ModelConfig& c = model.config();
  const std::size_t L = c.num_layers, n = B * T * c.d_model, z = B * T * c.h * c.head_dim;
  Pass p;
  p.hidden.resize(L * n);
  p.context.resize(L * z);
  ForwardOptions f;
  f.threads = o.threads;
  f.layers = o.layers_read;
  f.first_hidden = o.embeddings;  // an image model's patch embeddings, or null
  // Every layer's input (hook_resid_pre) and heads' outputs (hook_z), kept.
  SiteFunctions keep;
  keep.want = [](const Site& s) { return s.kind == SiteKind::resid_pre || s.kind == SiteKind::z; };
  keep.on_tensor = [&](const Site& s, float* x, std::size_t, std::size_t, std::size_t) {
    if (s.kind == SiteKind::resid_pre)
      std::copy(x, x + n, p.hidden.begin() + static_cast<std::ptrdiff_t>(s.layer * n));
    else
      std::copy(x, x + z, p.context.begin() + static_cast<std::ptrdiff_t>(s.layer * z));
  };
  f.hook = &keep;
  p.output = forward(model, ids, B, T, lengths, f).output;
  return p;
}

// A pass from layer l on, from `hidden` (layer l's input), with `edit`
// applied to layer l's heads' outputs; returns the final hidden states.
std::vector<float> pass_from(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                             std::size_t T, const std::vector<std::size_t>& lengths, std::size_t l,
                             const float* hidden, const std::function<void(float* context)>& edit,
                             const InterventionOptions& o) {
  ForwardOptions f;
  f.threads = o.threads;
  f.layers = o.layers_read;
  f.first_layer = l;
  f.first_hidden = hidden;
  SiteFunctions at_z;  // layer l's heads' outputs (hook_z), edited
  at_z.want = [&](const Site& s) { return s.kind == SiteKind::z && s.layer == l; };
  at_z.on_tensor = [&](const Site&, float* ctx, std::size_t, std::size_t, std::size_t) {
    edit(ctx);
  };
  if (edit) f.hook = &at_z;
  return forward(model, ids, B, T, lengths, f).output;
}

}  // namespace

namespace {

AblationResult one_stack_ablation(const Checkpoint& model, const std::int32_t* ids, std::size_t B,
                                  std::size_t T, const std::vector<std::size_t>& lengths,
                                  Ablation kind, const InterventionOptions& o) {
  const ModelConfig& c = model.config();
  Probe probe(model, ids, B, T, lengths, o);
  AblationResult r;
  r.layers = all_or(o.layers, c.num_layers);
  r.heads = all_or(o.heads, c.h);
  const std::size_t n = B * T * c.d_model, dv = c.head_dim, width = c.h * dv;
  const Pass clean = full_pass(model, ids, B, T, lengths, o);
  r.clean = probe(clean.output.data(), true);
  r.predicted = probe.predicted();
  if (o.metric == Metric::kl) std::fill(r.clean.begin(), r.clean.end(), 0.0);
  const std::size_t H = r.heads.size(), total = r.layers.size() * H;
  r.effect.assign(B * total, 0.0);
  // The heads of one layer run side by side as batch rows of one pass (GEMMs of
  // up to kAblationRows rows), each row zeroing or replacing its own head.
  constexpr std::size_t kAblationRows = 4096;
  const std::size_t per_pass = std::max<std::size_t>(1, std::min(H, kAblationRows / (B * T)));
  std::size_t done = 0;
  for (std::size_t li = 0; li < r.layers.size(); ++li) {
    const std::size_t l = r.layers[li];
    const float* ctx = clean.context.data() + l * B * T * width;
    for (std::size_t h0 = 0; h0 < H; h0 += per_pass) {
      const std::size_t k = std::min(per_pass, H - h0), rows = k * B;
      // The batch: k copies of the B rows, copy j ablating head r.heads[h0 + j].
      std::vector<std::int32_t> kids(rows * T);
      std::vector<std::size_t> klengths(rows);
      std::vector<float> hidden(rows * T * c.d_model), fill(rows * dv, 0.0f);
      for (std::size_t j = 0; j < k; ++j)
        for (std::size_t b = 0; b < B; ++b) {
          const std::size_t row = j * B + b, head = r.heads[h0 + j];
          std::copy_n(ids + b * T, T, kids.data() + row * T);
          klengths[row] = lengths[b];
          std::copy_n(clean.hidden.data() + l * n + b * T * c.d_model, T * c.d_model,
                      hidden.data() + row * T * c.d_model);
          if (kind == Ablation::mean) {  // the head's mean over the row's real positions
            for (std::size_t t = 0; t < lengths[b]; ++t)
              for (std::size_t i = 0; i < dv; ++i)
                fill[row * dv + i] += ctx[(b * T + t) * width + head * dv + i];
            for (std::size_t i = 0; i < dv; ++i) fill[row * dv + i] /= float(lengths[b]);
          }
        }
      Probe batch(model, kids.data(), rows, T, klengths, o);
      if (o.metric == Metric::kl || c.classifier) batch.share_reference(probe, k);
      const std::vector<float> out = pass_from(
          model, kids.data(), rows, T, klengths, l, hidden.data(),
          [&](float* context) {
            for (std::size_t row = 0; row < rows; ++row) {
              const std::size_t head = r.heads[h0 + row / B];
              for (std::size_t t = 0; t < T; ++t)
                std::copy_n(fill.data() + row * dv, dv,
                            context + (row * T + t) * width + head * dv);
            }
          },
          o);
      const std::vector<double> m = batch(out.data(), false);
      for (std::size_t j = 0; j < k; ++j)
        for (std::size_t b = 0; b < B; ++b)
          r.effect[b * total + li * H + h0 + j] = m[j * B + b] - r.clean[b];
      ++r.passes;
      r.layer_passes += k * (c.num_layers - l);
      done += k;
      if (o.progress) o.progress(done, total);
    }
  }
  return r;
}

}  // namespace

AblationResult head_ablation(const Checkpoint& model, const PassInput& in, Ablation kind,
                             const InterventionOptions& o) {
  if (in.has_decoder()) return encoder_decoder_ablation(model, in, kind, o);
  return one_stack_ablation(model, in.ids, in.B, in.T, in.lengths, kind, o);
}

PatchingResult activation_patching(const Checkpoint& model, const std::int32_t* clean_ids,
                                   const std::int32_t* corrupt_ids, std::size_t T,
                                   const InterventionOptions& o) {
  const ModelConfig& c = model.config();
  const std::vector<std::size_t> lengths = {T};
  PatchingResult r;
  r.layers = all_or(o.layers, c.num_layers);
  r.heads = all_or(o.heads, c.h);
  const std::size_t d = c.d_model, n = T * d, dv = c.head_dim, width = c.h * dv;
  // The metric is measured on the corrupt run's tokens (the loss of its text,
  // or its next token's logits): the clean run gives what is patched in.
  Probe probe(model, corrupt_ids, 1, T, lengths, o);
  const Pass clean = full_pass(model, clean_ids, 1, T, lengths, o);
  const Pass corrupt = full_pass(model, corrupt_ids, 1, T, lengths, o);
  // kl: against the clean run's distribution, kept first
  r.clean = probe(clean.output.data(), true)[0];
  if (o.metric == Metric::kl) r.clean = 0;
  r.corrupt = probe(corrupt.output.data(), false)[0];
  // Equal metrics (clean = corrupt) leave nothing to normalise by: the raw
  // difference from the corrupt run is given instead.
  const double span = r.clean - r.corrupt;
  auto normalised = [&](const std::vector<float>& out) {
    const double m = probe(out.data(), false)[0] - r.corrupt;
    return span != 0 ? m / span : m;
  };
  const std::size_t H = r.heads.size(), total = r.layers.size() * (H + T);
  std::size_t done = 0;
  r.heads_patched.assign(r.layers.size() * H, 0.0);
  r.resid_patched.assign(r.layers.size() * T, 0.0);
  for (std::size_t li = 0; li < r.layers.size(); ++li) {
    const std::size_t l = r.layers[li];
    const float* from = clean.context.data() + l * T * width;
    for (std::size_t hi = 0; hi < H; ++hi) {
      const std::size_t head = r.heads[hi];
      r.heads_patched[li * H + hi] = normalised(pass_from(
          model, corrupt_ids, 1, T, lengths, l, corrupt.hidden.data() + l * n,
          [&](float* context) {
            for (std::size_t t = 0; t < T; ++t)
              std::copy_n(from + t * width + head * dv, dv, context + t * width + head * dv);
          },
          o));
      if (o.progress) o.progress(++done, total);
    }
    std::vector<float> x(corrupt.hidden.begin() + static_cast<std::ptrdiff_t>(l * n),
                         corrupt.hidden.begin() + static_cast<std::ptrdiff_t>((l + 1) * n));
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<float> patched = x;
      std::copy_n(clean.hidden.data() + l * n + t * d, d, patched.data() + t * d);
      r.resid_patched[li * T + t] =
          normalised(pass_from(model, corrupt_ids, 1, T, lengths, l, patched.data(), nullptr, o));
      if (o.progress) o.progress(++done, total);
    }
  }
  return r;
}

}  // namespace mha
