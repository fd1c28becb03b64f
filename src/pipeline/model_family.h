// What differs between the model families one Pipeline runs: the
// transformer and its config, the text side (tokenizers, encoders, prompt
// embeddings), the defaults diffusers' pipeline applies, its guider
// (pipeline/guidance/), and the scheduler's timestep hints. Everything else
// — the loop, every parallel method, the VAE — is the Pipeline's and is
// shared. A family is picked from model_index.json's _class_name.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/dit.h"
#include "models/original_checkpoint.h"
#include "models/pixart.h"
#include "models/t5.h"
#include "nn/lora.h"
#include "nn/lora_side.h"
#include "pipeline/guidance/guider.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/plan.h"
#include "pipeline/request.h"
#include "schedulers/scheduler_config.h"

namespace xdit::pipeline {

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // The family of a diffusers folder, with its transformer config read and
  // checked; an unknown pipeline class throws one line listing the supported.
  static std::unique_ptr<ModelFamily> from_folder(const io::ModelFolder& folder);
  // PixArt from a bare config (the benchmarks' random full-size models).
  static std::unique_ptr<ModelFamily> pixart(const models::PixArtConfig& cfg);
  // The model_index.json classes xdit runs.
  static const std::vector<std::string>& supported_pipelines();

  virtual std::string name() const = 0;  // "PixArt-Σ", "FLUX.1 [dev]"
  // One line on the transformer's architecture (xdit info).
  virtual std::string describe() const = 0;
  virtual models::DiTSpec spec() const = 0;
  virtual int64_t parameter_count() const = 0;
  virtual io::WeightSpecs weight_specs(const models::DiTStage& stage) const = 0;
  virtual std::unique_ptr<models::DiT> make_transformer(const io::WeightSource& weights,
                                                        DType dtype,
                                                        const models::DiTStage& stage) const = 0;
  virtual int64_t text_width() const = 0;             // the prompt embeddings' last dimension
  virtual int64_t pooled_width() const { return 0; }  // 0: no pooled embedding

