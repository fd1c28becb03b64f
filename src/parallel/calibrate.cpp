#include "parallel/calibrate.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>

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

Calibration calibrate_weights(Mesh& mesh, int64_t rows,
                              const std::function<void(int64_t, int64_t)>& step) {
  const ParallelConfig& pc = mesh.config();
  const int n = pc.row_split_degree();
  XDIT_CHECK(rows >= n, "--patch_weights auto: ", rows, " rows cannot give each of the ", n,
             " ranks a row");
  const auto [b, e] = row_share(0, rows, n, mesh.coord().sp);
  const Mesh::ModelGroups& m = mesh.model_groups();  // the groups the attention waits on
  comm::Communicator* groups[] = {m.sp, m.ulysses, m.ring};
  double waited = 0;
  for (auto* g : groups) waited -= g->stats().seconds;
  mesh.world().barrier();
  const auto t0 = std::chrono::steady_clock::now();
  step(b, e);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto* g : groups) waited += g->stats().seconds;
  // Never below a millisecond: a step that is all communication says nothing.
  const float compute = static_cast<float>(std::max(wall - waited, 1e-3));
  const int world = mesh.world().size();
  std::vector<float> all(static_cast<size_t>(world));
  mesh.world().allgather(&compute, all.data(), 1, comm::Type::kF32);
  Calibration c;
  std::vector<double> sum(static_cast<size_t>(n), 0.0), count(sum.size(), 0.0);
  for (int r = 0; r < world; ++r) {
    const Coord k = Mesh::coord_of(pc, r);
    const auto [rb, re] = row_share(0, rows, n, k.sp);
    sum[static_cast<size_t>(k.sp)] += static_cast<double>(re - rb) / all[static_cast<size_t>(r)];
    count[static_cast<size_t>(k.sp)] += 1;
    c.compute_seconds.push_back(all[static_cast<size_t>(r)]);
  }
  for (int k = 0; k < n; ++k)
    c.weights.push_back(sum[static_cast<size_t>(k)] / count[static_cast<size_t>(k)]);
  const double top = *std::max_element(c.weights.begin(), c.weights.end());
  for (double& w : c.weights)  // (a rank a thousand times slower still gets a sliver)
    w = std::max(w / top, ParallelConfig::kMinPatchWeight);
  return c;
}

}  // namespace xdit::parallel
