#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "comm/device_comm.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "core/log.h"
#include "models/original_checkpoint.h"
#include "models/vae.h"
#include "parallel/calibrate.h"
#include "parallel/vae_bands.h"
#include "pipeline/denoiser.h"
#include "pipeline/resolution.h"
#include "pipeline/step_cache.h"
#include "pipeline/step_hooks.h"
#include "pipeline/text_encoding.h"

namespace xdit::pipeline {

namespace {
// Bytes of the weights a stage loads, as f32 ("412 MB of weights (as f32)").
std::string stage_weight_bytes(const ModelFamily& family, const models::DiTStage& stage) {
  double bytes = 0;
  for (const auto& [name, shape] : family.weight_specs(stage))
    bytes += static_cast<double>(shape_numel(shape)) * 4.0;
  return human_size(bytes) + " of weights (as f32)";
}

}  // namespace

Pipeline::Pipeline(const std::string& folder, DType dtype) : folder_(folder), dtype_(dtype) {
  family_ = ModelFamily::from_folder(*folder_);
  using Kind = ModelFamily::ComponentKind;
  const char* scheduler = family_->component(Kind::kScheduler);
  sched_cfg_ = schedulers::SchedulerConfig::from_json(
      folder_->component_config(scheduler, "scheduler_config.json"),
      folder_->component(scheduler) + "/scheduler_config.json");
  const std::string transformer = folder_->component(family_->component(Kind::kTransformer));
  // A folder without the transformer's weights (its config only, the
  // weights downloaded as one GGUF or safetensors file): they come from
  // set_transformer_file, and load() without it is one line.
  bool has_weights = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(transformer, ec))
    has_weights = has_weights || e.path().string().ends_with(".safetensors") ||
                  e.path().string().ends_with(".safetensors.index.json");
  if (!has_weights && !ec) {
    transformer_file_needed_ = true;
    return;
  }
  auto store = std::make_unique<io::WeightStore>(transformer);
  store->check_shapes(family_->weight_specs({}));  // the config against the headers
  weights_ = std::move(store);
  if (family_->boundary_ratio() > 0) {  // Wan2.2's second expert, of the same config
    auto second = std::make_unique<io::WeightStore>(folder_->component("transformer_2"));
    second->check_shapes(family_->weight_specs({}));
    weights_2_ = std::move(second);
  }
}

Pipeline::Pipeline(std::unique_ptr<ModelFamily> family, const schedulers::SchedulerConfig& sched,
                   std::unique_ptr<io::WeightSource> weights, DType dtype)
    : dtype_(dtype), family_(std::move(family)), sched_cfg_(sched), weights_(std::move(weights)) {}

Pipeline::~Pipeline() = default;

std::string Pipeline::lora_label() const {
  const int64_t skipped = lora_skipped_ + family_->text_lora_skipped();
  if (lora_label_.empty() || skipped == 0) return lora_label_;
  return detail::concat(lora_label_, "; ", skipped, " unmatched skipped");
}

