// Per-request LoRAs (xdit serve's `loras`): checked as a request is planned,
// applied beside the loaded weights as it runs (nn/lora_side.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/pipeline.h"

namespace xdit::pipeline {

namespace {

// The union of every rank's names (an allgather over `group`).
std::set<std::string> gathered_names(comm::Communicator& group, const std::set<std::string>& mine) {
  std::string joined;
  for (const std::string& n : mine) joined += n + '\n';
  const int64_t length = static_cast<int64_t>(joined.size());
  std::vector<int64_t> lengths(static_cast<size_t>(group.size()));
  group.allgather(&length, lengths.data(), sizeof length, comm::Type::kByte);
  const int64_t most = *std::max_element(lengths.begin(), lengths.end());
  joined.resize(static_cast<size_t>(most), '\0');
  std::string all(static_cast<size_t>(most * group.size()), '\0');
  group.allgather(joined.data(), all.data(), static_cast<size_t>(most), comm::Type::kByte);
  std::set<std::string> out;
  for (int r = 0; r < group.size(); ++r) {
    const std::string part =
        all.substr(static_cast<size_t>(r * most), static_cast<size_t>(lengths[r]));
    for (size_t b = 0, e; b < part.size(); b = e + 1) {
      e = part.find('\n', b);
      out.insert(part.substr(b, e - b));
    }
  }
  return out;
}

}  // namespace

std::string lora_list_label(const std::vector<LoraRef>& loras) {
  std::string label;
  for (const LoraRef& l : loras) {
    label += (label.empty() ? "" : ", ") + std::filesystem::path(l.path).filename().string() + ":" +
             detail::concat(l.scale);
    if (l.skipped > 0) label += detail::concat(" (", l.skipped, " unmatched skipped)");
  }
  return label;
}

void Pipeline::note_request_lora_targets() {
  std::set<std::string> mine = layers_.side_weights();
  if (runtime_->pipefusion() != nullptr) mine = gathered_names(mesh_->pp_group(), mine);
  lora_targets_["transformer"] = std::move(mine);
}

std::map<std::string, std::set<std::string>> Pipeline::request_lora_targets() const {
  std::map<std::string, std::set<std::string>> out = lora_targets_;
  for (auto& [component, weights] : family_->text_side_weights()) out[component] = weights;
  return out;
}

std::vector<nn::LoraUse> Pipeline::request_lora_uses(const std::vector<LoraRef>& loras) {
  std::vector<nn::LoraUse> uses;
  for (const LoraRef& l : loras)
    uses.push_back({lora_files_.get(l.path), l.scale, l.ignore_unmatched});
  return uses;
}

std::vector<LoraRef> Pipeline::checked_request_loras(const std::vector<LoraRef>& loras) {
  if (loras.empty()) return {};
  XDIT_CHECK(family_->boundary_ratio() == 0, family_->name(),
             ": LoRAs for a model of two experts (transformer, transformer_2) are not supported "
             "yet");
  XDIT_CHECK(!device_.cuda(),
             "a request's LoRAs run as side paths on the CPU only so far; on a CUDA device give "
             "them at start (--lora)");
  const std::vector<nn::LoraUse> uses = request_lora_uses(loras);
  std::vector<LoraRef> checked = loras;
  for (size_t i = 0; i < uses.size(); ++i) {
    const nn::LoraUse& u = uses[i];
    LoraRef& ref = checked[i];
    ref.skipped = 0;
    const std::string name = std::filesystem::path(u.file->path()).filename().string();
    XDIT_CHECK(std::isfinite(u.scale), "LoRA ", name, ": the scale ", u.scale,
               " is not a finite number");
    XDIT_CHECK(ref.ignore_unmatched || u.file->unread().empty(), "LoRA ", name, " (",
               u.file->format(), "): ", u.file->unread().size(),
               " tensors adapt nothing xdit applies, e.g. ",
               u.file->unread().empty() ? "" : u.file->unread().front(),
               " (\"ignore_unmatched\": true skips them)");
    ref.skipped += static_cast<int64_t>(u.file->unread().size());
    const std::vector<std::string> text = family_->lora_text_components();
    std::string names;
    for (const std::string& t : text) names += ", " + t;
    for (const std::string& c : u.file->components()) {
      if (c == "transformer" || std::find(text.begin(), text.end(), c) != text.end()) continue;
      XDIT_CHECK(ref.ignore_unmatched, "LoRA ", name, " adapts the ", c, "; xdit adapts ",
                 family_->name(), "'s transformer", names,
                 " only (\"ignore_unmatched\": true skips the rest)");
      ref.skipped += static_cast<int64_t>(u.file->modules(c).size());
    }
  }
  const auto targets = request_lora_targets();
  for (size_t i = 0; i < uses.size(); ++i)  // against the opened text stores
    checked[i].skipped += family_->check_request_text_loras({uses[i]}, targets);
  // Against the whole model's weights: their headers while open (before
  // load(), or a pipeline that checks requests), else the shapes load() kept.
  const io::WeightSource* source = lora_base_ ? lora_base_.get() : weights_.get();
  const auto* store = dynamic_cast<const io::WeightStore*>(source);
  // Another source (a --transformer file, random weights): the config's
  // shapes, which that source was checked against.
  if (store == nullptr && model_shapes_.empty())
    for (const auto& [name, shape] : family_->weight_specs({})) model_shapes_[name] = shape;
  const nn::WeightShapes shape_of = [&](const std::string& n) -> std::optional<Shape> {
    if (store != nullptr) {
      if (!store->has(n)) return std::nullopt;
      return store->shape(n);
    }
    const auto it = model_shapes_.find(n);
    if (it == model_shapes_.end()) return std::nullopt;
    return it->second;
  };
  // Each LoRA on its own: one may skip what matches nothing, another not.
  std::vector<nn::LoraAdapter> adapters;
  for (size_t i = 0; i < uses.size(); ++i) {
    int64_t skipped = 0;
    for (nn::LoraAdapter& a :
         nn::match_lora_adapters({uses[i]}, "transformer", shape_of, false, &skipped))
      adapters.push_back(std::move(a));
    checked[i].skipped += skipped;
  }
  if (const auto side = targets.find("transformer"); side != targets.end())
    nn::check_side_targets(adapters, side->second);
  for (const LoraRef& l : checked)
    if (l.skipped > 0)
      XDIT_INFO("LoRA ", lora_list_label({l}),
                ": tensors and modules that match nothing skipped (\"ignore_unmatched\")");
  return checked;
}

void Pipeline::apply_request_loras(const std::vector<LoraRef>& loras) {
  if (applied_request_loras_ && *applied_request_loras_ == loras) return;
  applied_request_loras_.reset();  // a failure below leaves the side paths unknown
  request_lora_layers_ = nn::set_side_loras(layers_, request_lora_uses(loras));
  applied_request_loras_ = loras;
  if (!loras.empty())
    XDIT_DEBUG("request LoRAs ", lora_list_label(loras), ": ", request_lora_layers_,
               " layers with a side path");
}

}  // namespace xdit::pipeline
