// LoRA adapters (issue 44): a file as diffusers' `load_lora_weights` reads
// it, and a weight source that merges its deltas into the weights a model
// loads — W + Σ scale · (alpha / rank) · B·A per adapted weight, formed in
// f32 and handed to the layer once (a bf16 layer rounds the merged weight
// once when it packs it). A tensor-parallel share of a weight gets the
// share of the delta (B's rows, or A's columns); a PipeFusion stage reads
// only its blocks' weights, so only their adapters apply.
//
// Formats (nn/lora_formats.h): diffusers / PEFT (alpha from `<module>.alpha`,
// else the file's `lora_adapter_metadata` — lora_alpha, alpha_pattern —,
// else the rank), kohya / sd-scripts, BFL's names and XLabs' (FLUX.1).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "io/weights.h"

namespace xdit::nn {

// One adapted weight: `<module>.weight` of the component, [out, in].
struct LoraModule {
  std::string down, up;      // the file's tensors A [rank, in] and B [≥ out, rank]
  int64_t up_begin = 0;      // B's first row of this module (a fused projection's part)
  bool swap_halves = false;  // its rows' two halves exchanged (nn/lora_formats.h)
  int64_t rank = 0, in = 0, out = 0;
  double alpha = 0;
  // A or B all zeros, or alpha 0: it changes nothing. Matched against the
  // model like any adapter (a module the model lacks is refused, whatever
  // its values), then left out, as diffusers drops all-zero adapters.
  bool zero = false;
};

class LoraFile {
 public:
  // The most bytes a LoRA file may hold (--max_lora_bytes' default): real
  // LoRAs are a few hundred MB, the largest a few GB.
  static constexpr size_t kDefaultMaxBytes = size_t{4} << 30;
  // Reads the header, detects the format from the key names and checks
  // every adapter (A and B present, ranks equal, finite values): throws one
  // line naming the file and what is wrong. A file over `max_bytes` (its
  // size from fstat, before anything is read) is refused.
  explicit LoraFile(const std::string& path, size_t max_bytes = kDefaultMaxBytes);
  // The same of a file already open (or read into memory).
  explicit LoraFile(io::SafeTensorsFile file);
  const std::string& path() const { return file_.path(); }
  // "diffusers", "kohya", "bfl" or "xlabs".
  const std::string& format() const { return format_; }
  // Tensors that adapt no module xdit knows (DoRA scales, …), whatever
  // their values: refused unless the user skips them (their values are
  // never read).
  const std::vector<std::string>& unread() const { return unread_; }
  // The adapters of a component ("transformer", "text_encoder", …) by
  // module name as the component's weights name it; empty when none. All-
  // zero ones are here too (LoraModule::zero), to be matched.
  const std::map<std::string, LoraModule>& modules(const std::string& component) const;
  // The components it adapts ("transformer", "text_encoder", …).
  std::vector<std::string> components() const;
  // A [rank, in] and B [out, rank] (its rows of the file's) in f32, on the host.
  Tensor down(const LoraModule& m) const;
  Tensor up(const LoraModule& m) const;

 private:
  io::SafeTensorsFile file_;
  std::string format_;
  std::vector<std::string> unread_;
  std::map<std::string, std::map<std::string, LoraModule>> components_;
};

// The weight `module` adapts, as a model that `has` its weights names it:
// "<module>.weight", with or without the "text_model." of transformers'
// CLIPTextModel (older and newer transformers name CLIP's modules either
// way, and so do LoRAs); "<module>.weight" when `has` knows neither.
std::string lora_weight_name(const std::string& module,
                             const std::function<bool(const std::string&)>& has);

struct LoraUse {
  std::shared_ptr<const LoraFile> file;
  double scale = 1.0;  // diffusers' set_adapters weight
  // Its modules that match nothing are skipped, not refused (a request's
  // choice; match_lora_adapters' skip_missing does it for every LoRA).
  bool ignore_unmatched = false;
};

// The LoRA files requests name (xdit serve), each read whole into memory
// (no mapping kept: a file replaced, rewritten or removed meanwhile harms
// nothing) and read again once its device, inode, size or modification
// time changes; the `capacity` most recently used are kept.
class LoraFileCache {
 public:
  explicit LoraFileCache(size_t capacity = 8) : capacity_(capacity) {}
  // A file over `max_bytes` is refused before it is read (--max_lora_bytes).
  void set_max_bytes(size_t max_bytes) { max_bytes_ = max_bytes; }
  std::shared_ptr<const LoraFile> get(const std::string& path);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string stamp;  // the file's identity when it was read
    std::shared_ptr<const LoraFile> file;
    uint64_t used = 0;
  };
  size_t capacity_;
  size_t max_bytes_ = LoraFile::kDefaultMaxBytes;
  uint64_t clock_ = 0;
  std::map<std::string, Entry> entries_;  // by path
};

