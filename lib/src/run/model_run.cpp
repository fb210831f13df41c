#include "mha/run/model_run.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/base/utf8.hpp"
#include "mha/config/memory.hpp"
#include "mha/io/checksum.hpp"
#include "mha/io/dir_lock.hpp"
#include "mha/io/gguf.hpp"
#include "mha/io/image.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/out_dir.hpp"
#include "mha/io/output_set.hpp"
#include "mha/io/safetensors.hpp"
#include "mha/pipeline/site_hooks.hpp"
#include "mha/run/run_json.hpp"
#include "mha/run/site_files.hpp"
#include "mha/text/gguf_tokenizer.hpp"
#include "mha/text/tokenizer.hpp"

namespace mha {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The ids as stored (Model::ids checks them against the vocabulary).
std::vector<std::int64_t> ids_of(const NpyArray& a, const std::string& path) {
  std::vector<std::int64_t> ids(a.size());
  auto take = [&](auto tag) {
    using I = decltype(tag);
    const auto* p = reinterpret_cast<const I*>(a.data.data());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(p[i]);
  };
  switch (a.dtype) {
    case DType::i4:
      take(std::int32_t{});
      break;
    case DType::i8:
      take(std::int64_t{});
      break;
    case DType::u4:
      take(std::uint32_t{});
      break;
    case DType::i2:
      take(std::int16_t{});
      break;
    case DType::u2:
      take(std::uint16_t{});
      break;
    default:
      fail_input(path + ": expected integer token ids (int16/32/64), got " + a.describe());
  }
  return ids;
}

std::vector<std::size_t> selection(const std::optional<std::vector<std::int64_t>>& given,
                                   std::size_t n, const char* what) {
  std::vector<std::size_t> out;
  if (!given) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  for (std::int64_t v : *given) {
    if (v < 0 || static_cast<std::size_t>(v) >= n)
      fail_input(std::string("--") + what + ": " + std::to_string(v) + " is outside [0, " +
                 std::to_string(n - 1) + "]");
    out.push_back(static_cast<std::size_t>(v));
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    fail_input(std::string("--") + what + ": a value is given twice");
  if (out.empty()) fail_input(std::string("--") + what + ": expected at least one index");
  return out;
}

}  // namespace

void check_finite_output(const ForwardResult& r, const std::string& dir) {
  for (const float v : r.output)
    if (!std::isfinite(v))
      fail_input(dir +
                 ": the forward produced a non-finite hidden state (NaN or inf); "
                 "are the weights finite?");
}

ModelCall check_model_call(const ModelConfig& c, const ModelCallOptions& o) {
  ModelCall call;
  if (o.threads < 0 || o.threads > 1024)
    fail_input("--threads: expected an integer from 0 to 1024 (0 = all cores), got " +
               std::to_string(o.threads));
  call.threads = static_cast<int>(o.threads);
  // An image model has no vocabulary: top_k is not bounded by one. An image
  // classifier lists at most its classes (num_labels), as transformers'
  // image-classification pipeline clips top_k to them.
  if (o.top_k < 0 || (c.vocab_size && static_cast<std::uint64_t>(o.top_k) > c.vocab_size))
    fail_input("--top_k: expected an integer from 0 to the vocabulary's " +
               std::to_string(c.vocab_size) + ", got " + std::to_string(o.top_k));
  call.top_k = c.has_lm_head() ? static_cast<std::size_t>(o.top_k)
               : c.classifier  ? std::min(static_cast<std::size_t>(o.top_k), c.num_labels)
                               : 0;
  if (o.attention) {
    call.map_layers = selection(o.layers, c.num_layers, "layer_indices");
    call.map_heads = selection(o.heads, c.h, "head_indices");
  } else if (o.layers || o.heads) {
    fail_input("--layer_indices/--head_indices choose the maps written: give --save_attention too");
  }
  return call;
}

namespace {

// DIR/tokenizer.json, or the GGUF file itself: its metadata holds the tokenizer.
std::string tokenizer_file(const std::string& dir) {
  if (is_gguf_file(dir)) return dir;
  const std::string path = dir + "/tokenizer.json";
  return is_file(path) ? path : std::string();
}

std::optional<Tokenizer> load_tokenizer(const std::string& path) {
  if (path.empty()) return std::nullopt;
  if (is_gguf_file(path)) return gguf_tokenizer(path);  // nullopt without tokenizer.ggml.model
  return Tokenizer::from_file(path);
}

}  // namespace

Model::Model(const std::string& dir, ComputeType compute)
    : tokenizer_path_(tokenizer_file(dir)),
      loading_(
          std::async(std::launch::async, [path = tokenizer_path_] { return load_tokenizer(path); })
              .share()),
      checkpoint_(dir, compute) {
  if (checkpoint_.config().image_input())
    processor_ = read_image_processor(dir, checkpoint_.config().model_type);
}

const std::optional<Tokenizer>& Model::tokenizer() const {
  return loading_.get();
}

namespace {

void check_positions(const ModelConfig& c, std::size_t T, const std::string& what,
                     const std::string& dir) {
  if (T > c.max_positions)
    fail_input(what + ": " + std::to_string(T) + " tokens are more than the model's " +
               std::to_string(c.max_positions) + " positions (max_position_embeddings in " + dir +
               "/config.json)");
}

}  // namespace

ModelInput Model::encode(const std::vector<std::string>& texts,
                         const std::vector<std::string>& names) const {
  const ModelConfig& c = config();
  const std::string& dir = checkpoint_.dir();
  if (c.image_input())
    fail_input("--text: " + dir + " is a " + c.model_type +
               " checkpoint, which reads images; give --image FILE (PNG or JPEG)");
  const std::optional<Tokenizer>& tokenizer_ = tokenizer();
  if (!tokenizer_)
    fail_input(dir +
               (checkpoint_.gguf() ? ": has no tokenizer metadata (tokenizer.ggml.model)"
                                   : ": has no tokenizer.json") +
               "; expected one to tokenize text, or give token ids");
  if (texts.empty()) fail_input("expected at least one text");
  ModelInput in;
  in.tokenizer = tokenizer_path_;
  // Text i's name in messages: names[i] (a corpus's "FILE: line N"), else "text #i".
  const auto name = [&](std::size_t i) {
    return i < names.size() ? names[i] : "text #" + std::to_string(i + 1);
  };
  std::vector<Encoding> rows;
  std::size_t longest = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    check_utf8(texts[i], name(i));
    rows.push_back(tokenizer_->encode(texts[i]));
    if (rows.back().ids.empty()) fail_input(name(i) + ": gives no tokens");
    if (rows.back().ids.size() > in.T) longest = i;
    in.T = std::max(in.T, rows.back().ids.size());
  }
  check_positions(c, in.T, names.empty() ? std::string("text") : name(longest), dir);
  in.B = rows.size();
  std::int32_t pad = 0;
  if (tokenizer_->pad_id())
    pad = *tokenizer_->pad_id();
  else if (c.pad_token_id && *c.pad_token_id >= 0)
    pad = static_cast<std::int32_t>(*c.pad_token_id);
  if (pad < 0 || static_cast<std::size_t>(pad) >= c.vocab_size) pad = 0;
  in.ids.assign(in.B * in.T, pad);
  for (std::size_t b = 0; b < in.B; ++b) {
    const Encoding& e = rows[b];
    in.lengths.push_back(e.ids.size());
    for (std::size_t t = 0; t < e.ids.size(); ++t) {
      if (e.ids[t] < 0 || static_cast<std::size_t>(e.ids[t]) >= c.vocab_size)
        fail_input(tokenizer_path_ + ": gives token id " + std::to_string(e.ids[t]) + " (" +
                   echo(e.tokens[t]) + ") for text #" + std::to_string(b + 1) +
                   ", outside the model's vocabulary (vocab_size " + std::to_string(c.vocab_size) +
                   " in config.json)");
      in.ids[b * in.T + t] = e.ids[t];
    }
    in.pieces.push_back(e.tokens);
    in.pieces.back().resize(in.T, "<pad>");
    in.tokens.emplace_back();
    for (const std::int32_t id : e.ids) in.tokens.back().push_back(tokenizer_->display_token(id));
    in.tokens.back().resize(in.T, "<pad>");
  }
  return in;
}

