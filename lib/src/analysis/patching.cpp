// `--method patching` (Meng et al. 2022; Wang et al. 2022): each head's
// output, then each layer's residual stream at each position, copied from the
// clean run into the corrupt one (pipeline/ablation.hpp's activation_patching).
#include <memory>
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/base/error.hpp"

namespace mha {

namespace {

void check_options(const AnalyzeConfig& config) {
  if (!config.clean || !config.corrupt)
    fail_input("--method patching: expected --clean TEXT and --corrupt TEXT");
}

// The clean and corrupt texts tokenized, one row each, of one length.
void check(AnalysisRun& run) {
  const ModelInput clean = run.whole.encode({*run.config.clean});
  const ModelInput corrupt = run.whole.encode({*run.config.corrupt});
  if (clean.T != corrupt.T)
    fail_input("--clean and --corrupt: " + std::to_string(clean.T) + " and " +
               std::to_string(corrupt.T) + " tokens; expected texts of equal token length");
  auto both = std::make_unique<ModelInput>();
  both->B = 2, both->T = clean.T;
  both->ids = clean.ids;
  both->ids.insert(both->ids.end(), corrupt.ids.begin(), corrupt.ids.end());
  both->lengths = {clean.T, corrupt.T};
  both->tokens = {clean.tokens.at(0), corrupt.tokens.at(0)};
  both->pieces = {clean.pieces.at(0), corrupt.pieces.at(0)};
  run.patching_rows = std::move(both);
}

void run_patching(AnalysisRun& run) {
  const ModelInput& both = *run.patching_rows;
  const std::size_t T = both.T;
  const Metric metric = run.io.metric;
  hold_layers(run);
  const auto t0 = std::chrono::steady_clock::now();
  const std::int32_t* clean = both.ids.data();
  const PatchingResult p = activation_patching(run.model(), clean, clean + T, T, run.io);
  run.out.array("patch_heads.npy", DType::f8, {p.layers.size(), p.heads.size()},
                p.heads_patched.data());
  run.out.array("patch_resid.npy", DType::f8, {p.layers.size(), T}, p.resid_patched.data());
  run.add("patch_heads.npy", {p.layers.size(), p.heads.size()},
          "each head's output copied from the clean run into the corrupt one: (metric - "
          "corrupt) / (clean - corrupt)");
  run.add("patch_resid.npy", {p.layers.size(), T},
          "layer l's input at position t copied from the clean run: the same normalised metric");
  run.summary["patching"] = {{"metric", to_string(metric)},
                             {"clean", p.clean},
                             {"corrupt", p.corrupt},
                             {"ms", ms_since(t0)}};
  run.extra["patching"] = {{"clean", std::vector<std::int32_t>(clean, clean + T)},
                           {"corrupt", std::vector<std::int32_t>(clean + T, clean + 2 * T)}};
  const std::vector<double> restored(p.heads_patched.begin(), p.heads_patched.end());
  run.lines.push_back("patching: " + std::string(to_string(metric)) + " clean " +
                      std::to_string(p.clean) + ", corrupt " + std::to_string(p.corrupt) +
                      "; the heads that restore most: " + top_entries(restored, [&](std::size_t i) {
                        return head_name(p.layers[i / p.heads.size()], p.heads[i % p.heads.size()]);
                      }));
}

}  // namespace

extern const Analysis patching_analysis = [] {
  Analysis a{};
  a.name = "patching";
  a.what = "activation patching from a clean run into a corrupt one";
  a.input = AnalysisInput::patching;
  a.lm_head = true;
  a.options = {"--clean", "--corrupt",       "--metric",      "--target",
               "--foil",  "--layer_indices", "--head_indices"};
  a.check_options = check_options;
  a.check = check;
  a.run = run_patching;
  return a;
}();

}  // namespace mha
