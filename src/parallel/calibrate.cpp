#include "parallel/calibrate.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
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
  comm::Communicator* groups[] = {m.sp, m.ulysses, m.ring, &mesh.sp_group(),
                                  &mesh.ulysses_group(), &mesh.ring_group(), &mesh.cfg_group()};
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
