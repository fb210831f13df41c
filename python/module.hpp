// What the Python module's files (module.cpp, show.cpp) share.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "mha/io/npy.hpp"

namespace mha_python {

// A NumPy array (or anything np.asarray takes) as an NpyArray: C order,
// native byte order; float16/32/64, bool, int32/64 and uint8 as the CLI reads them
// from files. Throws mha::Error (invalid_input) naming `what` otherwise.
mha::NpyArray to_npy(const pybind11::array& in, const std::string& what);

// mha.show and mha.View (show.cpp).
void add_show(pybind11::module_& m);

}  // namespace mha_python
