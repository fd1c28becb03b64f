#include "pipeline/model_family.h"
#include "pipeline/text_encoding.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace xdit::pipeline {

namespace {

// The registry: model_index.json's pipeline class → the family that runs it.
// A new family is one line here.
struct Registered {
  const char* pipeline_class;
  std::unique_ptr<ModelFamily> (*make)(const io::ModelFolder&);
};
const std::vector<Registered>& registry() {
  static const std::vector<Registered> rows = {
      {"PixArtAlphaPipeline", make_pixart_family},
      {"PixArtSigmaPipeline", make_pixart_family},
      {"FluxPipeline", make_flux_family},
      {"StableDiffusion3Pipeline", make_sd3_family},
      {"WanPipeline", make_wan_family},
      {"ZImagePipeline", make_zimage_family},
      {"QwenImagePipeline", make_qwen_image_family},
  };
  return rows;
}

}  // namespace

const std::vector<std::string>& ModelFamily::supported_pipelines() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Registered& r : registry()) v.emplace_back(r.pipeline_class);
    return v;
  }();
  return names;
}

std::vector<ModelFamily::Component> ModelFamily::components() const {
  // Every family so far keeps diffusers' transformer, vae and scheduler
  // folders; its text side and its VAE's kind are its own.
  std::vector<Component> v = {{"transformer", ComponentKind::kTransformer}};
  if (boundary_ratio() > 0) v.push_back({"transformer_2", ComponentKind::kTransformer});
  for (const Component& c : text_components()) v.push_back(c);
  v.push_back({"vae", vae_kind()});
  v.push_back({"scheduler", ComponentKind::kScheduler});
  return v;
}

const char* ModelFamily::component(ComponentKind kind) const {
  for (const Component& c : components())
    if (c.kind == kind) return c.folder;
  XDIT_FAIL(name(), " has no component of kind ", static_cast<int>(kind));
}

bool ModelFamily::has_weights(ComponentKind kind) {
  return kind == ComponentKind::kTransformer || kind == ComponentKind::kT5Encoder ||
         kind == ComponentKind::kClipEncoder || kind == ComponentKind::kQwenEncoder ||
         kind == ComponentKind::kAutoencoderKL || kind == ComponentKind::kAutoencoderKLWan;
}

std::unique_ptr<ModelFamily> ModelFamily::from_folder(const io::ModelFolder& folder) {
  const std::string cls = folder.pipeline_class();
  for (const Registered& r : registry())
    if (cls == r.pipeline_class) return r.make(folder);
  std::string list;
  for (const auto& n : supported_pipelines()) list += (list.empty() ? "" : ", ") + n;
  XDIT_FAIL(folder.root(), "/model_index.json names the pipeline \"", cls,
            "\", which xdit does not run; supported pipelines: ", list);
}

void ModelFamily::check_tensor_parallel(int degree) const {
  if (!t5_cfg_) return;  // the text side is not open (embeddings given)
  nn::check_divisible(t5_cfg_->num_heads, degree, "attention heads of the T5 text encoder",
                      "--tensor_parallel_degree");
  nn::check_divisible(t5_cfg_->d_ff, degree, "feed-forward units (d_ff) of the T5 text encoder",
                      "--tensor_parallel_degree");
}

models::T5Encoder& ModelFamily::t5_encoder(DType dtype) {
  XDIT_CHECK(t5_cfg_ && t5_weights_, "encode before the text side was opened");
  if (!t5_)
    t5_ = build_text_encoder(t5_component_, *t5_weights_, [&](const io::WeightSource& w) {
      return std::make_unique<models::T5Encoder>(*t5_cfg_, w, dtype, text_tp_, text_resident_);
    });
  return *t5_;
}

