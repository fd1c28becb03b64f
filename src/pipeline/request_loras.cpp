// Per-request LoRAs (xdit serve's `loras`): checked as a request is planned,
// applied beside the loaded weights as it runs (nn/lora_side.h).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/pipeline.h"

namespace xdit::pipeline {

std::vector<nn::LoraUse> Pipeline::request_lora_uses(const std::vector<LoraRef>& loras) {
  std::vector<nn::LoraUse> uses;
  for (const LoraRef& l : loras) {
    auto& file = lora_files_[l.path];
    if (!file) file = std::make_shared<nn::LoraFile>(l.path);
    uses.push_back({file, l.scale});
  }
  return uses;
}

std::vector<LoraRef> Pipeline::checked_request_loras(const std::vector<LoraRef>& loras) {
  if (loras.empty()) return {};
  const std::vector<nn::LoraUse> uses = request_lora_uses(loras);
  for (const nn::LoraUse& u : uses) {
    const std::string name = std::filesystem::path(u.file->path()).filename().string();
    XDIT_CHECK(std::isfinite(u.scale), "LoRA ", name, ": the scale ", u.scale,
               " is not a finite number");
    XDIT_CHECK(u.file->unread().empty(), "LoRA ", name, " (", u.file->format(),
               "): ", u.file->unread().size(), " tensors adapt nothing xdit applies, e.g. ",
               u.file->unread().empty() ? "" : u.file->unread().front());
    const std::vector<std::string> text = family_->lora_text_components();
    std::string names;
    for (const std::string& t : text) names += ", " + t;
    for (const std::string& c : u.file->components())
      XDIT_CHECK(c == "transformer" || std::find(text.begin(), text.end(), c) != text.end(),
                 "LoRA ", name, " adapts the ", c, "; xdit adapts ", family_->name(),
                 "'s transformer", names, " only");
  }
  family_->check_request_text_loras(uses);  // against the opened text stores
  // Against the whole model's weights while their headers are open (before
  // load(), or a validating pipeline); a loaded one checks what it holds.
  const io::WeightSource* source = lora_base_ ? lora_base_.get() : weights_.get();
  if (const auto* store = dynamic_cast<const io::WeightStore*>(source)) {
    nn::LoraWeights(*store, uses, "transformer");  // throws where it does not fit
  } else if (!model_shapes_.empty()) {             // loaded: the shapes load() kept
    for (const nn::LoraUse& u : uses)
      for (const auto& [module, m] : u.file->modules("transformer")) {
        const auto w = model_shapes_.find(module + ".weight");
        XDIT_CHECK(w != model_shapes_.end(), "LoRA ", u.file->path(), ": ", module,
                   " matches nothing in the model's transformer");
        XDIT_CHECK(w->second == Shape({m.out, m.in}), "LoRA ", u.file->path(), ": ", module,
                   " is [", m.out, ", ", m.in, "] but the model's ", w->first, " is ",
                   shape_str(w->second), " (a LoRA for another model?)");
      }
  }
  return loras;
}

void Pipeline::apply_request_loras(const std::vector<LoraRef>& loras) {
  if (applied_request_loras_ && *applied_request_loras_ == loras) return;
  applied_request_loras_.reset();  // a failure below leaves the side paths unknown
  request_lora_layers_ = nn::set_side_loras(layers_, request_lora_uses(loras));
  applied_request_loras_ = loras;
  if (!loras.empty()) {
    std::string label;
    for (const LoraRef& l : loras)
      label += (label.empty() ? "" : ", ") + std::filesystem::path(l.path).filename().string() +
               ":" + detail::concat(l.scale);
    XDIT_DEBUG("request LoRAs ", label, ": ", request_lora_layers_, " layers with a side path");
  }
}

}  // namespace xdit::pipeline
