// `mha run --model DIR`: a whole checkpoint (checkpoint/checkpoint.hpp) run
// from text or token ids, writing to out_dir, all-or-nothing:
//   tokens.json         the ids of every row and their token strings
//   images.npy          (B, H, W, 3) uint8: an image model's inputs as it sees them
//   output.npy          (B, T, d_model) the final hidden states
//   self_attention.npy  (layers, B, heads, T, T) with save_attention, streamed
//   hidden_states.npy   (num_layers + 1, B, T, d_model) with save_hidden_states
//   sites/<name>.npy    each activation site save_sites names, streamed
//   run.json            the model, its files, the tokens' shape, the top-k
//                       next tokens (causal LMs) or classes (image
//                       classifiers), timings, the outputs
// Every check (the checkpoint's files and tensors, the tokenizer, the ids,
// the memory estimate against max_memory) runs before any weight is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha/checkpoint/image_processor.hpp"
#include "mha/io/checksum.hpp"
#include "mha/io/dir_lock.hpp"
#include "mha/pipeline/forward.hpp"
#include "mha/text/tokenizer.hpp"

namespace mha {

struct ModelRunConfig {
  std::string model;  // the checkpoint directory
  // float32, or bfloat16: every GEMM on bfloat16 operands (Checkpoint::compute);
  // parsed once, by parse_model_dtype (model_options.hpp)
  ComputeType dtype = ComputeType::float32;
  std::vector<std::string> texts;     // a batch of texts (right-padded), or
  std::optional<std::string> tokens;  // a .npy of int ids, (T) or (B, T)
  // Encoder-decoders (T5, BART): the decoder's side, one target per source
  // row (the target's ids; the decoder's inputs are them shifted right).
  std::vector<std::string> target_texts;
  std::optional<std::string> target_tokens;  // a .npy of int ids, (T) or (B, T)
  std::vector<std::string> images;           // image models (vit): PNG or JPEG files, a batch
  std::string out_dir = "out";
  bool save_attention = false, save_hidden_states = false;
  // q.npy and k.npy (layers, B, heads, T, head_dim) of the maps written: the
  // queries and keys the scores are computed from (after QK-norm and RoPE), k
  // of each head's key group. Needs save_attention.
  bool save_qk = false;
  // Activation sites written to sites/<name>.npy (run/site_files.hpp): names
  // or globs, comma-separated; empty: none.
  std::string save_sites;
  // Layers and heads whose maps are written (ascending; unset: all).
  std::optional<std::vector<std::int64_t>> layers, heads;
  std::int64_t top_k = 5;  // causal LMs' next tokens, image classifiers' classes; 0: none
  std::int64_t threads = 0;
  std::optional<std::uint64_t> max_memory;  // unset: default_max_memory()
  // Every check of the plan (inputs, options, memory), then return: nothing
  // read past the checkpoint's headers and the tokenizer, nothing written.
  bool check_only = false;
};

// The per-call options of a model run, as `mha run --model` and mha.Model's
// call take them; check_model_call is the one check of them both use, so the
// two accept the same values and refuse the rest with the same message.
struct ModelCallOptions {
  bool attention = false;  // the maps are written (CLI) or returned (Python)
  std::optional<std::vector<std::int64_t>> layers, heads;  // unset: all
  std::int64_t top_k = 5;
  std::int64_t threads = 0;
};
struct ModelCall {
  std::vector<std::size_t> map_layers, map_heads;  // ascending, empty without attention
  std::size_t top_k = 0;                           // 0 for a model without an LM head or classifier
  int threads = 0;                                 // as given: 0 = all cores
};
// Throws mha::Error (invalid_input) naming the option: threads outside
// [0, 1024], top_k outside [0, vocab_size], an index outside the model's
// layers or heads, one given twice, an empty list, or indices without attention.
ModelCall check_model_call(const ModelConfig& c, const ModelCallOptions& o);

// A layer slot's queries and keys (ForwardOptions::qk_sink) as q.npy and
// k.npy hold them, (layers, B, heads, T, head_dim) over the chosen `heads`:
// each (batch row, head)'s (T, head_dim) block of Q, and of K from the head's
// key group, handed to `write(key, first element, block)`.
void qk_blocks(const ModelConfig& c, const std::vector<std::size_t>& heads, std::size_t B,
               std::size_t T, std::size_t slot, const float* Q, std::size_t ldq, const float* K,
               std::size_t ldk,
               const std::function<void(bool key, std::uint64_t first, const float* block)>& write);

// Throws mha::Error (invalid_input) naming the checkpoint directory when the
// forward's output holds a NaN or an infinity (non-finite weights): the CLI
// writes nothing and mha.Model returns nothing.
void check_finite_output(const ForwardResult& r, const std::string& dir);

// The token ids a model run computes on.
struct ModelInput {
  std::size_t B = 0, T = 0;
  std::vector<std::int32_t> ids;                 // (B, T), padded with the pad id (or 0)
  std::vector<std::size_t> lengths;              // B
  std::vector<std::vector<std::string>> tokens;  // each row's tokens as shown (display_token)
  std::vector<std::vector<std::string>> pieces;  // as tokenizer.json spells them (same shape)
  std::string tokenizer;  // the tokenizer.json that made the ids ("" for --tokens)
  // Image models: T = 1 + patches (the CLS token, then the patches row by
  // row), ids 0..T-1 (the positions), tokens "[CLS]" and "patch (row, col)".
  std::vector<float> pixels;         // (B, 3, H, W): the processor's pixel values
  std::vector<std::uint8_t> images;  // (B, H, W, 3): the 8-bit images the model sees
  struct Image {
    std::string path;  // "" for an array (Python)
    std::uint64_t bytes = 0;
    std::string crc32;  // of the file
    std::size_t width = 0, height = 0;
    std::string format, converted;  // as RgbImage's
  };
  std::vector<Image> image_sources;  // B
};

struct ModelRunReport {
  ModelRunConfig config;  // as run: run.json's "config" (model_job.hpp)
  ModelConfig model;
  std::string dir;
  struct File {
    std::string path;
    std::uint64_t bytes = 0;
    std::string crc32;  // of the whole file (config, tokenizer) or a weights file's header
  };
  std::vector<File> files;
  std::vector<std::string> stored_dtypes;
  std::string gguf_architecture;  // a GGUF file's general.architecture, else empty
  ModelInput input;
  std::vector<std::size_t> map_layers, map_heads;
  std::vector<std::vector<NextToken>> top_k;
  // their display texts (with a tokenizer); an image classifier's: the classes' labels
  std::vector<std::vector<std::string>> top_k_tokens;
  std::vector<std::vector<std::string>> top_k_pieces;  // and their pieces
  std::uint64_t memory_estimate = 0, max_memory = 0;
  int threads = 1;
  double read_ms = 0, forward_ms = 0, total_ms = 0;
  // An encoder-decoder's decoder side (B = 0 otherwise): its input ids (the
  // target's shifted right after decoder_start_token_id) and their tokens,
  // and the target's ids as given (B, T, padded). `input` is the encoder's.
  ModelInput target;
  std::vector<std::int32_t> labels;
  std::optional<ImageProcessor> processor;        // image models: the preprocessing applied
  std::vector<std::string> outputs;               // file names written, run.json last
  std::map<std::string, FileChecksum> checksums;  // of each output but run.json
};

// A file as run.json records it: its path, size and the crc32 (zlib's) of
// its first `limit` bytes (all of it by default).
ModelRunReport::File file_record(const std::string& path, std::uint64_t limit = ~std::uint64_t{0});

// A checkpoint with its tokenizer (DIR/tokenizer.json, when there is one):
// what `mha run --model` and the Python module's mha.Model run. Opening it
// checks everything and reads no weights.
class Model {
 public:
  // The tokenizer loads on a thread of its own while the checkpoint is
  // opened (and, for ids, while the forward runs); tokenizer() waits for it
  // and throws its error, if any.
  // `compute`: float32, or bfloat16 for every GEMM of its passes on
  // bfloat16 operands (Checkpoint::compute); float64 is refused.
  explicit Model(const std::string& dir, ComputeType compute = ComputeType::float32);
  ComputeType compute() const { return checkpoint_.compute(); }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  const ModelConfig& config() const { return checkpoint_.config(); }
  const std::optional<Tokenizer>& tokenizer() const;
  const std::string& tokenizer_path() const { return tokenizer_path_; }
  // Image models (ModelConfig::image_input()): DIR/preprocessor_config.json, or
  // its defaults (image_processor.hpp).
  const ImageProcessor& image_processor() const { return processor_; }

