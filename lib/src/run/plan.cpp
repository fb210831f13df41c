#include "mha/run/plan.hpp"

#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/io/npy.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/model/weights.hpp"

namespace mha {

const std::vector<std::size_t>& PlanFiles::npy_shape(const std::string& path) {
  if (errors_.count(path)) fail_input(errors_[path]);
  if (!shapes_.count(path)) {
    try {
      const NpyHeaderInfo header = read_npy_header(path);  // a full read's checks, no data
      shapes_[path] = header.shape;
      dtypes_[path] = header.dtype;
    } catch (const Error& e) {
      errors_[path] = e.what();
      throw;
    }
  }
  return shapes_[path];
}

DType PlanFiles::npy_dtype(const std::string& path) {
  npy_shape(path);
  return dtypes_.at(path);
}

const NativeWeights& PlanFiles::weights(const std::string& path, WeightsFormat format) {
  const std::string key = std::string(to_string(format)) + ":" + path;
  if (errors_.count(key)) fail_input(errors_[key]);
  if (!weights_.count(key)) {
    try {
      weights_[key] = to_native(read_weight_arrays(path), format, path);
    } catch (const Error& e) {
      errors_[key] = e.what();
      throw;
    }
  }
  return weights_[key];
}

RunPlan plan_run(const Config& c, PlanFiles& files) {
  RunPlan p;
  p.config = c;
  p.threads = resolve_threads(c.threads);
  FileShapes& shapes = p.shapes;
  if (c.query) shapes.query = files.npy_shape(*c.query), shapes.query_name = *c.query;
  if (c.key) shapes.key = files.npy_shape(*c.key), shapes.key_name = *c.key;
  if (c.value) shapes.value = files.npy_shape(*c.value), shapes.value_name = *c.value;
  // attention_axes: N-D inputs run as (B', L, F), every other axis a batch axis.
  p.axes = plan_attention_axes(c, shapes);
  if (c.weights) {
    p.weights = &files.weights(*c.weights, c.weights_format);
    shapes.weights_name = *c.weights;
    shapes.weights_h = p.weights->h;
    for (const auto& [name, array] : p.weights->arrays) shapes.weights[name] = array.shape;
  }
  // Biases: as the weights file has them, unless the config says otherwise.
  p.use_bias = c.use_bias.value_or(!p.weights || p.weights->arrays.count("b_q") > 0);
  const Dims& d = p.dims = resolve_dims(c, shapes);
  if (c.save_weights && c.save_weights_format != WeightsFormat::native && d.kv() != d.h)
    fail_input(std::string("save_weights: grouped-query weights (kv_heads = ") +
               std::to_string(d.kv()) + " < h = " + std::to_string(d.h) + ") have no " +
               to_string(c.save_weights_format) + " layout; use save_weights: native");
  // Refused before any big allocation, with the numbers.
  const std::size_t itemsize = c.dtype == ComputeType::float64 ? 8 : 4;
  p.memory = estimate_memory(d, itemsize, c.save_attention || c.plot, p.threads);
  const std::uint64_t limit = c.max_memory.value_or(default_max_memory());
  if (p.memory.total() > static_cast<double>(limit))
    fail_input("this run needs about " + p.memory.describe() + " but max_memory is " +
               format_bytes(static_cast<double>(limit)) + "; reduce batch or seq_len" +
               (c.dtype == ComputeType::float64 ? ", use float32," : "") + " or raise max_memory");
  // The inputs' dtypes, in the order the load stage converts them (with
  // files, query + value means the value file is the key too).
  auto check_float = [&](const std::string& path, const std::vector<std::size_t>& shape) {
    check_float_array(files.npy_dtype(path), shape, path);
  };
  if (c.query) check_float(*c.query, *shapes.query);
  if (!d.key_is_query && (c.key || c.value))
    check_float(c.key ? *c.key : *c.value, c.key ? *shapes.key : *shapes.value);
  if (!d.value_is_key && c.value) check_float(*c.value, *shapes.value);
  return p;
}

void check_loadable(const RunPlan& p) {
  if (p.weights)
    weights_from_arrays<float>(p.weights->arrays, p.dims, p.use_bias, *p.config.weights);
  load_mask<float>(p.config, p.dims);
}

}  // namespace mha
