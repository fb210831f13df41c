#include "mha/io/provided_input.hpp"

#include <memory>
#include <mutex>

namespace mha {

namespace {

struct Registry {
  std::mutex mutex;
  std::size_t next = 0;
  std::map<std::string, std::unique_ptr<NpyArray>> arrays;
  std::map<std::string, std::unique_ptr<NpyView>> views;
  std::map<std::string, std::unique_ptr<std::map<std::string, NpyArray>>> weights;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::string provide_npy(NpyArray array) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string path = "<memory:" + std::to_string(r.next++) + ">";
  r.arrays[path] = std::make_unique<NpyArray>(std::move(array));
  return path;
}

std::size_t NpyView::bytes() const {
  std::size_t n = itemsize(dtype);
  for (std::size_t d : shape) n *= d;
  return n;
}

std::string provide_view(NpyView view) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string path = "<memory:" + std::to_string(r.next++) + ">";
  r.views[path] = std::make_unique<NpyView>(std::move(view));
  return path;
}

const NpyView* provided_view(const std::string& path) {
  if (path.compare(0, 8, "<memory:") != 0) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.views.find(path);
  return it == r.views.end() ? nullptr : it->second.get();
}

std::string provide_weights(std::map<std::string, NpyArray> arrays) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string path = "<memory:" + std::to_string(r.next++) + ">";
  r.weights[path] = std::make_unique<std::map<std::string, NpyArray>>(std::move(arrays));
  return path;
}

void release_provided(const std::string& path) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.arrays.erase(path);
  r.views.erase(path);
  r.weights.erase(path);
}

const NpyArray* provided_npy(const std::string& path) {
  if (path.compare(0, 8, "<memory:") != 0) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.arrays.find(path);
  return it == r.arrays.end() ? nullptr : it->second.get();
}

const std::map<std::string, NpyArray>* provided_weights(const std::string& path) {
  if (path.compare(0, 8, "<memory:") != 0) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.weights.find(path);
  return it == r.weights.end() ? nullptr : it->second.get();
}

}  // namespace mha
