#include "app/bench_util.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace xdit::app::bench {

Device g_device;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

namespace {

void device_synchronize() {
#ifdef XDIT_HAVE_CUDA
  if (g_device.cuda()) cuda::synchronize();
#endif
}

// The name the rows report: oneDNN's ISA on the CPU, the GPU's name on CUDA.
std::string device_name() {
#ifdef XDIT_HAVE_CUDA
  if (g_device.cuda()) return cuda::device_info(g_device.index).name;
#endif
  return kernels::cpu_isa_name();
}

// The best rate of one GEMM shape (best of `runs`) through the same Linear
// the models use.
double gemm_rate(int64_t M, int64_t K, int64_t N, DType dtype, int runs) {
  const bool gpu = g_device.cuda();
  io::RandomWeights rw(7);
  DeviceScope scope(g_device);
  kernels::Linear lin(
      rw.get("w", {N, K}), Tensor(),
      gpu ? (dtype == DType::kF32 ? kernels::ComputeType::kF32 : kernels::ComputeType::kBF16)
          : kernels::resolve_compute_type(dtype));
  Tensor x = rw.get("x", {M, K}).to_device(g_device),
         y = Tensor::empty({M, N}, DType::kF32, g_device);
  lin.forward(x.data<float>(), M, y.data<float>());
  device_synchronize();
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t = Clock::now();
    lin.forward(x.data<float>(), M, y.data<float>());
    device_synchronize();
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * M * N * K / best;
}

}  // namespace

// The machine's GEMM peak. On a GPU: 8192³ (about 1 ms at Hopper's rate, so
// launch costs vanish), best of 10, cuBLASLt. On a CPU: the better of two
// shapes, best of 3 each, through the Linear the models use (oneDNN, or on
// AMX xdit's tile GEMM): 2048 × 4096 × 4096, and 2048 × 1152 × 4608 (a DiT's
// feed-forward shape), which oneDNN ran 1.2–1.3× faster on an AMX Xeon
// (K = 4096 costs it more): a peak from the slower shape alone made every
// ratio look that much better than it was.
double gemm_peak(DType dtype) {
  if (g_device.cuda()) return gemm_rate(8192, 8192, 8192, dtype, 10);
  return std::max(gemm_rate(2048, 4096, 4096, dtype, 3), gemm_rate(2048, 1152, 4608, dtype, 3));
}

double step_flops(const models::PixArtConfig& c, int64_t B, int64_t h, int64_t w, int64_t L) {
  const double d = static_cast<double>(c.hidden()),
               N = static_cast<double>((h / c.patch_size) * (w / c.patch_size));
  const double p2 = static_cast<double>(c.patch_size * c.patch_size);
  double f = 2.0 * N * d * c.in_channels * p2;                       // patch embedding
  f += 2.0 * L * d * (static_cast<double>(c.caption_channels) + d);  // caption projection
  double block = 2.0 * N * d * 3 * d + 2.0 * N * d * d;              // qkv, out
  block += 4.0 * N * N * d;                                          // self-attention QKᵀ and PV
  block += 2.0 * N * d * d + 2.0 * L * d * 2 * d + 2.0 * N * d * d;  // cross q, kv, out
  block += 4.0 * N * L * d;                                          // cross-attention
  block += 2.0 * N * d * 4 * d * 2;                                  // feed-forward
  f += c.num_layers * block + 2.0 * N * d * p2 * c.out_channels;
  return f * B;
}

nlohmann::json timed_row(const std::string& name, int64_t res, const std::string& dt_name,
                         double flops, DType dtype, double peak_before, int warmup, int repeat,
                         const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  double best = 1e30;
  for (int i = 0; i < std::max(1, repeat); ++i) {
    const auto t = Clock::now();
    run();
    best = std::min(best, seconds_since(t));
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // before the second peak measurement's buffers
  const double peak_after = gemm_peak(dtype);
  const double peak = std::max(peak_before, peak_after);
  return {{"name", name},
          {"resolution", res},
          {"dtype", dt_name},
          {"seconds", best},
          {"flops", flops},
          {"flops_per_s", flops / best},
          {"peak_flops_per_s", peak},
          {"peak_before", peak_before},
          {"peak_after", peak_after},
          {"peak_unstable", std::fabs(peak_before - peak_after) > 0.15 * peak},
          {"ratio", flops / best / peak},
          {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
          {"threads", omp_get_max_threads()},
          {"isa", device_name()},
          {"device", g_device.str()}};
}

StepInputs::StepInputs(const models::PixArtConfig& cfg, int64_t B, int64_t res) {
  TorchGenerator g(0);
  latents = g.randn({B, cfg.in_channels, 1, res / 8, res / 8});  // one frame
  text = g.randn({B, kTextTokens, cfg.caption_channels});
  mask = Tensor::empty({B, kTextTokens});
  resolution = Tensor::empty({B, 2});
  aspect = Tensor::empty({B, 1});
  for (int64_t i = 0; i < mask.numel(); ++i)
    mask.data<float>()[i] = (i % kTextTokens) < 100 ? 1.0f : 0.0f;
  for (int64_t b = 0; b < B; ++b) {
    resolution.data<float>()[2 * b] = resolution.data<float>()[2 * b + 1] = static_cast<float>(res);
    aspect.data<float>()[b] = 1.0f;
  }
  in.latents = &latents;
  in.timesteps.assign(static_cast<size_t>(B), 500.0f);
  cond.set(models::kText, text);
  cond.set(models::kTextMask, mask);
  cond.set(models::kResolution, resolution);
  cond.set(models::kAspectRatio, aspect);
  in.cond = &cond;
}

nlohmann::json run_child(const std::string& what, int64_t res, const std::string& dt,
                         const BenchOptions& o, const std::string& layout, int threads) {
  std::ostringstream cmd;
  // A slowed rank shares its core with a busy thread: bind each rank to one.
  const bool bind = layout.find("-slow") != std::string::npos;
  if (!layout.empty())
    cmd << "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe "
        << (bind ? "--bind-to core " : "--bind-to none ");
  cmd << "'/proc/" << ::getpid() << "/exe' bench " << what << " --row " << what << ":" << res << ":"
      << dt << (layout.empty() ? "" : ":" + layout) << " --warmup " << o.warmup << " --repeat "
      << o.repeat << " --device " << o.device << " --weights " << o.weights.at(0);
  if (threads > 0)
    cmd << " --threads " << threads;
  else if (o.threads > 0)
    cmd << " --threads " << o.threads;
  FILE* f = ::popen(cmd.str().c_str(), "r");
  XDIT_CHECK(f != nullptr, "bench: cannot start a child process");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int rc = ::pclose(f);
  XDIT_CHECK(rc == 0, "bench ", what, " ", res, " ", dt, " failed (exit status ", rc, ")");
  return nlohmann::json::parse(out);
}

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, ++i;
  std::ostringstream s;
  s << std::fixed << std::setprecision(v < 10 ? 2 : 1) << v << " " << prefixes[i] << unit;
  return s.str();
}

}  // namespace xdit::app::bench