int64_t ModelFamily::check_request_text_loras(
    const std::vector<nn::LoraUse>& loras,
    const std::map<std::string, std::set<std::string>>& side_weights) const {
  int64_t skipped = 0;
  for (const std::string& c : lora_text_components()) {
    const auto store = text_stores_.find(c);
    if (store == text_stores_.end() || store->second == nullptr) continue;
    const io::WeightStore& w = *store->second;
    const auto adapters = nn::match_lora_adapters(
        loras, c,
        [&](const std::string& n) -> std::optional<Shape> {
          if (!w.has(n)) return std::nullopt;
          return w.shape(n);
        },
        /*skip_missing=*/false, &skipped);
    if (const auto side = side_weights.find(c); side != side_weights.end())
      nn::check_side_targets(adapters, side->second);
  }
  return skipped;
}

std::map<std::string, std::set<std::string>> ModelFamily::text_side_weights() const {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& [component, layers] : text_layers_) out[component] = layers.side_weights();
  return out;
}

void ModelFamily::release_text() {
  drop_text_encoders();
  text_layers_.clear();
  text_recorded_.clear();
}

void ModelFamily::set_request_text_loras(const std::vector<nn::LoraUse>& loras) {
  bool adapts = false;
  for (const nn::LoraUse& l : loras)
    for (const std::string& c : lora_text_components())
      adapts = adapts || !l.file->modules(c).empty();
  XDIT_CHECK(!adapts || text_resident_,
             "a request's text-encoder LoRAs need resident text encoders (xdit serve); give "
             "them at start (--lora)");
  const auto same = [](const nn::LoraUse& a, const nn::LoraUse& b) {
    return a.file == b.file && a.scale == b.scale &&
           a.ignore_unmatched == b.ignore_unmatched;  // (a changed file is read anew)
  };
  if (request_text_loras_known_ &&
      std::equal(loras.begin(), loras.end(), request_text_loras_.begin(), request_text_loras_.end(),
                 same))
    return;  // the built encoders hold them already
  check_request_text_loras(loras, text_side_weights());
  request_text_loras_known_ = false;  // a failure below leaves the side paths unknown
  for (auto& [component, layers] : text_layers_) nn::set_side_loras(layers, loras, component);
  request_text_loras_ = loras;
  request_text_loras_known_ = true;
}

void ModelFamily::open_t5_encoder(const io::ModelFolder& folder, const std::string& component,
                                  int64_t width) {
  t5_cfg_ = open_t5(folder, component, width, t5_weights_);
  t5_component_ = component;
  text_stores_[component] = t5_weights_.get();
  text_weights(component, *t5_weights_);  // its LoRAs checked now
}

schedulers::TimestepHints linspace_sigmas_with_mu(const schedulers::SchedulerConfig& s,
                                                  int64_t steps, int64_t latent_h,
                                                  int64_t latent_w) {
  schedulers::TimestepHints h;
  for (int64_t i = 0; i < steps; ++i)  // np.linspace: start + i·step, the last exactly 1/N
    h.sigmas.push_back(steps > 1 ? 1.0 + static_cast<double>(i) *
                                             ((1.0 / static_cast<double>(steps) - 1.0) /
                                              static_cast<double>(steps - 1))
                                 : 1.0);
  if (steps > 1) h.sigmas.back() = 1.0 / static_cast<double>(steps);
  if (s.flow_match() != nullptr) h.mu = s.flow_match()->mu((latent_h / 2) * (latent_w / 2));
  return h;
}

int ModelFamily::text_parallel_degree(int ranks) const {
  if (!t5_cfg_) return 1;
  return largest_split_degree(
      ranks, [&](int d) { return t5_cfg_->num_heads % d == 0 && t5_cfg_->d_ff % d == 0; });
}

}  // namespace xdit::pipeline

