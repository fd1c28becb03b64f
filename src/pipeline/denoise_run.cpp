// A plan's denoising run (Pipeline::generate_latents): the initial latents,
// the scheduler, and the Denoiser with the run's step hooks (calibration,
// load balancing, a guider's extra pass, a step cache, progress) over the
// steps of each expert in turn — Wan2.2's two (ModelFamily::boundary_ratio),
// each loaded when first needed, or the one transformer of every other model.
#include "core/buffer_pool.h"
#include "core/error.h"
#include "core/log.h"
#include "nn/attention.h"
#include "pipeline/denoiser.h"
#include "pipeline/pipeline.h"
#include "pipeline/step_cache.h"
#include "pipeline/step_hooks.h"

namespace xdit::pipeline {

std::vector<Pipeline::ExpertPart> Pipeline::expert_parts(const std::vector<float>& ts) const {
  const double ratio = family_->boundary_ratio();
  // As WanPipeline decides each step: t >= boundary_ratio × num_train_timesteps
  // runs `transformer`, a smaller t `transformer_2` (the scheduler's t:
  // UniPC's integers); each at the guider's scale for it (CFG: guidance_scale,
  // guidance_scale_2).
  const double boundary = ratio * static_cast<double>(sched_cfg_.num_train_timesteps());
  std::vector<ExpertPart> parts;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int expert = ratio > 0 && static_cast<double>(ts[i]) < boundary ? 1 : 0;
    const auto step = static_cast<int64_t>(i);
    if (parts.empty() || parts.back().expert != expert) parts.push_back({step, step, expert});
    parts.back().end = step + 1;
  }
  return parts;
}

void Pipeline::use_expert(int expert) {
  if (transformer_ && expert_ == expert) return;
  // A caller's block hooks go with the run to the other expert.
  const std::vector<models::BlockHook*> hooks =
      transformer_ ? transformer_->block_hooks() : std::vector<models::BlockHook*>{};
  if (parked_ && parked_expert_ == expert) {
    std::swap(transformer_, parked_);
    std::swap(expert_, parked_expert_);
    runtime_->attach(*transformer_);  // a fresh backend: no K/V of the other expert
  } else {
    if (transformer_) {
      if (one_shot_) {
        // One run per process: the expert done is freed before the next loads.
        release_transformer();
      } else {
        // Parked: it points at no backend (attach replaces the one it has)
        // and runs no hooks until it is swapped back in.
        transformer_->set_attention_backend(&nn::serial_attention());
        transformer_->set_block_hooks({});
        parked_ = std::move(transformer_);
        parked_expert_ = expert_;
      }
    }
    if (family_->boundary_ratio() > 0)
      XDIT_INFO(family_->name(), ": loading ", expert == 0 ? "transformer" : "transformer_2",
                expert == 0 ? " (the high-noise expert)" : " (the low-noise expert)");
    load_expert(expert);
  }
  transformer_->set_block_hooks(hooks);
}

void Pipeline::load_experts() {
  load();
  if (family_->boundary_ratio() > 0 && !one_shot_ && !parked_) {
    use_expert(1);  // loaded, the first parked
    use_expert(0);
  }
}

Tensor Pipeline::generate_latents(const Plan& plan,
                                  const std::function<void(const StepEvent&)>& on_step,
                                  const std::vector<StepHook*>& hooks) {
  if (plan.has_prompts())
    return generate_latents(plan.with_embeddings(encode_prompts(plan)), on_step, hooks);
  const PlanFields& r = *plan;
  cache_report_ = {};  // (a run that ends early reports no cache)
  const int64_t P = plan.batch();
  const int64_t vsf = vae_scale_factor();
  const int64_t h = r.run_height / vsf, w = r.run_width / vsf, C = spec().latent_channels;
  // [P, C, F, h, w]: the plan gave given latents their frame axis.
  Tensor latents =
      r.latents.defined() ? r.latents : initial_noise(P, C, r.latent_frames, h, w, r.seed);
  const auto sched = sched_cfg_.make();
  if (r.num_inference_steps == 0) {
    load();
    return latents;
  }
  sched->set_timesteps(r.num_inference_steps,
                       family_->timestep_hints(sched_cfg_, r.num_inference_steps, h, w));
  // latents * init_noise_sigma (1 for DPM-Solver and Flow-Match).
  const LoopInputs li = loop_inputs(r);
  const auto total = static_cast<int64_t>(sched->timesteps().size());
  CacheReport report;
  for (const ExpertPart& part : expert_parts(sched->timesteps())) {
    use_expert(part.expert);
    apply_request_loras(r.loras);
    latents = run_part(r, li, *sched, part, std::move(latents), hooks, report,
                       ProgressHook(on_step, part.begin, total));
  }
  cache_report_ = std::move(report);
  if (!cache_report_.label.empty()) XDIT_INFO("step cache ", cache_summary());
  return latents;
}

