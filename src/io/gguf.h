// GGUF files (issue 45): the single-file checkpoints stable-diffusion.cpp,
// ComfyUI-GGUF and diffusers read, as the GGUF specification (ggml's
// docs/gguf.md, versions 2 and 3) lays them out: a header, typed key/value
// metadata, tensor descriptions, then the tensors' data at an alignment.
// Every count, length, offset and size is checked against the file before
// anything is read through it; one line names what is wrong.
//
// Quantized tensors stay as stored: `tensor(name)` gives the bytes and the
// type; io/gguf_quants.h turns blocks of them into f32.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace xdit::io {

// The ggml tensor types xdit reads (the specification's numbers).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

const char* ggml_type_name(GgmlType t);
// Values per block (1 for F32 / F16 / BF16) and bytes per block.
int64_t ggml_block_values(GgmlType t);
int64_t ggml_block_bytes(GgmlType t);

// One tensor as the file stores it. `shape` is torch's order (outermost
// first): the file's dimensions reversed. Rows are the innermost dimension's
// runs of whole blocks.
struct GgufTensor {
  GgmlType type = GgmlType::kF32;
  Shape shape;
  const uint8_t* data = nullptr;  // inside the file's mapping
  size_t bytes = 0;
  int64_t row_values() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const;
};

// A metadata value: integers, floats, booleans, strings, or arrays of them.
using GgufValue = std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>, std::vector<std::string>>;

class GgufFile {
 public:
  // Maps `path` and checks its header and tensor table.
  explicit GgufFile(const std::string& path);
  // The same checks on bytes already in memory (`name` for messages).
  GgufFile(std::shared_ptr<const void> data, size_t size, std::string name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::map<std::string, GgufTensor>& tensors() const { return tensors_; }
  // Throws one line for a name the file lacks.
  const GgufTensor& tensor(const std::string& name) const;
  // Where a tensor's data starts in the file.
  size_t offset_of(const GgufTensor& t) const {
    return static_cast<size_t>(t.data - static_cast<const uint8_t*>(map_.get()));
  }
  // The pages wholly inside `bytes` bytes of `t` from byte `from` leave the
  // resident set (io::drop_mapped_pages); nothing for bytes in memory.
  void drop_pages(const GgufTensor& t, size_t from, size_t bytes) const;
  // The whole tensor in f32 (dequantized, io/gguf_quants.h).
  Tensor dequantized(const std::string& name) const;

 private:
  void parse();
  std::string path_;
  std::shared_ptr<const void> map_;
  size_t size_ = 0;
  bool mapped_ = false;  // map_ is this object's mmap of the file
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, GgufTensor> tensors_;
};

}  // namespace xdit::io
