// Wan2.1 and Wan2.2 text-to-video (diffusers WanPipeline): UMT5 over prompts cleaned as
// the pipeline cleans them (html.unescape twice, whitespace collapsed; no
// ftfy), padded to max_sequence_length (512) with the states after each
// text's real length set to zero and no mask for the transformer's
// cross-attention; classifier-free guidance from guidance_scale > 1 (5 by
// default) with the negative prompt "" when none is given, each half its own
// transformer call (cache contexts "cond" and "uncond"); 480 × 832 px, 81
// frames (4k + 1), 50 steps of UniPC with flow sigmas; AutoencoderKLWan.
// Wan2.2 T2V-A14B: two experts (transformer_2, boundary_ratio), switched by
// the Pipeline. Wan2.2 TI2V-5B (expand_timesteps): the residual 48-channel
// VAE (16× in space, so sizes floor to multiples of 32 with a warning, as
// diffusers does) and a timestep per token — all equal without an image, so
// the transformer takes the step's one timestep; 24 frames per second.
#include "core/error.h"
#include "core/log.h"
#include "models/t5.h"
#include "models/wan.h"
#include "models/wan_checkpoint.h"
#include "pipeline/guidance/cfg.h"
#include "pipeline/model_family.h"
#include "pipeline/text_encoding.h"
#include "tokenizers/prompt_clean.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::pipeline {

namespace {

class WanFamily : public ConfigFamily<models::WanConfig, models::WanTransformer> {
 public:
  WanFamily(const models::WanConfig& cfg, double boundary_ratio, bool ti2v)
      : ConfigFamily(cfg), boundary_ratio_(boundary_ratio), ti2v_(ti2v) {}

  std::string name() const override {
    return ti2v_ ? "Wan2.2 TI2V" : boundary_ratio_ > 0 ? "Wan2.2" : "Wan2.1";
  }
  double boundary_ratio() const override { return boundary_ratio_; }
  std::optional<OriginalLayout> original_layout(const io::WeightSpecs&) const override {
    XDIT_CHECK(boundary_ratio_ == 0, "--transformer: ", name(),
               "'s two experts (transformer, transformer_2) are two files; one --transformer "
               "file is not supported yet: use the folder's weights");
    return OriginalLayout{name(), models::wan_original_rows};
  }
  std::vector<std::string> lora_text_components() const override { return {"text_encoder"}; }
  std::string describe() const override {
    const auto& c = cfg_;
    return detail::concat(
        boundary_ratio_ > 0 ? "two WanTransformer3DModel experts, " : "WanTransformer3DModel, ",
        c.num_layers, " blocks, hidden ", c.hidden(), " (", c.num_attention_heads, " heads x ",
        c.attention_head_dim, "), patch ", c.patch_t, "x", c.patch_h, "x", c.patch_w, ", text ",
        c.text_dim, ", feed-forward ", c.ffn_dim);
  }
  int64_t text_width() const override { return cfg_.text_dim; }
  // The text alone: the cross-attention takes no mask.
  std::vector<EmbeddingName> embedding_names() const override {
    return {{models::kText, "prompt_embeds", true}};
  }

  int64_t default_height(int64_t /*vsf*/) const override { return 480; }
  int64_t default_width(int64_t /*vsf*/) const override { return 832; }
  int64_t default_frames() const override { return 81; }
  int default_fps() const override { return ti2v_ ? 24 : 16; }
  bool floors_size() const override { return true; }
  int64_t size_multiple() const override { return 16; }
  int64_t default_steps() const override { return 50; }
  const Guider& guider() const override { return guider_; }
  ComponentKind vae_kind() const override { return ComponentKind::kAutoencoderKLWan; }

