#include "pipeline/denoiser.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "parallel/calibrate.h"

namespace xdit::pipeline {

Tensor initial_noise(int64_t prompts, int64_t channels, int64_t frames, int64_t latent_h,
                     int64_t latent_w, uint64_t seed) {
  return TorchGenerator(seed).randn({prompts, channels, frames, latent_h, latent_w});
}

Tensor with_frame_axis(const Tensor& latents) {
  if (!latents.defined() || latents.ndim() != 4) return latents;
  return latents.reshape({latents.dim(0), latents.dim(1), 1, latents.dim(2), latents.dim(3)});
}

void check_finite_latents(const Tensor& latents, int64_t step, int64_t total) {
  const int64_t bad = count_nonfinite(latents);
  XDIT_CHECK(bad == 0, "the latents hold ", bad, " NaN/Inf value(s) after denoising step ", step,
             " of ", total,
             "; stopped without writing an image. Likely causes: non-finite weights (check with "
             "xdit info --model DIR --check-weights), non-finite prompt embeddings, or a "
             "guidance_scale so large that the noise prediction overflows");
}

models::DiTInputs LoopInputs::at(const Tensor& latents, double t, int64_t r0, int64_t r1) const {
  models::DiTInputs in;
  in.latents = &latents;
  // As the pipelines pass it: PixArt the timestep, FLUX t / 1000 in f32,
  // Z-Image (1000 − t) / 1000 in f32.
  const auto div = static_cast<float>(timestep_divisor);
  const float value =
      timestep_reversed ? (div - static_cast<float>(t)) / div : static_cast<float>(t) / div;
  in.timesteps.assign(static_cast<size_t>(batch), value);
  in.cond = &cond;
  in.row_begin = r0;
  in.row_end = r1;
  in.skip_blocks = skip_blocks;
  return in;
}

SlowRank SlowRank::from_env(int rank) {
  SlowRank s;
  const char* r = std::getenv("XDIT_SLOW_RANK");
  if (r == nullptr || std::atoi(r) != rank) return s;
  const char* f = std::getenv("XDIT_SLOW_FACTOR");
  const char* from = std::getenv("XDIT_SLOW_FROM");
  s.factor = f != nullptr ? std::atof(f) : 1.0;
  s.from = from != nullptr ? std::atoll(from) : 0;
  return s;
}

void SlowRank::after_forward(int64_t step, double compute_seconds) const {
  if (factor > 1.0 && step >= from && compute_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1.0) * compute_seconds));
}

Denoiser::Denoiser(models::DiT& model, parallel::ParallelRuntime& runtime,
                   schedulers::Scheduler& sched, LoopInputs inputs, Device device)
    : model_(model), rt_(runtime), sched_(sched), li_(std::move(inputs)), device_(device) {}

const Tensor& Denoiser::model_input() {
  const int64_t P = li_.prompts, plane = latents_.numel() / P;
  Shape s = latents_.shape();
  s[0] = li_.batch;
  if (!model_in_.defined() || model_in_.shape() != s || model_in_.device() != latents_.device())
    model_in_ = Tensor::empty(s, DType::kF32, latents_.device());
  for (int64_t k = 0; k < li_.batch; ++k)
    kernels::copy_rows(model_in_.data<float>() + k * plane, plane,
                       latents_.data<float>() + (k % P) * plane, plane, 1, plane);
  return model_in_;
}

Tensor Denoiser::framed(const Tensor& whole) const {
  Shape s = latents_.shape();
  s[0] = whole.dim(0);
  s[1] = whole.dim(1);
  return whole.reshape(std::move(s));
}

Tensor Denoiser::call(const LoopInputs& li, const Tensor& x, double t) {
  return framed(rt_.gather(model_.forward(li.at(x, t, row0_, row1_)), false, 0, token_rows_));
}

Tensor Denoiser::noise_prediction(const Tensor& out, int64_t r0, int64_t r1, Tensor* gathered,
                                  double t) {
  Tensor all = rt_.gather(out, li_.cfg_split, r0, r1);
  if (r0 == 0 && r1 == token_rows_) all = framed(all);
  if (gathered != nullptr) *gathered = all;
  XDIT_CHECK(li_.guider != nullptr, "the denoising loop's inputs name no guider");
  return li_.guider->noise(all, li_.prompts, latents_.dim(1), li_.guidance,
                           {li_.cfg, li_.cfg_scale}, t);
}

Tensor Denoiser::run(Tensor latents, int64_t begin, int64_t end) {
  const auto n = static_cast<int64_t>(sched_.timesteps().size());
  begin_ = begin;
  end_ = end < 0 ? n : end;
  XDIT_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= n, "the denoising loop's steps [", begin,
             ", ", end, ") are not within the scheduler's ", n);
  const int64_t p = model_.spec().patch;
  XDIT_CHECK(latents.ndim() == 5 && latents.dim(3) % p == 0 && latents.dim(4) % p == 0,
             "the denoising loop takes latents [P, C, F, h, w] with h and w multiples of ", p,
             ", got ", shape_str(latents.shape()));
  token_rows_ = latents.dim(2) * (latents.dim(3) / p);
  rt_.set_grid_width(latents.dim(4) / p);
  latents_ = std::move(latents);
  if (rt_.pipefusion() != nullptr) return pipefusion_loop();
  return step_loop();
}

Tensor Denoiser::step_loop() {
  // The loop's tensors stay on the pipeline's device: on a GPU the latents,
  // the guidance and the scheduler's step run there (ops), the text
  // conditioning goes up once, and only the runtime's gathers (host groups)
  // and the finite check read them on the host.
  DeviceScope scope(device_);
  if (device_.cuda()) {
    li_.cond = li_.cond.as(DType::kF32, device_);
    latents_ = latents_.to_device(device_);
  }
  for (StepHook* h : hooks_) h->begin_loop(*this);
  const auto& ts = sched_.timesteps();
  const auto n = static_cast<int64_t>(ts.size());
  const SlowRank slow =
      rt_.mesh() != nullptr ? SlowRank::from_env(rt_.mesh()->world().rank()) : SlowRank{};
  for (int64_t i = begin_; i < end_; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepInfo info{i - begin_, end_ - begin_, ts[static_cast<size_t>(i)]};
    for (StepHook* h : hooks_) h->before_step(info);
    // Each step: the split may move between steps (--patch_weights dynamic).
    std::tie(row0_, row1_) = rt_.my_rows(0, token_rows_);
    const Tensor& model_in = model_input();
    rt_.begin_step(i - begin_, end_ - begin_);
    Tensor out;
    {
      trace::Span span("step " + std::to_string(i), "compute");
      const auto f0 = std::chrono::steady_clock::now();
      const double waited0 = slow.on() ? parallel::waited_seconds(*rt_.mesh()) : 0;
      // [MB, out_channels, this rank's token rows · patch, w]
      out = model_.forward(li_.at(model_in, info.timestep, row0_, row1_));
      if (slow.on())  // its compute, not its waits for the other ranks inside the forward
        slow.after_forward(
            i, std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count() -
                   (parallel::waited_seconds(*rt_.mesh()) - waited0));
    }
    Tensor gathered;
    Tensor noise = noise_prediction(out, 0, token_rows_, &gathered, info.timestep);
    for (StepHook* h : hooks_) h->on_noise(info, noise, gathered, *this);
    sched_.step(noise, latents_);
    check_finite_latents(latents_, i + 1, n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (StepHook* h : hooks_) h->after_step(info, s);
  }
  return latents_.to_device(Device{});  // the caller's latents are on the host
}

}  // namespace xdit::pipeline
