#include "models/dit.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::models {

std::pair<int64_t, int64_t> DiTInputs::rows(int64_t token_rows) const {
  const int64_t r0 = row_begin, r1 = row_end == 0 ? token_rows : row_end;
  XDIT_CHECK(r0 >= 0 && r0 < r1 && r1 <= token_rows, "token rows [", r0, ", ", r1,
             ") outside the latents' ", token_rows);
  return {r0, r1};
}

void check_latents(const DiTSpec& spec, const std::string& model, const Shape& latents) {
  XDIT_CHECK(latents.size() == 5 && latents[1] == spec.latent_channels && latents[2] >= 1, model,
             " latents must be [B, ", spec.latent_channels, ", F, H, W], got ", shape_str(latents));
  XDIT_CHECK(spec.video || latents[2] == 1, model,
             " makes images: its latents have one frame (F = 1), got ", latents[2], " frames in ",
             shape_str(latents));
}

void DiTInputs::check_joint_text(int64_t batch, int64_t text_width, int64_t pooled_width,
                                 const char* model) const {
  const Tensor *text = find(kText), *pooled = find(kPooled);
  XDIT_CHECK(
      text != nullptr && text->ndim() == 3 && text->dim(0) == batch && text->dim(2) == text_width,
      model, " text must be [", batch, ", L, ", text_width, "], got ",
      text != nullptr ? shape_str(text->shape()) : std::string("none"));
  XDIT_CHECK(pooled != nullptr && pooled->ndim() == 2 && pooled->dim(0) == batch &&
                 pooled->dim(1) == pooled_width,
             model, " pooled text must be [", batch, ", ", pooled_width, "], got ",
             pooled != nullptr ? shape_str(pooled->shape()) : std::string("none"));
  XDIT_CHECK(static_cast<int64_t>(timesteps.size()) == batch, model, " forward: ", batch,
             " timesteps needed");
}

Tensor DiT::forward_here(const DiTInputs& in, const Tensor* hidden) {
  const int64_t blocks = spec().blocks;
  for (const int64_t b : in.skip_blocks)
    XDIT_CHECK(b >= 0 && b < blocks, "skip layer ", b, " outside the model's ", blocks, " blocks");
  // An image model embeds the one frame: a [B, C, H, W] view of the latents.
  DiTInputs frame;
  Tensor view;
  if (in.latents != nullptr) {
    const Tensor& x = *in.latents;
    check_latents(spec(), name(), x.shape());
    if (!spec().video) {
      frame = in;
      view = x.reshape({x.dim(0), x.dim(1), x.dim(3), x.dim(4)});
      frame.latents = &view;
    }
  }
  Streams s = embed(view.defined() ? frame : in);
  const int64_t B = call_.batch, T = stream_text(), N = call_.tokens(), D = spec().hidden;
  if (!stage_.first) s = previous_stage_streams(hidden, B, T, N, D, name());
  XDIT_CHECK(s.x.numel() == B * (T + N) * D && s.text == T, name(), " streams must be [", B, ", ",
             T + N, ", ", D, "] with ", T, " text tokens, got ", shape_str(s.x.shape()));
  for (BlockHook* h : hooks_) h->begin_call(in, s);
  run_stage(s, in.skip_blocks);
  for (BlockHook* h : hooks_) h->end_call(s);
  return stage_.last ? finalize(s) : s.x;
}

void DiT::run_stage(Streams& s, const std::vector<int64_t>& skip) {
  const auto skipped = [&](int64_t b) {
    return std::find(skip.begin(), skip.end(), b) != skip.end();
  };
  const auto boundary = [&](int64_t b) {
    return std::any_of(hooks_.begin(), hooks_.end(),
                       [b](const BlockHook* h) { return h->at_boundary(b); });
  };
  const int64_t end = stage_.block_end;
  int64_t b = stage_.block_begin;
  while (b < end) {
    if (skipped(b)) {
      ++b;
      continue;
    }
    if (boundary(b)) {
      Tensor modulated;  // made once, for the hooks that ask
      for (BlockHook* h : hooks_)
        if (h->at_boundary(b) && h->wants_modulated_input(b)) {
          if (!modulated.defined()) modulated = block_modulated_input(b, s);
          h->modulated_input(b, modulated, s);
        }
      BlockSkip k;
      for (BlockHook* h : hooks_)
        if (h->at_boundary(b) && (k = h->before_block(b, s)).end >= 0) break;
      if (k.end >= 0) {
        XDIT_CHECK(k.end > b && k.end <= end, "a block hook skips blocks [", b, ", ", k.end,
                   ") outside this stage's [", stage_.block_begin, ", ", end, ")");
        if (k.residual != nullptr) {
          XDIT_CHECK(k.residual->numel() == s.x.numel() && k.residual->dtype() == DType::kF32 &&
                         k.residual->device() == s.x.device(),
                     "a block hook's residual ", shape_str(k.residual->shape()), " on ",
                     k.residual->device().str(), " does not match the streams ",
                     shape_str(s.x.shape()), " (f32 on ", s.x.device().str(), ")");
          kernels::gated_residual_add(s.x.data<float>(), k.residual->data<float>(), 1, 1,
                                      s.x.numel(), nullptr, 0);
        }
        b = k.end;
        continue;
      }
    }
    // One fused run up to the next skipped block or hook boundary.
    int64_t e = b + 1;
    while (e < end && !skipped(e) && !boundary(e)) ++e;
    run_blocks(s, b, e);
    for (BlockHook* h : hooks_)
      if (h->at_boundary(e)) h->after_block(e - 1, s);
    b = e;
  }
}

Tensor DiT::forward(const DiTInputs& in, const Tensor* hidden) {
  if (!device_.cuda()) return forward_here(in, hidden);
  DeviceScope scope(device_);
  // The tensors the layers read go to the device (masks and per-item
  // scalars too: models read those back as host values where they need to).
  const auto f32_here = [&](const Tensor& t) { return t.as(DType::kF32, device_); };
  DiTInputs d = in;
  Tensor latents, h;
  Conditioning cond;
  if (in.latents != nullptr) d.latents = &(latents = f32_here(*in.latents));
  if (in.cond != nullptr) d.cond = &(cond = in.cond->as(DType::kF32, device_));
  if (hidden != nullptr) h = f32_here(*hidden);
  // The result goes where the call's activations came from.
  const Device back = in.latents != nullptr ? in.latents->device()
                      : hidden != nullptr   ? hidden->device()
                                            : Device{};
  return forward_here(d, hidden != nullptr ? &h : nullptr).to_device(back);
}

DiTStage resolve_stage(DiTStage stage, int64_t blocks) {
  if (stage.block_end < 0) stage.block_end = blocks;
  XDIT_CHECK(
      stage.block_begin >= 0 && stage.block_begin <= stage.block_end && stage.block_end <= blocks,
      "stage blocks [", stage.block_begin, ", ", stage.block_end, ") outside the model's ", blocks,
      " blocks");
  return stage;
}

Streams previous_stage_streams(const Tensor* hidden, int64_t batch, int64_t text, int64_t tokens,
                               int64_t width, const char* model) {
  XDIT_CHECK(hidden != nullptr && hidden->numel() == batch * (text + tokens) * width, "a later ",
             model, " pipeline stage needs the previous stage's streams [", batch, ", ",
             text + tokens, ", ", width, "]");
  Streams s;
  s.x = hidden->clone();
  s.text = text;
  return s;
}

}  // namespace xdit::models
