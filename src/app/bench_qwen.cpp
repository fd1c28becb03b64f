// xdit bench qwen_text: the decoder-LLM text encoder of Qwen-Image
// (Qwen2.5-VL-7B's language model: hidden 3584, 28 heads over 4 key/value
// heads, SwiGLU 18944, vocabulary 152064) at full width and reduced depth
// (4 of its 28 layers) on one prompt of N tokens, with random weights,
// against the GEMM peak measured in the same process; extrapolated by layers
// to the whole encoder.
#include "app/bench_util.h"
#include "io/weights.h"
#include "models/qwen_text.h"

namespace xdit::app::bench {

namespace {
constexpr int64_t kLayers = 4;
}  // namespace

nlohmann::json run_qwen_text_row(int64_t tokens, const std::string& dt_name, int warmup,
                                 int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::QwenTextConfig full = models::QwenTextConfig::qwen2_5_vl_7b();
  models::QwenTextConfig cfg = full;
  cfg.num_layers = kLayers;
  io::RandomWeights weights(12);
  models::QwenTextEncoder enc(cfg, weights, dtype);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % 150000 + 3);
  const std::vector<uint8_t> mask(static_cast<size_t>(tokens), 1);
  const double flops = cfg.flops(1, tokens, kLayers);
  nlohmann::json r =
      timed_row("qwen2_5_vl_7b_text_4_layers", 0, dt_name, flops, dtype, peak, warmup, repeat,
                [&] { enc.encode(ids, mask, 1, tokens, kLayers, true); });
  r["tokens"] = tokens;
  r["layers"] = kLayers;
  r["extrapolated_seconds_28_layers"] =
      r["seconds"].get<double>() * static_cast<double>(full.num_layers) / kLayers;
  r["parameters"] = full.parameter_count();
  return r;
}

}  // namespace xdit::app::bench