  // diffusers' defaults.
  virtual int64_t default_height(int64_t vae_scale_factor) const = 0;  // pixels
  virtual int64_t default_width(int64_t vae_scale_factor) const {
    return default_height(vae_scale_factor);
  }
  // Frames per prompt (an image model: 1; Wan 81), and a video's frames
  // per second (Wan2.1: 16).
  virtual int64_t default_frames() const { return 1; }
  virtual int default_fps() const { return 16; }
  virtual int64_t default_steps() const = 0;
  // Its guidance (pipeline/guidance/): the guider its diffusers pipeline
  // uses, with that pipeline's defaults.
  virtual const Guider& guider() const = 0;
  // The layers of a decoder-LLM text encoder of `num_layers` that the
  // pipeline runs (Z-Image: all but the last).
  virtual int64_t text_layers_run(int64_t num_layers) const { return num_layers; }
  // FLUX.1 [dev]: the guidance scale is an input of the model.
  virtual bool embeds_guidance() const { return false; }
  // The conditioning a request adds beside the text (per-item scalars:
  // PixArt-α's size, FLUX.1 [dev]'s embedded guidance), to each half of
  // `c.batch()` items; `height` and `width` the size the model runs at.
  virtual void add_request_conditioning(models::Conditioning& /*c*/, int64_t /*height*/,
                                        int64_t /*width*/, double /*guidance_scale*/) const {}
  // The tensors of a --prompt_embeds file (diffusers' names: prompt_embeds,
  // prompt_attention_mask, pooled_prompt_embeds; "negative_" before each for
  // the negative prompts) and the conditioning names they fill.
  struct EmbeddingName {
    const char* conditioning;
    const char* file;
    bool required;  // the file must hold it (the negative ones only under CFG)
  };
  virtual std::vector<EmbeddingName> embedding_names() const;
  // Checks the embeddings of a request of `prompts` prompts against the model
  // (one line naming the file's tensor), and, under CFG, the negative ones'.
  virtual void check_embeddings(const PromptEmbeddings& e, bool cfg, double guidance_scale) const;
  // Stops on embeddings holding NaN/Inf, naming the file's tensor.
  void check_embeddings_finite(const PromptEmbeddings& e) const;
  // Under CFG the halves stack as [uncond; cond]: a mask one half lacks is
  // all ones (every token valid), as the text it masks; masked texts of
  // different lengths are zero-padded, masked, to the longer.
  static void match_masks(models::Conditioning& uncond, models::Conditioning& cond);
  // PixArt: sizes snap to the aspect-ratio bins (and resize back after).
  virtual bool bins_resolution() const { return false; }
  // FLUX: sizes floor to a multiple of 16 with a warning, as diffusers does;
  // PixArt refuses them.
  virtual bool floors_size() const { return false; }
  // Wan: sizes must be multiples of this (WanPipeline.check_inputs: 16)
  // before any flooring to the VAE × patch grid; 0: no such rule.
  virtual int64_t size_multiple() const { return 0; }
  virtual schedulers::TimestepHints timestep_hints(const schedulers::SchedulerConfig&,
                                                   int64_t /*steps*/, int64_t /*latent_h*/,
                                                   int64_t /*latent_w*/) const {
    return {};
  }
  // The largest side in pixels the model takes (SD3: its position table's
  // pos_embed_max_size patches); 0: no limit.
  virtual int64_t max_side(int64_t /*vae_scale_factor*/) const { return 0; }
  // A single-file checkpoint of the model's original layout
  // (--transformer FILE: a GGUF or safetensors file as people download
  // them): the model's name in messages and the map of its diffusers
  // weights to the file's tensors (models/original_checkpoint.h), from the
  // transformer's `specs`; none where the family reads its transformer from
  // its folder only.
  struct OriginalLayout {
    std::string model;  // "FLUX.1"
    models::OriginalRowMap map;
  };
  virtual std::optional<OriginalLayout> original_layout(const io::WeightSpecs& /*specs*/) const {
    return std::nullopt;
  }
  // The shape of weight `name` in `specs`; one line when the model has not
  // that weight (an original layout's widths are read from them).
  static const Shape& spec_shape(const io::WeightSpecs& specs, const std::string& name);
  // Whether the pipeline runs on the CUDA backend: its transformer, text
  // encoders and VAE use only the op set (kernels.h, Linear, Conv2d,
  // Scratch), no host loops over activations.
  virtual bool runs_on_cuda() const { return false; }

  // The components of its diffusers folder, by folder name and kind: the
  // transformer, the text side (a folder may lack it when only embeddings
  // are given), the VAE and the scheduler. xdit info describes and scans
  // them from this list, and the pipeline opens the transformer, VAE and
  // scheduler by it; nothing guesses a component from file names.
  enum class ComponentKind {
    kTransformer,
    kT5Encoder,
    kClipEncoder,
    kT5Tokenizer,
    kClipTokenizer,
    kQwenEncoder,    // a decoder LLM (Qwen2, Qwen2.5-VL, Qwen3) as text encoder
    kQwenTokenizer,  // its byte-level BPE tokenizer
    kAutoencoderKL,
    kAutoencoderKLWan,
    kScheduler,
  };
  struct Component {
    const char* folder;
    ComponentKind kind;
  };
  std::vector<Component> components() const;
  // The folder of its (first) component of `kind`; throws when it has none.
  const char* component(ComponentKind kind) const;
  // Whether a component of this kind holds weights (safetensors files).
  static bool has_weights(ComponentKind kind);
  // The text side's part of components().
  virtual std::vector<Component> text_components() const = 0;
  // The kind of its "vae" component.
  virtual ComponentKind vae_kind() const { return ComponentKind::kAutoencoderKL; }
  // Wan2.2's two experts (diffusers' boundary_ratio): `transformer` runs the
  // steps whose timestep t >= boundary_ratio × num_train_timesteps at
  // guidance_scale, `transformer_2` (the same config, its own weights) the
  // rest at guidance_scale_2; components() lists both. 0: one transformer.
  virtual double boundary_ratio() const { return 0; }