ModelInput Model::ids(const std::vector<std::int64_t>& ids, std::size_t B, std::size_t T,
                      const std::string& what) const {
  const ModelConfig& c = config();
  if (c.image_input())
    fail_input(what + ": " + checkpoint_.dir() + " is a " + c.model_type +
               " checkpoint, which reads images, not token ids; give --image FILE");
  if (B == 0 || T == 0 || ids.size() != B * T)
    fail_input(what + ": expected at least one token id, as (T) or (B, T)");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::uint64_t>(ids[i]) >= c.vocab_size)
      fail_input(what + ": token id " + std::to_string(ids[i]) + " at [" + std::to_string(i / T) +
                 ", " + std::to_string(i % T) + "] is outside the vocabulary (vocab_size " +
                 std::to_string(c.vocab_size) + " in " + checkpoint_.dir() + "/config.json)");
  check_positions(c, T, what, checkpoint_.dir());
  ModelInput in;
  in.B = B;
  in.T = T;
  in.ids.assign(ids.begin(), ids.end());  // each under vocab_size < 2^31 (read_model_config)
  in.lengths.assign(B, T);
  return in;
}

ModelInput Model::encode_images(const std::vector<RgbImage>& images,
                                const std::vector<std::string>& names) const {
  const ModelConfig& c = config();
  if (!c.image_input())
    fail_input("--image: " + checkpoint_.dir() + " is a " + c.model_type +
               " checkpoint, which reads text; give --text or --tokens");
  if (images.empty()) fail_input("expected at least one image");
  ModelInput in;
  in.B = images.size();
  in.T = c.image_tokens();
  in.lengths.assign(in.B, in.T);
  std::vector<std::string> row = {"[CLS]"};
  if (c.distillation_token) row.push_back("[DIST]");
  for (std::size_t r = 0; r < c.patch_rows(); ++r)
    for (std::size_t q = 0; q < c.patch_cols(); ++q)
      row.push_back("patch (" + std::to_string(r) + ", " + std::to_string(q) + ")");
  for (std::size_t b = 0; b < in.B; ++b) {
    const std::string what =
        b < names.size() && !names[b].empty() ? names[b] : "image #" + std::to_string(b + 1);
    RgbImage seen;
    const std::vector<float> x = preprocess_image(processor_, c, images[b], what, seen);
    in.pixels.insert(in.pixels.end(), x.begin(), x.end());
    in.images.insert(in.images.end(), seen.rgb.begin(), seen.rgb.end());
    ModelInput::Image src;
    src.path = b < names.size() ? names[b] : "";
    src.width = images[b].width;
    src.height = images[b].height;
    src.format = images[b].format;
    src.converted = images[b].converted;
    in.image_sources.push_back(src);
    for (std::size_t t = 0; t < in.T; ++t) in.ids.push_back(static_cast<std::int32_t>(t));
    in.tokens.push_back(row);
    in.pieces.push_back(row);
  }
  return in;
}

