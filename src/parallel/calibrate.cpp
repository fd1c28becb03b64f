#include "parallel/calibrate.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/linear.h"
#include "parallel/split.h"

namespace xdit::parallel {

std::string Calibration::describe() const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << "weights ";
  for (size_t i = 0; i < weights.size(); ++i) s << (i ? "," : "") << weights[i];
  s << " (compute ";
  for (size_t i = 0; i < compute_seconds.size(); ++i)
    s << (i ? ", " : "") << compute_seconds[i] << " s";
  s << ")";
  return s.str();
}

double waited_seconds(Mesh& mesh) {
  // The groups the attention waits on (over GPU memory on a GPU), and the
  // host ones of the step's end: the rows' gather and the CFG exchange. On
  // the CPU they are the same communicators, counted once.
  const Mesh::ModelGroups& m = mesh.model_groups();
  comm::Communicator* groups[] = {m.sp,
                                  m.ulysses,
                                  m.ring,
                                  &mesh.sp_group(),
                                  &mesh.ulysses_group(),
                                  &mesh.ring_group(),
                                  &mesh.cfg_group()};
  double waited = 0;
  for (size_t i = 0; i < std::size(groups); ++i)
    if (std::find(groups, groups + i, groups[i]) == groups + i)
      waited += groups[i]->stats().seconds;
  return waited;
}

std::vector<float> gather_compute(comm::Communicator& group, double wall, double waited) {
  // Never below a millisecond: a step that is all communication says nothing.
  const float compute = static_cast<float>(std::max(wall - waited, 1e-3));
  std::vector<float> all(static_cast<size_t>(group.size()));
  group.allgather(&compute, all.data(), 1, comm::Type::kF32);
  return all;
}

Speeds weights_from_compute(const ParallelConfig& pc, const std::vector<int64_t>& rows,
                            const std::vector<float>& compute) {
  const int n = pc.row_split_degree();
  std::vector<double> speed(static_cast<size_t>(n), 0.0), seconds(speed.size(), 0.0),
      count(speed.size(), 0.0);
  for (int r = 0; r < static_cast<int>(compute.size()); ++r) {
    const auto k = static_cast<size_t>(Mesh::coord_of(pc, r).sp);
    speed[k] += static_cast<double>(rows[k]) / compute[static_cast<size_t>(r)];
    seconds[k] += compute[static_cast<size_t>(r)];
    count[k] += 1;
  }
  Speeds s;
  for (size_t k = 0; k < speed.size(); ++k) {
    s.weights.push_back(speed[k] / count[k]);
    seconds[k] /= count[k];
  }
  const double top = *std::max_element(s.weights.begin(), s.weights.end());
  for (double& w : s.weights)  // (a rank a thousand times slower still gets a sliver)
    w = std::max(w / top, ParallelConfig::kMinPatchWeight);
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  s.imbalance = (*hi - *lo) / *hi;
  return s;
}

std::vector<int> blocks_from_speeds(int64_t num_blocks, const std::vector<double>& speeds) {
  const auto n = static_cast<int64_t>(speeds.size());
  XDIT_CHECK(n >= 1 && num_blocks >= n, "--attn_layer_num_for_pp auto: ", num_blocks,
             " blocks cannot give each of the ", n, " stages one");
  double sum = 0;
  for (const double v : speeds) sum += std::max(v, 0.0);
  // Each stage's ideal share, rounded down but at least one; then blocks go
  // to (or come from) the stages furthest below (above) their share.
  std::vector<double> share;
  std::vector<int> blocks;
  int64_t total = 0;
  for (const double v : speeds) {
    share.push_back(sum > 0 ? static_cast<double>(num_blocks) * std::max(v, 0.0) / sum
                            : static_cast<double>(num_blocks) / static_cast<double>(n));
    blocks.push_back(std::max(1, static_cast<int>(share.back())));
    total += blocks.back();
  }
  const auto gap = [&](size_t i) { return share[i] - blocks[i]; };
  for (; total < num_blocks; ++total) {
    size_t best = 0;
    for (size_t i = 1; i < blocks.size(); ++i)
      if (gap(i) > gap(best)) best = i;
    ++blocks[best];
  }
  for (; total > num_blocks; --total) {
    size_t best = blocks.size();
    for (size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i] > 1 && (best == blocks.size() || gap(i) < gap(best))) best = i;
    --blocks[best];
  }
  return blocks;
}

