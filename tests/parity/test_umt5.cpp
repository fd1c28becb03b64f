// UMT5 (Wan's text encoder) against transformers' UMT5EncoderModel: a tiny
// random one from tools/goldens/make_umt5.py, whose every block has its own
// relative-position bias table.
#include <gtest/gtest.h>

#include <algorithm>

#include "io/json.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/t5.h"
#include "test_util.h"

namespace xdit {
namespace {

const std::string kDir = std::string(XDIT_TEST_DATA) + "/umt5";

models::T5Config umt5_config() {
  return models::T5Config::from_json(io::read_json_file(kDir + "/text_encoder/config.json"),
                                     "umt5 config.json");
}

struct Golden {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  int64_t batch = 0, seq = 0;
  std::vector<float> embeds, unmasked;
};

Golden golden() {
  auto g = io::read_safetensors_f32(kDir + "/umt5_encoder.safetensors");
  Golden r;
  r.batch = g["ids"].dim(0);
  r.seq = g["ids"].dim(1);
  for (float v : g["ids"].to_vector()) r.ids.push_back(static_cast<int32_t>(v));
  for (float v : g["mask"].to_vector()) r.mask.push_back(v != 0);
  r.embeds = g["embeds"].to_vector();
  r.unmasked = g["unmasked"].to_vector();
  return r;
}

TEST(Umt5Encoder, ConfigNamesABiasTablePerBlock) {
  const models::T5Config c = umt5_config();
  EXPECT_TRUE(c.bias_per_block);
  EXPECT_EQ(c.num_layers, 3);
  int tables = 0;
  for (const auto& spec : c.weight_specs())
    tables += spec.first.find("relative_attention_bias") != std::string::npos;
  EXPECT_EQ(tables, 3);
  // A T5 folder keeps one table.
  models::T5Config t5 = c;
  t5.bias_per_block = false;
  tables = 0;
  for (const auto& spec : t5.weight_specs())
    tables += spec.first.find("relative_attention_bias") != std::string::npos;
  EXPECT_EQ(tables, 1);
}

TEST(Umt5Encoder, MaskedAndUnmaskedMatchTransformers) {
  const Golden g = golden();
  for (bool resident : {true, false}) {
    io::WeightStore w(kDir + "/text_encoder");
    models::T5Encoder enc(umt5_config(), w, DType::kF32, {}, resident);
    EXPECT_LE(test::rel_max_err(enc.encode(g.ids, g.mask, g.batch, g.seq).to_vector(), g.embeds),
              1e-4)
        << (resident ? "resident" : "streamed");
    EXPECT_LE(test::rel_max_err(enc.encode(g.ids, {}, g.batch, g.seq).to_vector(), g.unmasked),
              1e-4)
        << (resident ? "resident" : "streamed");
  }
}

TEST(Umt5Encoder, Bf16ComputeStaysClose) {
  const Golden g = golden();
  io::WeightStore w(kDir + "/text_encoder");
  models::T5Encoder enc(umt5_config(), w, DType::kBF16);
  EXPECT_LE(test::rel_max_err(enc.encode(g.ids, g.mask, g.batch, g.seq).to_vector(), g.embeds),
            3e-2);
}

// Block 0's table for every block (T5's rule) gives another answer: the
// golden tells the two apart.
TEST(Umt5Encoder, SharingBlockZerosTableIsWrong) {
  const Golden g = golden();
  models::T5Config c = umt5_config();
  c.bias_per_block = false;
  io::WeightStore w(kDir + "/text_encoder");
  models::T5Encoder enc(c, w, DType::kF32);
  EXPECT_GT(test::rel_max_err(enc.encode(g.ids, g.mask, g.batch, g.seq).to_vector(), g.embeds),
            1e-2);
}

}  // namespace
}  // namespace xdit
