#include "models/original_checkpoint.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/gguf_quants.h"

namespace xdit::models {

OriginalCheckpointWeights::OriginalCheckpointWeights(std::shared_ptr<const io::CheckpointFile> file,
                                                     std::string model, OriginalRowMap map)
    : file_(std::move(file)), model_(std::move(model)), map_(std::move(map)) {}

const io::GgufTensor* OriginalCheckpointWeights::find(const std::string& original,
                                                      std::string* stored_name) const {
  for (const std::string& n : {original, "model.diffusion_model." + original})
    if (const auto it = file_->tensors().find(n); it != file_->tensors().end()) {
      if (stored_name != nullptr) *stored_name = n;
      return &it->second;
    }
  return nullptr;
}

bool OriginalCheckpointWeights::has(const std::string& name) const {
  const auto rows = map_(name);
  return rows && find(rows->name) != nullptr;
}

size_t OriginalCheckpointWeights::stored_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : file_->tensors()) n += t.bytes;
  return n;
}

void OriginalCheckpointWeights::drop_pages(const std::string& name) const {
  const auto rows = map_(name);
  std::string stored;
  const io::GgufTensor* t = rows ? find(rows->name, &stored) : nullptr;
  if (t == nullptr || t->shape.empty()) return;
  const size_t row_bytes = t->bytes / static_cast<size_t>(t->shape[0]);
  const int64_t count = rows->count < 0 ? t->shape[0] : rows->count;
  file_->drop_pages(stored, static_cast<size_t>(rows->begin) * row_bytes,
                    static_cast<size_t>(count) * row_bytes);
}

void OriginalCheckpointWeights::check_shapes(const io::WeightSpecs& specs) const {
  for (const auto& [name, shape] : specs) {
    const auto rows = map_(name);
    const io::GgufTensor* t = rows ? find(rows->name) : nullptr;
    XDIT_CHECK(t != nullptr, file_->kind(), " file ", file_->path(), " has no ",
               rows ? rows->name : name, ", which the model's ", name,
               " needs (a checkpoint of another model?)");
    XDIT_CHECK(this->shape(name) == shape, file_->kind(), " file ", file_->path(), ": ", rows->name,
               " is ", shape_str(t->shape), ", which does not give the model's ", name, " ",
               shape_str(shape), " (the config and the checkpoint disagree)");
  }
}

std::optional<Shape> OriginalCheckpointWeights::shape(const std::string& name) const {
  const auto rows = map_(name);
  const io::GgufTensor* t = rows ? find(rows->name) : nullptr;
  if (t == nullptr) return std::nullopt;
  Shape s = t->shape;
  if (rows->count >= 0 && !s.empty()) s[0] = rows->count;
  return s;
}

OriginalCheckpointWeights::Located OriginalCheckpointWeights::locate(
    const std::string& name) const {
  const auto rows = map_(name);
  const io::GgufTensor* t = rows ? find(rows->name) : nullptr;
  XDIT_CHECK(t != nullptr, file_->kind(), " file ", file_->path(), " has no ",
             rows ? rows->name : std::string("tensor"), " (", model_, "'s ", name, ")");
  XDIT_CHECK(!t->shape.empty(), file_->kind(), " file ", file_->path(), ": ", rows->name,
             " is a scalar");
  // Rows along the first axis: a convolution's or a table's other axes are
  // one row's values.
  int64_t cols = 1;
  for (size_t i = 1; i < t->shape.size(); ++i) cols *= t->shape[i];
  const int64_t all = t->shape[0];
  const int64_t count = rows->count < 0 ? all : rows->count;
  XDIT_CHECK(rows->begin + count <= all, file_->kind(), " file ", file_->path(), ": ", rows->name,
             " has ", all, " rows; ", model_, "'s ", name, " takes rows [", rows->begin, ", ",
             rows->begin + count, ") (a checkpoint of another width?)");
  const int64_t per_block = io::ggml_block_values(t->type),
                block_bytes = io::ggml_block_bytes(t->type);
  const int64_t first = rows->begin * cols, values = count * cols;
  XDIT_CHECK(first % per_block == 0 && values % per_block == 0, file_->kind(), " file ",
             file_->path(), ": ", name, " takes part of a ", io::ggml_type_name(t->type),
             " block of ", rows->name);
  // (A matrix's rows are whole blocks: io::GgufFile checks it.)
  const auto row_bytes = static_cast<size_t>(cols / per_block * block_bytes);
  return {*rows, t, count, cols, row_bytes, t->data + first / per_block * block_bytes};
}

std::optional<io::QuantizedRows> OriginalCheckpointWeights::read_quantized(
    const std::string& name, const Shape& /*expected: quantized() checks*/,
    const Shape& /*share*/) const {
  const Located l = locate(name);
  if (io::ggml_block_values(l.tensor->type) == 1 || l.tensor->shape.size() != 2 ||
      l.rows.swap_halves)
    return std::nullopt;
  const int64_t blocks = l.count * l.cols / io::ggml_block_values(l.tensor->type);
  XDIT_CHECK(io::block_scales_finite(l.tensor->type, l.data, blocks), file_->kind(), " file ",
             file_->path(), ": ", l.rows.name, " has NaN or Inf ",
             io::ggml_type_name(l.tensor->type), " scales");
  return io::QuantizedRows{l.tensor->type, l.count, l.cols, l.data, l.row_bytes, file_};
}

Tensor OriginalCheckpointWeights::read(const std::string& name,
                                       const Shape& /*expected: get() checks*/) const {
  const Located l = locate(name);
  const io::GgufTensor* t = l.tensor;
  const int64_t count = l.count, cols = l.cols, values = count * cols;
  const int64_t per_block = io::ggml_block_values(t->type);
  Shape shape = t->shape;
  shape[0] = count;
  const DType stored = t->type == io::GgmlType::kF16    ? DType::kF16
                       : t->type == io::GgmlType::kBF16 ? DType::kBF16
                                                        : DType::kF32;
  if (per_block == 1 && !l.rows.swap_halves)  // as stored: a view of the mapping
    return Tensor::view(std::shared_ptr<const void>(file_, l.data), l.data, shape, stored);
  Tensor out = Tensor::empty(shape);
  io::dequantize_blocks(t->type, l.data, values / per_block, out.data<float>());
  for (int64_t i = 0; i < values; ++i)
    XDIT_CHECK(std::isfinite(out.data<float>()[i]), file_->kind(), " file ", file_->path(), ": ",
               l.rows.name, " holds NaN or Inf (its ", io::ggml_type_name(t->type), " scales?)");
  if (l.rows.swap_halves) {  // shift | scale → scale | shift
    XDIT_CHECK(count % 2 == 0, file_->kind(), " file ", file_->path(), ": ", l.rows.name,
               " has an odd row count");
    const size_t half = static_cast<size_t>(count / 2 * cols);
    std::vector<float> first_half(out.data<float>(), out.data<float>() + half);
    std::memmove(out.data<float>(), out.data<float>() + half, half * sizeof(float));
    std::memcpy(out.data<float>() + half, first_half.data(), half * sizeof(float));
  }
  return out;
}

}  // namespace xdit::models