// One adapter on the weight it adapts.
struct LoraAdapter {
  const LoraFile* file;
  const LoraModule* module;
  std::string weight;  // the model's name of the weight (lora_weight_name)
  double factor;       // scale · alpha / rank
};

// The model's weight shapes by name; nullopt for a name it has not.
using WeightShapes = std::function<std::optional<Shape>(const std::string&)>;

// The adapters the LoRAs hold for `component` that change something, each
// on its weight as `shape_of` knows them. Every module is matched first —
// all-zero ones too — then the all-zero ones are left out. Throws one line
// for a scale that is not finite, an adapter whose [out, in] its weight
// contradicts (a LoRA for another model), or, unless `skip_missing`,
// modules the model lacks (listing the first few) — a LoRA's own
// `ignore_unmatched` skips its own; the count of those skipped is added to
// `skipped` (when given).
std::vector<LoraAdapter> match_lora_adapters(const std::vector<LoraUse>& loras,
                                             const std::string& component,
                                             const WeightShapes& shape_of, bool skip_missing,
                                             int64_t* skipped = nullptr);

// `base` (a component's weights) with the LoRAs' deltas merged in.
class LoraWeights : public io::WeightSource {
 public:
  // Throws one line, before any weight is read, for a scale that is not
  // finite, or adapters whose module `base` lacks (unless ignore_unmatched)
  // or whose [out, in] its weight contradicts (a LoRA for another model).
  // An adapted weight is merged in f32 and handed over as `merged` (bf16
  // for bf16 layers: rounded once, half the memory of f32, and packed as a
  // bf16 weight is; f32 otherwise).
  LoraWeights(const io::WeightStore& base, std::vector<LoraUse> loras, const std::string& component,
              bool ignore_unmatched = false, DType merged = DType::kF32);
  // Over any source (a single-file checkpoint's), whose weights' shapes
  // `shape_of` gives.
  LoraWeights(const io::WeightSource& base, const WeightShapes& shape_of,
              std::vector<LoraUse> loras, const std::string& component,
              bool ignore_unmatched = false, DType merged = DType::kF32);
  bool has(const std::string& name) const override { return base_.has(name); }
  size_t stored_bytes() const override { return base_.stored_bytes(); }
  void drop_pages(const std::string& name) const override { base_.drop_pages(name); }
  // The weights the LoRAs change; the modules matching nothing that
  // ignore_unmatched skipped.
  size_t adapted() const { return adapters_.size(); }
  int64_t skipped() const { return skipped_; }

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override;
  Tensor read_slice(const std::string& name, const Shape& expected, int dim, int64_t begin,
                    int64_t count) const override;
  // A weight no LoRA adapts stays in the blocks the base keeps it in; an
  // adapted one is merged in floating point.
  std::optional<io::QuantizedRows> read_quantized(const std::string& name, const Shape& expected,
                                                  const Shape& share) const override;

 private:
  // w [rows, cols] (any float dtype) + factor · B[r0 …]·A[…, c0 …] for
  // each adapter of `name` (the rows or columns a share holds), formed in
  // f32 a band of rows at a time and written as merged_.
  Tensor merged(const std::string& name, const Tensor& w, int64_t r0, int64_t c0) const;

  const io::WeightSource& base_;
  DType merged_;
  std::vector<LoraUse> loras_;
  std::map<std::string, std::vector<LoraAdapter>> adapters_;  // by weight name
  int64_t skipped_ = 0;
};

}  // namespace xdit::nn