  // A batch of texts, tokenized and right-padded (pad_id, else config.json's
  // pad_token_id, else 0). Throws mha::Error (invalid_input) without a
  // tokenizer, for a text that is not UTF-8 or has no tokens, or over the
  // model's positions; `names` (a corpus's "FILE: line N") name the texts.
  ModelInput encode(const std::vector<std::string>& texts,
                    const std::vector<std::string>& names = {}) const;
  // Ids (B, T) given as they are; `what` (a file name) starts messages.
  // Their token strings (from the tokenizer when there is one, else the
  // ids) come with name_tokens(), which waits for the tokenizer.
  ModelInput ids(const std::vector<std::int64_t>& ids, std::size_t B, std::size_t T,
                 const std::string& what) const;
  void name_tokens(ModelInput& input) const;
  // Image models: a batch of images through the image processor. `names`
  // (file paths, or "" for arrays) start messages. Throws mha::Error
  // (invalid_input) for a text model, an empty batch, or an image the
  // processor does not bring to config.json's image_size.
  ModelInput encode_images(const std::vector<RgbImage>& images,
                           const std::vector<std::string>& names) const;
  // The tokenizer's display text for `id` (Tokenizer::display_token), or "<id N>"
  // for an id it lacks: config.json's vocab_size is often padded past the
  // tokenizer's vocabulary (to a multiple of 64 or 128), and those ids are valid
  // inputs and outputs all the same. token_piece: the same with the raw piece.
  std::string token_name(std::int32_t id) const;
  std::string token_piece(std::int32_t id) const;