  // The text side: open_text reads the tokenizer(s) and encoder configs and
  // checks the weight headers (cheap); encode builds the encoders on first use.
  virtual void open_text(const io::ModelFolder& folder) = 0;
  virtual int64_t default_max_sequence_length() const = 0;
  virtual int64_t max_sequence_limit() const = 0;
  // A plan's prompts (and under its CFG the negative prompts) → embeddings.
  virtual PromptEmbeddings encode(const PlanFields& r, DType dtype) = 0;
  // Frees the text encoders (and the registries of their layers).
  void release_text();
  // The text encoders, for the memory estimate.
  virtual void describe_text(MemoryQuery& q) const = 0;

  // Tensor parallelism: the group the T5 encoder splits over (CLIP stays
  // whole; the transformer's share comes with its DiTStage).
  void set_tensor_parallel(const nn::TensorParallel& tp) { text_tp_ = tp; }
  // false: the T5 encoder builds its blocks one at a time in each encoding
  // (models::T5Encoder's `resident`), for a pipeline that frees it after one
  // encoding; set before the encoder is first built.
  void set_text_resident(bool resident) { text_resident_ = resident; }
  // One line naming the part when the opened T5 encoder (a Qwen family's:
  // its Qwen encoder) cannot split over `degree` ranks (before its weights load).
  virtual void check_tensor_parallel(int degree) const;
  // The most of `ranks` (a divisor of it) that the opened T5 encoder's heads
  // and feed-forward units split over evenly (a Qwen family's: its Qwen
  // encoder's, by whole GQA groups); 1 without such an encoder.
  virtual int text_parallel_degree(int ranks) const;
  // The T5 encoder's files once opened (null before): what this process has
  // read of them (`loaded()`: its share under a split) is what tests check.
  const io::WeightStore* t5_weights() const { return t5_weights_.get(); }

  // LoRAs for the text encoders: the components whose adapters this family
  // applies — its CLIP encoders, which diffusers' LoRA loaders adapt
  // (FLUX.1: text_encoder; SD3: text_encoder and text_encoder_2), and its
  // T5 encoder, which diffusers' do not (peft adapts it: FLUX.1's
  // text_encoder_2, SD3's text_encoder_3, PixArt's text_encoder) — and the
  // LoRAs, set before the text side opens.
  virtual std::vector<std::string> lora_text_components() const = 0;
  void set_text_loras(std::vector<nn::LoraUse> loras, bool ignore_unmatched);
  // The text LoRAs' modules that match nothing in the encoders opened so
  // far, skipped under ignore_unmatched.
  int64_t text_lora_skipped() const;
  // A request's LoRAs for the text encoders, beside their weights (side
  // paths, nn/lora_side.h): applied to the encoders built and to each as it
  // is built; they must stay resident (xdit serve), since a T5 built block
  // by block would not get them. Checked against the opened stores
  // (check_request_text_loras, one line) before any encoder changes.
  void set_request_text_loras(const std::vector<nn::LoraUse>& loras);
  // Also each adapter against `side_weights` (by component; the weights
  // in layers with side paths) where a component's are known. Returns the
  // modules skipped (a LoRA's ignore_unmatched).
  int64_t check_request_text_loras(
      const std::vector<nn::LoraUse>& loras,
      const std::map<std::string, std::set<std::string>>& side_weights = {}) const;
  // The side-path weights of the text encoders built so far, by component.
  std::map<std::string, std::set<std::string>> text_side_weights() const;

