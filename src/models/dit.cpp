#include "models/dit.h"

#include "core/error.h"

namespace xdit::models {

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
