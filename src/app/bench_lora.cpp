// xdit bench lora: what merging a LoRA adds to loading a model. One FLUX.1
// double block's matrices at full width (to_q, to_k, to_v, to_out.0 of
// both streams: 3072 × 3072; the MLPs' 12288 × 3072 and 3072 × 12288),
// bf16 in a safetensors file, loaded into layers (read + pack) as the
// transformer loads them, against the same with a rank-R LoRA (16 by
// default) on every one of them merged on the way (nn::LoraWeights). The
// files are written to a temporary folder first and read once before
// timing, so both runs read from the page cache. Then the per-request way
// (xdit serve): the same LoRA applied to the loaded layers as side paths
// (nn::set_side_loras) — the time to apply it, and a forward of every layer
// over 512 rows (a 512 × 512 FLUX.1 image's tokens are 1024) with and
// without it.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/bench_util.h"
#include "core/error.h"
#include "core/memory.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/linear.h"
#include "nn/layers.h"
#include "nn/lora.h"
#include "nn/lora_side.h"

namespace xdit::app::bench {

namespace {

namespace fs = std::filesystem;

struct Matrix {
  std::string name;
  int64_t out, in;
};

std::vector<Matrix> flux_double_block() {
  constexpr int64_t D = 3072;
  std::vector<Matrix> m;
  for (const char* p : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj",
                        "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"})
    m.push_back({p, D, D});
  for (const char* p : {"ff", "ff_context"}) {
    m.push_back({std::string(p) + ".net.0.proj", 4 * D, D});
    m.push_back({std::string(p) + ".net.2", D, 4 * D});
  }
  return m;
}

Tensor random_bf16(const Shape& shape, uint64_t seed, double scale) {
  Tensor t = Tensor::empty(shape);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {  // xorshift: fast, and values vary
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    t.data<float>()[i] = static_cast<float>(scale * (static_cast<double>(s >> 11) * 0x1p-53 - 0.5));
  }
  return t.as(DType::kBF16, Device{});
}

// The largest resident memory above the start while making every
// matrix's layer from `w` (each layer freed before the next, as a model's
// load leaves only the packed layers behind); 0 where it cannot be measured.
size_t load_peak_bytes(const io::WeightSource& w, const std::vector<Matrix>& ms,
                       kernels::ComputeType ct) {
  const size_t before = current_rss_bytes();
  if (!reset_peak_rss()) return 0;
  for (const Matrix& m : ms) {
    const kernels::Linear layer(w.get(m.name + ".weight", {m.out, m.in}), Tensor(), ct);
    (void)layer;
    w.drop_pages(m.name + ".weight");
  }
  const size_t peak = peak_rss_bytes();
  return peak > before ? peak - before : 0;
}

// Seconds to make every matrix's layer from `w`, the best of `repeat`.
double load_seconds(const io::WeightSource& w, const std::vector<Matrix>& ms,
                    kernels::ComputeType ct, int repeat) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    for (const Matrix& m : ms) {
      const kernels::Linear layer(w.get(m.name + ".weight", {m.out, m.in}), Tensor(), ct);
      (void)layer;
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Seconds of a forward of every layer over `rows` rows, the best of `repeat`.
double forward_seconds(const std::vector<kernels::Linear>& layers, int64_t rows, int repeat) {
  int64_t widest = 0;
  for (const kernels::Linear& l : layers)
    widest = std::max({widest, l.in_features(), l.out_features()});
  const Tensor x = random_bf16({rows, widest}, 7, 1.0).as(DType::kF32, Device{});
  Tensor y = Tensor::empty({rows, widest});
  double best = 1e30;
  for (int r = 0; r < repeat + 1; ++r) {  // the first: the primitives made
    const auto t0 = Clock::now();
    for (const kernels::Linear& l : layers) l.forward(x.data<float>(), rows, y.data<float>());
    if (r > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int run_bench_lora(const BenchOptions& o) {
  const fs::path dir =
      fs::temp_directory_path() / ("xdit_bench_lora_" + std::to_string(::getpid()));
  fs::create_directories(dir / "model");
  struct Cleanup {
    fs::path d;
    ~Cleanup() { fs::remove_all(d); }
  } cleanup{dir};
  const std::vector<Matrix> ms = flux_double_block();
  std::vector<std::pair<std::string, Tensor>> base, lora;
  for (size_t i = 0; i < ms.size(); ++i) {
    const Matrix& m = ms[i];
    base.emplace_back(m.name + ".weight", random_bf16({m.out, m.in}, i, 0.04));
    lora.emplace_back("transformer." + m.name + ".lora_A.weight",
                      random_bf16({o.lora_rank, m.in}, 100 + i, 0.02));
    lora.emplace_back("transformer." + m.name + ".lora_B.weight",
                      random_bf16({m.out, o.lora_rank}, 200 + i, 0.02));
  }
  io::write_safetensors((dir / "model" / "model.safetensors").string(), base);
  io::write_safetensors((dir / "lora.safetensors").string(), lora);
  const io::WeightStore store((dir / "model").string());
  const std::vector<nn::LoraUse> uses = {
      {std::make_shared<nn::LoraFile>((dir / "lora.safetensors").string()), 1.0}};
  const size_t lora_bytes = fs::file_size(dir / "lora.safetensors");
  int64_t params = 0;
  for (const Matrix& m : ms) params += m.out * m.in;
  for (const std::string& dt : o.dtypes) {
    const kernels::ComputeType ct = kernels::resolve_compute_type(parse_dtype(dt));
    load_seconds(store, ms, ct, 1);  // the page cache, and first-touch of the allocator
    const double plain = load_seconds(store, ms, ct, std::max(1, o.repeat));
    // Merged as xdit generate --lora does for this dtype (bf16 layers: a bf16 merged weight).
    const nn::LoraWeights merged(store, uses, "transformer", false,
                                 parse_dtype(dt) == DType::kBF16 ? DType::kBF16 : DType::kF32);
    const double with = load_seconds(merged, ms, ct, std::max(1, o.repeat));
    const size_t peak_plain = load_peak_bytes(store, ms, ct);
    const size_t peak_merged = load_peak_bytes(merged, ms, ct);
    // Per request: side paths on the loaded layers.
    nn::LinearRegistry registry;
    std::vector<kernels::Linear> layers;
    {
      const nn::RecordingWeights recorded(store, registry);
      const nn::LinearRegistry::Recording recording(registry);
      for (const Matrix& m : ms)
        layers.push_back(nn::load_linear(recorded, m.name, m.in, m.out, false, ct));
    }
    constexpr int64_t kRows = 512;
    const double step = forward_seconds(layers, kRows, std::max(1, o.repeat));
    double apply = 1e30;
    for (int r = 0; r < std::max(1, o.repeat); ++r) {
      nn::set_side_loras(registry, {});
      const auto t0 = Clock::now();
      nn::set_side_loras(registry, uses);
      apply = std::min(apply, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    nn::set_side_loras(registry, {});
    const size_t rss_before_side = current_rss_bytes();
    nn::set_side_loras(registry, uses);
    const size_t side_bytes = current_rss_bytes() - std::min(current_rss_bytes(), rss_before_side);
    const double step_side = forward_seconds(layers, kRows, std::max(1, o.repeat));
    const nlohmann::json row = {{"dtype", dt},
                                {"matrices", ms.size()},
                                {"parameters", params},
                                {"rank", o.lora_rank},
                                {"load_seconds", plain},
                                {"load_with_lora_seconds", with},
                                {"lora_fraction", (with - plain) / plain},
                                {"side_apply_seconds", apply},
                                {"side_apply_fraction", apply / plain},
                                {"forward_rows", kRows},
                                {"forward_seconds", step},
                                {"forward_with_side_seconds", step_side},
                                {"side_forward_fraction", (step_side - step) / step},
                                {"lora_file_bytes", lora_bytes},
                                {"load_peak_bytes", peak_plain},
                                {"load_with_lora_peak_bytes", peak_merged},
                                {"side_resident_bytes", side_bytes}};
    if (o.json) {
      std::cout << row.dump() << std::endl;
      continue;
    }
    std::printf(
        "FLUX.1 double block (%zu matrices, %.0f M parameters, bf16 file), %s layers: load "
        "%.3f s; a rank-%lld LoRA merged on the way %.3f s (+%.0f %%); or applied as side "
        "paths %.4f s (%.1f %% of the load), a forward of %lld rows %.3f s -> %.3f s "
        "(+%.1f %%)\n",
        ms.size(), static_cast<double>(params) / 1e6, dt.c_str(), plain,
        static_cast<long long>(o.lora_rank), with, 100 * (with - plain) / plain, apply,
        100 * apply / plain, static_cast<long long>(kRows), step, step_side,
        100 * (step_side - step) / step);
    std::printf(
        "  memory: the LoRA file %.1f MB; the load's peak %.1f MB, merging %.1f MB (+%.1f MB); "
        "side paths resident %.1f MB\n",
        static_cast<double>(lora_bytes) / 1e6, static_cast<double>(peak_plain) / 1e6,
        static_cast<double>(peak_merged) / 1e6,
        (static_cast<double>(peak_merged) - static_cast<double>(peak_plain)) / 1e6,
        static_cast<double>(side_bytes) / 1e6);
  }
  return 0;
}

}  // namespace xdit::app::bench
