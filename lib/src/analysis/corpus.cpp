// `--method corpus --texts FILE`: per-head statistics (entropy, distance,
// first token, diagonal, the detectors' scores) averaged over every text of a
// corpus, batch after batch (memory: one batch), on analyze_maps's pass.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/analysis/options.hpp"
#include "mha/base/error.hpp"
#include "mha/config/memory.hpp"
#include "mha/inspect/attention_stats.hpp"

namespace mha {

namespace {

using nlohmann::json;

struct Corpus {
  std::vector<std::string> texts;
  std::vector<std::size_t> lines;
  std::size_t T = 1, tokens = 0, per = 1;
  std::uint64_t need = 0;
};

void check_options(const AnalyzeConfig& config) {
  if (!config.texts_file)
    fail_input("--method corpus: expected --texts FILE (one text a line, or JSON Lines)");
  if (config.batch < 1 || config.batch > 1024)
    fail_input("--batch: expected 1 to 1024 texts per pass, got " + std::to_string(config.batch));
  read_corpus(*config.texts_file);  // its errors before the model opens (check reads it again)
}

std::vector<std::string> batch_of(const Corpus& k, std::size_t i) {
  return std::vector<std::string>(
      k.texts.begin() + static_cast<std::ptrdiff_t>(i),
      k.texts.begin() + static_cast<std::ptrdiff_t>(std::min(k.texts.size(), i + k.per)));
}

// Every text's length first (the statistics' maps are as wide as the longest), then the memory
// of one batch's pass.
void check(AnalysisRun& run) {
  auto k = std::make_shared<Corpus>();
  const std::string& file = *run.config.texts_file;
  k->texts = read_corpus(file, &k->lines);
  k->per = static_cast<std::size_t>(run.config.batch);
  for (std::size_t i = 0; i < k->texts.size(); i += k->per) {
    const std::vector<std::string> part = batch_of(*k, i);
    // Each text named by its file and line, as the reader's messages name them.
    std::vector<std::string> names;
    for (std::size_t j = i; j < i + part.size(); ++j)
      names.push_back(file + (k->lines.empty() ? ": element " + std::to_string(j)
                                               : ": line " + std::to_string(k->lines[j])));
    const ModelInput b = run.whole.encode(part, names);
    k->T = std::max(k->T, b.T);
    for (std::size_t n : b.lengths) k->tokens += n;
  }
  const std::size_t per = k->per, T = k->T;
  k->need = forward_memory(run.c(), run.model().layer_float32_bytes(), per, T, run.threads) +
            bytes_of({per, run.c().h, T, T}) * 2 + bytes_of({T, T});
  if (k->need > run.max_memory)
    fail_input(file + ": a batch of " + std::to_string(per) + " texts of up to " +
               std::to_string(T) + " tokens needs about " + format_bytes(k->need) +
               ", over max_memory " + format_bytes(run.max_memory) + "; lower --batch");
  run.state["corpus"] = k;
}

const std::vector<std::string> kStatistics = {"entropy",  "distance",       "first_token",
                                              "diagonal", "previous_token", "duplicate_token",
                                              "induction"};

// Each text's maps into the per-layer statistics, each batch's detector scores summed (weighted
// by its texts).
void accumulate(AnalysisRun& run, const Corpus& k,
                std::vector<std::unique_ptr<AttentionStats>>& stats, std::vector<double>& det_sum) {
  const std::size_t L = run.c().num_layers, h = run.c().h, N = k.texts.size(), T = k.T;
  // Many passes: every layer's weights read once when they fit beside a batch.
  std::vector<TransformerLayer<float>> layers;
  if (k.need + run.model().layer_float32_bytes() * L <= run.max_memory)
    layers = read_layers(run.model(), run.threads);
  std::vector<float> padded(T * T, 0.0f);
  std::vector<std::size_t> all_layers(L), all_heads(h);
  for (std::size_t i = 0; i < L; ++i) all_layers[i] = i;
  for (std::size_t i = 0; i < h; ++i) all_heads[i] = i;
  for (std::size_t i = 0; i < N; i += k.per) {
    const ModelInput b = run.whole.encode(batch_of(k, i));
    MapAnalysisOptions mo;
    mo.detectors = true;
    mo.layers_read = layers.empty() ? nullptr : &layers;
    mo.layers = all_layers;
    mo.heads = all_heads;
    mo.threads = run.threads;
    mo.maps_sink = [&](std::size_t l, std::size_t row, std::size_t head, const float* A) {
      const std::size_t n = b.lengths[row];  // its real query rows, keys zero-padded to T
      for (std::size_t t = 0; t < n; ++t) std::copy_n(A + t * b.T, b.T, padded.data() + t * T);
      stats[l]->add_rows(head, 0, n, padded.data());
    };
    PassInput pin;
    pin.ids = b.ids.data(), pin.B = b.B, pin.T = b.T, pin.lengths = b.lengths;
    const MapAnalysisResult r = analyze_maps(run.model(), pin, mo);
    check_finite_output(r.forward, run.config.model);
    for (std::size_t j = 0; j < det_sum.size(); ++j) det_sum[j] += r.head_scores[j] * double(b.B);
    if (run.config.progress) run.config.progress(std::min(N, i + k.per), N);
  }
}

void run_corpus(AnalysisRun& run) {
  const Corpus& k = *std::static_pointer_cast<Corpus>(run.state.at("corpus"));
  const std::size_t L = run.c().num_layers, h = run.c().h, N = k.texts.size(),
                    S = kStatistics.size();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<AttentionStats>> stats;
  for (std::size_t l = 0; l < L; ++l)
    stats.push_back(std::make_unique<AttentionStats>(h, k.T, k.T));
  std::vector<double> det_sum(all_detectors().size() * L * h, 0.0);
  accumulate(run, k, stats, det_sum);
  std::vector<double> heads_out(S * L * h);
  std::string csv = "layer,head";
  for (const std::string& n : kStatistics) csv += "," + n;
  csv += "\n";
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t head = 0; head < h; ++head) {
      const HeadStats st = stats[l]->head(head);
      const double v[] = {st.entropy,
                          st.distance,
                          st.first_key,
                          st.diagonal,
                          det_sum[(0 * L + l) * h + head] / double(N),
                          det_sum[(1 * L + l) * h + head] / double(N),
                          det_sum[(2 * L + l) * h + head] / double(N)};
      csv += std::to_string(l) + "," + std::to_string(head);
      for (std::size_t s = 0; s < S; ++s) {
        heads_out[(s * L + l) * h + head] = v[s];
        char cell[32];
        std::snprintf(cell, sizeof cell, ",%.9g", v[s]);
        csv += cell;
      }
      csv += "\n";
    }
  json per_layer = json::object();  // each statistic's mean over a layer's heads
  for (std::size_t s = 0; s < S; ++s) {
    std::vector<double> means(L, 0.0);
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t head = 0; head < h; ++head) means[l] += heads_out[(s * L + l) * h + head];
      means[l] /= double(h);
    }
    per_layer[kStatistics[s]] = means;
  }
  run.out.array("corpus_heads.npy", DType::f8, {S, L, h}, heads_out.data());
  run.out.bytes("corpus_heads.csv", csv);
  run.add("corpus_heads.npy", {S, L, h},
          "per head over every text's real query rows: mean entropy (nats), mean attended "
          "distance, mean weight on the first token, on the query's own token; then "
          "TransformerLens's detector scores, the mean over texts; statistics in the order of "
          "summary.corpus.statistics");
  run.add("corpus_heads.csv", {L * h, S + 2}, "the same, a row per head");
  run.summary["corpus"] = {{"file", *run.config.texts_file},
                           {"texts", N},
                           {"tokens", k.tokens},
                           {"batch", k.per},
                           {"statistics", kStatistics},
                           {"per_layer", per_layer},
                           {"ms", ms_since(t0)}};
  run.lines.push_back("corpus: " + std::to_string(N) + " texts, " + std::to_string(k.tokens) +
                      " tokens, " + std::to_string(ms_since(t0)) + " ms");
}

}  // namespace

extern const Analysis corpus_analysis = [] {
  Analysis a{};
  a.name = "corpus";
  a.what = "per-head statistics over a whole corpus (`--texts FILE`)";
  a.input = AnalysisInput::corpus;
  a.options = {"--texts", "--batch"};
  a.check_options = check_options;
  a.check = check;
  a.run = run_corpus;
  return a;
}();

}  // namespace mha