Tensor Pipeline::run_part(const PlanFields& r, LoopInputs li, schedulers::Scheduler& sched,
                          const ExpertPart& part, Tensor latents,
                          const std::vector<StepHook*>& hooks, CacheReport& report,
                          ProgressHook progress) {
  li.cfg_scale = li.guider->scale(li.guidance, part.expert);
  // A guider's extra pass (SD3's skip-layer call), the prompt half made only
  // when it is asked for.
  const std::unique_ptr<StepHook> pass =
      li.guider->pass_hook(li.guidance, [&] { return prompt_half_inputs(r, li); });
  Denoiser d(*transformer_, *runtime_, sched, std::move(li), device_);
  CalibrationHook calibration;
  if (mesh_ != nullptr && mesh_->config().auto_weights && runtime_->pipefusion() == nullptr)
    d.add_hook(&calibration);
  DynamicBalanceHook balance;  // first: its step time covers every later hook's
  if (mesh_ != nullptr && mesh_->config().dynamic_weights && runtime_->pipefusion() == nullptr)
    d.add_hook(&balance);
  if (pass) d.add_hook(pass.get());
  // Each expert its own cache (as each diffusers transformer has its own
  // hooks): the other's residuals say nothing of this one.
  const std::unique_ptr<StepCache> cache =
      r.cache.on() ? make_step_cache(r.cache, cache_setup(r)) : nullptr;
  // The model keeps no pointer to the run's cache; a caller's block hooks
  // run before it and stay.
  struct Unhook {
    models::DiT& model;
    std::vector<models::BlockHook*> before;
    ~Unhook() {
      model.set_block_hooks(before);
      model.set_attention_hook(nullptr);
    }
  } unhook{*transformer_, transformer_->block_hooks()};
  if (cache) {
    d.add_hook(cache.get());
    std::vector<models::BlockHook*> with = unhook.before;
    with.push_back(cache.get());
    transformer_->set_block_hooks(with);
    transformer_->set_attention_hook(cache->attention_hook());
  }
  for (StepHook* hook : hooks) d.add_hook(hook);
  d.add_hook(&progress);
  Tensor out = d.run(std::move(latents), part.begin, part.end);
  // PipeFusion's counts over the run's parts (micro-steps numbered on).
  const PipeFusionStats& ps = d.pipefusion_stats();
  if (part.begin == 0) pf_stats_ = {};
  const int64_t offset = pf_stats_.last_micro_step;
  pf_stats_.patch_forwards += ps.patch_forwards;
  if (pf_stats_.first_micro_step == 0 && ps.first_micro_step > 0)
    pf_stats_.first_micro_step = offset + ps.first_micro_step;
  if (ps.last_micro_step > 0) pf_stats_.last_micro_step = offset + ps.last_micro_step;
  if (cache) {
    report.label = r.cache.label();
    report.stats.append(cache->stats());
  }
  return out;
}

std::string Pipeline::cache_summary() const {
  return cache_report_.label.empty() ? ""
                                     : cache_report_.label + ": " + cache_report_.stats.summary();
}

CacheSetup Pipeline::cache_setup(const PlanFields& r) const {
  CacheSetup s;
  s.model = transformer_->name();
  s.blocks = spec().blocks;
  s.stage = transformer_->stage();
  s.token_rows = token_rows(r);
  const bool cfg_split = r.cfg && mesh_ != nullptr && mesh_->config().use_cfg_parallel;
  // The CFG halves decide apart where the family's diffusers pipeline calls
  // them apart (FLUX.1's true CFG); a batched pair decides once, over both
  // halves, which under CFG parallel live on the two CFG groups.
  const bool apart = family_->guider().calls_apart();
  s.contexts = r.cfg && apart && !cfg_split ? 2 : 1;
  if (mesh_ != nullptr) {
    s.sum_groups = {&mesh_->sp_group()};
    s.agree_groups = {&mesh_->sp_group(), &mesh_->tp_group()};
    s.stage_group = &mesh_->pp_group();
    if (cfg_split && !apart) {
      s.sum_groups.push_back(&mesh_->cfg_group());
      s.agree_groups.push_back(&mesh_->cfg_group());
    }
  }
  return s;
}

}  // namespace xdit::pipeline
