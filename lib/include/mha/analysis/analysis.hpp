// The analyses of `mha analyze` and of mha.Model's methods (docs/analyses.md),
// as a registry: each method is one file of lib/src/analysis/ defining one
// `Analysis` (its name, what it reads, the options it takes, its memory
// estimate, what it asks of the model's pass, what it writes and its summary
// lines), and one line of the table in registry.cpp. analyze.hpp's
// run_analyze (the CLI) and analyze_input (Python) loop over the methods
// given: check their options, plan the memory as the sum of their estimates,
// run the one shared pass with what each asks of it (maps, hidden states),
// then let each write its arrays and summary. The math is below, in
// checkpoint/ (lens, attention_analysis, ablation, seq2seq_analysis). An
// encoder-decoder (T5, BART) runs through the same loop and entries: the
// entries that take one (Analysis::encoder_decoder) read AnalysisRun::seq2seq.
//
//   const Analysis* a = find_analysis("rollout");
//   a->ask(run, pass);   // rollout's sinks on the pass; its finish writes rollout.npy
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/io/npy.hpp"
#include "mha/pipeline/ablation.hpp"
#include "mha/pipeline/attention_analysis.hpp"
#include "mha/pipeline/forward.hpp"
#include "mha/pipeline/seq2seq_analysis.hpp"
#include "mha/run/analyze.hpp"
#include "mha/run/model_run.hpp"

namespace mha {

// Where an analysis's arrays go: files of out_dir (the CLI, all-or-nothing
// through an OutputSet), or arrays in memory (mha.Model's methods).
class AnalysisOutputs {
 public:
  virtual ~AnalysisOutputs() = default;
  // A float32 array written in pieces, at flat element offsets; `written`
  // says a range is complete (the CLI starts it towards the disk).
  class Stream {
   public:
    virtual ~Stream() = default;
    virtual void write(std::size_t offset, const float* data, std::size_t count) const = 0;
    virtual void written(std::size_t, std::size_t) const {}
  };
  virtual const Stream& stream(const std::string& name, const std::vector<std::size_t>& shape) = 0;
  // A whole array (f4, f8, i4) or file (JSON, CSV) at once.
  virtual void array(const std::string& name, DType dtype, const std::vector<std::size_t>& shape,
                     const void* data) = 0;
  virtual void bytes(const std::string& name, const std::string& bytes) = 0;
};

// An encoder-decoder's two stacks as the analyses see them: the source's
// length S, the target's T, each stack's layers and the chosen ones (a layer
// index names a layer of both stacks), and each kind of map's shape.
struct AnalysisStacks {
  std::size_t S = 0, T = 0, Le = 0, Ld = 0, Les = 0, Lds = 0;
  std::size_t queries(MapKind k) const { return k == MapKind::encoder ? S : T; }
  std::size_t keys(MapKind k) const { return k == MapKind::decoder ? T : S; }
  std::size_t layers(MapKind k, bool chosen) const {
    return k == MapKind::encoder ? (chosen ? Les : Le) : (chosen ? Lds : Ld);
  }
};
constexpr MapKind kMapKinds[3] = {MapKind::encoder, MapKind::decoder, MapKind::cross};
const char* kind_name(MapKind k);  // "encoder", "decoder", "cross"

// The sizes the memory estimates read: the rows' batch and length, the model's.
struct AnalysisSizes {
  std::size_t B = 0, T = 0, L = 0, h = 0, d = 0, head_dim = 0;
  std::size_t Ls = 0, Hs = 0;  // the chosen layers and heads
  int threads = 1;
  const AnalysisStacks* stacks = nullptr;  // an encoder-decoder's (T: the target's)
  // The outputs are held in memory (Python) rather than streamed to files.
  bool in_memory = false;
};

// One analysis as it runs: what the loop has read and decided, shared by the
// methods given, and what they write.
struct AnalysisRun {
  AnalysisRun(const AnalyzeConfig& config, const Model& whole, const ModelCall& call,
              ModelInput& in, InterventionOptions& io, std::uint64_t max_memory,
              AnalysisOutputs& out)
      : config(config),
        whole(whole),
        call(call),
        in(in),
        io(io),
        max_memory(max_memory),
        out(out) {}
  const AnalyzeConfig& config;
  const Model& whole;
  const ModelCall& call;  // the chosen layers and heads, as check_model_call made them
  int threads = 1;
  ModelInput& in;  // the rows (--text, --tokens, --image; an encoder-decoder's source)
  // An encoder-decoder's teacher-forced batch (source `in`, the target) and
  // its stacks' sizes; null for a model of one stack.
  const PassInput* seq2seq = nullptr;
  AnalysisStacks stacks;
  InterventionOptions& io;  // ablation's and patching's metric, target, foil
  std::uint64_t need = 0;   // the plan's estimate
  std::uint64_t max_memory = 0;
  AnalysisOutputs& out;
  nlohmann::json arrays = nlohmann::json::object();   // run.json's "arrays"
  nlohmann::json summary = nlohmann::json::object();  // run.json's "summary"
  nlohmann::json extra = nlohmann::json::object();    // more top-level keys of run.json
  std::vector<std::string> outputs;                   // files written, in order
  std::vector<std::string> lines;                     // the summary for stdout
  // patching's clean and corrupt rows (B = 2, one length): their passes'
  // length, and tokens.json's rows when no method reads `in`.
  std::unique_ptr<ModelInput> patching_rows;
  // What a method keeps from its check to its run (corpus: the texts), by its name.
  std::map<std::string, std::shared_ptr<void>> state;
  // Every layer's weights, read once for the interventions' many passes (hold_layers).
  std::vector<TransformerLayer<float>> resident;

