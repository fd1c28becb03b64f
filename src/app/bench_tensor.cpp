// xdit bench tensor: tensor parallelism on two ranks against one rank with
// the same two cores, and the weights per rank of real FLUX.1-dev + T5-XXL
// at larger degrees.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>

#include "app/bench_util.h"
#include "app/startup.h"
#include "core/error.h"
#include "io/weights.h"
#include "models/flux.h"
#include "models/t5.h"
#include "nn/tensor_parallel.h"

namespace xdit::app::bench {

namespace {

// Which share of each weight a tensor-parallel rank reads, by state-dict
// key: 1 whole, 1/T for a slice (summed over several slices of one weight).
// Learnt from the loaders on a narrow model of the same structure, then
// applied to the full-size shapes: the memory of layouts larger than this
// machine, measured from the code that loads them.
class ShareRecorder : public io::WeightSource {
 public:
  bool has(const std::string&) const override { return true; }
  size_t stored_bytes() const override { return 0; }
  // bf16 bytes of the weights `specs` at these shares (throws on a weight
  // the narrow model did not read: the two would not share a structure).
  double bf16_bytes(const io::WeightSpecs& specs) const {
    double b = 0;
    for (const auto& [name, shape] : specs) {
      auto it = share_.find(name);
      XDIT_CHECK(it != share_.end(), "bench: '", name, "' was not read by the narrow model");
      b += static_cast<double>(shape_numel(shape)) * it->second * 2.0;
    }
    return b;
  }

 protected:
  Tensor read(const std::string& name, const Shape& shape) const override {
    share_[name] += 1.0;
    return random_.get(name, shape);
  }
  Tensor read_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                    int64_t count) const override {
    share_[name] +=
        static_cast<double>(count) / static_cast<double>(shape[static_cast<size_t>(dim)]);
    return random_.get_slice(name, shape, dim, begin, count);
  }

 private:
  io::RandomWeights random_{3};
  mutable std::map<std::string, double> share_;
};

}  // namespace

// Tensor parallelism on the same two cores: 1 rank x 2 threads against 2
// ranks x 1 thread, for the PixArt-α step with CFG and FLUX's reduced-depth
// forward, with the bytes all-reduced, the time inside the all-reduces and
// each rank's weights; then rank 0's weights for real FLUX.1-dev + T5-XXL at
// T = 1, 2, 4, 8 (rank 0 also holds the row-parallel biases).
int run_tensor_bench(const BenchOptions& o) {
  XDIT_CHECK(world().size() == 1,
             "run `xdit bench tensor` itself without mpirun: it starts mpirun for its rows");
  const int64_t res = *std::max_element(o.resolutions.begin(), o.resolutions.end());
  const std::string dt = o.dtypes.front();
  if (!o.json)
    std::cout << "Tensor parallel 2 at " << res << " px, " << dt
              << ": 1 rank x 2 threads against 2 ranks x 1 thread\n"
              << std::left << std::setw(26) << "model" << std::right << std::setw(10) << "serial s"
              << std::setw(10) << "tp2 s" << std::setw(10) << "speed-up" << std::setw(10)
              << "comm s" << std::setw(14) << "all-reduced" << std::setw(16) << "weights 1 rank"
              << std::setw(16) << "weights/rank" << std::setw(15) << "peak RSS/rank"
              << "\n";
  for (const bool flux : {false, true}) {
    nlohmann::json base = run_child(flux ? "flux" : "transformer", res, dt, o, "", 2);
    nlohmann::json tp = run_child(flux ? "flux" : "parallel", res, dt, o, "tensor", 1);
    const double t1 = base["seconds"].get<double>(), t2 = tp["seconds"].get<double>();
    tp["speedup"] = t1 / t2;
    if (o.json) {
      std::cout << base.dump() << std::endl << tp.dump() << std::endl;
      continue;
    }
    const auto bytes = [](const nlohmann::json& r, const char* k) {
      return human(static_cast<double>(r[k].get<int64_t>()), "B");
    };
    std::cout << std::left << std::setw(26)
              << (flux ? "FLUX.1 2+4 blocks" : "PixArt-alpha step, CFG") << std::right << std::fixed
              << std::setprecision(2) << std::setw(10) << t1 << std::setw(10) << t2 << std::setw(10)
              << t1 / t2 << std::setw(10) << tp["comm_seconds"].get<double>() << std::setw(14)
              << human(static_cast<double>(tp["comm_bytes"].get<uint64_t>()), "B") << std::setw(16)
              << bytes(base, "weight_bytes_bf16") << std::setw(16) << bytes(tp, "weight_bytes_bf16")
              << std::setw(15) << bytes(tp, "peak_rss_bytes") << std::endl;
  }
  // Real FLUX.1-dev (guidance embedding) and T5-XXL, from narrow models of
  // their structure (8 heads, so that T = 8 splits).
  models::FluxConfig flux_dev;
  flux_dev.guidance_embeds = true;
  models::FluxConfig flux_narrow = flux_dev;
  flux_narrow.num_attention_heads = 8;
  flux_narrow.attention_head_dim = 8;
  flux_narrow.axes_dims_rope = {2, 2, 4};
  flux_narrow.joint_attention_dim = 16;
  models::T5Config t5_narrow = models::T5Config::xxl();
  t5_narrow.d_model = 16;
  t5_narrow.d_kv = 2;
  t5_narrow.num_heads = 8;
  t5_narrow.d_ff = 16;
  t5_narrow.vocab_size = 8;
  io::WeightSpecs t5_specs = models::T5Config::xxl().weight_specs();
  if (!o.json)
    std::cout << "\nWeights per rank (bf16) for FLUX.1-dev + T5-XXL under tensor parallelism\n"
              << std::left << std::setw(6) << "T" << std::right << std::setw(16) << "transformer"
              << std::setw(12) << "T5-XXL" << std::setw(12) << "together"
              << "\n";
  for (const int T : {1, 2, 4, 8}) {
    const nn::TensorParallel load_only{0, T, nullptr};
    ShareRecorder fr, tr;
    models::FluxTransformer f(flux_narrow, fr, DType::kF32,
                              models::DiTStage(0, -1, true, true, load_only));
    models::T5Encoder t(t5_narrow, tr, DType::kF32, load_only);
    const double fb = fr.bf16_bytes(flux_dev.weight_specs()), tb = tr.bf16_bytes(t5_specs);
    if (o.json) {
      std::cout << nlohmann::json{{"name", "tensor_parallel_weights"},
                                  {"tensor_parallel_degree", T},
                                  {"flux_dev_bytes_bf16", fb},
                                  {"t5_xxl_bytes_bf16", tb}}
                       .dump()
                << std::endl;
      continue;
    }
    std::cout << std::left << std::setw(6) << T << std::right << std::setw(16) << human(fb, "B")
              << std::setw(12) << human(tb, "B") << std::setw(12) << human(fb + tb, "B")
              << std::endl;
  }
  return 0;
}

}  // namespace xdit::app::bench
