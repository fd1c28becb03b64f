// Quantized weights under mpirun (issue 45), on the tiny FLUX.1 with true
// CFG, f32: with its transformer from the Q8_0 GGUF (matrices kept in their
// blocks) and with --weights_dtype int8, every exact layout — CFG
// parallel, Ulysses, Ring, both, PipeFusion with full warm-up (each stage
// reads only its blocks) — makes the serial quantized run's latents
// (≤ 1e-4 relative: a block decodes alike wherever it lies; int8 products
// sum exactly and each token's activations are quantized alike however the
// tokens are split). Tensor parallelism splits a Q8_0 weight only by whole
// blocks: the tiny model's 32-input shares of 16 are refused in one line on
// every rank; int8 under tensor parallelism quantizes each rank's share of
// a row-parallel weight (and of its activations) at its own scales, so it
// is near, not equal to, the serial int8 run.
#include <gtest/gtest.h>

#include "dist/flux_request.h"
#include "dist/layouts.h"
#include "dist/world.h"
#include "kernels/linear.h"
#include "pipeline/distributed.h"
#include "test_util.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;
using namespace test::layouts;

enum class Weights { kGgufQ8_0, kInt8 };

void quantize(pipeline::Pipeline& p, Weights w) {
  if (w == Weights::kGgufQ8_0)
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
  pipeline::Pipeline q(model(), DType::kF32), plain(model(), DType::kF32);
  quantize(q, w);
  Serial s{request(q), {}, {}};
  s.want = q.generate_latents(s.req);
  s.plain = plain.generate_latents(s.req);
  return s;
}

Tensor parallel_run(const ParallelConfig& pc, Weights w, const pipeline::LatentRequest& req) {
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline par(model(), DType::kF32);
  par.set_mesh(&mesh);
  quantize(par, w);
  return pipeline::generate_latents_distributed(par, mesh, req);
}

void check(const ParallelConfig& pc, Weights w) {
  if (pc.world() != world().size())
    GTEST_SKIP() << pc.describe() << " needs " << pc.world() << " ranks, not " << world().size();
  SCOPED_TRACE(pc.describe() + (w == Weights::kInt8 ? " int8" : " Q8_0"));
  const Serial s = serial(w);
  const Tensor &want = s.want, &plain = s.plain;
  EXPECT_GT(test::rel_max_err(plain.to_vector(), want.to_vector()), 1e-4) << "quantized";
  const Tensor got = parallel_run(pc, w, s.req);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_LE(test::rel_max_err(got.to_vector(), want.to_vector()), 1e-4)
      << "rank " << world().rank();
}

TEST(QuantizedMpi, CfgParallel) {
  check(layout(1, true, 1, 1), Weights::kGgufQ8_0);
  check(layout(1, true, 1, 1), Weights::kInt8);
}
TEST(QuantizedMpi, Ulysses2) {
  check(layout(1, false, 2, 1), Weights::kGgufQ8_0);
  check(layout(1, false, 2, 1), Weights::kInt8);
}
TEST(QuantizedMpi, Ring2) {
  check(layout(1, false, 1, 2), Weights::kGgufQ8_0);
  check(layout(1, false, 1, 2), Weights::kInt8);
}
TEST(QuantizedMpi, PipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 3), Weights::kGgufQ8_0);
  check(layout(1, false, 1, 1, 2, 2, 3), Weights::kInt8);
}
TEST(QuantizedMpi, UlyssesTimesRing) {
  check(layout(1, false, 2, 2), Weights::kGgufQ8_0);
  check(layout(1, false, 2, 2), Weights::kInt8);
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
