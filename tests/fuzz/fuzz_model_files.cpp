// Fuzz target for a checkpoint's JSON files through the one bounded reader
// (mha/io/json_file.hpp): the input as a config.json (parse_model_config, every
// key checked), as a model.safetensors.index.json and as a tokenizer_config.json.
// Every refusal is an input error whose message is one line of at most 300
// characters; nothing crashes, whatever the nesting or size.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/checkpoint/model_config.hpp"
#include "mha/io/json_file.hpp"

namespace {

using mha_fuzz::check_message;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const mha::ModelConfig c = mha::parse_model_config(text, "config.json");
    FUZZ_CHECK(c.num_layers > 0 && c.h > 0 && c.head_dim > 0 && c.kv_heads > 0);
    FUZZ_CHECK(c.h % c.kv_heads == 0);
  } catch (const mha::Error& e) {
    check_message(e);
  }
  for (const mha::JsonKind* kind :
       {&mha::json_kind::shard_index, &mha::json_kind::tokenizer_config}) {
    try {
      const nlohmann::json j = mha::parse_json(text, "file.json", *kind);
      (void)j.dump();  // at most 64 levels deep: dumping recurses that far and no further
    } catch (const mha::Error& e) {
      check_message(e);
    }
  }
  return 0;
}