void check_image_batch(const Model& model, std::size_t n, std::uint64_t max_memory) {
  const ModelConfig& c = model.config();
  const std::uint64_t pixel_bytes = std::uint64_t{4} * 3 * n * c.image_height * c.image_width;
  if (c.image_input() && pixel_bytes > max_memory)
    fail_input(model.checkpoint().dir() + ": " + std::to_string(n) + " images of " +
               std::to_string(c.image_height) + " x " + std::to_string(c.image_width) +
               " pixels need " + format_bytes(pixel_bytes) + " as float32, over max_memory " +
               format_bytes(max_memory));
}

ModelInput read_image_input(const Model& model, const std::vector<std::string>& paths,
                            std::uint64_t max_memory) {
  check_image_batch(model, paths.size(), max_memory);
  std::vector<RgbImage> images;
  std::vector<FileChecksum> files(paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i)  // each path opened once: a FIFO is read once
    images.push_back(read_image(paths[i], image_byte_limit(max_memory), &files[i]));
  ModelInput in = model.encode_images(images, paths);
  for (std::size_t i = 0; i < in.image_sources.size() && i < files.size(); ++i) {
    in.image_sources[i].bytes = files[i].bytes;
    in.image_sources[i].crc32 = crc32_hex(files[i].crc32);
  }
  return in;
}

