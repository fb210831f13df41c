// Where the analyses' arrays go (AnalysisOutputs, mha/analysis/analysis.hpp):
// out_dir's files through an OutputSet, or arrays in memory; and the end every
// analysis run shares. Private to lib/src/analysis/.
#pragma once

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/analysis/analysis.hpp"
#include "mha/io/output_set.hpp"

namespace mha {

// Files of out_dir through an OutputSet (made when the first file is staged: a
// plan writes nothing); streams are its NpyStreams.
class FileOutputs : public AnalysisOutputs {
 public:
  explicit FileOutputs(std::string dir) : dir_(std::move(dir)) {}
  OutputSet& set() {
    if (!set_) set_ = std::make_unique<OutputSet>(dir_);
    return *set_;
  }
  class File : public Stream {
   public:
    explicit File(const OutputSet::NpyStream& s) : s_(s) {}
    void write(std::size_t offset, const float* data, std::size_t count) const override {
      s_.write_elements(offset, data, count);
    }
    void written(std::size_t offset, std::size_t count) const override {
      s_.start_writeback(offset, count);
    }

   private:
    const OutputSet::NpyStream& s_;
  };
  const Stream& stream(const std::string& name, const std::vector<std::size_t>& shape) override {
    streams_.push_back(std::make_unique<File>(set().stage_npy_stream(name, DType::f4, shape)));
    return *streams_.back();
  }
  void array(const std::string& name, DType dtype, const std::vector<std::size_t>& shape,
             const void* data) override {
    if (dtype == DType::f4)
      set().stage_npy(name, static_cast<const float*>(data), shape);
    else if (dtype == DType::f8)
      set().stage_npy(name, static_cast<const double*>(data), shape);
    else
      set().stage_bytes(name, encode_npy(memory_array(dtype, shape, data)));
  }
  void bytes(const std::string& name, const std::string& bytes) override {
    set().stage_bytes(name, bytes);
  }
  static NpyArray memory_array(DType dtype, const std::vector<std::size_t>& shape,
                               const void* data) {
    NpyArray a;
    a.dtype = dtype;
    a.shape = shape;
    a.data.resize(a.size() * itemsize(dtype));
    if (data) std::memcpy(a.data.data(), data, a.data.size());
    return a;
  }

 private:
  std::string dir_;
  std::unique_ptr<OutputSet> set_;
  std::vector<std::unique_ptr<File>> streams_;
};

// Arrays in memory, by file name (mha.Model); files other than arrays are dropped.
class MemoryOutputs : public AnalysisOutputs {
 public:
  std::map<std::string, NpyArray> arrays;
  class Buffer : public Stream {
   public:
    explicit Buffer(NpyArray& a) : a_(a) {}
    void write(std::size_t offset, const float* data, std::size_t count) const override {
      std::memcpy(a_.data.data() + offset * sizeof(float), data, count * sizeof(float));
    }

   private:
    NpyArray& a_;
  };
  const Stream& stream(const std::string& name, const std::vector<std::size_t>& shape) override {
    NpyArray& a = arrays[name] = FileOutputs::memory_array(DType::f4, shape, nullptr);
    streams_.push_back(std::make_unique<Buffer>(a));
    return *streams_.back();
  }
  void array(const std::string& name, DType dtype, const std::vector<std::size_t>& shape,
             const void* data) override {
    arrays[name] = FileOutputs::memory_array(dtype, shape, data);
  }
  void bytes(const std::string&, const std::string&) override {}

 private:
  std::vector<std::unique_ptr<Buffer>> streams_;
};

// The end every analysis shares: run.json's dtype, compute, memory (`need`
// against `max_memory`), every output's checksum and total_ms (since
// `start`) added to `run`, written beside the outputs, the outputs of an
// earlier run in out_dir removed (the input ids files kept), and all of it
// committed; report.run and report.outputs filled.
void commit_analysis(const AnalyzeConfig& config, nlohmann::json run, OutputSet& out,
                     AnalyzeReport& report, std::uint64_t need, std::uint64_t max_memory,
                     std::chrono::steady_clock::time_point start);

}  // namespace mha
