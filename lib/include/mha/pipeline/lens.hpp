// What a causal LM's head makes of hidden states: the logits of any rows of
// the residual stream (streamed over the vocabulary's LM head rows), the
// next-token loss of a batch, and the logit lens (nostalgebraist 2020):
// every layer's residual stream through the final norm and the LM head.
// docs/analyses.md gives the formulas and conventions.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mha/checkpoint/checkpoint.hpp"

namespace mha {

// Calls fn(r0, n, logits) for pieces of rows [r0, r0 + n) of hidden (rows,
// d_model), logits (n, vocab_size): the LM head (soft-capped where the family
// caps its final logits) on rows that are already final-normed. Memory: one
// piece of rows and one piece of the head's rows. The GEMMs run in blocks of
// rows fixed by the shape, on `threads`: the same bits for any count.
void lm_logits(const Checkpoint& model, const float* hidden, std::size_t rows,
               const std::function<void(std::size_t r0, std::size_t n, const float* logits)>& fn,
               int threads);

// softmax(logits)'s normaliser over `vocab` entries, in double: the largest
// logit and the sum of exp(logit - top). One pass over the vocabulary serves
// every probability of the row.
struct Softmax {
  double top = 0, sum = 0;
  double p(float z) const { return std::exp(double(z) - top) / sum; }
  double log_p(float z) const { return double(z) - top - std::log(sum); }
};
Softmax softmax_of(const float* logits, std::size_t vocab);

// The next token's log-probability and rank (0 = the most likely) under
// logits (vocab entries) whose softmax is `s`: log_softmax(logits)[next].
struct TokenScore {
  double log_p = 0;
  std::int64_t rank = 0;
};
TokenScore score_token(const float* logits, std::size_t vocab, std::int32_t next, const Softmax& s);

// Per-token loss of a batch from the model's final hidden states `output`
// (B, T, d_model): loss (B, T) = -log p(ids[b, t + 1]) for t < lengths[b] - 1,
// NaN at the other positions; mean_loss over those tokens; perplexity =
// exp(mean_loss).
struct TokenLoss {
  std::vector<double> loss;
  double mean_loss = 0, perplexity = 0;
  std::size_t tokens = 0;
};
TokenLoss token_loss(const Checkpoint& model, const float* output, const std::int32_t* ids,
                     std::size_t B, std::size_t T, const std::vector<std::size_t>& lengths,
                     int threads);

// The logit lens on hidden_states (L + 1, B, T, d_model) as forward's
// hidden_sink gives them: state i < L through the final norm, state L (the
// model's output, already normed) as it is, then the LM head. For each state
// and position: the k most likely tokens and their probabilities, and the
// probability and rank of the actual next token (NaN and -1 where there is
// none).
struct LogitLens {
  std::size_t states = 0, B = 0, T = 0, k = 0;
  std::vector<std::int32_t> top_ids;    // (states, B, T, k)
  std::vector<float> top_p;             // (states, B, T, k)
  std::vector<float> p_next;            // (states, B, T)
  std::vector<std::int64_t> rank_next;  // (states, B, T)
};
LogitLens logit_lens(const Checkpoint& model, const float* hidden_states, std::size_t B,
                     std::size_t T, const std::int32_t* ids,
                     const std::vector<std::size_t>& lengths, std::size_t k, int threads);

}  // namespace mha