  const Checkpoint& model() const { return whole.checkpoint(); }
  const ModelConfig& c() const { return whole.config(); }
  // The shared pass's and the interventions' input: the teacher-forced
  // batch, or the rows of `in`.
  PassInput input() const {
    if (seq2seq) return *seq2seq;
    return {in.ids.data(), in.B, in.T, in.lengths, nullptr, nullptr, 0, {}};
  }
  // An array's entry in run.json ("shape", "meaning"), and its file listed.
  void add(const std::string& name, const std::vector<std::size_t>& shape,
           const std::string& meaning);
};

// The one pass over the rows that the methods reading maps, hidden states or
// the output share: each sets what it needs and returns what to do once the
// pass is done (write its arrays and summary).
struct AnalysisPass {
  MapAnalysisOptions options;  // flags and sinks; layers, heads and threads set by the loop
  bool hidden_states = false;  // (L + 1, B, T, d) kept in `hidden`
  std::vector<float> hidden;
  MapAnalysisResult result;
  // The layer's arrays are all given (after every method's own layer_done).
  std::vector<std::function<void(std::size_t l)>> layer_done;
};

using AnalysisFinish = std::function<void(AnalysisRun&, const AnalysisPass&)>;

// What a method reads.
enum class AnalysisInput {
  rows,      // --text/--tokens (or --image where `images`): the shared pass
  patching,  // --clean and --corrupt
  corpus,    // --texts FILE, batch after batch
};

struct Analysis {
  const char* name;
  const char* what;  // one phrase: docs/analyses.md's table and --help
  AnalysisInput input = AnalysisInput::rows;
  bool images = false;   // takes --image (an image model's rows)
  bool lm_head = false;  // reads a causal LM's predictions (images: the classifier's)
  // Takes an encoder-decoder with --target_text: its ask, memory and run
  // then see AnalysisRun::seq2seq and AnalysisSizes::stacks.
  bool encoder_decoder = false;
  bool reads_maps = false;  // holds a layer's maps in the pass (the estimate's share)
  // The options it reads beyond the input, as flags (docs and --help).
  std::vector<const char*> options;
  // Checks of its options before the model opens (null: none); throws naming the flag.
  void (*check_options)(const AnalyzeConfig& config) = nullptr;
  // Checks of its options against the model's sizes, once it is open (null: none).
  void (*check_model)(const AnalyzeConfig& config, const ModelConfig& c) = nullptr;
  // Bytes it holds beyond the pass (null: none).
  std::uint64_t (*memory)(const AnalysisSizes& s) = nullptr;
  // Checks once the model is open and the input read, before weights are read (null: none).
  void (*check)(AnalysisRun& run) = nullptr;
  // Rows methods: what it asks of the shared pass; the returned function
  // writes its arrays and summary after it.
  AnalysisFinish (*ask)(AnalysisRun& run, AnalysisPass& pass) = nullptr;
  // Other methods: its own passes and outputs.
  void (*run)(AnalysisRun& run) = nullptr;
};

// The registry (lib/src/analysis/registry.cpp), in the order the methods run.
const std::vector<const Analysis*>& analyses();
// The entry named `name`, or null.
const Analysis* find_analysis(const std::string& name);

// The summary's "a 0.412, b 0.120, c 0.051": the `n` largest of `values`
// (NaN skipped), each after its label; "all 0" when they are.
std::string top_entries(const std::vector<double>& values,
                        const std::function<std::string(std::size_t)>& label, std::size_t n = 3);
// "L3H7"
std::string head_name(std::size_t layer, std::size_t head);
// Bytes of an array of `shape` in `itemsize`-byte elements.
std::uint64_t bytes_of(std::initializer_list<std::size_t> shape, std::uint64_t itemsize = 4);
// Every layer's weights read once into run.resident and given to run.io,
// when they fit beside the plan's estimate (the interventions' many passes).
void hold_layers(AnalysisRun& run);
// Milliseconds since `t0`.
double ms_since(std::chrono::steady_clock::time_point t0);
// Rows a summary lists, one line each; the arrays hold them all.
constexpr std::size_t kSummaryRows = 4;
// "rollout: row b, into 'tok' from a 0.41, b 0.12, ..." for the first rows.
void per_row_lines(AnalysisRun& run, const char* method,
                   const std::function<std::vector<double>(std::size_t)>& row_of);

}  // namespace mha
