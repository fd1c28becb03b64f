// Every model config refuses bad values with one line that names the file
// and the key: counts below 1, sizes whose products would overflow, channels
// that do not divide into groups, values of the wrong type, non-finite
// numbers — the cases that once crashed (SIGFPE, SIGSEGV, an undefined shift)
// or ran for minutes first. Also the request-side number checks (seeds,
// non-finite values, the memory estimate).
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "core/rng.h"
#include "core/tensor.h"
#include "io/json.h"
#include "models/pixart.h"
#include "models/t5.h"
#include "models/vae.h"
#include "pipeline/memory_estimate.h"
#include "schedulers/scheduler_config.h"
#include "test_util.h"

namespace xdit {
namespace {

struct Case {
  const char* file;  // which config
  const char* key;
  const char* value;   // JSON text
  const char* expect;  // in the message
};

// The four configs of a PixArt folder, each parsed by parse_error below.
const char* const kConfigFiles[] = {"transformer/config.json", "text_encoder/config.json",
                                    "vae/config.json", "scheduler/scheduler_config.json"};

// The shipped tiny model's config of `file` with `key` set to `value`.
io::Json with(const char* file, const char* key, const char* value) {
  io::Json j = io::read_json_file(std::string(XDIT_MODELS) + "/pixart-alpha-tiny/" + file);
  j[key] = io::parse_json_text(value, "test value");
  return j;
}

std::string parse_error(const char* file, const io::Json& j) {
  const std::string f = file;
  return test::error_message([&] {
    if (f.rfind("transformer", 0) == 0) models::PixArtConfig::from_json(j, f);
    if (f.rfind("text_encoder", 0) == 0) models::T5Config::from_json(j, f);
    if (f.rfind("vae", 0) == 0) models::VaeConfig::from_json(j, f);
    if (f.rfind("scheduler", 0) == 0) {
      const auto s = schedulers::SchedulerConfig::from_json(j, f).make();
      for (int64_t n : {1, 20, 999}) s->set_timesteps(n, {});
    }
  });
}

TEST(Configs, ShippedConfigsParse) {
  for (const char* f : kConfigFiles)
    EXPECT_EQ(
        parse_error(f, io::read_json_file(std::string(XDIT_MODELS) + "/pixart-alpha-tiny/" + f)),
        "(no error)")
        << f;
}

TEST(Configs, EachBadValueIsNamedWithItsFile) {
  const std::string sixty_six = [] {
    std::string s = "[";
    for (int i = 0; i < 66; ++i) s += i ? ",8" : "8";
    return s + "]";
  }();
  const Case cases[] = {
      // VAE: the values that crashed.
      {"vae/config.json", "norm_num_groups", "0", "\"norm_num_groups\" is 0, outside 1"},
      {"vae/config.json", "layers_per_block", "-1", "\"layers_per_block\" is -1, outside 1"},
      {"vae/config.json", "block_out_channels", sixty_six.c_str(), "list of 1 … 8 integers"},
      {"vae/config.json", "block_out_channels", "[8, \"16\", 16, 24]",
       "should hold integers, found \"16\""},
      {"vae/config.json", "block_out_channels", "[]", "list of 1 … 8 integers"},
      {"vae/config.json", "block_out_channels", "[8, 12, 16, 24]", "multiple of norm_num_groups"},
      {"vae/config.json", "block_out_channels", "[8, 16, 16, 24, 24]", "up_block_types"},
      {"vae/config.json", "latent_channels", "\"4\"", "should be an integer, found \"4\""},
      {"vae/config.json", "scaling_factor", "\"NaN\"", "should be a finite number"},
      {"vae/config.json", "scaling_factor", "0", "scaling_factor must not be 0"},
      {"vae/config.json", "in_channels", "1e300", "should be an integer"},
      {"vae/config.json", "act_fn", "\"relu\"", "act_fn"},
      {"vae/config.json", "use_post_quant_conv", "1", "should be true or false"},
      // Transformer: products that overflowed, and zero sizes.
      {"transformer/config.json", "num_attention_heads", "4611686018427387904",
       "\"num_attention_heads\" is 4611686018427387904, outside 1"},
      {"transformer/config.json", "attention_head_dim", "5000", "outside 1 … 4096"},
      {"transformer/config.json", "num_layers", "0", "\"num_layers\" is 0, outside 1"},
      {"transformer/config.json", "patch_size", "-2", "\"patch_size\" is -2"},
      {"transformer/config.json", "sample_size", "[128]", "should be an integer, found [128]"},
      {"transformer/config.json", "norm_eps", "\"Infinity\"", "should be a finite number"},
      {"transformer/config.json", "interpolation_scale", "0",
       "interpolation_scale must be positive"},
      {"transformer/config.json", "_class_name", "\"FluxTransformer2DModel\"",
       "FluxTransformer2DModel is not supported"},
      {"transformer/config.json", "norm_type", "\"layer_norm\"", "norm_type"},
      // T5: sizes, and the bucket formula's divisions.
      {"text_encoder/config.json", "d_model", "0", "\"d_model\" is 0"},
      {"text_encoder/config.json", "num_heads", "100000", "\"num_heads\" is 100000"},
      {"text_encoder/config.json", "relative_attention_num_buckets", "2",
       "\"relative_attention_num_buckets\" is 2, outside 4"},
      {"text_encoder/config.json", "relative_attention_max_distance", "8",
       "\"relative_attention_max_distance\" is 8, outside 9"},
      {"text_encoder/config.json", "layer_norm_epsilon", "-1", "layer_norm_epsilon must be >= 0"},
      {"text_encoder/config.json", "feed_forward_proj", "\"gated-silu\"", "gated-silu"},
      // Scheduler: sizes and a schedule outside the training steps.
      {"scheduler/scheduler_config.json", "num_train_timesteps", "1",
       "\"num_train_timesteps\" is 1, outside 2"},
      {"scheduler/scheduler_config.json", "num_train_timesteps", "99999999999",
       "outside 2 … 1048576"},
      {"scheduler/scheduler_config.json", "steps_offset", "1000", "\"steps_offset\" is 1000"},
      {"scheduler/scheduler_config.json", "beta_end", "1.5", "must lie in (0, 1)"},
      {"scheduler/scheduler_config.json", "lambda_min_clipped", "\"NaN\"",
       "should be a finite number"},
      {"scheduler/scheduler_config.json", "lambda_min_clipped", "1e9", "clips the whole"},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.file, with(c.file, c.key, c.value));
    EXPECT_NE(msg.find(c.expect), std::string::npos)
        << c.file << " " << c.key << "=" << c.value << ": " << msg;
    const std::string name = std::string(c.file).substr(std::string(c.file).find('/') + 1);
    EXPECT_NE(msg.find(name), std::string::npos) << "the file is named: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(Configs, LeadingSpacingWithAnOffsetPastTheScheduleIsRefused) {
  io::Json j = with("scheduler/scheduler_config.json", "timestep_spacing", "\"leading\"");
  j["steps_offset"] = 999;
  const std::string msg = parse_error("scheduler/scheduler_config.json", j);
  EXPECT_NE(msg.find("outside its 1000 training steps"), std::string::npos) << msg;
}

TEST(Configs, ATopLevelThatIsNotAnObjectIsRefused) {
  for (const char* f : kConfigFiles) {
    const std::string msg = parse_error(f, io::parse_json_text("[1, 2]", "x"));
    EXPECT_NE(msg.find("should hold a JSON object"), std::string::npos) << f << ": " << msg;
  }
}

TEST(Configs, PythonInfinityIsAllowedOnlyWhereDiffusersWritesIt) {
  const io::Json j = io::parse_json_text(R"({"a": -Infinity, "b": NaN})", "x");
  EXPECT_EQ(io::number_or(j, "a", 0, "x", true), -std::numeric_limits<double>::infinity());
  EXPECT_NE(test::error_message([&] { io::number_or(j, "a", 0, "x"); }).find("finite"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { io::number_or(j, "b", 0, "x", true); }).find("finite"),
            std::string::npos);
}

TEST(Seeds, TorchRangeAndWrapping) {
  EXPECT_EQ(parse_torch_seed("42"), 42u);
  EXPECT_EQ(parse_torch_seed("+7"), 7u);
  EXPECT_EQ(parse_torch_seed("18446744073709551615"), 18446744073709551615u);
  // torch: a negative seed is its two's complement (Generator.cpp unpack_uint64).
  EXPECT_EQ(parse_torch_seed("-1"), 18446744073709551615u);
  EXPECT_EQ(parse_torch_seed("-9223372036854775808"), 9223372036854775808u);
  for (const char* bad : {"18446744073709551616", "-9223372036854775809", "99999999999999999999",
                          "", "-", "12abc", "1.5", " 3"})
    EXPECT_NE(test::error_message([&] { parse_torch_seed(bad); }).find("is not a seed"),
              std::string::npos)
        << bad;
}

TEST(NonFinite, CountedInEveryStoredType) {
  auto v = test::randn(37, 3);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[11] = std::numeric_limits<float>::infinity();
  v[36] = -std::numeric_limits<float>::infinity();
  Tensor t = Tensor::from_vector(v, {37});
  EXPECT_EQ(count_nonfinite(t), 3);
  EXPECT_EQ(count_nonfinite(t.to(DType::kBF16)), 3);
  EXPECT_EQ(count_nonfinite(t.to(DType::kF16)), 3);
  v[5] = 65504.0f * 2;  // finite in f32, Inf in f16
  EXPECT_EQ(count_nonfinite(Tensor::from_vector(v, {37})), 2);
  EXPECT_EQ(count_nonfinite(Tensor::from_vector(v, {37}).to(DType::kF16)), 3);
  EXPECT_EQ(count_nonfinite(Tensor()), 0);
}

TEST(MemoryEstimate, GrowsWithTheRequestAndRefusesWhatCannotFit) {
  const models::PixArtConfig c = models::PixArtConfig::alpha_xl_1024();
  const models::T5Config t5 = models::T5Config::xxl();
  const models::VaeConfig vae;
  pipeline::MemoryQuery q;
  q.run_height = q.out_height = q.run_width = q.out_width = 1024;
  q.text_tokens = 120;
  q.t5 = &t5;
  q.vae = &vae;
  const auto base = pipeline::estimate_memory(c, q);
  // PixArt-α XL: 0.6 B parameters (1.2 GB in bf16); T5-XXL 4.8 B (9.5 GB).
  EXPECT_NEAR(base.transformer / 1e9, 1.22, 0.05);
  EXPECT_NEAR(base.text_encoder / 1e9, 9.6, 0.3);
  EXPECT_GT(base.peak(), base.text_encoder - 1);
  // Split over 2 ranks: the blocks halve, the embedding (0.13 B) stays whole
  // (counted in f32); streamed a block at a time: about two of 24 blocks.
  auto split = q;
  split.text_parallel = 2;
  EXPECT_NEAR(pipeline::estimate_memory(c, split).text_encoder / 1e9, 5.2, 0.2);
  auto streamed = q;
  streamed.text_streamed = true;
  const auto s = pipeline::estimate_memory(c, streamed);
  EXPECT_NEAR(s.text_encoder / 1e9, 1.3, 0.2);
  // One-shot: the transformer is not held while the VAE decodes.
  streamed.one_shot = true;
  const auto o = pipeline::estimate_memory(c, streamed);
  EXPECT_DOUBLE_EQ(o.peak(),
                   std::max({o.text_encoder, o.transformer + o.denoise, o.decode + o.output}));
  EXPECT_NEAR(s.peak() - o.peak(), o.transformer, 1.0) << "1024 px: decoding is the peak";
  auto bigger = q;
  bigger.out_height = bigger.out_width = 100000;  // the binning resize to 100000 px
  EXPECT_GT(pipeline::estimate_memory(c, bigger).output, 1e11);
  bigger = q;
  bigger.run_height = bigger.run_width = bigger.out_height = bigger.out_width = 1 << 20;
  EXPECT_GT(pipeline::estimate_memory(c, bigger).peak(), 1e15);  // no overflow, just huge
  auto pp = q;
  pp.pipeline_stages = 4;
  EXPECT_NEAR(pipeline::estimate_memory(c, pp).transformer, base.transformer / 4, 1);
  // Quantized layers (a GGUF's Q8_0 blocks: 34 bytes a 32 weights; int8):
  // their bytes a parameter, never above the compute type's.
  auto q8 = q;
  q8.transformer_bytes_per_parameter = 34.0 / 32;
  EXPECT_NEAR(pipeline::estimate_memory(c, q8).transformer, base.transformer * 17 / 32, 1);
  q8.transformer_bytes_per_parameter = 8;
  EXPECT_NEAR(pipeline::estimate_memory(c, q8).transformer, base.transformer, 1);
  pipeline::MemoryEstimate absurd;
  absurd.denoise = 1e18;
  const std::string msg = test::error_message([&] { pipeline::check_memory(absurd); });
  EXPECT_NE(msg.find("needs about 1000000.00 TB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is available"), std::string::npos) << msg;
  EXPECT_EQ(test::error_message([&] { pipeline::check_memory(base); }), "(no error)");
}

}  // namespace
}  // namespace xdit
