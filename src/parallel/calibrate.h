// --patch_weights auto: uneven bands for uneven devices from one measured
// step. Every rank runs its even share of the rows once; the time it spent
// computing (the step's wall time less the time inside the mesh's
// sequence-parallel communicators, where a fast rank waits for a slow one)
// gives its speed in rows per second. Each sequence-parallel position's
// weight is the mean speed of the ranks at that position (over CFG and data
// parallel), scaled so that the fastest is 1; every rank gets the same weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "parallel/config.h"

namespace xdit::parallel {

// --attn_layer_num_for_pp auto: the blocks of `num_blocks` per PipeFusion
// stage in proportion to the stages' speeds (at least one each).
std::vector<int> blocks_from_speeds(int64_t num_blocks, const std::vector<double>& speeds);

// Every stage's speed, measured on each rank: the best of three timings
// (rounds of at least 5 ms) of the blocks' largest product (1024 tokens x
// `hidden` by 4·hidden, the feed-forward's first, in `dtype`, on the thread's
// device) — blocks are alike, so a stage's time goes with this product's —
// multiplied by `slow_factor` (the XDIT_SLOW_* test knob), gathered over the
// world; a stage is as fast as its slowest rank. Collective over the world.
struct StageCalibration {
  std::vector<int> blocks;       // one per stage
  std::vector<double> seconds;   // every stage's measured product
  std::string describe() const;  // "blocks 4,1 (GEMM 0.121 ms, 0.364 ms)"
};
StageCalibration calibrate_stage_blocks(Mesh& mesh, int64_t num_blocks, int64_t hidden, DType dtype,
                                        double slow_factor);

struct Calibration {
  std::vector<double> weights;          // one per sequence-parallel position
  std::vector<double> compute_seconds;  // every rank's, in world rank order
  std::string describe() const;         // "weights 1.00,0.48 (compute 0.81 s, 1.69 s)"
};

// The weights from measured compute: `compute` holds every rank's seconds
// (world rank order) for the rows `rows[k]` of each SP position k. A
// position's speed is rows / seconds, the mean over the ranks at that
// position; the weights are the speeds over the fastest (at least
// kMinPatchWeight). `imbalance`: (slowest − fastest) / slowest of the
// positions' mean compute seconds (0: balanced).
struct Speeds {
  std::vector<double> weights;
  double imbalance = 0;
};
Speeds weights_from_compute(const ParallelConfig& pc, const std::vector<int64_t>& rows,
                            const std::vector<float>& compute);

// The seconds this rank has spent inside the mesh's row-splitting and CFG
// communicators, host and device ones (where a fast rank waits for a slow
// one), so far. Device communicators start their clocks once the rank's own
// queued GPU work is done, so this is waiting, not compute.
double waited_seconds(Mesh& mesh);
// Every rank's compute seconds (`wall` less `waited`, at least 1 ms) over
// `group` (the world, or a data-parallel replica: its ranks are the world's
// first ones shifted, with the same SP positions), in rank order. Collective.
std::vector<float> gather_compute(comm::Communicator& group, double wall, double waited);

// `step(begin, end)` runs this rank's forward over rows [begin, end) of
// `rows` split evenly over the SP group.
Calibration calibrate_weights(Mesh& mesh, int64_t rows,
                              const std::function<void(int64_t, int64_t)>& step);

}  // namespace xdit::parallel
