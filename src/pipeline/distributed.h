// Running a request over the device mesh: data parallelism splits the prompts
// into contiguous shares, one per DP group (each group draws the whole
// batch's noise from the seed and takes its share, so the result equals the
// serial batch); inside a group the pipeline runs with CFG / sequence
// parallelism (Pipeline::set_mesh). Results are assembled in prompt
// order on every rank. A server's round (generate_groups) instead gives each
// DP group a request of its own, assembled the same way.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "parallel/config.h"
#include "pipeline/pipeline.h"

namespace xdit::pipeline {

// The prompts [begin, end) of data-parallel group g of dp, for P prompts.
std::pair<int64_t, int64_t> dp_share(int64_t prompts, int dp, int g);

// Every DP group's bytes, in group order, on every rank of `dp_group` (each
// rank passes its group's; the sizes may differ).
std::vector<std::vector<uint8_t>> gather_groups(comm::Communicator& dp_group,
                                                const std::vector<uint8_t>& mine);

// Every DP group's result (its images, their size and its timings), in group
// order, on every rank of `dp_group` (each rank passes its group's; a group
// that ran nothing passes an empty one).
std::vector<ImageResult> gather_results(comm::Communicator& dp_group, const ImageResult& mine);

// A plan → final latents for the whole batch (a plan with prompts: every
// rank encodes the whole batch, then takes its share of the embeddings).
Tensor generate_latents_distributed(Pipeline& pipe, parallel::Mesh& mesh, const Plan& plan,
                                    const std::function<void(const StepEvent&)>& on_step = {});
// Plans `r` on `pipe` (whose mesh is `mesh`), then runs the plan.
inline Tensor generate_latents_distributed(
    Pipeline& pipe, parallel::Mesh& mesh, const LatentRequest& r,
    const std::function<void(const StepEvent&)>& on_step = {}) {
  return generate_latents_distributed(pipe, mesh, pipe.plan(r), on_step);
}

// A plan for images → the whole batch's images (each group encodes its
// share of the prompts).
ImageResult generate_distributed(Pipeline& pipe, parallel::Mesh& mesh, const Plan& plan,
                                 const std::function<void(const StepEvent&)>& on_step = {});
inline ImageResult generate_distributed(Pipeline& pipe, parallel::Mesh& mesh, const ImageRequest& r,
                                        const std::function<void(const StepEvent&)>& on_step = {}) {
  return generate_distributed(pipe, mesh, pipe.plan(r), on_step);
}

// Data parallelism over requests instead of prompts (a server's round): DP
// group g runs plans[g] whole (nothing when there are fewer plans than
// groups); every rank returns one result per plan, in plan order.
std::vector<ImageResult> generate_groups(Pipeline& pipe, parallel::Mesh& mesh,
                                         const std::vector<Plan>& plans,
                                         const std::function<void(const StepEvent&)>& on_step = {});

}  // namespace xdit::pipeline
