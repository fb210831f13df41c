// A layer as an object in memory: multi-head attention, or a stack of
// Transformer encoder or decoder layers, built once from a config and its
// weights and called on the caller's arrays. No file is touched by a call.
//
//   mha::Config c;
//   c.apply(nlohmann::json{{"h", 8}, {"d_model", 512}, {"causal", true}}, "example");
//   const mha::Layer layer(c);                  // planned; weights converted once
//   mha::Layer::Call call;
//   call.query = {x.data(), mha::DType::f4, {B, T, 512}};
//   std::vector<float> out(mha::Layer::size(layer.shapes(call).output));
//   layer(call, out.data());                    // output (B, T, 512)
//
// Building runs `mha run`'s plan (plan.hpp) on the config, with its checks and
// messages, then reads and converts the weights (any file and layout the tool
// reads, arrays given in memory through provided_input.hpp, or drawn from the
// seed) and builds the mask of the planned sizes. A call takes arrays of any
// batch and length whose feature sizes match the layer's. `mha run`, the
// Python module and `mha bench` all compute through this object, so a call
// gives the same bits as `mha run` on the same arrays.
//
// A Layer is immutable once built: calls from several threads at once are
// safe (the kernel's pool runs one call's tasks at a time).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mha/config/config.hpp"
#include "mha/io/provided_input.hpp"

namespace mha {

class Layer {
 public:
  // Plans `config` and builds the layer; throws mha::Error (invalid_input for
  // bad input) naming the key, tensor or file. `warn` gets the plan's and the
  // mask's warnings. `sized` says the config's sizes (or its query) are
  // those of the calls to come: the mask is then made and checked now, once,
  // else for each call (a mask file fixes T and S; a layer built without
  // them would refuse it).
  explicit Layer(const Config& config, const std::function<void(const std::string&)>& warn = {},
                 bool sized = true);

  // The config as planned (sizes resolved from the files, a decoder's causal).
  const Config& config() const;
  // The dtype of the arrays a call takes and fills: f4 (float32, bfloat16) or f8.
  DType dtype() const;
  // Feature sizes a call's arrays must have.
  std::size_t d_model() const;
  std::size_t kdim() const;
  std::size_t vdim() const;

  struct Call {
    // (B, T, d_model), or (T, d_model) for B = 1; under attention_axes, the
    // N-D shape the layer was planned for. C order, in dtype().
    NpyView query;
    // Cross-attention's key (B, S, kdim) and value (B, S, vdim); a value
    // without a key is the key too (as in `mha run`). Null: self-attention.
    const NpyView* key = nullptr;
    const NpyView* value = nullptr;
    const NpyView* memory = nullptr;  // a decoder stack's (B, S, d_model)
    // A call's own config: the layer's with mask keys, position_offset,
    // save_attention or average_heads changed. Null: the layer's.
    const Config* config = nullptr;
  };

  struct Shapes {
    std::vector<std::size_t> output;  // (B, T, d_out), or its N-D layout
    // With save_attention, else empty: (B, h, T, S) or (B, T, S) averaged
    // over heads (Keras' N-D layout under attention_axes); for a stack, with a
    // leading layer axis, and cross_attention for a decoder's.
    std::vector<std::size_t> attention, cross_attention;
  };
  // Checks the call's arrays against the layer (errors name the argument and
  // the expected shape) and gives the shapes of what it fills.
  Shapes shapes(const Call& call) const;

  // Computes into the caller's C-order buffers of shapes(call), in dtype();
  // attention and cross_attention are written only when their shapes are not
  // empty. Inputs with NaN or Inf are refused unless allow_nonfinite.
  void operator()(const Call& call, void* output, void* attention = nullptr,
                  void* cross_attention = nullptr,
                  const std::function<void(const std::string&)>& warn = {}) const;

  static std::size_t size(const std::vector<std::size_t>& shape);

  // The inputs `mha run` draws from the seed when a config names no file
  // (uniform on [0, 1) from the streams "query", "key", "value", "memory"),
  // for the planned sizes: query always, key, value and memory where the plan
  // has them. `call` points into this object.
  struct Drawn {
    std::vector<unsigned char> query_bytes, key_bytes, value_bytes, memory_bytes;
    NpyView key, value, memory;
    Call call;
  };
  std::unique_ptr<Drawn> draw_inputs() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace mha