std::vector<float> input_embeddings(const Checkpoint& model, const ModelInput& in) {
  if (!model.config().image_input()) return {};
  std::vector<float> x(in.B * in.T * model.config().d_model);
  model.embed_patches(in.pixels.data(), in.B, x.data());
  return x;
}

std::uint64_t image_byte_limit(std::uint64_t max_memory) {
  return std::min<std::uint64_t>(max_memory, kMaxImagePixels * 3);
}

std::string Model::token_name(std::int32_t id) const {
  const std::optional<Tokenizer>& tok = tokenizer();
  if (tok && tok->has_token(id)) return tok->display_token(id);
  return "<id " + std::to_string(id) + ">";
}

std::string Model::token_piece(std::int32_t id) const {
  const std::optional<Tokenizer>& tok = tokenizer();
  if (tok && tok->has_token(id)) return tok->token(id);
  return "<id " + std::to_string(id) + ">";
}

void Model::name_tokens(ModelInput& in) const {
  const std::optional<Tokenizer>& tok = tokenizer();
  in.tokens.clear();
  in.pieces.clear();
  for (std::size_t b = 0; b < in.B; ++b) {
    std::vector<std::string> row, pieces;
    for (std::size_t t = 0; t < in.T; ++t) {
      const std::int32_t id = in.ids[b * in.T + t];
      row.push_back(tok ? token_name(id) : std::to_string(id));
      pieces.push_back(tok ? token_piece(id) : std::to_string(id));
    }
    in.tokens.push_back(std::move(row));
    in.pieces.push_back(std::move(pieces));
  }
}

ModelInput read_token_ids(const Model& model, const std::string& path) {
  const NpyArray a = read_npy(path);
  if (a.shape.size() != 1 && a.shape.size() != 2)
    fail_input(path + ": expected token ids of shape (T) or (B, T), got " + a.describe());
  const std::size_t B = a.shape.size() == 1 ? 1 : a.shape[0], T = a.shape.back();
  return model.ids(ids_of(a, path), B, T, path);
}

void check_out_dir(const std::string& out_dir, const std::string& model) {
  // The outputs never go among the checkpoint's files: a run replaces what an
  // earlier run left in its out_dir, and the model directory is not one.
  std::error_code same_ec;
  if (std::filesystem::equivalent(out_dir.empty() ? "." : out_dir, model, same_ec))
    fail_input("--out_dir " + out_dir + ": is the model directory " + model +
               "; expected a directory of the run's own");
}

std::optional<DirLock> lock_out_dir(const std::string& out_dir, const std::string& model,
                                    bool check_only) {
  check_out_dir(out_dir, model);
  if (check_only) return std::nullopt;
  return std::optional<DirLock>(std::in_place, out_dir, kOutDirLock);  // elided: no move
}