 protected:
  // `store`, the weights of `component`, with the text LoRAs that adapt it
  // merged (the store itself when none adapt it); made when first asked —
  // as the text side opens, so its modules and shapes are checked before
  // any weight is read — and kept while the store lives.
  const io::WeightSource& text_weights(const std::string& component, const io::WeightStore& store);
  // Builds the text encoder of `component` from text_weights(component,
  // store) — make(weights) — with its linear layers noted, then gives them
  // the request's text LoRAs.
  template <class Make>
  auto build_text_encoder(const std::string& component, const io::WeightStore& store, Make make) {
    text_stores_[component] = &store;
    nn::LinearRegistry& layers = text_layers_[component];
    layers.clear();
    auto& recorded = text_recorded_[component];
    recorded = std::make_unique<nn::RecordingWeights>(text_weights(component, store), layers);
    decltype(make(*recorded)) encoder;
    {
      const nn::LinearRegistry::Recording on(layers);
      encoder = make(*recorded);
    }
    nn::set_side_loras(layers, request_text_loras_, component);
    return encoder;
  }
  // The T5 encoder every family has: its config and files (open_t5 fills
  // them in open_text) and the encoder, built on first use by t5_encoder
  // with the split and residency set above, freed by release_text.
  models::T5Encoder& t5_encoder(DType dtype);
  // The family's encoders freed (release_text).
  virtual void drop_text_encoders() = 0;
  // open_t5 for the T5 encoder of `component`, its LoRAs checked now.
  void open_t5_encoder(const io::ModelFolder& folder, const std::string& component, int64_t width);
  std::string t5_component_;  // the T5 encoder's folder ("text_encoder_2", …)
  nn::TensorParallel text_tp_;
  bool text_resident_ = true;
  std::unique_ptr<models::T5Config> t5_cfg_;
  std::unique_ptr<io::WeightStore> t5_weights_;
  std::unique_ptr<models::T5Encoder> t5_;

 private:
  std::vector<nn::LoraUse> text_loras_;
  bool text_lora_ignore_ = false;
  std::map<std::string, std::pair<const io::WeightStore*, std::unique_ptr<nn::LoraWeights>>>
      text_lora_weights_;
  // Per text component: its store, the layers of the encoder built last and
  // the weights they were read through; the request's text LoRAs.
  std::map<std::string, const io::WeightStore*> text_stores_;
  std::map<std::string, nn::LinearRegistry> text_layers_;
  std::map<std::string, std::unique_ptr<nn::RecordingWeights>> text_recorded_;
  std::vector<nn::LoraUse> request_text_loras_;
  bool request_text_loras_known_ = true;  // the built encoders' side paths hold them
};

// What every family takes straight from its transformer's config.
template <class Config, class Transformer>
class ConfigFamily : public ModelFamily {
 public:
  explicit ConfigFamily(const Config& cfg) : cfg_(cfg) {}
  models::DiTSpec spec() const override { return cfg_.spec(); }
  int64_t parameter_count() const override { return cfg_.parameter_count(); }
  io::WeightSpecs weight_specs(const models::DiTStage& stage) const override {
    return cfg_.weight_specs(stage);
  }
  std::unique_ptr<models::DiT> make_transformer(const io::WeightSource& w, DType dtype,
                                                const models::DiTStage& stage) const override {
    return std::make_unique<Transformer>(cfg_, w, dtype, stage);
  }

 protected:
  Config cfg_;
};

// The largest divisor d > 1 of `ranks` with splits(d) (a text encoder's
// tensor-parallel degree over a replica); 1 when none.
template <class Splits>
int largest_split_degree(int ranks, Splits splits) {
  for (int d = ranks; d > 1; --d)
    if (ranks % d == 0 && splits(d)) return d;
  return 1;
}

// FluxPipeline's and QwenImagePipeline's schedule: np.linspace(1, 1/N, N)
// in f64, and mu from the packed image's tokens (the scheduler's own
// base/max sequence lengths and shifts).
schedulers::TimestepHints linspace_sigmas_with_mu(const schedulers::SchedulerConfig& s,
                                                  int64_t steps, int64_t latent_h,
                                                  int64_t latent_w);

// The family of a PixArt, FLUX, SD3, Wan, Z-Image or Qwen-Image folder
// (pixart_family.cpp, flux_family.cpp, sd3_family.cpp, wan_family.cpp,
// zimage_family.cpp, qwen_image_family.cpp), as the registry
// (model_family.cpp) makes it.
std::unique_ptr<ModelFamily> make_pixart_family(const io::ModelFolder& folder);
std::unique_ptr<ModelFamily> make_flux_family(const io::ModelFolder& folder);
std::unique_ptr<ModelFamily> make_sd3_family(const io::ModelFolder& folder);
std::unique_ptr<ModelFamily> make_wan_family(const io::ModelFolder& folder);
std::unique_ptr<ModelFamily> make_zimage_family(const io::ModelFolder& folder);
std::unique_ptr<ModelFamily> make_qwen_image_family(const io::ModelFolder& folder);

}  // namespace xdit::pipeline