namespace xdit::pipeline {

std::vector<ModelFamily::EmbeddingName> ModelFamily::embedding_names() const {
  std::vector<EmbeddingName> names = {{models::kText, "prompt_embeds", true},
                                      {models::kTextMask, "prompt_attention_mask", false}};
  // (A missing pooled vector is named by check_embeddings, which says why.)
  if (pooled_width() > 0) names.push_back({models::kPooled, "pooled_prompt_embeds", false});
  return names;
}

namespace {

void check_text(const Tensor& e, const Tensor* mask, const char* name, int64_t channels) {
  XDIT_CHECK(e.ndim() == 3, name, " must be [batch, tokens, ", channels, "], got ",
             shape_str(e.shape()));
  XDIT_CHECK(e.dim(2) == channels, name, " has hidden size ", e.dim(2),
             " but this model takes text of width ", channels,
             " (embeddings from a different text encoder?)");
  if (mask != nullptr)
    XDIT_CHECK(mask->ndim() == 2 && mask->dim(0) == e.dim(0) && mask->dim(1) == e.dim(1), name,
               " attention mask must be [", e.dim(0), ", ", e.dim(1), "], got ",
               shape_str(mask->shape()));
}

void check_pooled(const Tensor* p, const char* name, int64_t prompts, int64_t width) {
  XDIT_CHECK(p != nullptr, name, " are required by this model (FLUX's pooled CLIP embedding)");
  XDIT_CHECK(p->ndim() == 2 && p->dim(0) == prompts && p->dim(1) == width, name, " must be [",
             prompts, ", ", width, "], got ", shape_str(p->shape()));
}

}  // namespace

void ModelFamily::check_embeddings(const PromptEmbeddings& e, bool cfg,
                                   double guidance_scale) const {
  const Tensor* text = e.cond.find(models::kText);
  XDIT_CHECK(text != nullptr, "prompt_embeds are required");
  check_text(*text, e.cond.find(models::kTextMask), "prompt_embeds", text_width());
  const int64_t P = text->dim(0);
  const bool pooled = pooled_width() > 0;
  if (pooled) check_pooled(e.cond.find(models::kPooled), "pooled_prompt_embeds", P, pooled_width());
  if (cfg) {
    const Tensor* neg = e.uncond.find(models::kText);
    XDIT_CHECK(neg != nullptr, "classifier-free guidance (", guider().requirement(),
               "; guidance_scale ", guidance_scale,
               ") needs negative_prompt_embeds in the embeddings file");
    check_text(*neg, e.uncond.find(models::kTextMask), "negative_prompt_embeds", text_width());
    // Masked halves may differ in length (QwenImagePipeline encodes each at
    // its own): match_masks pads the shorter.
    const bool masked = e.cond.has(models::kTextMask) && e.uncond.has(models::kTextMask);
    XDIT_CHECK(neg->dim(0) == P && (masked || neg->dim(1) == text->dim(1)),
               "negative_prompt_embeds ", shape_str(neg->shape()), " must match prompt_embeds ",
               shape_str(text->shape()), masked ? " in batch" : "");
    if (pooled)
      check_pooled(e.uncond.find(models::kPooled), "negative_pooled_prompt_embeds", P,
                   pooled_width());
  }
}

void ModelFamily::check_embeddings_finite(const PromptEmbeddings& e) const {
  // In the file's order: each embedding, then its negative; a mask's values
  // must lie in [0, 1] (NaN is refused: it would silently read as "keep").
  for (const EmbeddingName& n : embedding_names()) {
    const bool mask = std::string(n.conditioning) == models::kTextMask;
    for (const bool negative : {false, true}) {
      const Tensor* t = (negative ? e.uncond : e.cond).find(n.conditioning);
      if (t == nullptr) continue;
      const int64_t bad = count_nonfinite(*t);
      XDIT_CHECK(bad == 0, negative ? "negative_" : "", n.file, " hold ", bad,
                 " NaN/Inf value(s): give finite values", mask ? " (a mask holds 0 and 1)" : "");
      if (!mask) continue;
      const Tensor f = t->to(DType::kF32);
      const float* v = f.data<float>();
      for (int64_t i = 0; i < f.numel(); ++i)
        XDIT_CHECK(v[i] >= 0.0f && v[i] <= 1.0f, negative ? "negative_" : "", n.file, " holds ",
                   v[i], " at flat index ", i, ": a mask holds 0 (padding) and 1");
    }
  }
}

void ModelFamily::match_masks(models::Conditioning& uncond, models::Conditioning& cond) {
  const Tensor *um = uncond.find(models::kTextMask), *cm = cond.find(models::kTextMask);
  if ((um == nullptr) != (cm == nullptr)) {
    models::Conditioning& lacking = um == nullptr ? uncond : cond;
    if (const Tensor* text = lacking.find(models::kText); text != nullptr) {
      Tensor ones = Tensor::empty({text->dim(0), text->dim(1)});
      std::fill(ones.data<float>(), ones.data<float>() + ones.numel(), 1.0f);
      lacking.set(models::kTextMask, std::move(ones));
    }
  }
  const Tensor *ut = uncond.find(models::kText), *ct = cond.find(models::kText);
  if (ut == nullptr || ct == nullptr || !uncond.has(models::kTextMask) ||
      !cond.has(models::kTextMask) || ut->ndim() != 3 || ct->ndim() != 3 ||
      ut->dim(1) == ct->dim(1))
    return;
  // Masked texts of two lengths (Z-Image's prompts and negative prompts):
  // the shorter zero-padded, masked, to the longer.
  models::Conditioning& shorter = ut->dim(1) < ct->dim(1) ? uncond : cond;
  const int64_t L = std::max(ut->dim(1), ct->dim(1));
  const Tensor text = shorter.at(models::kText).as(DType::kF32, Device{});
  const Tensor mask = shorter.at(models::kTextMask).as(DType::kF32, Device{});
  const int64_t B = text.dim(0), l = text.dim(1), d = text.dim(2);
  Tensor padded = Tensor::zeros({B, L, d}), padded_mask = Tensor::zeros({B, L});
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(text.data<float>() + b * l * d, l * d, padded.data<float>() + b * L * d);
    std::copy_n(mask.data<float>() + b * l, l, padded_mask.data<float>() + b * L);
  }
  shorter.set(models::kText, std::move(padded));
  shorter.set(models::kTextMask, std::move(padded_mask));
}

