// Quantized weights under mpirun (issue 45), on the tiny FLUX.1 with true
// CFG, f32: with its transformer from the Q8_0 GGUF (matrices kept in their
// blocks) and with --weights_dtype int8, every exact layout — CFG
// parallel, Ulysses, Ring, both, PipeFusion with full warm-up (each stage
// reads only its blocks) — makes the serial quantized run's latents
// (≤ 1e-4 relative: a block decodes alike wherever it lies; int8 products
// sum exactly and each token's activations are quantized alike however the
// tokens are split). Tensor parallelism splits a Q8_0 weight only by whole
// blocks: the tiny model's 32-input shares of 16 are refused in one line on
// every rank (from a GGUF, and with --weights_dtype q8_0, which quantizes
// each share); int8 under tensor parallelism quantizes each rank's share of
// a row-parallel weight (and of its activations) at its own scales, so it
// is near, not equal to, the serial int8 run. In bf16 on AVX-512-VNNI
// without AMX the Q8_0 layers multiply as integers against Q8_0
// activations (kernels/cpu/q8_0_gemm.h): each token's blocks are quantized
// alike however the tokens are split, so every layout above makes the
// serial bf16 run's latents too.
#include <gtest/gtest.h>

#include "dist/flux_request.h"
#include "dist/layouts.h"
#include "dist/world.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/linear.h"
#include "pipeline/distributed.h"
#include "test_util.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;
using namespace test::layouts;

// kGgufQ8_0Integers: the Q8_0 GGUF in bf16 (its layers as integers);
// kQ8_0: --weights_dtype q8_0 (the folder's weights quantized at load).
enum class Weights { kGgufQ8_0, kInt8, kGgufQ8_0Integers, kQ8_0 };

DType dtype(Weights w) {
  return w == Weights::kGgufQ8_0Integers ? DType::kBF16 : DType::kF32;
}

void quantize(pipeline::Pipeline& p, Weights w) {
  if (w == Weights::kQ8_0)
    p.set_weights_format(kernels::WeightFormat::kQ8_0);
  else if (w != Weights::kInt8)
    p.set_transformer_file(std::string(XDIT_TEST_DATA) + "/flux_checkpoint/flux_tiny_q8_0.gguf");
  else
    p.set_weights_format(kernels::WeightFormat::kInt8);
}

pipeline::LatentRequest request(const pipeline::Pipeline& p) {
  return test::flux_true_cfg_request(p, 5, 3, 13);
}

const std::string& model() {
  static const std::string m = test::models_dir() + "/flux-schnell-tiny";
  return m;
}

// The request, the serial quantized run's latents and the float run's.
struct Serial {
  pipeline::LatentRequest req;
  Tensor want, plain;
};
Serial serial(Weights w) {
  pipeline::Pipeline q(model(), dtype(w)), plain(model(), dtype(w));
  quantize(q, w);
  Serial s{request(q), {}, {}};
  s.want = q.generate_latents(s.req);
  s.plain = plain.generate_latents(s.req);
  return s;
}

// quantized false: the float weights, in w's dtype.
Tensor parallel_run(const ParallelConfig& pc, Weights w, const pipeline::LatentRequest& req,
                    bool quantized = true) {
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline par(model(), dtype(w));
  par.set_mesh(&mesh);
  if (quantized) quantize(par, w);
  return pipeline::generate_latents_distributed(par, mesh, req);
}

void check(const ParallelConfig& pc, Weights w) {
  if (pc.world() != world().size())
    GTEST_SKIP() << pc.describe() << " needs " << pc.world() << " ranks, not " << world().size();
  if (w == Weights::kGgufQ8_0Integers && !kernels::cpu::cpu_runs_block_int8_dot())
    GTEST_SKIP() << "this CPU (or ONEDNN_MAX_CPU_ISA) runs no Q8_0 layer as integers "
                    "(AVX-512-VNNI + bf16 without AMX)";
  SCOPED_TRACE(pc.describe() + (w == Weights::kInt8 ? " int8" : " Q8_0") +
               (w == Weights::kQ8_0 ? " at load" : "") +
               (w == Weights::kGgufQ8_0Integers ? " as integers, bf16" : ""));
  const Serial s = serial(w);
  const Tensor &want = s.want, &plain = s.plain;
  EXPECT_GT(test::rel_max_err(plain.to_vector(), want.to_vector()), 1e-4) << "quantized";
  const Tensor got = parallel_run(pc, w, s.req);
  ASSERT_EQ(got.shape(), want.shape());
  if (dtype(w) == DType::kBF16 && pc.ring_degree > 1) {
    // Ring attention in bf16 combines its partial softmaxes in another
    // order than the serial kernel (the float weights' ring run is off by
    // `ring`), and an activation code that flips on such a rounding moves
    // its block's product by a whole step: the ring run is not the serial
    // one, but its error against the float run is of the serial quantized
    // run's size.
    const double ring = test::rel_max_err(parallel_run(pc, w, s.req, false).to_vector(),
                                          plain.to_vector()),
                 serial_error = test::rel_max_err(want.to_vector(), plain.to_vector()),
                 error = test::rel_max_err(got.to_vector(), plain.to_vector());
    std::printf(
        "%s, Q8_0 as integers in bf16: %.2e from the float run (serial %.2e; the float "
        "weights' ring run %.2e)\n",
        pc.describe().c_str(), error, serial_error, ring);
    EXPECT_LE(error, 2 * serial_error + ring);
    return;
  }
  EXPECT_LE(test::rel_max_err(got.to_vector(), want.to_vector()), 1e-4)
      << "rank " << world().rank();
}

