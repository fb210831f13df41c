#include "mha/base/shared_library.hpp"

#include <dlfcn.h>

#include "mha/base/error.hpp"

namespace mha {

SharedLibrary::SharedLibrary(const char* soname, const std::string& what, const std::string& hint)
    : soname_(soname), handle_(::dlopen(soname, RTLD_NOW | RTLD_LOCAL)) {
  if (!handle_) {
    const char* e = ::dlerror();
    fail_runtime("cannot load " + what + " (" + (e ? e : soname_) + "); " + hint);
  }
}

void* SharedLibrary::symbol(const char* name) const {
  ::dlerror();
  void* f = ::dlsym(handle_, name);
  if (!f) fail_runtime(soname_ + ": has no function " + name + "; is it too old a version?");
  return f;
}

}  // namespace mha
