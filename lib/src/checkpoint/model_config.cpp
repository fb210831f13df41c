#include "mha/checkpoint/model_config.hpp"
#include "config_keys.hpp"
#include "mha/base/message.hpp"
#include "mha/checkpoint/family.hpp"
#include "mha/io/json_file.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"

namespace mha {

namespace {

using nlohmann::json;

// The sizes' products in 128-bit arithmetic: every weight matrix, and all of
// them together, stays under kMaxParameters, so that no product of two sizes
// the forward or the memory estimate forms can wrap in 64 bits.
void check_sizes(const ModelConfig& c, const std::string& path) {
  using u128 = unsigned __int128;
  constexpr u128 kMaxParameters = u128{1} << 40;  // 4 TiB of float32
  const u128 d = c.d_model, q = u128{c.h} * c.head_dim, kv = u128{c.kv_heads} * c.head_dim;
  const u128 layer = d * (q + 2 * kv) + q * d + 3 * d * c.d_ff + 4 * d + 2 * q;
  // A decoder layer of an encoder-decoder holds a second attention: counted as two layers.
  const u128 total = layer * (u128{c.num_layers} + 2 * u128{c.num_decoder_layers}) +
                     2 * u128{c.relative_buckets} * c.h + 2 * u128{c.vocab_size} * d +
                     u128{std::max(c.max_positions, c.position_rows)} * d +
                     u128{c.type_vocab_size} * d;
  if (c.vocab_size > 0x7fffffff)
    fail_input(path + ": vocab_size " + std::to_string(c.vocab_size) +
               " is over 2^31 - 1; expected token ids that fit 32 bits");
  for (const u128 n : {q, kv, layer, total})
    if (n > kMaxParameters)
      fail_input(path + ": the sizes (" + std::to_string(c.num_layers) + " layers, hidden_size " +
                 std::to_string(c.d_model) + ", " + std::to_string(c.h) + " heads of " +
                 std::to_string(c.head_dim) + ", intermediate_size " + std::to_string(c.d_ff) +
                 ", vocab_size " + std::to_string(c.vocab_size) +
                 ") imply over 2^40 parameters; expected a model that can exist");
}

}  // namespace

const std::vector<std::string>& known_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const Family* f : families())
      t.insert(t.end(), f->model_types.begin(), f->model_types.end());
    return t;
  }();
  return types;
}

ModelConfig read_model_config(const std::string& path) {
  return parse_model_config(read_json_text(path, json_kind::model_config), path);
}

ModelConfig parse_model_config(std::string_view text, const std::string& path) {
  const json j = parse_json(text, path, json_kind::model_config);
  if (!j.is_object()) fail_input(path + ": expected a JSON object (a model's config.json)");
  const ConfigKeys k(j, path);
  ModelConfig c;
  std::string known;
  for (const std::string& t : known_model_types()) known += (known.empty() ? "" : ", ") + t;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    fail_input(path + ": key 'model_type' is missing; expected one of " + known);
  c.model_type = j["model_type"].get<std::string>();
  c.family = find_family(c.model_type);
  if (!c.family)
    // The value cut shorter than other echoes: the list of the known types must fit the line.
    fail_input(path + ": model_type " + echo(c.model_type, 24) +
               " is not supported; expected one of " + known);
  c.family->read_config(k, c);
  if (!c.kv_heads) c.kv_heads = c.h;
  if (!c.head_dim) {  // the families without a head_dim key: hidden_size / heads, exactly
    if (c.d_model % c.h && c.d_model >= c.h)
      fail_input(path + ": hidden size " + std::to_string(c.d_model) + " is not a multiple of " +
                 std::to_string(c.h) + " heads");
    c.head_dim = c.d_model / c.h;
  }
  if (c.head_dim == 0)
    fail_input(path + ": head_dim is 0 (hidden_size " + std::to_string(c.d_model) + " over " +
               std::to_string(c.h) + " heads); expected a positive head size");
  check_sizes(c, path);
  if (c.encoder_decoder && (c.decoder_start_token_id < 0 ||
                            static_cast<std::uint64_t>(c.decoder_start_token_id) >= c.vocab_size))
    fail_input(path + ": decoder_start_token_id " + std::to_string(c.decoder_start_token_id) +
               " is outside the vocabulary (vocab_size " + std::to_string(c.vocab_size) +
               "); expected the id the decoder's inputs start with");
  if (c.h % c.kv_heads)
    fail_input(path + ": num_attention_heads " + std::to_string(c.h) +
               " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
  if (c.attn_scale == 0) c.attn_scale = 1 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.rope) {
    // int(head_dim * fraction), as GPT-NeoX's rotary_ndims and Phi-3's rotary_ndims
    c.rotary_dim = static_cast<std::size_t>(static_cast<double>(c.head_dim) * c.rotary_fraction);
    if (c.rotary_fraction == 1 && c.head_dim % 2)
      fail_input(path + ": head_dim " + std::to_string(c.head_dim) +
                 " is odd; rotary embeddings need an even size");
    if (c.rotary_dim == 0 || c.rotary_dim % 2)
      fail_input(
          path + ": head_dim " + std::to_string(c.head_dim) + " rotates " +
          std::to_string(c.rotary_dim) +
          " features (the rotary fraction); rotary embeddings need an even, positive number");
  }
  if (c.sliding_window == 0) c.sliding.clear();
  c.sliding.resize(c.num_layers, 0);
  c.pad_token_id = k.id("pad_token_id");
  c.bos_token_id = k.id("bos_token_id");
  c.eos_token_id = k.id("eos_token_id");
  c.torch_dtype = k.string("torch_dtype", "");
  if (const json* arch = k.find({"architectures"}); arch && arch->is_array() && !arch->empty()) {
    c.base_model = true;
    for (const json& a : *arch)
      if (!a.is_string() ||
          !(a.get<std::string>().size() > 5 &&
            a.get<std::string>().compare(a.get<std::string>().size() - 5, 5, "Model") == 0) ||
          a.get<std::string>().find("LMHead") != std::string::npos)
        c.base_model = false;
  }
  return c;
}

}  // namespace mha
