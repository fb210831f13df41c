// The attention page of a run directory or an attention .npy, with its
// run.json read by this layer: what `mha view` writes and Python's mha.show
// puts in a notebook cell, through the same code.
//
//   std::string html = mha::run_attention_page("out/default", {});
#pragma once

#include <string>

#include "mha/view/attention_view.hpp"

namespace mha {

// The page's view of a run.json at `path`: its contents, a model run's tokens,
// and for an attention_axes run the flattened shape its N-D attention.npy is
// read as. Throws mha::Error (invalid_input) naming the file.
ViewedRun read_viewed_run(const std::string& path);

// read_attention_view with read_viewed_run, then attention_page.
std::string run_attention_page(const std::string& path, const ViewOptions& options);

}  // namespace mha
