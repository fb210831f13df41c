// A shared library opened with dlopen when it is first needed instead of
// linked. Libraries that only some commands use (libzip for .npz, FreeType
// for plot text) are loaded this way so that every other mha process does not
// pay for loading and relocating them at start (about 1.5 ms and 0.7 ms).
#pragma once

#include <string>

namespace mha {

class SharedLibrary {
 public:
  // Opens `soname` (RTLD_NOW | RTLD_LOCAL), open for the life of the process;
  // throws mha::Error (runtime, exit code 1): "cannot load <what> (<dlerror>);
  // <hint>".
  SharedLibrary(const char* soname, const std::string& what, const std::string& hint);

  // Sets f to the function `name`; throws naming the library and the function
  // if it has none.
  template <class F>
  void bind(F*& f, const char* name) const {
    f = reinterpret_cast<F*>(symbol(name));
  }

 private:
  void* symbol(const char* name) const;

  std::string soname_;
  void* handle_ = nullptr;
};

}  // namespace mha
