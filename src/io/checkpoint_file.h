// A single-file checkpoint (--transformer FILE): a GGUF file or a
// safetensors file, seen as one table of tensors in GGUF's terms (a
// safetensors file's F32, F16 and BF16 tensors are GGUF's float types), so
// that one mapping of the original layout reads both.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "io/gguf.h"
#include "io/safetensors.h"

namespace xdit::io {

class CheckpointFile {
 public:
  // By the name's extension: .gguf or .safetensors; anything else, a
  // missing or malformed file, and a safetensors tensor of another dtype
  // throw one line.
  explicit CheckpointFile(const std::string& path);
  // A GGUF file already read (bytes in memory: tests, fuzzing).
  explicit CheckpointFile(std::shared_ptr<const GgufFile> gguf);
  const std::string& path() const { return path_; }
  const char* kind() const { return gguf_ ? "GGUF" : "safetensors"; }
  const std::map<std::string, GgufTensor>& tensors() const {
    return gguf_ ? gguf_->tensors() : table_;
  }
  // The pages of bytes [from, from + bytes) of tensor `name` leave the
  // resident set (a safetensors file's: the whole tensor's).
  void drop_pages(const std::string& name, size_t from, size_t bytes) const;

 private:
  std::string path_;
  std::shared_ptr<const GgufFile> gguf_;
  std::shared_ptr<const SafeTensorsFile> safetensors_;
  std::map<std::string, GgufTensor> table_;  // a safetensors file's
  // The tensors table_ points into: views of the mapping, or aligned
  // copies of tensors the file stores at an offset their dtype cannot be
  // read at (SafeTensorsFile::get).
  std::map<std::string, Tensor> views_;
};

}  // namespace xdit::io
