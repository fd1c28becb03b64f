// LoRAs per request, beside the loaded weights (nn/lora_side.h): a layer's
// low-rank side path gives act(x·(W + B·A)ᵀ + b) — f32 and bf16 layers,
// fused GELU, bf16 output — and, cleared, its base output bit for bit; on
// the tiny FLUX.1 [schnell] requests that switch LoRAs (diffusers, kohya and
// XLabs files; CLIP adapters too) give diffusers' images without reloading the transformer, and a
// request without LoRAs after them gives the base image exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "io/safetensors.h"
#include "kernels/linear.h"
#include "lora_request.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/lora/" + name;
}

Tensor randn(Shape s, uint64_t seed, float std = 1.0f) {
  std::vector<float> v = test::randn(static_cast<size_t>(shape_numel(s)), seed);
  for (float& x : v) x *= std;
  return Tensor::from_vector(v, std::move(s));
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(LoraSide, LayerIsTheMergedWeightAndClearsExactly) {
  const int64_t m = 7, in = 37, out = 53, rank = 5;
  const Tensor w = randn({out, in}, 1, 0.2f), bias = randn({out}, 2, 0.1f);
  const Tensor a = randn({rank, in}, 3, 0.3f), b = randn({out, rank}, 4, 0.3f);
  const Tensor x = randn({m, in}, 5);
  for (const auto ct : {kernels::ComputeType::kF32, kernels::ComputeType::kBF16}) {
    for (const auto act : {kernels::Activation::kNone, kernels::Activation::kGeluTanh}) {
      SCOPED_TRACE(::testing::Message() << "bf16 " << (ct == kernels::ComputeType::kBF16)
                                        << " gelu " << (act == kernels::Activation::kGeluTanh));
      const kernels::Linear l(w, bias, ct, act);
      std::vector<float> base(m * out), side(m * out), again(m * out);
      l.forward(x.data<float>(), m, base.data());
      l.low_rank()->set(a, b);
      l.forward(x.data<float>(), m, side.data());
      // act(x·(W + B·A)ᵀ + b) in double; bf16 layers round x, W and A.
      const double tol = ct == kernels::ComputeType::kBF16 ? 3e-2 : 1e-4;
      double worst = 0, moved = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double z = bias.data<float>()[o];
          for (int64_t k = 0; k < in; ++k) {
            double d = 0;
            for (int64_t r = 0; r < rank; ++r)
              d += double(b.data<float>()[o * rank + r]) * a.data<float>()[r * in + k];
            z += x.data<float>()[i * in + k] * (w.data<float>()[o * in + k] + d);
          }
          const double want = act == kernels::Activation::kGeluTanh ? gelu_tanh(z) : z;
          worst = std::max(worst, std::abs(side[i * out + o] - want));
          moved = std::max(moved, std::abs(double(side[i * out + o]) - base[i * out + o]));
        }
      EXPECT_LE(worst, tol);
      EXPECT_GT(moved, 0.1) << "the side path changes the output";
      if (ct == kernels::ComputeType::kBF16) {  // bf16 output: the f32 result rounded once
        std::vector<uint16_t> y16(m * out);
        l.forward_to_bf16(x.data<float>(), m, y16.data());
        std::vector<float> back(m * out);
        convert_to_f32(y16.data(), DType::kBF16, back.data(), back.size());
        for (size_t i = 0; i < back.size(); ++i)
          ASSERT_NEAR(back[i], side[i], std::abs(side[i]) / 128 + 1e-6);
      }
      l.low_rank()->clear();
      l.forward(x.data<float>(), m, again.data());
      EXPECT_EQ(again, base) << "a cleared side path is the base layer bit for bit";
    }
  }
}

TEST(LoraSide, RequestsSwitchLorasWithoutReloading) {
  const auto want = io::read_safetensors_f32(data("flux_images.safetensors"));
  const auto formats = io::read_safetensors_f32(data("flux_formats_images.safetensors"));
  pipeline::Pipeline pipe(test::models_dir() + "/flux-schnell-tiny", DType::kF32);
  pipe.set_keep_text_encoder(true);
  const std::string a = data("flux_a.safetensors"), b = data("flux_b.safetensors");
  struct Case {
    std::string name;
    std::vector<pipeline::LoraRef> loras;
    const Tensor* golden;
  };
  const std::vector<Case> cases = {
      {"none", {}, &want.at("none")},
      {"two", {{a, 0.7}, {b, -0.4}}, &want.at("two")},
      {"one", {{a, 1.0}}, &want.at("one")},
      {"kohya", {{data("flux_kohya.safetensors"), 0.8}}, &formats.at("kohya")},  // CLIP too
      {"te", {{data("flux_te.safetensors"), 0.8}}, &want.at("te")},  // transformer + CLIP
      {"xlabs", {{data("flux_xlabs.safetensors"), 0.6}}, &formats.at("xlabs")},
      {"none again", {}, &want.at("none")}};
  std::vector<uint8_t> first_base;
  const models::DiT* model = nullptr;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    pipeline::ImageRequest r = test::flux_lora_request();
    r.loras = c.loras;
    const pipeline::ImageResult out = pipe.generate(r);
    ASSERT_EQ(out.rgb.size(), 1u);
    EXPECT_LE(test::worst_pixel_difference(out.rgb, c.golden->data<float>()), 1)
        << "largest per-pixel difference (of 255)";
    if (model == nullptr) model = pipe.transformer();
    EXPECT_EQ(pipe.transformer(), model) << "the transformer is loaded once";
    EXPECT_EQ(pipe.request_lora_layers() > 0, !c.loras.empty());
    if (c.loras.empty() && first_base.empty()) first_base = out.rgb[0];
    if (c.name == "none again") {
      EXPECT_EQ(out.rgb[0], first_base) << "the base image bit for bit";
    }
  }
}

TEST(LoraSide, BadRequestLorasAreOneLine) {
  pipeline::Pipeline pipe(test::models_dir() + "/flux-schnell-tiny", DType::kF32);
  const auto error = [&](std::vector<pipeline::LoraRef> loras) {
    pipeline::ImageRequest r = test::flux_lora_request();
    r.loras = std::move(loras);
    return test::error_message([&] { pipe.plan(r); });
  };
  const auto expect = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  expect(error({{data("sd3_a.safetensors"), 1.0}}), "a LoRA for another model?");
  pipe.generate(test::flux_lora_request());  // loaded: checked against the shapes load() kept
  expect(error({{data("sd3_a.safetensors"), 1.0}}), "a LoRA for another model?");
  expect(error({{data("flux_a.safetensors"), std::nan("")}}), "is not a finite number");
  expect(error({{data("no_such.safetensors"), 1.0}}), "no_such.safetensors");
}

}  // namespace
}  // namespace xdit