void name_top_k(const Model& model, ModelRunReport& report) {
  if (model.config().classifier) {  // an image classifier's classes: their labels
    for (const auto& row : report.top_k) {
      report.top_k_tokens.emplace_back();
      for (const NextToken& t : row)
        report.top_k_tokens.back().push_back(model.config().labels.at(std::size_t(t.id)));
    }
    return;
  }
  if (!model.tokenizer()) return;
  for (const auto& row : report.top_k) {
    report.top_k_tokens.emplace_back();
    report.top_k_pieces.emplace_back();
    for (const NextToken& t : row) {
      report.top_k_tokens.back().push_back(model.token_name(t.id));
      report.top_k_pieces.back().push_back(model.token_piece(t.id));
    }
  }
}

ModelRunReport::File file_record(const std::string& path, std::uint64_t limit) {
  ModelRunReport::File f;
  f.path = path;
  struct stat st {};
  f.bytes = ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  f.crc32 = crc32_hex(file_checksum(path, limit).crc32);
  return f;
}

void qk_blocks(
    const ModelConfig& c, const std::vector<std::size_t>& heads, std::size_t B, std::size_t T,
    std::size_t slot, const float* Q, std::size_t ldq, const float* K, std::size_t ldk,
    const std::function<void(bool key, std::uint64_t first, const float* block)>& write) {
  const std::size_t dk = c.head_dim, Hs = heads.size(), group = c.h / c.kv_heads;
  std::vector<float> block(T * dk);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t hs = 0; hs < Hs; ++hs) {
      const std::uint64_t first = ((std::uint64_t{slot} * B + b) * Hs + hs) * T * dk;
      // block (T, head_dim) = Q[b*T:(b+1)*T, head*head_dim:(head+1)*head_dim]
      for (std::size_t t = 0; t < T; ++t)
        std::copy_n(Q + (b * T + t) * ldq + heads[hs] * dk, dk, block.data() + t * dk);
      write(false, first, block.data());
      // the head's key group: grouped-query attention shares one K among `group` heads
      for (std::size_t t = 0; t < T; ++t)
        std::copy_n(K + (b * T + t) * ldk + heads[hs] / group * dk, dk, block.data() + t * dk);
      write(true, first, block.data());
    }
}

namespace {

// A model run's plan: the input read and tokenized, the call's options checked,
// the memory estimate against max_memory; nothing read past the headers.
ModelCall plan_model_run(const ModelRunConfig& config, const Model& whole, ModelRunReport& report) {
  const Checkpoint& model = whole.checkpoint();
  const ModelConfig& c = model.config();
  report.config = config;
  report.model = c;
  report.dir = config.model;
  report.max_memory = config.max_memory ? *config.max_memory : default_max_memory();
  if (!config.images.empty()) {
    if (!c.image_input())  // before any image is read
      whole.encode_images({}, {});
    report.input = read_image_input(whole, config.images, report.max_memory);
    report.processor = whole.image_processor();
  } else {
    report.input =
        config.tokens ? read_token_ids(whole, *config.tokens) : whole.encode(config.texts);
  }
  const ModelInput& in = report.input;
  const ModelCall call = check_model_call(
      c, {config.save_attention, config.layers, config.heads, config.top_k, config.threads});
  if (config.save_qk && !config.save_attention)
    fail_input(
        "--save_qk writes the queries and keys of the maps written: give --save_attention "
        "too");
  report.threads = resolve_threads(call.threads);
  report.map_layers = call.map_layers;
  report.map_heads = call.map_heads;
  report.memory_estimate =
      forward_memory(c, model.layer_float32_bytes(), in.B, in.T, report.threads);
  if (c.image_input())  // the pixels, the embeddings, the patches and the projection
    report.memory_estimate +=
        4 * (in.pixels.size() + in.B * in.T * c.d_model +
             (in.T + c.d_model) * 3 * c.patch_size * c.patch_size + in.T * c.d_model) +
        in.images.size();
  if (report.memory_estimate > report.max_memory)
    fail_input(config.model + ": the run needs about " + format_bytes(report.memory_estimate) +
               " (one layer's weights in float32, " + format_bytes(model.layer_float32_bytes()) +
               ", plus activations for " + std::to_string(in.B) + " x " + std::to_string(in.T) +
               " tokens), over max_memory " + format_bytes(report.max_memory));
  return call;
}

}  // namespace

