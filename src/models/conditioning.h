// A call's conditioning as data: named, batch-major tensors (dimension 0 is
// the batch item) — a family's text encoders produce them, the loop moves
// them (the CFG batch [uncond; cond], the CFG-parallel halves, data-parallel
// shares, skip-layer guidance's prompt half, --prompt_embeds files, serve)
// without naming any, and a model reads the names it knows. A per-item
// scalar (FLUX.1 [dev]'s embedded guidance, PixArt-α's size) is a tensor
// [B] or [B, k] like any other. A new family adds names in its own files,
// never a field to a shared struct.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace xdit::models {

// The names every text-to-image family here uses; a family may add its own.
inline constexpr const char* kText = "text";           // [B, L, width]
inline constexpr const char* kTextMask = "text_mask";  // [B, L]: 1 token, 0 padding
inline constexpr const char* kPooled = "pooled";       // [B, pooled width]

class Conditioning {
 public:
  // Adds or replaces `name`; an undefined tensor removes it.
  void set(const std::string& name, Tensor t);
  // The tensor `name`, or null when absent.
  const Tensor* find(const std::string& name) const;
  // The tensor `name`; throws one line naming it when absent.
  const Tensor& at(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }
  bool empty() const { return tensors_.empty(); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  // The batch items (dimension 0 of every tensor, checked alike; 0 when empty).
  int64_t batch() const;

  // Items [b, e) of every tensor, as f32 (a data-parallel group's share).
  Conditioning slice(int64_t b, int64_t e) const;
  // [a; b] per name as f32 (the CFG batch [uncond; cond]); both must hold the
  // same names.
  static Conditioning concat(const Conditioning& a, const Conditioning& b);
  // Every tensor as `dtype` on `device` (shared where it already is).
  Conditioning as(DType dtype, Device device) const;

 private:
  std::map<std::string, Tensor> tensors_;
};

}  // namespace xdit::models