void Pipeline::set_loras(std::vector<nn::LoraUse> loras, bool ignore_unmatched) {
  XDIT_CHECK(!transformer_file_needed_ || weights_,
             "set_transformer_file before set_loras (the folder has no transformer weights)");
  XDIT_CHECK(!transformer_ && weights_, "set_loras before the transformer loads");
  XDIT_CHECK(!lora_base_, "set_loras once per pipeline");
  if (loras.empty()) return;
  XDIT_CHECK(family_->boundary_ratio() == 0, family_->name(),
             ": LoRAs for a model of two experts (transformer, transformer_2) are not supported "
             "yet");
  const auto* store = dynamic_cast<const io::WeightStore*>(weights_.get());
  const auto* file = dynamic_cast<const models::OriginalCheckpointWeights*>(weights_.get());
  XDIT_CHECK(store != nullptr || file != nullptr,
             "set_loras over a model folder's weights or a "
             "--transformer file's only");
  XDIT_CHECK(!text_opened_, "set_loras before the first plan opens the text encoders");
  std::vector<std::string> adaptable = family_->lora_text_components();
  adaptable.insert(adaptable.begin(), "transformer");
  std::string names;
  for (const std::string& c : adaptable) names += (names.empty() ? "" : ", ") + c;
  lora_skipped_ = 0;
  for (const nn::LoraUse& l : loras) {
    const std::vector<std::string>& unread = l.file->unread();
    lora_skipped_ += static_cast<int64_t>(unread.size());
    if (!unread.empty() && !ignore_unmatched) {
      std::string list;
      for (size_t i = 0; i < unread.size() && i < 3; ++i) list += (i ? ", " : "") + unread[i];
      if (unread.size() > 3) list += " and " + std::to_string(unread.size() - 3) + " more";
      XDIT_FAIL("LoRA ", l.file->path(), " (", l.file->format(), "): ", unread.size(),
                " tensors adapt nothing xdit applies: ", list,
                " (--lora_ignore_unmatched skips them)");
    }
  }
  for (const nn::LoraUse& l : loras)
    for (const std::string& c : l.file->components()) {
      if (std::find(adaptable.begin(), adaptable.end(), c) != adaptable.end()) continue;
      XDIT_CHECK(ignore_unmatched, "LoRA ", l.file->path(), " adapts the ", c, "; xdit adapts ",
                 family_->name(), "'s ", names, " only (--lora_ignore_unmatched applies the rest)");
      lora_skipped_ += static_cast<int64_t>(l.file->modules(c).size());
    }
  family_->set_text_loras(loras, ignore_unmatched);
  std::vector<LoraRef> refs;
  for (const nn::LoraUse& l : loras) refs.push_back({l.file->path(), l.scale});
  const std::string label = lora_list_label(refs);
  // A --transformer file's adapted matrices are merged in floating point;
  // the others keep the blocks they are stored in.
  const DType merged_type = dtype_ == DType::kBF16 ? DType::kBF16 : DType::kF32;
  auto merged = store != nullptr
                    ? std::make_unique<nn::LoraWeights>(*store, std::move(loras), "transformer",
                                                        ignore_unmatched, merged_type)
                    : std::make_unique<nn::LoraWeights>(
                          *file, [file](const std::string& n) { return file->shape(n); },
                          std::move(loras), "transformer", ignore_unmatched, merged_type);
  lora_skipped_ += merged->skipped();
  XDIT_INFO("LoRA ", label, ": ", merged->adapted(), " transformer weights adapted",
            lora_skipped_ > 0 ? detail::concat("; ", lora_skipped_,
                                               " tensors and modules that match nothing skipped "
                                               "(--lora_ignore_unmatched)")
                              : std::string());
  lora_base_ = std::move(weights_);
  weights_ = std::move(merged);
  lora_label_ = label;
}

void Pipeline::set_transformer_file(const std::string& path) {
  XDIT_CHECK(!transformer_ && !lora_base_ && (weights_ || transformer_file_needed_),
             "set_transformer_file before set_loras and the load");
  const io::WeightSpecs specs = family_->weight_specs({});
  std::optional<ModelFamily::OriginalLayout> layout = family_->original_layout(specs);
  XDIT_CHECK(
      layout.has_value(), "--transformer ", path,
      ": single-file checkpoints of FLUX.1, SD3 / SD3.5, Z-Image, Qwen-Image and Wan only so far; ",
      family_->name(), "'s transformer is read from its folder");
  auto source = std::make_unique<models::OriginalCheckpointWeights>(
      std::make_shared<io::CheckpointFile>(path), layout->model, std::move(layout->map));
  source->check_shapes(specs);  // the config against the file, before any weight is read
  weights_ = std::move(source);
}

void Pipeline::check_transformer_weights() const {
  XDIT_CHECK(weights_ || !transformer_file_needed_,
             "the model folder's transformer has no weights (no *.safetensors in ",
             folder_->component(family_->component(ModelFamily::ComponentKind::kTransformer)),
             "): give them as one file with --transformer FILE");
}

void Pipeline::set_weights_format(kernels::WeightFormat f) {
  XDIT_CHECK(!transformer_, "set_weights_format before the load");
  weights_format_ = f;
}

size_t Pipeline::linear_weight_bytes() const {
  size_t n = 0;
  for (const nn::LinearOrigin& l : layers_.layers()) n += l.weight_bytes;
  return n;
}

