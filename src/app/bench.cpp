// xdit bench: benchmarks of full-size components with random weights made
// in memory, each against the GEMM peak measured in the same process (the
// rows are listed in bench_util.h, by file). Each row runs in its own child
// process so that its peak memory is its own. This file: the subcommand, the
// dispatch of a child's row, and the table of the single-process rows.
#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/bench_util.h"
#include "app/commands.h"
#include "app/startup.h"
#include "core/device.h"
#include "core/error.h"

namespace xdit::app {

namespace bench {
namespace {

constexpr int64_t kPromptTokens = 20;  // bench t5's PixArt prompt row

// A number of --row (the parent process writes it; a hand-written one may
// be anything): one line instead of std::stoll's exception.
int64_t row_integer(const std::string& text, const char* what) {
  int64_t v = 0;
  XDIT_CHECK(CLI::detail::lexical_cast(text, v) && v >= 0 && v <= (int64_t{1} << 20),
             "--row: ", what, " '", text, "' is not a whole number in 0 … 1048576");
  return v;
}

int run_bench(const BenchOptions& o) {
  if (o.what == "serve")
    return run_bench_serve(o.model, o.requests, o.clients, o.threads, o.ranks, o.serve_args);
  set_threads(o.threads);
  if (o.what == "cache") return run_bench_cache(o);
  if (o.what == "lora") return run_bench_lora(o);
  g_device = parse_device(o.device);
  check_device(g_device);  // one line where there is no GPU
  XDIT_CHECK(!g_device.cuda() || o.what == "transformer" || o.what == "flux", "bench ", o.what,
             ": --device ", g_device.str(),
             " runs the transformer and flux benchmarks only (the other rows have no GPU form "
             "yet)");
  XDIT_CHECK(o.what == "transformer" || o.what == "attention" || o.what == "t5" ||
                 o.what == "vae" || o.what == "flux" || o.what == "sd3" || o.what == "wan" ||
                 o.what == "wan_vae" || o.what == "parallel" || o.what == "tensor" ||
                 o.what == "wan_parallel" || o.what == "qwen_text" || o.what == "zimage" ||
                 o.what == "all",
             "unknown benchmark '", o.what,
             "': transformer, attention, t5, vae, flux, sd3, wan, wan_vae, wan_parallel, "
             "qwen_text, zimage, parallel, tensor, cache, lora, serve or all");
  if (!o.row.empty()) {  // child: WHAT:RES:DTYPE[:LAYOUT]
    std::vector<std::string> f;
    std::stringstream ss(o.row);
    for (std::string part; std::getline(ss, part, ':');) f.push_back(part);
    XDIT_CHECK(f.size() >= 3, "--row expects WHAT:RES:DTYPE[:LAYOUT]");
    const std::string& what = f[0];
    const std::string& dt = f[2];
    const int64_t res = row_integer(f[1], "RES");
    nlohmann::json r =
        what == "t5"          ? run_t5_row(res, dt, o.warmup, o.repeat)
        : what == "vae"       ? run_vae_row(res, dt, o.warmup, o.repeat)
        : what == "attention" ? run_attention_row(res, dt, o.warmup, o.repeat)
        : what == "flux"      ? run_flux_row(res, dt, o.warmup, o.repeat,
                                             f.size() > 3 && f[3] == "tensor", o.weights.at(0))
        : what == "sd3"       ? run_sd3_row(res, dt, o.warmup, o.repeat)
        : what == "wan"       ? run_wan_row(res, dt, o.warmup, o.repeat, f.size() > 3 ? f[3] : "")
        : what == "wan_vae"   ? run_wan_vae_row(res, dt, o.warmup, o.repeat)
        : what == "qwen_text" ? run_qwen_text_row(res, dt, o.warmup, o.repeat)
        : what == "zimage"    ? run_zimage_row(res, dt, o.warmup, o.repeat)
        : what == "parallel" && f.at(3) == "vae" ? run_parallel_vae_row(res, dt, o.warmup, o.repeat)
        : what == "parallel" && f.at(3).rfind("pipefusion", 0) == 0
            ? run_pipefusion_row(res, dt, row_integer(f.at(3).substr(11), "the patch count"))
        : what == "parallel" ? run_parallel_row(res, dt, f.at(3), o.warmup, o.repeat)
                             : run_row(res, dt, o.warmup, o.repeat);
    if (world().rank() == 0) std::cout << r.dump() << std::endl;
    return 0;
  }
  if (o.what == "parallel") return run_parallel_bench(o);
  if (o.what == "wan_parallel") return run_wan_parallel_bench(o);
  if (o.what == "tensor") return run_tensor_bench(o);
  for (const auto& dt : o.dtypes) {
    const DType t = parse_dtype(dt);
    XDIT_CHECK(t != DType::kF16, "bench: --dtypes takes bf16 and/or f32");
  }
  // The rows: the transformer at each resolution; T5-XXL (120 tokens, and a
  // 20-token PixArt prompt with its empty negative as the pipeline encodes
  // them; bf16 unless only f32 is asked for: f32 XXL weights alone are
  // 19 GB); the VAE at the largest resolution.
  struct Row {
    std::string what;
    int64_t res;
    std::string dt;
    std::string weights = "bf16";
  };
  std::vector<Row> rows;
  const bool all = o.what == "all";
  if (all || o.what == "transformer")
    for (int64_t res : o.resolutions)
      for (const auto& dt : o.dtypes) rows.push_back({"transformer", res, dt});
  if (all || o.what == "attention")
    for (int64_t res : o.resolutions)
      for (const auto& dt : o.dtypes) rows.push_back({"attention", res, dt});
  if (all || o.what == "t5")
    for (const auto& dt : o.dtypes)
      if (dt == "bf16" || o.dtypes.size() == 1)
        for (int64_t tokens : {int64_t{0}, kPromptTokens}) rows.push_back({"t5", tokens, dt});
  if (all || o.what == "vae")
    for (const auto& dt : o.dtypes)
      rows.push_back({"vae", *std::max_element(o.resolutions.begin(), o.resolutions.end()), dt});
  if (all || o.what == "flux")
    for (const auto& dt : o.dtypes)
      for (const auto& w : o.weights)
        rows.push_back(
            {"flux", *std::max_element(o.resolutions.begin(), o.resolutions.end()), dt, w});
  if (all || o.what == "sd3")
    for (const auto& dt : o.dtypes)
      rows.push_back({"sd3", *std::max_element(o.resolutions.begin(), o.resolutions.end()), dt});
  // Wan: RES p clips (480: 480 x 832), not in `all` (minutes a row on a few cores);
  // qwen_text: RES tokens; zimage: RES px (minutes a row as well).
  for (const char* what : {"wan", "wan_vae", "qwen_text", "zimage"})
    if (o.what == what)
      for (const auto& dt : o.dtypes)
        for (int64_t res : o.resolutions) rows.push_back({what, res, dt});
  if (!o.json)
    std::cout << "full-size components, random weights; ratio = achieved FLOP/s / GEMM peak "
                 "measured in the same "
                 "process\n"
              << std::left << std::setw(30) << "benchmark" << std::setw(7) << "res" << std::setw(6)
              << "dtype" << std::right << std::setw(10) << "seconds" << std::setw(12) << "FLOPs"
              << std::setw(14) << "FLOP/s" << std::setw(14) << "GEMM peak" << std::setw(7)
              << "ratio" << std::setw(11) << "peak RSS" << std::endl;
  for (const Row& row : rows) {
    BenchOptions child = o;
    child.weights = {row.weights};
    nlohmann::json r = run_child(row.what, row.res, row.dt, child);
    if (o.json) {
      std::cout << r.dump() << std::endl;
      continue;
    }
    const std::string res = row.what == "t5" ? std::to_string(r["tokens"].get<int64_t>()) + "t"
                                             : std::to_string(row.res);
    std::cout << std::left << std::setw(30) << r["name"].get<std::string>() << std::setw(7) << res
              << std::setw(6) << row.dt << std::right << std::setw(10) << std::fixed
              << std::setprecision(2) << r["seconds"].get<double>() << std::setw(12)
              << human(r["flops"].get<double>(), "") << std::setw(14)
              << human(r["flops_per_s"].get<double>(), "/s") << std::setw(14)
              << human(r["peak_flops_per_s"].get<double>(), "/s") << std::setw(7)
              << std::setprecision(2) << r["ratio"].get<double>() << std::setw(11)
              << human(static_cast<double>(r["peak_rss_bytes"].get<int64_t>()), "B");
    if (r.contains("extrapolated_seconds_19_38"))
      std::cout << "  " << std::setprecision(2) << r["seconds_per_block"].get<double>()
                << " s per block; 19 + 38 blocks ~ "
                << r["extrapolated_seconds_19_38"].get<double>() << " s";
    if (r.contains("extrapolated_seconds_38"))
      std::cout << "  " << std::setprecision(2) << r["seconds_per_block"].get<double>()
                << " s per block; 38 blocks ~ " << r["extrapolated_seconds_38"].get<double>()
                << " s";
    if (r.value("peak_unstable", false))
      std::cout << "  ! GEMM peak moved from " << human(r["peak_before"].get<double>(), "/s")
                << " to " << human(r["peak_after"].get<double>(), "/s")
                << " during the row: repeat it";
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace bench

std::function<int()> add_bench(CLI::App& app) {
  auto o = std::make_shared<bench::BenchOptions>();
  CLI::App* b =
      app.add_subcommand("bench", "benchmarks against the GEMM peak measured in the same run");
  b->add_option("what", o->what,
                "benchmark: transformer, attention, t5, vae, flux, sd3, wan, wan_vae, parallel, "
                "tensor, cache, lora "
                "(step caches on --model), serve (load on xdit serve) or all")
      ->capture_default_str();
  b->add_option("--resolutions", o->resolutions, "image sizes in pixels")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, bench::kMaxBenchSide))
      ->capture_default_str();
  b->add_option("--dtypes", o->dtypes, "bf16 and/or f32")->delimiter(',')->capture_default_str();
  b->add_flag("--json", o->json, "one JSON object per row");
  b->add_option("--device", o->device,
                "transformer and flux: cpu, or cuda[:N] (the GEMM peak is then cuBLASLt's)")
      ->capture_default_str();
  b->add_option("--threads", o->threads, "OpenMP threads, 1 … 4 x cores (default: all cores)")
      ->check(thread_count());
  b->add_option("--warmup", o->warmup, "untimed steps before timing")->capture_default_str();
  b->add_option("--repeat", o->repeat, "timed steps (the best is reported)")->capture_default_str();
  b->add_option("--model", o->model, "serve, cache: the model (default: the built-in tiny one)");
  b->add_option("--prompt", o->prompt, "cache: the prompt")->capture_default_str();
  b->add_option("--steps", o->steps, "cache: denoising steps (default: the model's)");
  b->add_option("--cache_thresholds", o->cache_thresholds,
                "cache: fbcache thresholds to run (default 0.05, 0.12, 0.2)")
      ->delimiter(',');
  b->add_option("--teacache_thresholds", o->teacache_thresholds,
                "cache: TeaCache thresholds to run")
      ->delimiter(',')
      ->capture_default_str();
  b->add_option("--taylorseer_intervals", o->taylorseer_intervals,
                "cache: TaylorSeer intervals to run (warm-up 3, order 1)")
      ->delimiter(',')
      ->capture_default_str();
  b->add_option("--weights", o->weights,
                "flux: the transformer's weights as computed (bf16), int8, fp8 (--weights_dtype) "
                "or q8_0 / q4_k / q5_k (GGUF blocks; with _decoded: decoded into bf16 even "
                "where they could run as integers), a row each")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "int8", "fp8", "q8_0", "q8_0_decoded", "q4_k", "q4_k_decoded",
                             "q5_k", "q5_k_decoded"}))
      ->capture_default_str();
  b->add_option("--lora_rank", o->lora_rank, "lora: the LoRA's rank")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  b->add_option("--requests", o->requests, "serve: requests sent (a tenth is the warm-up)")
      ->capture_default_str();
  b->add_option("--clients", o->clients, "serve: concurrent clients")->capture_default_str();
  b->add_option("--ranks", o->ranks, "serve: processes, under mpirun when more than 1")
      ->capture_default_str();
  b->add_option("--serve_args", o->serve_args,
                "serve: flags for xdit serve, e.g. \"--data_parallel_degree 2\"")
      ->delimiter(' ');
  b->add_option("--row", o->row, "internal: run one row (WHAT:RES:DTYPE) in this process")
      ->group("");
  return [o] { return bench::run_bench(*o); };
}

}  // namespace xdit::app
