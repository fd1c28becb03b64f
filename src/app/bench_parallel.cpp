// xdit bench parallel: one step of the full-size PixArt-α transformer, and
// the VAE decoder, on two ranks per layout (Ulysses, Ring, CFG, DistriFusion
// patches, PipeFusion, a slowed rank with even or calibrated bands) against
// one rank with the same two cores.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "app/bench_util.h"
#include "app/startup.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/weights.h"
#include "models/pixart.h"
#include "models/vae.h"
#include "nn/attention.h"
#include "parallel/calibrate.h"
#include "parallel/config.h"
#include "parallel/runtime.h"
#include "parallel/split.h"
#include "parallel/vae_bands.h"
#include "pipeline/pipeline.h"

namespace xdit::app::bench {

// One step of the full-size transformer over two ranks with one layout
// ("ulysses", "ring", "cfg", "displaced" or "naive"), as the pipeline runs
// it: CFG halves or patch rows per rank, then the gathers. A "-slow" suffix
// slows rank 1 by a busy thread on its core (the child runs with
// --bind-to core): a co-tenant taking half of one device; "-slow-auto" then
// sets the bands from one calibration step (--patch_weights auto). Rank 0
// returns the row.
nlohmann::json run_parallel_row(int64_t res, const std::string& dt_name, const std::string& name,
                                int warmup, int repeat) {
  comm::Communicator& w = world();
  XDIT_CHECK(w.size() == 2, "bench parallel rows run on 2 ranks (got ", w.size(), ")");
  const bool auto_weights = name.size() > 10 && name.substr(name.size() - 10) == "-slow-auto";
  const bool slow = auto_weights || (name.size() > 5 && name.substr(name.size() - 5) == "-slow");
  const std::string layout = name.substr(0, name.find('-'));
  parallel::ParallelConfig pc;
  if (layout == "ulysses")
    pc.ulysses_degree = 2;
  else if (layout == "ring")
    pc.ring_degree = 2;
  else if (layout == "cfg")
    pc.use_cfg_parallel = true;
  else if (layout == "displaced" || layout == "naive") {
    pc.patch_parallel_degree = 2;
    pc.patch_mode = layout;
  } else if (layout == "tensor") {
    pc.tensor_parallel_degree = 2;
  } else {
    XDIT_FAIL("unknown layout '", layout, "': ulysses, ring, cfg, displaced, naive or tensor");
  }
  XDIT_CHECK(!slow || pc.row_split_degree() > 1, "a slowed rank needs a layout that splits rows");
  parallel::Mesh mesh(pc, w);
  // The co-tenant: a busy thread on rank 1's core for the whole row.
  std::atomic<bool> stop{false};
  std::thread spinner;
  if (slow && w.rank() == 1)
    spinner = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::PixArtConfig cfg = models::PixArtConfig::alpha_xl_1024();
  io::RandomWeights weights(1);
  // The pipeline's own parallel runtime: the method the layout selects, the
  // stage's tensor-parallel share, the row split and the gathers.
  const int64_t B = pc.use_cfg_parallel ? 1 : 2, h = res / 8, w8 = res / 8, p = cfg.patch_size;
  parallel::ParallelRuntime rt(&mesh, p);
  models::PixArtTransformer model(cfg, weights, dtype, rt.stage(cfg.num_layers));
  rt.attach(model);
  rt.set_grid_width(w8 / p);
  int64_t step_no = 0;
  StepInputs step_in(cfg, B, res);
  models::DiTInputs& in = step_in.in;
  // This rank's token rows of the split (even, or by the mesh's weights).
  std::vector<int64_t> counts;
  const auto set_rows = [&] {
    counts = mesh.config().row_split(h / p);
    std::tie(in.row_begin, in.row_end) = rt.my_rows(0, h / p);
  };
  set_rows();
  std::string calibration;
  if (auto_weights) {
    const parallel::Calibration c = parallel::calibrate_weights(mesh, h / p, [&](int64_t, int64_t) {
      if (rt.backend() != nullptr) rt.backend()->begin_step(0, 1, true);
      model.forward(in);
    });
    mesh.set_patch_weights(c.weights);
    calibration = c.describe();
    set_rows();
  }
  // Patch parallelism: the warm-up step exchanges fresh K/V; the timed steps
  // run DistriFusion's stale-K/V steps (or naive bands).
  auto step = [&] {
    if (rt.backend() != nullptr) rt.backend()->begin_step(step_no, int64_t{1} << 40, step_no == 0);
    ++step_no;
    rt.gather(model.forward(in), pc.use_cfg_parallel, 0, h / p);
  };
  comm::Communicator* groups[] = {&mesh.sp_group(), &mesh.ulysses_group(), &mesh.ring_group(),
                                  &mesh.cfg_group(), &mesh.tp_group()};
  for (int i = 0; i < warmup; ++i) step();
  double best = 1e30, comm_s = 0;
  uint64_t comm_bytes = 0;
  for (int i = 0; i < std::max(1, repeat); ++i) {
    for (auto* c : groups) c->stats() = {};
    w.barrier();
    const auto t = Clock::now();
    step();
    const double s = seconds_since(t);
    if (s < best) {
      best = s;
      comm_s = 0;
      comm_bytes = 0;
      for (auto* c : groups) comm_s += c->stats().seconds, comm_bytes += c->stats().bytes_sent;
    }
  }
  stop = true;
  if (spinner.joinable()) spinner.join();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double flops = step_flops(cfg, 2, h, w8, kTextTokens);
  nlohmann::json r = {{"name", "pixart_alpha_step_cfg_parallel"},
                      {"layout", name},
                      {"ranks", 2},
                      {"resolution", res},
                      {"dtype", dt_name},
                      {"seconds", best},
                      {"comm_seconds", comm_s},
                      {"comm_bytes", comm_bytes},
                      {"flops", flops},
                      {"flops_per_s", flops / best},
                      {"peak_flops_per_s", peak},
                      {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
                      {"patch_rows", counts},
                      // the weights this rank loaded, as bf16 (random weights come as f32)
                      {"weight_bytes_bf16", weights.loaded().total / 2},
                      {"threads", omp_get_max_threads()}};
  if (!calibration.empty()) r["calibration"] = calibration;
  return r;
}

// PipeFusion on two ranks (two stages of 14 blocks, M patches): the full
// pipeline loop for one prompt with CFG, one warm-up step then one patch step;
// the patch step is timed. Rank 0 returns the row with both ranks' memory.
nlohmann::json run_pipefusion_row(int64_t res, const std::string& dt_name, int64_t m) {
  comm::Communicator& w = world();
  XDIT_CHECK(w.size() == 2, "bench PipeFusion rows run on 2 ranks (got ", w.size(), ")");
  parallel::ParallelConfig pc;
  pc.pipefusion_parallel_degree = 2;
  pc.num_pipeline_patch = static_cast<int>(m);
  pc.warmup_steps = 1;
  parallel::Mesh mesh(pc, w);
  const models::PixArtConfig cfg = models::PixArtConfig::alpha_xl_1024();
  pipeline::Pipeline pipe(pipeline::ModelFamily::pixart(cfg), schedulers::SchedulerConfig{},
                          std::make_unique<io::RandomWeights>(1), parse_dtype(dt_name));
  pipe.set_mesh(&mesh);
  TorchGenerator g(0);
  pipeline::LatentRequest r;
  r.cond.set(models::kText, g.randn({1, kTextTokens, cfg.caption_channels}));
  r.uncond.set(models::kText, g.randn({1, kTextTokens, cfg.caption_channels}));
  r.height = r.width = res;
  r.num_inference_steps = 2;
  r.guidance_scale = 4.5;
  comm::Communicator& pp = mesh.pp_group();
  double step_s = 0, comm_s = 0;
  uint64_t bytes = 0;
  pipe.generate_latents(r, [&](const pipeline::StepEvent& e) {
    if (e.step == 1) {  // the warm-up: start counting the patch step from here
      pp.stats() = {};
      return;
    }
    step_s = e.seconds;
    comm_s = pp.stats().seconds;
    bytes = pp.stats().bytes_sent;
  });
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  int64_t rss[2] = {static_cast<int64_t>(ru.ru_maxrss) * 1024, 0}, all[4];
  w.allgather(rss, all, sizeof rss, comm::Type::kByte);
  return {{"name", "pixart_alpha_step_cfg_pipefusion"},
          {"layout", "pipefusion"},
          {"ranks", 2},
          {"patches", m},
          {"resolution", res},
          {"dtype", dt_name},
          {"seconds", step_s},
          {"comm_seconds", comm_s},
          {"comm_bytes", bytes},
          {"peak_rss_bytes", all[0]},
          {"peak_rss_bytes_rank1", all[2]},
          {"threads", omp_get_max_threads()}};
}

// The patch-parallel VAE decoder on two ranks (a band of latent rows each):
// the decode to a res px image is timed; rank 0 returns the row with both
// ranks' memory.
nlohmann::json run_parallel_vae_row(int64_t res, const std::string& dt_name, int warmup,
                                    int repeat) {
  comm::Communicator& w = world();
  XDIT_CHECK(w.size() == 2, "bench parallel VAE rows run on 2 ranks (got ", w.size(), ")");
  models::VaeConfig cfg;  // the SD / PixArt VAE
  io::RandomWeights weights(3);
  models::VaeDecoder vae(cfg, weights, parse_dtype(dt_name));
  const int64_t h = res / cfg.scale_factor();
  TorchGenerator g(1);
  Tensor z = g.randn({1, cfg.latent_channels, h, h});
  parallel::VaeBands bands(w, parallel::row_counts(h, 2));
  const int64_t before = peak_rss_bytes();
  for (int i = 0; i < warmup; ++i) vae.decode(z, &bands);
  double best = 1e30, comm_s = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < std::max(1, repeat); ++i) {
    w.barrier();
    w.stats() = {};
    const auto t = Clock::now();
    vae.decode(z, &bands);
    const double s = seconds_since(t);
    if (s < best) best = s, comm_s = w.stats().seconds, bytes = w.stats().bytes_sent;
  }
  int64_t rss[2] = {peak_rss_bytes(), before}, all[4];
  w.allgather(rss, all, sizeof rss, comm::Type::kByte);
  return {{"name", "vae_decoder_parallel"},
          {"rss_before_decode_bytes", all[1]},
          {"rss_before_decode_bytes_rank1", all[3]},
          {"layout", "vae_bands"},
          {"ranks", 2},
          {"resolution", res},
          {"dtype", dt_name},
          {"seconds", best},
          {"comm_seconds", comm_s},
          {"comm_bytes", bytes},
          {"flops", cfg.decoder_flops(1, h, h)},
          {"peak_rss_bytes", all[0]},
          {"peak_rss_bytes_rank1", all[2]},
          {"threads", omp_get_max_threads()}};
}

// 1 rank x 2 threads against 2 ranks x 1 thread for Ulysses, Ring and CFG parallel.
int run_parallel_bench(const BenchOptions& o) {
  XDIT_CHECK(world().size() == 1,
             "run `xdit bench parallel` itself without mpirun: it starts mpirun for its rows");
  const int64_t res = *std::max_element(o.resolutions.begin(), o.resolutions.end());
  const std::string dt = o.dtypes.front();
  nlohmann::json base = run_child("transformer", res, dt, o, "", 2);
  const double t1 = base["seconds"].get<double>();
  if (o.json)
    std::cout << base.dump() << std::endl;
  else
    std::cout << "PixArt-alpha XL/2 step with CFG at " << res << " px, " << dt
              << ": 1 rank x 2 threads against 2 ranks x 1 thread\n"
              << std::left << std::setw(22) << "layout" << std::right << std::setw(10) << "s/step"
              << std::setw(12) << "comm s" << std::setw(14) << "sent/rank" << std::setw(10)
              << "speed-up" << std::setw(12) << "efficiency" << std::setw(11) << "peak RSS"
              << "\n"
              << std::left << std::setw(22) << "serial (1x2 threads)" << std::right << std::setw(10)
              << std::fixed << std::setprecision(2) << t1 << std::setw(12) << "-" << std::setw(14)
              << "-" << std::setw(10) << "1.00" << std::setw(12) << "1.00" << std::setw(11)
              << human(static_cast<double>(base["peak_rss_bytes"].get<int64_t>()), "B")
              << std::endl;
  for (const char* layout : {"ulysses", "ring", "cfg", "displaced", "naive", "pipefusion-2",
                             "pipefusion-4", "pipefusion-8", "displaced-slow",
                             "displaced-slow-auto", "ulysses-slow", "ulysses-slow-auto"}) {
    nlohmann::json r = run_child("parallel", res, dt, o, layout, 1);
    const double t = r["seconds"].get<double>();
    r["speedup"] = t1 / t;
    r["efficiency"] = t1 / t;  // the same two cores either way
    if (o.json) {
      std::cout << r.dump() << std::endl;
      continue;
    }
    std::cout << std::left << std::setw(22) << (std::string(layout) + " (2x1)") << std::right
              << std::setw(10) << std::fixed << std::setprecision(2) << t << std::setw(12)
              << r["comm_seconds"].get<double>() << std::setw(14)
              << human(static_cast<double>(r["comm_bytes"].get<uint64_t>()), "B") << std::setw(10)
              << t1 / t << std::setw(12) << t1 / t << std::setw(11)
              << human(static_cast<double>(r["peak_rss_bytes"].get<int64_t>()), "B");
    if (r.contains("peak_rss_bytes_rank1"))  // PipeFusion: each rank holds its stage
      std::cout << " / "
                << human(static_cast<double>(r["peak_rss_bytes_rank1"].get<int64_t>()), "B");
    if (r.contains("patch_rows") && std::string(layout).find("-slow") != std::string::npos)
      std::cout << "  patch rows " << r["patch_rows"].dump()
                << (r.contains("calibration") ? ", " + r["calibration"].get<std::string>() : "");
    std::cout << std::endl;
  }
  // The patch-parallel VAE decoder (--use_parallel_vae) on the same two cores.
  nlohmann::json vb = run_child("vae", res, dt, o, "", 2);
  nlohmann::json vp = run_child("parallel", res, dt, o, "vae", 1);
  const double v1 = vb["seconds"].get<double>(), v2 = vp["seconds"].get<double>();
  vp["speedup"] = v1 / v2;
  if (o.json) {
    std::cout << vb.dump() << std::endl << vp.dump() << std::endl;
    return 0;
  }
  // Peak RSS, and in brackets what decoding added (activations) over the
  // weights and runtime held before it.
  const auto mem = [](const nlohmann::json& r, const std::string& suffix) {
    const auto peak = static_cast<double>(r["peak_rss_bytes" + suffix].get<int64_t>());
    const auto before = static_cast<double>(r["rss_before_decode_bytes" + suffix].get<int64_t>());
    return human(peak, "B") + " (+" + human(peak - before, "B") + ")";
  };
  std::cout << "\nVAE decoder to " << res << " px, " << dt
            << ": 1 rank x 2 threads against 2 ranks x 1 thread (row bands); peak RSS "
               "(+ decoding's own)\n"
            << std::left << std::setw(22) << "serial (1x2 threads)" << std::right << std::setw(10)
            << std::fixed << std::setprecision(2) << v1 << std::setw(12) << "-" << std::setw(14)
            << "-" << std::setw(10) << "1.00" << std::setw(12) << "1.00"
            << "  " << mem(vb, "") << "\n"
            << std::left << std::setw(22) << "vae bands (2x1)" << std::right << std::setw(10) << v2
            << std::setw(12) << vp["comm_seconds"].get<double>() << std::setw(14)
            << human(static_cast<double>(vp["comm_bytes"].get<uint64_t>()), "B") << std::setw(10)
            << v1 / v2 << std::setw(12) << v1 / v2 << "  " << mem(vp, "") << " / "
            << mem(vp, "_rank1") << std::endl;
  return 0;
}

}  // namespace xdit::app::bench
