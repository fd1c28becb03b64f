#include "models/flux_checkpoint.h"

#include <cmath>
#include <cstring>
#include <map>
#include <regex>

#include "core/error.h"
#include "io/gguf_quants.h"

namespace xdit::models {

namespace {

// A fused tensor's part: the original name's tail and the part's rows.
struct Part {
  std::string tail;
  int index = -1;  // −1: the whole tensor; else q, k, v (, MLP) of a fused one
};

const std::map<std::string, std::string>& global_names() {
  static const std::map<std::string, std::string> m = {
      {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer"},
      {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer"},
      {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer"},
      {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer"},
      {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer"},
      {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer"},
      {"context_embedder", "txt_in"},
      {"x_embedder", "img_in"},
      {"proj_out", "final_layer.linear"},
      {"norm_out.linear", "final_layer.adaLN_modulation.1"},
  };
  return m;
}

// A double block's module → (original module, part of a fused qkv).
const std::map<std::string, Part>& double_parts() {
  static const std::map<std::string, Part> m = {
      {"norm1.linear", {"img_mod.lin"}},        {"norm1_context.linear", {"txt_mod.lin"}},
      {"attn.to_q", {"img_attn.qkv", 0}},       {"attn.to_k", {"img_attn.qkv", 1}},
      {"attn.to_v", {"img_attn.qkv", 2}},       {"attn.add_q_proj", {"txt_attn.qkv", 0}},
      {"attn.add_k_proj", {"txt_attn.qkv", 1}}, {"attn.add_v_proj", {"txt_attn.qkv", 2}},
      {"attn.to_out.0", {"img_attn.proj"}},     {"attn.to_add_out", {"txt_attn.proj"}},
      {"ff.net.0.proj", {"img_mlp.0"}},         {"ff.net.2", {"img_mlp.2"}},
      {"ff_context.net.0.proj", {"txt_mlp.0"}}, {"ff_context.net.2", {"txt_mlp.2"}},
  };
  return m;
}

const std::map<std::string, Part>& single_parts() {
  static const std::map<std::string, Part> m = {
      {"norm.linear", {"modulation.lin"}}, {"attn.to_q", {"linear1", 0}},
      {"attn.to_k", {"linear1", 1}},       {"attn.to_v", {"linear1", 2}},
      {"proj_mlp", {"linear1", 3}},        {"proj_out", {"linear2"}},
  };
  return m;
}

// The qk RMSNorms' scales (weights only).
const std::map<std::string, std::string>& norm_names(bool single) {
  static const std::map<std::string, std::string> dbl = {
      {"attn.norm_q", "img_attn.norm.query_norm.scale"},
      {"attn.norm_k", "img_attn.norm.key_norm.scale"},
      {"attn.norm_added_q", "txt_attn.norm.query_norm.scale"},
      {"attn.norm_added_k", "txt_attn.norm.key_norm.scale"},
  };
  static const std::map<std::string, std::string> sgl = {
      {"attn.norm_q", "norm.query_norm.scale"},
      {"attn.norm_k", "norm.key_norm.scale"},
  };
  return single ? sgl : dbl;
}

}  // namespace

std::optional<OriginalRows> flux_original_rows(const std::string& diffusers_name, int64_t inner_dim,
                                               int64_t mlp_hidden) {
  static const std::regex kName(
      R"(^(?:(transformer_blocks|single_transformer_blocks)\.(\d+)\.)?(.+)\.(weight|bias)$)");
  std::smatch m;
  if (!std::regex_match(diffusers_name, m, kName)) return std::nullopt;
  const std::string module = m[3], kind = m[4];
  if (!m[1].matched) {
    const auto it = global_names().find(module);
    if (it == global_names().end()) return std::nullopt;
    OriginalRows r{it->second + "." + kind};
    r.swap_halves = module == "norm_out.linear";
    return r;
  }
  const bool single = m[1] == "single_transformer_blocks";
  const std::string prefix = (single ? "single_blocks." : "double_blocks.") + m[2].str() + ".";
  if (const auto n = norm_names(single).find(module); n != norm_names(single).end())
    return kind == "weight" ? std::optional<OriginalRows>(OriginalRows{prefix + n->second})
                            : std::nullopt;
  const auto& parts = single ? single_parts() : double_parts();
  const auto p = parts.find(module);
  if (p == parts.end()) return std::nullopt;
  OriginalRows r{prefix + p->second.tail + "." + kind};
  if (p->second.index >= 0) {
    r.begin = inner_dim * p->second.index;
    r.count = p->second.index == 3 ? mlp_hidden : inner_dim;
  }
  return r;
}

FluxCheckpointWeights::FluxCheckpointWeights(std::shared_ptr<const io::CheckpointFile> file,
                                             int64_t inner_dim, int64_t mlp_hidden)
    : file_(std::move(file)), inner_(inner_dim), mlp_(mlp_hidden) {}

const io::GgufTensor* FluxCheckpointWeights::find(const std::string& original,
                                                  std::string* stored_name) const {
  for (const std::string& n : {original, "model.diffusion_model." + original})
    if (const auto it = file_->tensors().find(n); it != file_->tensors().end()) {
      if (stored_name != nullptr) *stored_name = n;
      return &it->second;
    }
  return nullptr;
}

bool FluxCheckpointWeights::has(const std::string& name) const {
  const auto rows = flux_original_rows(name, inner_, mlp_);
  return rows && find(rows->name) != nullptr;
}

size_t FluxCheckpointWeights::stored_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : file_->tensors()) n += t.bytes;
  return n;
}

void FluxCheckpointWeights::drop_pages(const std::string& name) const {
  const auto rows = flux_original_rows(name, inner_, mlp_);
  std::string stored;
  const io::GgufTensor* t = rows ? find(rows->name, &stored) : nullptr;
  if (t == nullptr || t->shape.empty()) return;
  const size_t row_bytes = t->bytes / static_cast<size_t>(t->shape[0]);
  const int64_t count = rows->count < 0 ? t->shape[0] : rows->count;
  file_->drop_pages(stored, static_cast<size_t>(rows->begin) * row_bytes,
                    static_cast<size_t>(count) * row_bytes);
}

void FluxCheckpointWeights::check_shapes(const io::WeightSpecs& specs) const {
  for (const auto& [name, shape] : specs) {
    const auto rows = flux_original_rows(name, inner_, mlp_);
    const io::GgufTensor* t = rows ? find(rows->name) : nullptr;
    XDIT_CHECK(t != nullptr, file_->kind(), " file ", file_->path(), " has no ",
               rows ? rows->name : name, ", which the model's ", name,
               " needs (a checkpoint of another model?)");
    Shape got = t->shape;
    if (rows->count >= 0 && !got.empty()) got[0] = rows->count;
    XDIT_CHECK(got == shape, file_->kind(), " file ", file_->path(), ": ", rows->name, " is ",
               shape_str(t->shape), ", which does not give the model's ", name, " ",
               shape_str(shape), " (the config and the checkpoint disagree)");
  }
}

FluxCheckpointWeights::Located FluxCheckpointWeights::locate(const std::string& name) const {
  const auto rows = flux_original_rows(name, inner_, mlp_);
  const io::GgufTensor* t = rows ? find(rows->name) : nullptr;
  XDIT_CHECK(t != nullptr, file_->kind(), " file ", file_->path(), " has no ",
             rows ? rows->name : std::string("tensor"), " (FLUX.1's ", name, ")");
  XDIT_CHECK(t->shape.size() <= 2, file_->kind(), " file ", file_->path(), ": ", rows->name, " is ",
             shape_str(t->shape), ", not a matrix or a vector");
  const int64_t all = t->shape[0], cols = t->shape.size() == 2 ? t->shape[1] : 1;
  const int64_t count = rows->count < 0 ? all : rows->count;
  XDIT_CHECK(rows->begin + count <= all, file_->kind(), " file ", file_->path(), ": ", rows->name,
             " has ", all, " rows; FLUX.1's ", name, " takes rows [", rows->begin, ", ",
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

std::optional<io::QuantizedRows> FluxCheckpointWeights::read_quantized(
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

Tensor FluxCheckpointWeights::read(const std::string& name,
                                   const Shape& /*expected: get() checks*/) const {
  const Located l = locate(name);
  const io::GgufTensor* t = l.tensor;
  const int64_t count = l.count, cols = l.cols, values = count * cols;
  const int64_t per_block = io::ggml_block_values(t->type);
  const Shape shape = t->shape.size() == 2 ? Shape{count, cols} : Shape{count};
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
