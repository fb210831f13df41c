// checkpoint/: config.json as each family's reference implementation reads it
// (parse_model_config), its defaults and refusals, the sizes bounded before
// anything is allocated, Qwen2's sliding window by layer, and the memory
// estimate that saturates instead of wrapping.
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "mha/checkpoint/family.hpp"
#include "mha/checkpoint/model_config.hpp"
#include "mha/pipeline/forward.hpp"
#include "test_util.hpp"

namespace {

using json = nlohmann::json;
using mha::test::require_invalid;

mha::ModelConfig parse(const json& j) {
  return mha::parse_model_config(j.dump(), "config.json");
}

const json kGpt2 = {{"model_type", "gpt2"}, {"n_layer", 3}, {"n_embd", 48}, {"n_head", 4}};
const json kQwen2 = {{"model_type", "qwen2"},    {"num_hidden_layers", 4},
                     {"hidden_size", 64},        {"num_attention_heads", 4},
                     {"num_key_value_heads", 2}, {"intermediate_size", 96},
                     {"vocab_size", 180},        {"sliding_window", 8}};

}  // namespace

TEST_CASE("config.json: each family's keys and defaults", "[checkpoint]") {
  const mha::ModelConfig g = parse(kGpt2);
  CHECK(g.family == mha::find_family("gpt2"));
  CHECK(std::string(g.family->name) == "gpt2");
  CHECK((g.num_layers == 3 && g.d_model == 48 && g.h == 4 && g.kv_heads == 4 && g.head_dim == 12));
  CHECK(g.d_ff == 4 * 48);         // n_inner absent: 4 n_embd
  CHECK(g.vocab_size == 50257);    // GPT-2's
  CHECK(g.max_positions == 1024);  // n_positions
  CHECK(g.tie_word_embeddings);
  CHECK((g.causal && g.norm_placement == mha::NormPlacement::pre && !g.rms_norm && g.qkv_bias));

  json b = {{"model_type", "bert"},
            {"num_hidden_layers", 2},
            {"hidden_size", 32},
            {"num_attention_heads", 4},
            {"vocab_size", 120}};
  const mha::ModelConfig bert = parse(b);
  CHECK((!bert.causal && bert.norm_placement == mha::NormPlacement::post && !bert.has_lm_head()));
  CHECK((bert.d_ff == 128 && bert.max_positions == 512 && bert.type_vocab_size == 2));
  CHECK(bert.norm_eps == 1e-12);

  json q = kQwen2;
  q["model_type"] = "qwen3";
  q["head_dim"] = 32;  // Qwen3: head_dim apart from hidden_size / heads
  const mha::ModelConfig q3 = parse(q);
  CHECK((q3.head_dim == 32 && q3.kv_heads == 2 && q3.qk_norm && !q3.qkv_bias));
  CHECK(q3.sliding_window == 0);  // use_sliding_window absent: false
  const mha::ModelConfig q2 = parse(kQwen2);
  CHECK((q2.head_dim == 16 && q2.qkv_bias));  // Qwen2: q, k and v biases
}

TEST_CASE("config.json: Qwen2's sliding window from max_window_layers on", "[checkpoint]") {
  using Layers = std::vector<unsigned char>;
  json q = kQwen2;
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 0;  // every layer from 0 on
  CHECK(parse(q).sliding_window == 8);
  CHECK(parse(q).sliding == Layers{1, 1, 1, 1});
  q["max_window_layers"] = 4;  // none: layers 0..3 are all below 4
  CHECK(parse(q).sliding == Layers{0, 0, 0, 0});
  q.erase("max_window_layers");  // Qwen2Config's default, 28: none of 4 layers
  CHECK(parse(q).sliding == Layers{0, 0, 0, 0});
  q["max_window_layers"] = 2;  // layers 2 and 3 only
  CHECK(parse(q).sliding == Layers{0, 0, 1, 1});
  CHECK((!parse(q).layer_sliding(1) && parse(q).layer_sliding(2)));
  q.erase("max_window_layers");
  q["layer_types"] = json::array(
      {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention"});
  CHECK(parse(q).sliding == Layers{1, 1, 1, 1});
  q["layer_types"][0] = "full_attention";
  CHECK(parse(q).sliding == Layers{0, 1, 1, 1});
  q["layer_types"][0] = "chunked_attention";
  require_invalid([&] { parse(q); }, "key 'layer_types' holds \"chunked_attention\"");
  q["layer_types"] = json::array({"full_attention"});
  require_invalid([&] { parse(q); }, "expected one entry per layer");
  // Mistral: every layer, whatever max_window_layers says.
  json m = kQwen2;
  m["model_type"] = "mistral";
  m["max_window_layers"] = 2;
  CHECK(parse(m).sliding_window == 8);
  CHECK(parse(m).sliding == Layers{1, 1, 1, 1});
}

TEST_CASE("config.json: sizes bounded before anything is allocated", "[checkpoint]") {
  json g = kGpt2;
  g["n_layer"] = 1000000000;  // passes each key's bound; the parameters it implies do not
  g["n_embd"] = 4096;
  g["n_head"] = 32;
  require_invalid([&] { parse(g); }, "imply over 2^40 parameters");
  json q = kQwen2;  // heads x head_dim = 2^64: wraps to 0 in 64 bits, not in 128
  q["num_attention_heads"] = 4294967296LL;
  q["num_key_value_heads"] = 4294967296LL;
  q["head_dim"] = 4294967296LL;
  require_invalid([&] { parse(q); }, "imply over 2^40 parameters");
  q = kQwen2;
  q["hidden_size"] = 2;  // 2 / 4 heads = head_dim 0
  require_invalid([&] { parse(q); }, "head_dim is 0 (hidden_size 2 over 4 heads)");
  q = kQwen2;
  q["vocab_size"] = 2147483648LL;
  require_invalid([&] { parse(q); }, "vocab_size 2147483648 is over 2^31 - 1");
  q = kQwen2;
  q["num_hidden_layers"] = 4294967297LL;  // past each key's 2^32
  require_invalid([&] { parse(q); }, "key 'num_hidden_layers' is 4294967297");
}

TEST_CASE("forward_memory saturates instead of wrapping", "[checkpoint]") {
  mha::ModelConfig c = parse(kGpt2);
  const std::uint64_t small = mha::forward_memory(c, 1 << 20, 1, 16, 1);
  CHECK(small > (1u << 20));
  // Sizes no config.json can pass (read_model_config bounds them), the estimate alone: its
  // products reach 2^96 and would wrap to small numbers in 64 bits.
  c.d_model = std::size_t{1} << 32;
  c.d_ff = std::size_t{1} << 32;
  c.h = std::size_t{1} << 32;
  c.head_dim = std::size_t{1} << 32;
  CHECK(mha::forward_memory(c, 0, std::size_t{1} << 32, std::size_t{1} << 32, 1) ==
        std::numeric_limits<std::uint64_t>::max());
}