void Pipeline::set_mesh(parallel::Mesh* mesh) {
  // The runtime owns the attention backend the loaded model points at.
  XDIT_CHECK(!transformer_, "set_mesh after the transformer loaded");
  mesh_ = mesh;
  runtime_ = std::make_unique<parallel::ParallelRuntime>(mesh_, spec().patch);
}

int Pipeline::text_parallel() const {
  if (mesh_ == nullptr) return 1;
  const int tp = mesh_->config().tensor_parallel_degree;
  // On a GPU the text encoder splits over the transformer's tensor-parallel
  // group or not at all; on the CPU over as many of the replica's ranks as
  // its heads and units allow.
  // (Nothing to say before the text side is open: embeddings given.)
  const bool splits_tp = tp == 1 || !text_opened_ || family_->text_parallel_degree(tp) == tp;
  const int d = device_.cuda() ? (splits_tp ? tp : 1)
                               : family_->text_parallel_degree(mesh_->config().replica());
  if (!splits_tp) {
    // Its heads (or units) do not split over the degree (a 3-head encoder
    // under TP 2): a note, once, instead of refusing the run.
    std::string why = "the text encoder does not split";
    try {
      family_->check_tensor_parallel(tp);
    } catch (const Error& e) {
      why = e.what();
      why = why.substr(0, why.find_first_of(":;"));  // the reason, not the advice
    }
    static std::once_flag noted;
    std::call_once(noted, [&] {
      if (mesh_->world().rank() == 0)
        XDIT_INFO("note: ", why,
                  d == 1 ? std::string(": it runs whole on each rank")
                         : detail::concat(": it splits over ", d, " ranks instead"),
                  " (the transformer stays split over --tensor_parallel_degree ", tp, ")");
    });
  }
  return d;
}

bool Pipeline::vae_in_bands(int64_t latent_rows) const {
  if (mesh_ == nullptr) return false;
  const auto& pc = mesh_->config();
  if (pc.use_parallel_vae.has_value() || pc.patch_parallel_degree > 1 || device_.cuda())
    return pc.parallel_vae();
  return pc.replica() > 1 && latent_rows >= pc.replica();
}

const io::ModelFolder& Pipeline::folder() const {
  XDIT_CHECK(folder_.has_value(), "this pipeline was built without a model folder");
  return *folder_;
}

int64_t Pipeline::token_rows(const PlanFields& p) const {
  const int64_t patch = spec().patch;
  if (p.latents.defined())  // [P, C, F, h, w], or [P, C, h, w]
    return p.latents.ndim() == 5 ? p.latents.dim(2) * (p.latents.dim(3) / patch)
                                 : p.latents.dim(2) / patch;
  return p.latent_frames * (p.run_height / vae_scale_factor() / patch);
}

LatentDecoder::Factors Pipeline::vae_factors() const {
  if (decoder_) return decoder_->factors();
  if (!folder_) return {kVaeScaleFactor, 1};
  // Read once: every plan asks (the folder's VAE config does not change).
  if (!factors_)
    factors_ = LatentDecoder::read_factors(*folder_, family_->vae_kind(),
                                           family_->component(family_->vae_kind()));
  return *factors_;
}

bool Pipeline::uses_cfg(const LatentRequest& r) const {
  // (the defaults resolved as the planner resolves them)
  GuidanceSettings asked;
  asked.guidance_scale = r.guidance_scale;
  asked.true_cfg_scale = r.true_cfg_scale;
  asked.negative = !r.uncond.empty();
  const Guider& guider = family_->guider();
  return guider.two_predictions(guider.resolved(asked));
}