TEST(QuantizedMpi, CfgParallel) {
  check(layout(1, true, 1, 1), Weights::kGgufQ8_0);
  check(layout(1, true, 1, 1), Weights::kInt8);
  check(layout(1, true, 1, 1), Weights::kGgufQ8_0Integers);
  check(layout(1, true, 1, 1), Weights::kQ8_0);
}
TEST(QuantizedMpi, Ulysses2) {
  check(layout(1, false, 2, 1), Weights::kGgufQ8_0);
  check(layout(1, false, 2, 1), Weights::kInt8);
  check(layout(1, false, 2, 1), Weights::kGgufQ8_0Integers);
  check(layout(1, false, 2, 1), Weights::kQ8_0);
}
TEST(QuantizedMpi, Ring2) {
  check(layout(1, false, 1, 2), Weights::kGgufQ8_0);
  check(layout(1, false, 1, 2), Weights::kInt8);
  check(layout(1, false, 1, 2), Weights::kGgufQ8_0Integers);
}
TEST(QuantizedMpi, PipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 3), Weights::kGgufQ8_0);
  check(layout(1, false, 1, 1, 2, 2, 3), Weights::kInt8);
  check(layout(1, false, 1, 1, 2, 2, 3), Weights::kGgufQ8_0Integers);
  check(layout(1, false, 1, 1, 2, 2, 3), Weights::kQ8_0);
}
TEST(QuantizedMpi, UlyssesTimesRing) {
  check(layout(1, false, 2, 2), Weights::kGgufQ8_0);
  check(layout(1, false, 2, 2), Weights::kInt8);
  check(layout(1, false, 2, 2), Weights::kGgufQ8_0Integers);
}
TEST(QuantizedMpi, PipeFusion4FullWarmup) {
  check(layout(1, false, 1, 1, 4, 4, 3), Weights::kGgufQ8_0);
}

TEST(QuantizedMpi, TensorParallelRefusesSplitsThatCutBlocks) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;  // the tiny model's 2 heads
  if (c.world() != world().size()) GTEST_SKIP() << "tensor parallel 2 needs 2 ranks";
  const pipeline::LatentRequest req = serial(Weights::kInt8).req;
  const std::string e = test::error_message([&] { parallel_run(c, Weights::kGgufQ8_0, req); });
  EXPECT_NE(e.find("cuts its Q8_0 blocks of 32 values"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // --weights_dtype q8_0 quantizes each share: one that is not whole blocks
  // of the weight's would not be the serial run's blocks.
  const std::string at_load = test::error_message([&] { parallel_run(c, Weights::kQ8_0, req); });
  EXPECT_NE(at_load.find("cuts its q8_0 blocks of 32 values"), std::string::npos) << at_load;
  EXPECT_EQ(at_load.find('\n'), std::string::npos) << at_load;
}

TEST(QuantizedMpi, TensorParallelInt8IsNearTheSerialInt8Run) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;  // the tiny model's 2 heads
  if (c.world() != world().size()) GTEST_SKIP() << "tensor parallel 2 needs 2 ranks";
  const Serial s = serial(Weights::kInt8);
  const Tensor &want = s.want, &plain = s.plain;
  const Tensor got = parallel_run(c, Weights::kInt8, s.req);
  const double to_int8 = test::rel_max_err(got.to_vector(), want.to_vector()),
               to_float = test::rel_max_err(got.to_vector(), plain.to_vector()),
               serial_error = test::rel_max_err(want.to_vector(), plain.to_vector());
  std::printf(
      "tensor parallel %d int8: %.2e from the serial int8 run, %.2e from the float run "
      "(serial int8: %.2e)\n",
      world().size(), to_int8, to_float, serial_error);
  // Its error against the float run is of the serial int8 run's size.
  EXPECT_LE(to_float, 2 * serial_error + 1e-4);
}

}  // namespace
}  // namespace xdit