  void open_text(const io::ModelFolder& folder) override {
    if (!tokenizer_)
      tokenizer_ = std::make_unique<tokenizers::T5Tokenizer>(folder.component("tokenizer"));
    if (!t5_cfg_) open_t5_encoder(folder, "text_encoder", cfg_.text_dim);
  }
  std::vector<Component> text_components() const override {
    return {{"text_encoder", ComponentKind::kT5Encoder},
            {"tokenizer", ComponentKind::kT5Tokenizer}};
  }
  int64_t default_max_sequence_length() const override { return 512; }
  int64_t max_sequence_limit() const override { return tokenizer_->model_max_length(); }

  PromptEmbeddings encode(const PlanFields& r, DType dtype) override {
    XDIT_CHECK(tokenizer_ && t5_cfg_, "encode before the text side was opened");
    std::vector<T5Texts> lists = prompt_lists(r, r.cfg);
    for (T5Texts& list : lists)
      for (std::string& text : list.texts) text = tokenizers::wan_prompt_clean(text);
    // Masked through UMT5, so every text's states past its real length are
    // zero, as WanPipeline's trim and zero padding leave them; the
    // transformer takes no mask.
    auto enc = encode_t5(*tokenizer_, t5_encoder(dtype), lists, r.max_sequence_length,
                         /*lower_strip=*/false, /*masked=*/true);
    PromptEmbeddings e;
    e.cond.set(models::kText, std::move(enc[0].first));
    if (r.cfg) e.uncond.set(models::kText, std::move(enc[1].first));
    return e;
  }
  void drop_text_encoders() override { t5_.reset(); }
  void describe_text(MemoryQuery& q) const override { q.t5 = t5_cfg_.get(); }

 private:
  CfgGuider guider_{{.default_guidance = 5.0, .calls_apart = true}};
  std::unique_ptr<tokenizers::T5Tokenizer> tokenizer_;
  double boundary_ratio_;
  bool ti2v_;
};

// A config as its model is made of it: the bookkeeping keys (class, version,
// the path it was saved from) left out.
io::Json model_config(io::Json j) {
  for (const char* k : {"_class_name", "_diffusers_version", "_name_or_path"}) j.erase(k);
  return j;
}

}  // namespace

std::unique_ptr<ModelFamily> make_wan_family(const io::ModelFolder& folder) {
  const io::Json& index = folder.model_index();
  // (An absent component is saved as [null, null].)
  const bool expert_2 = index.contains("transformer_2") && index["transformer_2"].is_array() &&
                        !index["transformer_2"].empty() && !index["transformer_2"][0].is_null();
  double boundary = 0;
  if (index.contains("boundary_ratio") && !index["boundary_ratio"].is_null()) {
    const io::Json& b = index["boundary_ratio"];
    XDIT_CHECK(b.is_number() && b.get<double>() > 0 && b.get<double>() <= 1, folder.root(),
               "/model_index.json: boundary_ratio must be a number in (0, 1], got ", b.dump());
    boundary = b.get<double>();
    XDIT_CHECK(expert_2, folder.root(), "/model_index.json: boundary_ratio ", boundary,
               " switches to a second expert, but the folder names no transformer_2");
  } else if (expert_2) {
    XDIT_WARN(folder.root(),
              "/model_index.json: transformer_2 is never used without a boundary_ratio (as in "
              "diffusers); the transformer runs every step");
  }
  const bool ti2v = index.contains("expand_timesteps") && index["expand_timesteps"].is_boolean() &&
                    index["expand_timesteps"].get<bool>();
  const std::string tdir = folder.component("transformer");
  const io::Json config = folder.component_config("transformer", "config.json");
  const auto cfg = models::WanConfig::from_json(config, tdir + "/config.json");
  if (boundary > 0) {
    // The Pipeline builds both experts from one config.
    const io::Json config_2 = folder.component_config("transformer_2", "config.json");
    models::WanConfig::from_json(config_2, folder.component("transformer_2") + "/config.json");
    XDIT_CHECK(model_config(config) == model_config(config_2), folder.root(),
               "/transformer_2/config.json differs from transformer/config.json: xdit runs two "
               "experts of one architecture (as Wan2.2's)");
  }
  return std::make_unique<WanFamily>(cfg, boundary, ti2v);
}

}  // namespace xdit::pipeline
