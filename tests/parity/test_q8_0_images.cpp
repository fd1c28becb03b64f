// GGUF Q8_0 transformers in bf16 on AVX-512-VNNI without AMX: their layers
// multiply as integers against Q8_0 activations (kernels/cpu/q8_0_gemm.h).
// The tiny FLUX.1's and SD3.5's images from their Q8_0 GGUF files against
// diffusers' images of the same files (GGUFQuantizationConfig, f32; the
// goldens of tools/goldens/make_flux_gguf.py and make_sd3_gguf.py): PSNR
// reported beside the decoded route's, and at least 30 dB (issue 45).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "io/safetensors.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/q8_0_blocks.h"
#include "lora_request.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

struct Case {
  std::string model, gguf, golden, key;
  pipeline::ImageRequest request;
};

// The image of `c`'s GGUF in bf16, its Q8_0 layers as integers or decoded.
std::vector<uint8_t> draw(const Case& c, bool integers) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/" + c.model, DType::kBF16);
  {
    const kernels::DecodedQ8_0 route(integers);
    pipe.set_transformer_file(std::string(XDIT_TEST_DATA) + "/" + c.gguf);
    pipe.load();  // the layers choose their route as they are made
  }
  return pipe.generate(c.request).rgb.at(0);
}

class Q8_0Images : public testing::TestWithParam<Case> {};

TEST_P(Q8_0Images, IntegerRouteIsWithin30DbOfDiffusers) {
  if (!kernels::cpu::cpu_runs_block_int8_dot())
    GTEST_SKIP() << "this CPU (or ONEDNN_MAX_CPU_ISA) has no AVX-512-VNNI + bf16 without AMX: "
                    "its Q8_0 layers decode their blocks";
  const Case& c = GetParam();
  const auto golden = io::read_safetensors_f32(std::string(XDIT_TEST_DATA) + "/" + c.golden);
  const Tensor& want_t = golden.at(c.key);
  const auto want = test::np_image_rgb8(want_t.data<float>(), static_cast<size_t>(want_t.numel()));
  const auto integers = draw(c, true), decoded = draw(c, false);
  ASSERT_EQ(integers.size(), want.size());
  const double p_int = test::psnr_rgb8(integers, want), p_dec = test::psnr_rgb8(decoded, want),
               p_routes = test::psnr_rgb8(integers, decoded);
  std::printf(
      "%s Q8_0, bf16: PSNR against diffusers' f32 image: integers %.1f dB, decoded %.1f dB; "
      "integers against decoded %.1f dB\n",
      c.model.c_str(), p_int, p_dec, p_routes);
  RecordProperty("psnr_integers_db", std::to_string(p_int));
  RecordProperty("psnr_decoded_db", std::to_string(p_dec));
  EXPECT_GE(p_int, 30.0);
  EXPECT_NE(integers, decoded);  // the activations were quantized
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, Q8_0Images,
    testing::Values(Case{"flux-schnell-tiny", "flux_checkpoint/flux_tiny_q8_0.gguf",
                         "flux_checkpoint/flux_tiny_q8_0_image.safetensors", "diffusers_image",
                         test::flux_lora_request()},
                    Case{"sd35-tiny", "sd3_checkpoint/sd35_tiny_q8_0.gguf",
                         "sd3_checkpoint/sd35_tiny_q8_0_images.safetensors", "image",
                         test::sd35_lora_request()}),
    [](const auto& info) { return info.index == 0 ? std::string("flux") : std::string("sd35"); });

}  // namespace
}  // namespace xdit
