#include "tensor_source.hpp"

#include "mha/base/error.hpp"
#include "mha/io/safetensors.hpp"

namespace mha {

namespace {

class Safetensors final : public TensorSource {
 public:
  explicit Safetensors(const std::string& path) : file_(path) {
    for (const auto& [name, t] : file_.tensors()) tensors_[name] = {t.dtype, t.shape};
  }
  const std::string& path() const override { return file_.path(); }
  std::uint64_t header_bytes() const override { return file_.data_start(); }
  const std::map<std::string, StoredTensor>& tensors() const override { return tensors_; }
  void read(const std::string& name, float* out, int) const override { file_.read(name, out); }
  void read_rows(const std::string& name, std::size_t row0, std::size_t rows,
                 float* out) const override {
    file_.read_rows(name, row0, rows, out);
  }
  void read_transposed(const std::string& name, float*, int) const override {
    fail_input(file_.path() + ": tensor '" + name + "' is not held transposed");
  }
  void read_bfloat16(const std::string& name, std::uint16_t* out) const override {
    file_.read_bfloat16(name, out);
  }

 private:
  SafetensorsFile file_;
  std::map<std::string, StoredTensor> tensors_;
};

}  // namespace

std::unique_ptr<TensorSource> open_safetensors(const std::string& path) {
  return std::make_unique<Safetensors>(path);
}

}  // namespace mha