void Pipeline::set_device(Device device) {
  if (device.cuda()) {
    XDIT_CHECK(family_->runs_on_cuda(), "--device ", device.str(), ": the ", family_->name(),
               " pipeline does not run on the CUDA backend yet; use --device cpu");
    XDIT_CHECK(!transformer_, "set_device after the transformer loaded");
    if (mesh_ != nullptr && mesh_->world().size() > 1) {
      // Every rank takes the GPU of its local rank; the mesh's model groups
      // move to device communicators (NCCL, or host-staged where ranks share
      // a GPU), the pipeline's own exchanges stay on the host.
      XDIT_CHECK(device.index == 0, "--device ", device.str(),
                 ": under mpirun each rank takes the GPU of its local rank; use --device cuda "
                 "(CUDA_VISIBLE_DEVICES chooses the GPUs)");
      if (mesh_->device_comm().empty()) {  // the first pipeline on this mesh (serve has two)
        std::string note;
        const comm::RankDevice mine = comm::rank_device(&note);
        if (!note.empty() && mesh_->world().rank() == 0) XDIT_INFO(note);
        mesh_->set_device(mine.device, mine.kind);
      }
      device = mesh_->device();
    }
    check_device(device);
  }
  device_ = device;
}

void Pipeline::load() {
  if (!transformer_) load_expert(0);
}

void Pipeline::load_expert(int expert) {
  check_transformer_weights();
  std::unique_ptr<io::WeightSource>& weights = expert == 0 ? weights_ : weights_2_;
  XDIT_CHECK(weights, expert == 0
                          ? "this one-shot pipeline released its transformer after its image; make "
                            "a new pipeline for another"
                          : "transformer_2's weights are not open: a one-shot pipeline released "
                            "them after its video, or it was made without a folder");
  if (!runtime_) runtime_ = std::make_unique<parallel::ParallelRuntime>(mesh_, spec().patch);
  if (!stage_blocks_measured_ && mesh_ != nullptr && mesh_->config().auto_stage_blocks &&
      mesh_->config().pipefusion_parallel_degree > 1 &&
      mesh_->config().attn_layer_num_for_pp.empty()) {
    DeviceScope scope(device_);
    const parallel::StageCalibration c =
        parallel::calibrate_stage_blocks(*mesh_, spec().blocks, spec().hidden, dtype_,
                                         SlowRank::from_env(mesh_->world().rank()).factor);
    mesh_->set_stage_blocks(c.blocks, spec().blocks);
    stage_blocks_measured_ = true;
    if (mesh_->world().rank() == 0)
      XDIT_INFO("--attn_layer_num_for_pp auto: measured ", c.describe());
  }
  const models::DiTStage stage = runtime_->stage(spec().blocks);
  const size_t before = weights->loaded().total;
  {
    // On a CUDA device the layers upload their weights as they are made.
    DeviceScope scope(device_);
    layers_.clear();
    applied_request_loras_ = std::vector<LoraRef>{};  // every side path empty
    const nn::RecordingWeights recorded(*weights, layers_);
    const nn::LinearRegistry::Recording recording(layers_);
    const kernels::WeightFormatScope format(weights_format_);
    transformer_ = family_->make_transformer(recorded, dtype_, stage);
  }
  XDIT_DEBUG("transformer loaded: ", layers_.layers().size(), " linear layers, their weights ",
             human_size(static_cast<double>(linear_weight_bytes())));
  if (stage.tp.split())
    XDIT_INFO("tensor parallel rank ", stage.tp.rank, " of ", stage.tp.size, ": loaded ",
              human_size(static_cast<double>(weights->loaded().total - before)), " of the ",
              human_size(static_cast<double>(weights->stored_bytes())),
              " transformer weights (as stored; modulation and embeddings whole)");
  // The layers hold converted copies of their (shares of the) weights: the
  // files' mappings go, and with them the pages loading touched (a
  // tensor-parallel rank's strided reads touch most pages of a row-split
  // matrix), so a rank's resident weights are its shares.
  // The whole model's weight shapes outlive the files: a request's LoRAs
  // are checked against them after the load too.
  const io::WeightSource* source = lora_base_ ? lora_base_.get() : weights.get();
  if (const auto* store = dynamic_cast<const io::WeightStore*>(source))
    for (const std::string& name : store->names()) model_shapes_[name] = store->shape(name);
  weights.reset();
  lora_base_.reset();
  expert_ = expert;
  runtime_->set_stale_refresh(stale_refresh_);
  runtime_->attach(*transformer_);
  note_request_lora_targets();  // (collective under PipeFusion)
  if (runtime_->pipefusion() != nullptr) {
    // Every stage's blocks and weight bytes, logged by rank 0.
    const std::string line = detail::concat(
        "PipeFusion stage ", mesh_->coord().pp, ": blocks [", stage.block_begin, ", ",
        stage.block_end, ")", stage.first ? " + embeddings" : "",
        stage.last ? " + output layer" : "", ", ", stage_weight_bytes(*family_, stage));
    constexpr size_t kLine = 256;
    std::vector<char> mine(kLine, '\0'), all(kLine * static_cast<size_t>(mesh_->pp_group().size()));
    std::memcpy(mine.data(), line.data(), std::min(line.size(), kLine - 1));
    mesh_->pp_group().allgather(mine.data(), all.data(), kLine, comm::Type::kByte);
    for (int i = 0; i < mesh_->pp_group().size(); ++i)
      XDIT_INFO(std::string(all.data() + i * kLine));
  }
}

