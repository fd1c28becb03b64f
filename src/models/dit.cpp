#include "models/dit.h"

#include "core/error.h"

namespace xdit::models {

std::pair<int64_t, int64_t> DiTInputs::rows(int64_t grid_rows) const {
  const int64_t r0 = patch_row_begin, r1 = patch_row_end == 0 ? grid_rows : patch_row_end;
  XDIT_CHECK(r0 >= 0 && r0 < r1 && r1 <= grid_rows, "patch rows [", r0, ", ", r1, ") outside the ",
             grid_rows, "-row grid");
  return {r0, r1};
}

void DiTInputs::check_joint_text(int64_t batch, int64_t text_width, int64_t pooled_width,
                                 const char* model) const {
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
  Streams s = embed(in, hidden);
  run_blocks(s, stage().block_begin, stage().block_end);
  return stage().last ? finalize(s) : s.x;
}

Tensor DiT::forward(const DiTInputs& in, const Tensor* hidden) {
  if (!device_.cuda()) return forward_here(in, hidden);
  DeviceScope scope(device_);
  // The tensors the layers read go to the device; the mask and the
  // micro-conditions are read on the host (models copy what they need).
  const auto f32_here = [&](const Tensor& t) { return t.as(DType::kF32, device_); };
  DiTInputs d = in;
  Tensor latents, text, pooled, h;
  if (in.latents != nullptr) d.latents = &(latents = f32_here(*in.latents));
  if (in.text != nullptr) d.text = &(text = f32_here(*in.text));
  if (in.pooled != nullptr) d.pooled = &(pooled = f32_here(*in.pooled));
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
