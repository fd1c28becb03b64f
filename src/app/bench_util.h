// What the files of `xdit bench` share: its options, the GEMM peak every row
// is divided by, the timing of a row, the child process each row runs in,
// and the rows themselves, by file:
//  - bench.cpp: the subcommand, the serial table;
//  - bench_models.cpp: full-size model components (PixArt step, T5, VAE,
//    FLUX, SD3);
//  - bench_attention.cpp: the attention kernel;
//  - bench_parallel.cpp: two-rank rows (Ulysses, Ring, CFG, patch, PipeFusion,
//    the parallel VAE) and their table;
//  - bench_tensor.cpp: tensor parallelism's table.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "models/dit.h"
#include "models/pixart.h"

namespace xdit::app::bench {

using Clock = std::chrono::steady_clock;
constexpr int64_t kTextTokens = 120;
constexpr int64_t kMaxBenchSide = 16384;  // --resolutions: 1 … this many px

struct BenchOptions {
  std::string what = "transformer";
  std::vector<int64_t> resolutions{512, 1024};
  std::vector<std::string> dtypes{"bf16", "f32"};
  bool json = false;
  int threads = 0, warmup = 1, repeat = 1;
  std::string row;                      // internal: "WHAT:RES:DTYPE" runs one row in this process
  std::string model;                    // serve: the model served
  int requests = 1000, clients = 8;     // serve: the load
  int ranks = 1;                        // serve: processes (mpirun when > 1)
  std::vector<std::string> serve_args;  // serve: flags for xdit serve
  std::string device = "cpu";           // transformer and flux rows: cpu or cuda[:N]
  // cache: the request, and the thresholds of each cache (empty: defaults)
  std::string prompt = "a large red circle on the left on a blue background";
  int64_t steps = 0;  // 0: the model's
  std::vector<double> cache_thresholds;
  // TeaCache: xDiT's 0.12 and TeaCache4FLUX's 0.25, 0.4, 0.6 (FLUX.1's
  // rescaled change adds at least 0.18 a step: below that it never skips).
  std::vector<double> teacache_thresholds{0.12, 0.25, 0.4, 0.6};
  std::vector<int64_t> taylorseer_intervals{5, 3, 2};  // 5: diffusers' default
  int64_t lora_rank = 16;                              // lora: the LoRA's rank
  // flux: how the transformer keeps its weights: "bf16" (as --dtypes
  // computes), int8, fp8 (--weights_dtype) or q8_0 (GGUF blocks).
  std::vector<std::string> weights{"bf16"};
};

// xdit bench cache (bench_cache.cpp), lora (bench_lora.cpp).
int run_bench_cache(const BenchOptions& o);
int run_bench_lora(const BenchOptions& o);

// Where the transformer and flux rows run (--device): their model is built
// under this device's scope, and the GEMM peak is measured there.
extern Device g_device;

double seconds_since(Clock::time_point t);
int64_t peak_rss_bytes();

// The machine's GEMM peak in FLOP/s for `dtype` (on g_device).
double gemm_peak(DType dtype);

// FLOPs of one PixArt forward (multiply-adds × 2) for batch B on an h×w latent.
double step_flops(const models::PixArtConfig& c, int64_t B, int64_t h, int64_t w, int64_t L);

// Times `run` (best of repeat after warmup) and fills the common fields.
// The GEMM peak is measured again after the timed runs (`peak_before` was
// taken before the model was built): the row divides by the better of the
// two and is flagged when they differ by more than 15 %, since a machine
// whose peak moves that much within one run makes any single ratio doubtful.
nlohmann::json timed_row(const std::string& name, int64_t res, const std::string& dt_name,
                         double flops, DType dtype, double peak_before, int warmup, int repeat,
                         const std::function<void()>& run);

// Random inputs of one PixArt step for batch B at res px: latents, 120 text
// tokens of which 100 valid, micro-conditions, timestep 500.
struct StepInputs {
  Tensor latents, text, mask, resolution, aspect;
  models::Conditioning cond;
  models::DiTInputs in;
  StepInputs(const models::PixArtConfig& cfg, int64_t B, int64_t res);
  StepInputs(const StepInputs&) = delete;  // `in` points into this object
};

// Runs one row in a child process (this binary with --row) and parses its JSON.
// A layout runs the row on two ranks under mpirun.
nlohmann::json run_child(const std::string& what, int64_t res, const std::string& dt,
                         const BenchOptions& o, const std::string& layout = "", int threads = 0);

// "1.23 GB/s"-style: v with an SI prefix and `unit`.
std::string human(double v, const char* unit);

// --- the rows (each returns its JSON object) ---------------------------------

// bench_models.cpp
nlohmann::json run_row(int64_t res, const std::string& dt_name, int warmup, int repeat);
nlohmann::json run_t5_row(int64_t prompt_tokens, const std::string& dt_name, int warmup,
                          int repeat);
nlohmann::json run_vae_row(int64_t res, const std::string& dt_name, int warmup, int repeat);
nlohmann::json run_flux_row(int64_t res, const std::string& dt_name, int warmup, int repeat,
                            bool tensor = false, const std::string& weights = "bf16");
nlohmann::json run_sd3_row(int64_t res, const std::string& dt_name, int warmup, int repeat);

// bench_wan.cpp
// `layout` "ulysses" or "ring": on 2 ranks (run_wan_parallel_bench's rows).
nlohmann::json run_wan_row(int64_t res, const std::string& dt_name, int warmup, int repeat,
                           const std::string& layout = "");
int run_wan_parallel_bench(const BenchOptions& o);
// The Qwen2.5-VL-7B text encoder, 4 of 28 layers, on one prompt of `tokens` tokens.
nlohmann::json run_qwen_text_row(int64_t tokens, const std::string& dt_name, int warmup,
                                 int repeat);
// Z-Image-Turbo's transformer at full width, 1 + 1 refiner blocks and 3 layers (bench_zimage.cpp).
nlohmann::json run_zimage_row(int64_t res, const std::string& dt_name, int warmup, int repeat);
nlohmann::json run_wan_vae_row(int64_t res, const std::string& dt_name, int warmup, int repeat);

// bench_attention.cpp
nlohmann::json run_attention_row(int64_t res, const std::string& dt_name, int warmup, int repeat);

// bench_parallel.cpp: the rows on two ranks (rank 0 returns the row), and
// `xdit bench parallel`'s table.
nlohmann::json run_parallel_row(int64_t res, const std::string& dt_name, const std::string& name,
                                int warmup, int repeat);
nlohmann::json run_pipefusion_row(int64_t res, const std::string& dt_name, int64_t m);
nlohmann::json run_parallel_vae_row(int64_t res, const std::string& dt_name, int warmup,
                                    int repeat);
int run_parallel_bench(const BenchOptions& o);

// bench_tensor.cpp: `xdit bench tensor`'s table.
int run_tensor_bench(const BenchOptions& o);

}  // namespace xdit::app::bench
