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

}  // namespace xdit::models
