#include "io/checkpoint_file.h"

#include "core/error.h"

namespace xdit::io {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

CheckpointFile::CheckpointFile(const std::string& path) : path_(path) {
  if (ends_with(path, ".gguf")) {
    gguf_ = std::make_shared<GgufFile>(path);
    return;
  }
  XDIT_CHECK(ends_with(path, ".safetensors"), path,
             ": a single-file checkpoint is a GGUF (.gguf) or safetensors (.safetensors) file");
  safetensors_ = std::make_shared<SafeTensorsFile>(path);
  for (const auto& [name, e] : safetensors_->entries()) {
    GgufTensor t;
    if (e.dtype == "F32")
      t.type = GgmlType::kF32;
    else if (e.dtype == "F16")
      t.type = GgmlType::kF16;
    else if (e.dtype == "BF16")
      t.type = GgmlType::kBF16;
    else
      XDIT_FAIL("safetensors file ", path, ": ", name, " is ", e.dtype,
                "; a checkpoint's tensors are read in F32, F16 or BF16");
    t.shape = e.shape;
    const Tensor& view = views_[name] = safetensors_->get(name);
    t.data = static_cast<const uint8_t*>(view.raw());
    t.bytes = e.end - e.begin;
    table_[name] = t;
  }
}

CheckpointFile::CheckpointFile(std::shared_ptr<const GgufFile> gguf)
    : path_(gguf->path()), gguf_(std::move(gguf)) {}

void CheckpointFile::drop_pages(const std::string& name, size_t from, size_t bytes) const {
  if (gguf_) return gguf_->drop_pages(gguf_->tensor(name), from, bytes);
  safetensors_->drop_pages(name);  // (a later read of its other rows faults them in again)
}

}  // namespace xdit::io
