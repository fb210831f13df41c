// The tokenizer a GGUF file describes in its metadata (tokenizer.ggml.*, as llama.cpp's
// convert_hf_to_gguf.py writes it), rebuilt as the tokenizer.json Hugging Face would have for
// it and read by Tokenizer::from_json_text: all tokenizing stays in one implementation.
//
//   tokenizer.ggml.model "gpt2"   byte-level BPE: tokens, merges ("left right", rank = index),
//                                 the pre-tokenizer regexes of tokenizer.ggml.pre (gpt-2,
//                                 llama-bpe/llama3/llama-v3, qwen2/deepseek-r1-qwen, default)
//   tokenizer.ggml.model "llama"  SentencePiece BPE: tokens and scores, byte fallback through
//                                 the <0xXX> tokens, "▁" for spaces (add_space_prefix), merges
//                                 derived from the scores as transformers' SentencePieceExtractor
//                                 derives them
//
// Token types CONTROL and UNKNOWN become special added tokens, USER_DEFINED plain ones; bos/eos
// and add_bos_token/add_eos_token (llama.cpp's defaults when absent) become the post-processor.
// Everything is checked against the token count (ids, merges, types, scores): a file that
// fails is refused with one line naming it and the key.
//
//   mha::GgufFile f("model-Q4_K_M.gguf");
//   std::optional<mha::Tokenizer> t = mha::gguf_tokenizer(f);  // nullopt: no tokenizer.ggml.model
//   t->encode("Hello world").ids;
#pragma once

#include <optional>
#include <string>

#include "mha/text/tokenizer.hpp"

namespace mha {

class GgufFile;

// Whether the file names a tokenizer (tokenizer.ggml.model present and not "none").
bool gguf_has_tokenizer(const GgufFile& f);

// The tokenizer.json text equivalent to the file's tokenizer metadata; throws mha::Error
// (invalid_input) naming the file and the key for anything missing, unsupported or out of
// range.
std::string gguf_tokenizer_json(const GgufFile& f);

// The tokenizer of the file, or nullopt when it has none (gguf_has_tokenizer).
std::optional<Tokenizer> gguf_tokenizer(const GgufFile& f);
std::optional<Tokenizer> gguf_tokenizer(const std::string& gguf_path);

}  // namespace mha
