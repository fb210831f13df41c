#include "mha/run/view_run.hpp"

#include <optional>
#include <utility>

#include "mha/run/run_json.hpp"

namespace mha {

ViewedRun read_viewed_run(const std::string& path) {
  ViewedRun v;
  if (std::optional<ModelRunView> model = read_model_run_view(path)) {
    v.page = std::move(model->run_json);
    v.token_labels = std::move(model->tokens);
    v.token_pieces = std::move(model->pieces);
    v.target_labels = std::move(model->target_tokens);
    v.target_pieces = std::move(model->target_pieces);
    v.target_label_tokens = std::move(model->label_tokens);
    v.lengths = std::move(model->lengths);
    v.target_lengths = std::move(model->target_lengths);
    return v;
  }
  const RunReport r = read_run_report(path);
  v.page = to_json(r);
  if (r.attention_axes) {
    const Dims& d = r.dims;  // of the flattened run: B' = batch
    v.attention_shape = r.config.average_heads ? std::vector<std::size_t>{d.B, d.T, d.S}
                                               : std::vector<std::size_t>{d.B, d.h, d.T, d.S};
  }
  return v;
}

std::string run_attention_page(const std::string& path, const ViewOptions& options) {
  return attention_page(read_attention_view(path, options, read_viewed_run));
}

}  // namespace mha