void Pipeline::release_transformer() {
  transformer_.reset();
  parked_.reset();
  if (runtime_) runtime_->release();
  release_pooled_buffers();  // before the decoder takes its buffers
}

std::pair<models::Conditioning, models::Conditioning> Pipeline::halves(const PlanFields& r) const {
  models::Conditioning uncond = r.uncond, cond = r.cond;
  if (r.cfg) ModelFamily::match_masks(uncond, cond);  // the halves stack
  for (models::Conditioning* c : {&uncond, &cond})    // without CFG the negative half is not used
    if (!c->empty() && (c == &cond || r.cfg))
      family_->add_request_conditioning(*c, r.run_height, r.run_width, r.guidance_scale);
  return {std::move(uncond), std::move(cond)};
}

LoopInputs Pipeline::loop_inputs(const PlanFields& r) const {
  LoopInputs li;
  li.prompts = r.cond.batch();
  li.guider = &family_->guider();
  li.guidance = r.guidance();
  li.cfg = r.cfg;
  li.cfg_scale = li.guider->scale(li.guidance, 0);
  li.timestep_divisor = spec().timestep_divisor;
  li.timestep_reversed = spec().timestep_reversed;
  // Under CFG parallel each CFG group runs one half: group 0 the negative
  // prompt, group 1 the prompt; the predictions are all-gathered after.
  li.cfg_split = li.cfg && mesh_ != nullptr && mesh_->config().use_cfg_parallel;
  const auto [uncond, cond] = halves(r);
  if (li.cfg_split)
    li.cond = (mesh_->coord().cfg == 0 ? uncond : cond).as(DType::kF32, Device{});
  else if (li.cfg)
    li.cond = models::Conditioning::concat(uncond, cond);
  else
    li.cond = cond.as(DType::kF32, Device{});
  li.batch = (li.cfg && !li.cfg_split) ? 2 * li.prompts : li.prompts;
  return li;
}

LoopInputs Pipeline::prompt_half_inputs(const PlanFields& r, const LoopInputs& li) const {
  LoopInputs s = li;  // the divisor; the prompt half only, unmasked
  s.cond = halves(r).second.as(DType::kF32, Device{});
  s.cond.set(models::kTextMask, Tensor());
  s.batch = s.prompts;
  s.cfg = s.cfg_split = false;
  return s;
}

PromptEmbeddings Pipeline::encode_prompts(const Plan& plan) {
  XDIT_CHECK(text_opened_ && plan.has_prompts(), "encode_prompts needs a plan with prompts");
  // T5's share: on the CPU the replica's text group (made on the first call,
  // collective over the replica, all of whose ranks encode these prompts),
  // on a CUDA device the transformer's tensor-parallel group.
  const int d = text_parallel();
  nn::TensorParallel share;  // whole
  if (d > 1)
    share =
        device_.cuda() ? runtime_->tensor_parallel() : nn::TensorParallel::of(mesh_->text_group(d));
  family_->set_tensor_parallel(share);
  // Freed after this encoding (one-shot on the CPU): T5 builds a block at a
  // time, holding one block's weights instead of all of them.
  family_->set_text_resident(keep_text_encoder_ || device_.cuda());
  family_->set_request_text_loras(request_lora_uses(plan->loras));
  // On a CUDA device the text encoders run there too (the embeddings come
  // back to the host).
  DeviceScope scope(device_);
  // PixArt's CFG runs with the negative prompt "" when none is given;
  // FLUX's true CFG needs a given one (the plan's cfg says which).
  return family_->encode(*plan, dtype_);
}

