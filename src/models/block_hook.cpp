#include "models/block_hook.h"

#include "comm/communicator.h"

namespace xdit::models {

bool all_ranks_agree(comm::Communicator& group, bool mine) {
  if (group.size() == 1) return mine;
  float yes = mine ? 1.0f : 0.0f;  // a count of ranks: exact in f32
  group.allreduce_sum(&yes, 1);
  return yes == static_cast<float>(group.size());
}

}  // namespace xdit::models
