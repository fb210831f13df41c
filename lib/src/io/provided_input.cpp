#include "mha/io/provided_input.hpp"

#include <memory>
#include <mutex>

namespace mha {

namespace {

struct Registry {
  std::mutex mutex;
  std::size_t next = 0;
  std::map<std::string, std::unique_ptr<NpyArray>> arrays;
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