void ModelFamily::set_text_loras(std::vector<nn::LoraUse> loras, bool ignore_unmatched) {
  text_loras_ = std::move(loras);
  text_lora_ignore_ = ignore_unmatched;
  text_lora_weights_.clear();
}

int64_t ModelFamily::text_lora_skipped() const {
  int64_t n = 0;
  for (const auto& [component, entry] : text_lora_weights_)
    if (entry.second) n += entry.second->skipped();
  return n;
}

const io::WeightSource& ModelFamily::text_weights(const std::string& component,
                                                  const io::WeightStore& store) {
  text_stores_[component] = &store;
  bool adapts = false;
  for (const nn::LoraUse& l : text_loras_) adapts = adapts || !l.file->modules(component).empty();
  if (!adapts) return store;
  auto& [base, merged] = text_lora_weights_[component];
  if (base != &store || !merged) {
    merged = std::make_unique<nn::LoraWeights>(store, text_loras_, component, text_lora_ignore_);
    base = &store;
    if (merged->skipped() > 0)
      XDIT_INFO("LoRA: ", merged->skipped(), " ", component,
                " modules that match nothing skipped (--lora_ignore_unmatched)");
  }
  return *merged;
}

const Shape& ModelFamily::spec_shape(const io::WeightSpecs& specs, const std::string& name) {
  for (const auto& [n, shape] : specs)
    if (n == name) return shape;
  XDIT_FAIL("--transformer: the model has no ", name, " (its original layout needs it)");
}

}  // namespace xdit::pipeline
