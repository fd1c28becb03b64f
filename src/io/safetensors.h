// safetensors reading (memory-mapped, validated) and writing.
// Format: u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data section that the offsets index.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace xdit::io {

struct TensorEntry {
  std::string dtype;  // as written in the file ("F32", "BF16", "I64", ...)
  Shape shape;
  size_t begin = 0;  // byte offsets inside the data section
  size_t end = 0;
};

// One .safetensors file, mapped read-only. The constructor validates the whole
// header (and that every tensor lies inside the file) and throws xdit::Error
// naming the file and the problem.
class SafeTensorsFile {
 public:
  explicit SafeTensorsFile(const std::string& path);
  // The same checks on a file's bytes already in memory (`name` for messages).
  SafeTensorsFile(std::shared_ptr<const void> data, size_t size, std::string name);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A zero-copy view of tensor `name` (f32, f16 or bf16).
  Tensor get(const std::string& name) const;
  // Takes the pages of tensor `name` that reads have touched out of this
  // process's resident memory (madvise MADV_DONTNEED on the private read-only
  // mapping): the page cache keeps them, and a later read of a view faults
  // them in again, unchanged. Only pages wholly inside the tensor's bytes;
  // nothing for a file given as bytes in memory.
  void drop_pages(const std::string& name) const;

 private:
  void parse();  // validates the header of the bytes in map_
  std::string path_;
  std::shared_ptr<const void> map_;  // the whole file
  bool mapped_ = false;              // map_ is this object's mmap of the file
  size_t file_size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The mapped safetensors files still in use (weights a resident model
// reads) whose bytes changed on disk since they were mapped: truncated or
// rewritten in place, as copying a new model over the folder does (a
// replacement by rename leaves the mapped file intact and is not listed).
// Touching a truncated mapping's pages would end the process with SIGBUS;
// xdit serve asks before each round and refuses to run until restarted.
std::vector<std::string> changed_mapped_files();

// A file mapped read-only (private), noted for changed_mapped_files while
// the mapping lives; throws one line (naming `what` and the path) for a file
// that cannot be opened, is not a regular file, or is empty.
struct MappedFile {
  std::shared_ptr<const void> data;
  size_t size = 0;
};
MappedFile map_file(const std::string& path, const std::string& what);
// Takes the pages wholly inside bytes [begin, end) of a private read-only
// mapping out of this process's resident memory (madvise MADV_DONTNEED: the
// page cache keeps them; a later read faults them in again, unchanged).
void drop_mapped_pages(const void* mapping, size_t begin, size_t end);

class OutputFile;

// Writes tensors (any of f32/f16/bf16) and string metadata. Writes to a
// temporary file and renames it, so a failure never leaves a partial file.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same into an output reserved before the work (io/file.h).
void write_safetensors(OutputFile& out, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a file into memory as f32 (small files: inputs, goldens).
std::map<std::string, Tensor> read_safetensors_f32(const std::string& path);

}  // namespace xdit::io