ModelRunReport run_model(const ModelRunConfig& config) {
  const auto start = Clock::now();
  ModelRunReport report;
  // Plan: every check before any weight is read.
  if (config.tokens && !config.texts.empty())
    fail_input("--tokens and --text: give one of them, not both");
  if (!config.images.empty() && (config.tokens || !config.texts.empty()))
    fail_input(std::string("--image and ") + (config.tokens ? "--tokens" : "--text") +
               ": give images or text, not both");
  if (!config.tokens && config.texts.empty() && config.images.empty())
    fail_input(
        "--model: expected the input as --text \"...\" (repeatable), --tokens FILE.npy or "
        "--image FILE (image models)");
  for (const std::string& t : config.texts) check_utf8(t, "--text");
  for (const std::string& t : config.target_texts) check_utf8(t, "--target_text");
  const std::optional<DirLock> lock = lock_out_dir(config.out_dir, config.model, config.check_only);
  const Model whole(config.model, config.dtype);
  const Checkpoint& model = whole.checkpoint();
  const ModelConfig& c = model.config();
  // Encoder-decoders, and targets given to any model (refused there): run/seq2seq_run.cpp.
  if (c.encoder_decoder || config.target_tokens || !config.target_texts.empty())
    return run_seq2seq(config, whole);
  const ModelCall call = plan_model_run(config, whole, report);
  const ModelInput& in = report.input;
  // --save_sites: checked against the model's sites before any weight is read
  const std::vector<SiteShape> sites = sites_to_save(c, in.B, in.T, 0, config.save_sites);
  if (config.check_only) return report;
  if (!model.gguf()) report.files.push_back(file_record(config.model + "/config.json"));
  // A GGUF file's tokenizer is in its metadata: the file is listed once, with the weights.
  if (!whole.tokenizer_path().empty() && !model.gguf())
    report.files.push_back(file_record(whole.tokenizer_path()));
  const std::vector<std::string> weights = model.weight_files();
  const std::vector<std::uint64_t> headers = model.weight_header_bytes();
  for (std::size_t i = 0; i < weights.size(); ++i)
    report.files.push_back(file_record(weights[i], headers[i]));
  report.stored_dtypes = model.stored_dtypes();
  report.gguf_architecture = model.gguf_architecture();

  OutputSet out(config.out_dir);
  const std::size_t B = in.B, T = in.T, d = c.d_model;
  const std::size_t Ls = report.map_layers.size(), Hs = report.map_heads.size();
  const OutputSet::NpyStream* maps = nullptr;
  const OutputSet::NpyStream* hidden = nullptr;
  if (config.save_attention)
    maps = &out.stage_npy_stream("self_attention.npy", DType::f4, {Ls, B, Hs, T, T});
  if (config.save_hidden_states)
    hidden = &out.stage_npy_stream("hidden_states.npy", DType::f4, {c.num_layers + 1, B, T, d});
  const OutputSet::NpyStream* qs = nullptr;
  const OutputSet::NpyStream* ks = nullptr;
  const std::size_t dk = c.head_dim;
  if (config.save_qk) {
    qs = &out.stage_npy_stream("q.npy", DType::f4, {Ls, B, Hs, T, dk});
    ks = &out.stage_npy_stream("k.npy", DType::f4, {Ls, B, Hs, T, dk});
  }

  ForwardOptions fo;
  fo.threads = report.threads;
  fo.top_k = call.top_k;
  HookList hooks;
  MapHook map_hook(c.h, report.map_layers, report.map_heads,
                   [&](MapKind, std::size_t slot, std::size_t b, std::size_t head, std::size_t t0,
                       std::size_t rows, const float* block) {
                     maps->write_elements((((slot * B + b) * Hs + head) * T + t0) * T, block,
                                          rows * T);
                   });
  if (maps) hooks.add(&map_hook);
  QKHook qk_hook(report.map_layers, [&](std::size_t slot, const float* Q, std::size_t ldq,
                                        const float* K, std::size_t ldk) {
    qk_blocks(c, report.map_heads, B, T, slot, Q, ldq, K, ldk,
              [&](bool key, std::uint64_t first, const float* block) {
                (key ? ks : qs)->write_elements(first, block, T * dk);
              });
  });
  if (qs) hooks.add(&qk_hook);
  HiddenHook hidden_hook(model, [&](Stack, std::size_t i, const float* x) {
    hidden->write_elements(i * B * T * d, x, B * T * d);
  });
  if (hidden) hooks.add(&hidden_hook);
  SiteFiles site_files(out, sites);  // --save_sites: each site to sites/<name>.npy
  if (!sites.empty()) hooks.add(&site_files);
  fo.hook = hooks.empty() ? nullptr : &hooks;
  // A layer's maps are complete when the next layer starts: to disk in the background.
  std::size_t maps_done = 0;
  if (maps)
    fo.on_layer = [&](Stack, std::size_t l, const TransformerLayer<float>&) {
      const std::size_t slots = static_cast<std::size_t>(
          std::lower_bound(report.map_layers.begin(), report.map_layers.end(), l) -
          report.map_layers.begin());
      const std::size_t per_slot = B * Hs * T * T;
      if (slots > maps_done)
        maps->start_writeback(maps_done * per_slot, (slots - maps_done) * per_slot);
      maps_done = slots;
    };
  const auto t0 = Clock::now();
  // An image model's pass starts from its patch embeddings.
  const std::vector<float> embeddings = input_embeddings(model, in);
  if (!embeddings.empty()) fo.first_hidden = embeddings.data();
  ForwardResult r = forward(model, in.ids.data(), B, T, in.lengths, fo);
  report.forward_ms = ms_since(t0);
  report.read_ms = r.seconds_read * 1e3;
  report.top_k = std::move(r.top_k);
  if (report.input.tokens.empty()) whole.name_tokens(report.input);  // ids given: after the forward
  name_top_k(whole, report);
  check_finite_output(r, config.model);
  site_files.check_complete();
  out.stage_npy("output.npy", r.output.data(), {B, T, d});
  out.stage_bytes("tokens.json", dump_json(tokens_json(in)) + "\n");
  report.outputs = {"tokens.json", "output.npy"};
  if (!in.images.empty()) {
    out.stage_npy("images.npy", in.images.data(),
                  {B, c.image_height, c.image_width, std::size_t{3}});
    report.outputs.push_back("images.npy");
  }
  if (maps) report.outputs.push_back("self_attention.npy");
  if (hidden) report.outputs.push_back("hidden_states.npy");
  if (qs) report.outputs.insert(report.outputs.end(), {"q.npy", "k.npy"});
  for (const std::string& name : site_files.filenames()) report.outputs.push_back(name);
  for (const std::string& name : report.outputs) report.checksums[name] = out.checksum(name);
  report.outputs.push_back("run.json");
  report.total_ms = ms_since(start);
  out.stage_bytes("run.json", dump_json(to_json(report), 2) + "\n");
  // An earlier run's outputs in out_dir go in the same commit (the ids file stays).
  const auto is_input = [&](const std::string& p) {
    std::error_code ec;
    return config.tokens && fs::equivalent(*config.tokens, p, ec);
  };
  out.remove_on_commit(
      earlier_site_files(out.dir(), is_input, earlier_run_outputs(out.dir(), is_input)));
  out.commit();
  return report;
}

}  // namespace mha