std::string StageCalibration::describe() const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << "blocks ";
  for (size_t i = 0; i < blocks.size(); ++i) s << (i ? "," : "") << blocks[i];
  s << " (GEMM ";
  for (size_t i = 0; i < seconds.size(); ++i) s << (i ? ", " : "") << seconds[i] * 1e3 << " ms";
  s << ")";
  return s.str();
}

StageCalibration calibrate_stage_blocks(Mesh& mesh, int64_t num_blocks, int64_t hidden, DType dtype,
                                        double slow_factor) {
  constexpr int64_t kTokens = 1024;
  TorchGenerator g(0);
  const kernels::Linear ff(g.randn({4 * hidden, hidden}), Tensor(),
                           kernels::resolve_compute_type(dtype));
  const Tensor x = g.randn({kTokens, hidden}).to_device(current_device());
  // Seconds per product over `reps` of them.
  const auto time = [&](int reps) {
    wait_for_device(current_device());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ff.forward(x);
    wait_for_device(current_device());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  // The first warms up (packing, caches) and sizes the rounds: at least 5 ms
  // each, so that a small model's product is not timer noise.
  const double first = time(1);
  const int reps = static_cast<int>(std::clamp(5e-3 / std::max(first, 1e-7), 1.0, 1000.0));
  double best = 1e30;
  for (int run = 0; run < 3; ++run) best = std::min(best, time(reps));
  // Over the world, so that every rank splits alike: a stage is as fast as
  // the slowest rank at its PipeFusion coordinate (its SP ranks wait for
  // each other; replicas keep one split).
  const auto mine = static_cast<float>(best * std::max(slow_factor, 1.0));
  comm::Communicator& world = mesh.world();
  std::vector<float> all(static_cast<size_t>(world.size()));
  world.allgather(&mine, all.data(), 1, comm::Type::kF32);
  const ParallelConfig& pc = mesh.config();
  StageCalibration c;
  c.seconds.assign(static_cast<size_t>(pc.pipefusion_parallel_degree), 0.0);
  for (int r = 0; r < world.size(); ++r) {
    double& stage = c.seconds[static_cast<size_t>(Mesh::coord_of(pc, r).pp)];
    stage = std::max(stage, static_cast<double>(all[static_cast<size_t>(r)]));
  }
  std::vector<double> speeds;
  for (const double s : c.seconds) speeds.push_back(1.0 / std::max(s, 1e-9));
  c.blocks = blocks_from_speeds(num_blocks, speeds);
  return c;
}

Calibration calibrate_weights(Mesh& mesh, int64_t rows,
                              const std::function<void(int64_t, int64_t)>& step) {
  const ParallelConfig& pc = mesh.config();
  const int n = pc.row_split_degree();
  XDIT_CHECK(rows >= n, "--patch_weights auto: ", rows, " rows cannot give each of the ", n,
             " ranks a row");
  const auto [b, e] = row_share(0, rows, n, mesh.coord().sp);
  const double waited0 = waited_seconds(mesh);
  wait_for_device(mesh.device());  // (a GPU's clock: from idle to idle)
  mesh.world().barrier();
  const auto t0 = std::chrono::steady_clock::now();
  step(b, e);
  wait_for_device(mesh.device());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Calibration c;
  const std::vector<float> all = gather_compute(mesh.world(), wall, waited_seconds(mesh) - waited0);
  c.compute_seconds.assign(all.begin(), all.end());
  c.weights = weights_from_compute(pc, row_counts(rows, n), all).weights;
  return c;
}

}  // namespace xdit::parallel