 private:
  std::string tokenizer_path_;
  std::shared_future<std::optional<Tokenizer>> loading_;  // declared first: starts first
  Checkpoint checkpoint_;
  ImageProcessor processor_;
};

// The display texts and pieces of report.top_k's tokens (with a tokenizer),
// or an image classifier's labels of its classes.
void name_top_k(const Model& model, ModelRunReport& report);

// The bytes an image may take decoded (3 a pixel): max_memory's, at most.
std::uint64_t image_byte_limit(std::uint64_t max_memory);
// Throws mha::Error (invalid_input) when n images' pixel values, (n, 3, H, W)
// float32 at the model's image size, would pass max_memory: checked before
// any image is decoded.
void check_image_batch(const Model& model, std::size_t n, std::uint64_t max_memory);
// An image model's input from image files: each read (bounded by
// image_byte_limit), preprocessed, and recorded with its size and crc32.
ModelInput read_image_input(const Model& model, const std::vector<std::string>& paths,
                            std::uint64_t max_memory);
// The embeddings an image model's pass starts from, (B, T, d_model) (its
// patch embeddings, CLS and positions); empty for a text model.
std::vector<float> input_embeddings(const Checkpoint& model, const ModelInput& in);

// The ids of a .npy file of shape (T) or (B, T) (any integer dtype).
ModelInput read_token_ids(const Model& model, const std::string& path);

// Throws mha::Error (invalid_input) when `out_dir` is the checkpoint directory
// `model`: a run replaces what an earlier run left in its out_dir.
void check_out_dir(const std::string& out_dir, const std::string& model);

// check_out_dir, then out_dir's lock taken before anything is read (a second
// process on it stops here), unless `check_only` (a plan that writes nothing).
std::optional<DirLock> lock_out_dir(const std::string& out_dir, const std::string& model,
                                    bool check_only);

ModelRunReport run_model(const ModelRunConfig& config);

// An encoder-decoder's teacher-forced run (run_model's part for T5 and BART,
// run/seq2seq_run.cpp): encoder_attention.npy (layers, B, heads, S, S),
// decoder_attention.npy (layers, B, heads, T, T) and cross_attention.npy
// (layers, B, heads, T, S) with save_attention, encoder_hidden_states.npy
// (encoder layers + 1, B, S, d_model) and decoder_hidden_states.npy (decoder
// layers + 1, B, T, d_model) with save_hidden_states, output.npy (B, T,
// d_model) the decoder's final hidden states, tokens.json with both sides,
// run.json. Refuses save_qk.
// Refuses a target for a model that is not an encoder-decoder, and an
// encoder-decoder without one. `model` is opened; out_dir's lock is held.
ModelRunReport run_seq2seq(const ModelRunConfig& config, const Model& model);

// The target's ids of an encoder-decoder call (texts or an ids file, one row
// per source row) and the decoder's input made from them.
struct Seq2SeqInput {
  ModelInput labels;   // the target's ids as given (B, T), right-padded
  ModelInput decoder;  // their shift right: what the decoder reads, with its tokens
};
Seq2SeqInput seq2seq_target(const Model& model, const ModelInput& labels);

// Both sides of an encoder-decoder call from the flags of `mha run` and `mha
// analyze`: the source (--text or --tokens) and the target (--target_text,
// one per --text, or --target_tokens, one row per source row). Throws
// mha::Error (invalid_input) for a target with a model that is not an
// encoder-decoder, an encoder-decoder without one, images, or counts that
// differ, naming the flags.
struct Seq2SeqFlags {
  const std::vector<std::string>& texts;
  const std::optional<std::string>& tokens;
  const std::vector<std::string>& target_texts;
  const std::optional<std::string>& target_tokens;
  bool images = false;
};
void check_seq2seq_flags(const Model& model, const std::string& dir, const Seq2SeqFlags& flags);
struct Seq2SeqSides {
  ModelInput source;
  Seq2SeqInput target;
};
Seq2SeqSides read_seq2seq_sides(const Model& model, const Seq2SeqFlags& flags);

// check_model_call for an encoder-decoder: a layer index names a layer of
// both stacks (it must be under both layer counts); with o.attention and no
// o.layers, map_layers holds every layer of each stack (0 to the larger count).
ModelCall check_seq2seq_call(const ModelConfig& c, const ModelCallOptions& o);

}  // namespace mha