namespace {

// Images [N, 3, H, W] each of one flat colour: what a decoder with zeroed
// or broken weights gives for any latents (a real one never does). Said in
// one line; the images are still written (a uniform picture may be meant).
void warn_if_uniform(const Tensor& image, const char* component) {
  if (image.ndim() != 4 || image.numel() == 0) return;
  const Tensor f = image.dtype() == DType::kF32 ? image : image.to(DType::kF32);
  const int64_t n = f.dim(0), c = f.dim(1), plane = f.dim(2) * f.dim(3);
  const float* v = f.data<float>();
  int64_t uniform = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool flat = true;
    for (int64_t ch = 0; ch < c && flat; ++ch) {
      const float* p = v + (i * c + ch) * plane;
      flat = std::all_of(p, p + plane, [&](float x) { return x == p[0]; });
    }
    uniform += flat ? 1 : 0;
  }
  if (uniform > 0)
    XDIT_WARN("the VAE decoder produced ", uniform, " of ", n,
              " image(s) of one flat colour: its weights are likely zero or broken (check ",
              component, "/ with xdit info --model DIR --check-weights)");
}

}  // namespace

Tensor Pipeline::decode_latents(const Tensor& latents) {
  XDIT_CHECK(decoder_, "decode_latents before a plan with images opened the VAE");
  XDIT_CHECK(latents.ndim() == 5, "decode_latents takes latents [B, C, F, h, w], got ",
             shape_str(latents.shape()));
  // On a CUDA device the decoder's weights and activations live there; the
  // frames come back to the host.
  DeviceScope scope(device_);
  Tensor image;
  if (vae_in_bands(latents.dim(3))) {
    // Every rank of the replica decodes its band of latent rows; every one
    // returns the whole image.
    const std::vector<int64_t> rows = mesh_->config().vae_rows(latents.dim(3));
    if (!told_vae_bands_)
      XDIT_INFO("VAE decoder in ", rows.size(), " row bands over the ranks of each replica");
    told_vae_bands_ = true;
    parallel::VaeBands bands(*mesh_->model_groups().replica, mesh_->replica_group(), rows);
    image = decoder_->decode(latents, dtype_, &bands);
  } else {
    image = decoder_->decode(latents, dtype_, nullptr);
  }
  const char* vae = family_->component(family_->vae_kind());
  check_finite_output(image, "VAE decoder", vae);
  warn_if_uniform(image, vae);
  return image;
}

ImageResult Pipeline::generate(const Plan& plan,
                               const std::function<void(const StepEvent&)>& on_step) {
  XDIT_CHECK(plan->output == Output::kImages, "generate needs a plan for images");
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  ImageResult out;
  const auto t0 = Clock::now();
  std::optional<Plan> encoded;
  if (plan.has_prompts()) {
    encoded = plan.with_embeddings(encode_prompts(plan));
    if (!keep_text_encoder_) {
      family_->release_text();
      release_pooled_buffers();  // their buffers go back to the system before the transformer's
    }
  }
  const auto t1 = Clock::now();
  Tensor latents = generate_latents(encoded ? *encoded : plan, on_step);
  if (one_shot_) release_transformer();
  const auto t2 = Clock::now();
  Tensor image = decode_latents(latents);
  if (plan->resize_back) image = resize_and_crop(image, plan->height, plan->width);
  out.rgb = models::image_to_rgb8(image);  // [P·F, 3, H, W]: prompt-major frames
  out.frames = image.dim(0) / latents.dim(0);
  out.height = image.dim(2);
  out.width = image.dim(3);
  const auto t3 = Clock::now();
  out.text_seconds = secs(t0, t1);
  out.denoise_seconds = secs(t1, t2);
  out.decode_seconds = secs(t2, t3);
  out.cache = cache_summary();
  return out;
}

}  // namespace xdit::pipeline
