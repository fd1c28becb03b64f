// T5 tokenizer and encoder against transformers (goldens from
// tools/goldens/make_pixart.py: a SentencePiece model trained there, a tiny
// random T5 v1.1 encoder stored in shards, and a bf16 copy of it).
#include <gtest/gtest.h>

#include "io/json.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "models/t5.h"
#include "pipeline/text_encoding.h"
#include "test_util.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit {
namespace {

const std::string kModel = std::string(XDIT_MODELS) + "/pixart-alpha-tiny";
const std::string kGolden = std::string(XDIT_TEST_DATA) + "/goldens/t5_encoder.safetensors";

std::vector<std::string> golden_prompts() {
  io::SafeTensorsFile f(kGolden);
  return io::parse_json_text(f.metadata().at("prompts"), "prompts").get<std::vector<std::string>>();
}

TEST(T5Tokenizer, IdsAndMasksEqualTransformers) {
  tokenizers::T5Tokenizer tok(kModel + "/tokenizer");
  auto g = io::read_safetensors_f32(kGolden);
  const auto prompts = golden_prompts();
  ASSERT_EQ(prompts.size(), 7u);
  for (int64_t max_len : {120, 300}) {
    auto ids = g["ids_" + std::to_string(max_len)].to_vector();
    auto mask = g["mask_" + std::to_string(max_len)].to_vector();
    for (size_t p = 0; p < prompts.size(); ++p) {
      tokenizers::Tokens t = tok.encode(tokenizers::lower_strip(prompts[p]), max_len);
      ASSERT_EQ(t.ids.size(), static_cast<size_t>(max_len));
      for (int64_t i = 0; i < max_len; ++i) {
        ASSERT_EQ(t.ids[i], static_cast<int32_t>(ids[p * max_len + i]))
            << "prompt " << p << " token " << i;
        ASSERT_EQ(t.mask[i], static_cast<uint8_t>(mask[p * max_len + i]))
            << "prompt " << p << " token " << i;
      }
    }
  }
  // The last prompt is longer than 120 tokens: truncated with EOS kept.
  tokenizers::Tokens t = tok.encode(tokenizers::lower_strip(prompts.back()), 120);
  EXPECT_TRUE(t.truncated());
  EXPECT_EQ(t.ids.back(), tokenizers::T5Tokenizer::kEos);
}

TEST(T5Tokenizer, LowerStripLikePython) {
  EXPECT_EQ(tokenizers::lower_strip("  A Photo of TWO Cats \n"), "a photo of two cats");
  EXPECT_EQ(tokenizers::lower_strip("\u00c9T\u00c9 \u0100B \u0391\u0392 \u0416"),
            "\u00e9t\u00e9 \u0101b \u03b1\u03b2 \u0436");
  EXPECT_EQ(tokenizers::lower_strip(" \t "), "");
  // Python 3.11's str.lower().strip() of each (printed with python3 -c):
  // final sigma, dotted capital I, Python's extra white space, capital
  // sharp s, title-case digraphs, Armenian and Cherokee.
  EXPECT_EQ(tokenizers::lower_strip("\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u039f\u03a3."),
            "\u03bf\u03b4\u03bf\u03c2 \u03c3\u03bf\u03c6\u03bf\u03c2.");
  EXPECT_EQ(tokenizers::lower_strip("\u0130STANBUL"), "i\u0307stanbul");
  EXPECT_EQ(tokenizers::lower_strip("\x1c abc \u3000"), "abc");
  EXPECT_EQ(tokenizers::lower_strip("\u1e9e STRASSE"), "\u00df strasse");
  EXPECT_EQ(tokenizers::lower_strip("\u01c5 \u01c8"), "\u01c6 \u01c9");
  EXPECT_EQ(tokenizers::lower_strip("\u0531 \u13a0"), "\u0561 \uab70");
}

TEST(T5Tokenizer, MissingModelIsNamed) {
  try {
    tokenizers::T5Tokenizer tok(std::string(XDIT_TEST_DATA) + "/no_such_dir");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spiece.model"), std::string::npos);
  }
}

TEST(T5Tokenizer, RelativeBucketsMatchTheFormula) {
  // Exact buckets for a few distances (T5: 32 buckets, max distance 128).
  EXPECT_EQ(models::t5_relative_bucket(0, 32, 128), 0);
  EXPECT_EQ(models::t5_relative_bucket(-7, 32, 128), 7);
  EXPECT_EQ(models::t5_relative_bucket(7, 32, 128), 23);
  EXPECT_EQ(models::t5_relative_bucket(-8, 32, 128), 8);
  EXPECT_EQ(models::t5_relative_bucket(-1000, 32, 128), 15);
  EXPECT_EQ(models::t5_relative_bucket(1000, 32, 128), 31);
}

double encoder_error(const std::string& folder, const std::string& golden,
                     const std::string& ids_key, const std::string& mask_key,
                     const std::string& out_key, DType dtype) {
  io::ModelFolder mf(kModel);
  auto cfg = models::T5Config::from_json(mf.component_config("text_encoder", "config.json"), "t5");
  io::WeightStore w(folder);
  models::T5Encoder enc(cfg, w, dtype);
  auto g = io::read_safetensors_f32(golden);
  const Tensor& ids = g[ids_key];
  const int64_t B = ids.dim(0), S = ids.dim(1);
  std::vector<int32_t> iv;
  std::vector<uint8_t> mv;
  for (float v : ids.to_vector()) iv.push_back(static_cast<int32_t>(v));
  for (float v : g[mask_key].to_vector()) mv.push_back(v != 0);
  Tensor out = enc.encode(iv, mv, B, S);
  EXPECT_EQ(out.shape(), g[out_key].shape());
  return test::rel_max_err(out.to_vector(), g[out_key].to_vector());
}

TEST(T5Encoder, ShardedF32MatchesTransformers) {
  EXPECT_LE(encoder_error(kModel + "/text_encoder", kGolden, "ids_120", "mask_120", "embeds_120",
                          DType::kF32),
            1e-4);
  EXPECT_LE(encoder_error(kModel + "/text_encoder", kGolden, "ids_300", "mask_300", "embeds_300",
                          DType::kF32),
            1e-4);
}

TEST(T5Encoder, Bf16CheckpointMatchesItsUpcast) {
  EXPECT_LE(encoder_error(std::string(XDIT_TEST_DATA) + "/t5_bf16",
                          std::string(XDIT_TEST_DATA) + "/goldens/t5_bf16.safetensors", "ids",
                          "mask", "embeds", DType::kF32),
            1e-4);
}

// FLUX / SD3: the prompt as given (no lower-casing), padded, and no mask.
TEST(T5Encoder, UnmaskedAsFluxAndSd3CallItMatchesTransformers) {
  const std::string file = std::string(XDIT_TEST_DATA) + "/goldens/t5_unmasked.safetensors";
  io::SafeTensorsFile f(file);
  const auto prompts =
      io::parse_json_text(f.metadata().at("prompts"), "prompts").get<std::vector<std::string>>();
  const int64_t L = std::stoll(f.metadata().at("length")), P = static_cast<int64_t>(prompts.size());
  auto g = io::read_safetensors_f32(file);
  const auto ids = g["ids"].to_vector();
  tokenizers::T5Tokenizer tok(kModel + "/tokenizer");
  std::vector<int32_t> iv;
  std::vector<uint8_t> mv;
  for (int64_t p = 0; p < P; ++p) {
    const tokenizers::Tokens t = tok.encode(prompts[static_cast<size_t>(p)], L);
    for (int64_t i = 0; i < L; ++i)
      ASSERT_EQ(t.ids[static_cast<size_t>(i)], static_cast<int32_t>(ids[p * L + i]))
          << "prompt " << p << " token " << i;
    iv.insert(iv.end(), t.ids.begin(), t.ids.end());
    mv.insert(mv.end(), t.mask.begin(), t.mask.end());
  }
  io::ModelFolder folder(kModel);
  const auto cfg = models::T5Config::from_json(
      folder.component_config("text_encoder", "config.json"), "text_encoder/config.json");
  io::WeightStore w(kModel + "/text_encoder");
  models::T5Encoder enc(cfg, w, DType::kF32);
  const Tensor unmasked = enc.encode(iv, {}, P, L);
  EXPECT_LE(test::rel_max_err(unmasked.to_vector(), g["embeds"].to_vector()), 1e-4);
  // The mask changes the result: the golden's masked run is far from it.
  const Tensor masked = enc.encode(iv, mv, P, L);
  EXPECT_LE(test::rel_max_err(masked.to_vector(), g["masked"].to_vector()), 1e-4);
  EXPECT_GT(test::rel_max_err(masked.to_vector(), g["embeds"].to_vector()), 1e-2);
}

// The pipelines' encode_t5: the masked form runs T5 only up to the longest
// text's last real token, encodes a repeated text once, and zeroes the
// padding; its real positions must still equal transformers' run over all
// 120 (or all L unmasked) positions.
TEST(T5Encoder, PipelineEncodeTrimsPaddingAndSharesRepeatsAgainstTransformers) {
  tokenizers::T5Tokenizer tok(kModel + "/tokenizer");
  io::ModelFolder folder(kModel);
  const auto cfg = models::T5Config::from_json(
      folder.component_config("text_encoder", "config.json"), "text_encoder/config.json");
  io::WeightStore w(kModel + "/text_encoder");
  models::T5Encoder enc(cfg, w, DType::kF32);
  const int64_t d = cfg.d_model;

  auto g = io::read_safetensors_f32(kGolden);
  const auto prompts = golden_prompts();
  const auto want = g["embeds_120"].to_vector();
  const auto want_mask = g["mask_120"].to_vector();
  // Without the last prompt (longer than 120 tokens) every text has padding.
  const std::vector<size_t> first{3, 0, 5, 1}, second{5, 2, 5, 0};
  std::vector<pipeline::T5Texts> lists(2);
  for (size_t p : first) lists[0].texts.push_back(prompts[p]);
  for (size_t p : second) lists[1].texts.push_back(prompts[p]);
  const auto out = pipeline::encode_t5(tok, enc, lists, 120, true, true);
  ASSERT_EQ(out.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const auto& order = l == 0 ? first : second;
    const Tensor& e = out[l].first;
    const Tensor& m = out[l].second;
    ASSERT_EQ(e.shape(), (Shape{4, 120, d}));
    ASSERT_EQ(m.shape(), (Shape{4, 120}));
    std::vector<float> got_real, want_real;
    int64_t padded = 0, real = 0;
    for (size_t b = 0; b < order.size(); ++b) {
      const size_t p = order[b];
      for (int64_t i = 0; i < 120; ++i) {
        const float mk = want_mask[p * 120 + static_cast<size_t>(i)];
        ASSERT_EQ(m.data<float>()[b * 120 + static_cast<size_t>(i)], mk) << "text " << p;
        const float* row = e.data<float>() + (static_cast<int64_t>(b) * 120 + i) * d;
        if (mk == 0.0f) {
          ++padded;
          for (int64_t c = 0; c < d; ++c) ASSERT_EQ(row[c], 0.0f) << "padding of text " << p;
          continue;
        }
        ++real;
        got_real.insert(got_real.end(), row, row + d);
        const size_t at = (p * 120 + static_cast<size_t>(i)) * static_cast<size_t>(d);
        want_real.insert(want_real.end(), want.begin() + static_cast<ptrdiff_t>(at),
                         want.begin() + static_cast<ptrdiff_t>(at + static_cast<size_t>(d)));
      }
    }
    EXPECT_GT(padded, real) << "the texts should be short enough to be padded";
    EXPECT_LE(test::rel_max_err(got_real, want_real), 1e-4) << "list " << l;
  }
  // A text in both lists, and twice in one, gets the same rows.
  const float* a = out[0].first.data<float>();  // prompts[5] is row 2 of list 0
  const float* b = out[1].first.data<float>();  // and rows 0 and 2 of list 1
  for (int64_t i = 0; i < 120 * d; ++i) {
    ASSERT_EQ(a[2 * 120 * d + i], b[i]);
    ASSERT_EQ(b[i], b[2 * 120 * d + i]);
  }

  // Unmasked (FLUX.1, SD3) nothing is trimmed: every position as transformers.
  const std::string file = std::string(XDIT_TEST_DATA) + "/goldens/t5_unmasked.safetensors";
  io::SafeTensorsFile f(file);
  const auto raw =
      io::parse_json_text(f.metadata().at("prompts"), "prompts").get<std::vector<std::string>>();
  const int64_t L = std::stoll(f.metadata().at("length"));
  const auto u = io::read_safetensors_f32(file);
  std::vector<std::string> twice = raw;
  twice.insert(twice.end(), raw.begin(), raw.end());
  const Tensor e = pipeline::encode_t5(tok, enc, twice, L, false, false, false).first;
  EXPECT_FALSE(pipeline::encode_t5(tok, enc, raw, L, false, false, false).second.defined());
  const auto wu = u.at("embeds").to_vector();
  auto ev = e.to_vector();
  EXPECT_LE(test::rel_max_err(std::vector<float>(ev.begin(), ev.begin() + wu.size()), wu), 1e-4);
  EXPECT_LE(test::rel_max_err(std::vector<float>(ev.begin() + wu.size(), ev.end()), wu), 1e-4);
}

// Built a block at a time in each encode (a one-shot pipeline's T5), the
// encoder computes what the resident one computes, bit for bit, in f32 and
// bf16 and from an f32 and a bf16 checkpoint; its constructor reads only the
// embedding, the position table and the final norm, and each encode reads
// the blocks once more.
TEST(T5Encoder, StreamedBlocksEqualResidentOnes) {
  io::ModelFolder mf(kModel);
  const auto cfg =
      models::T5Config::from_json(mf.component_config("text_encoder", "config.json"), "t5");
  const std::vector<int32_t> ids{3, 17, 42, 8, 1, 0, 5, 9, 12, 33, 2, 1, 0, 0};
  const std::vector<uint8_t> mask{1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0};
  for (const std::string& dir :
       {kModel + "/text_encoder", std::string(XDIT_TEST_DATA) + "/t5_bf16"}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(dir + (dt == DType::kF32 ? " f32" : " bf16"));
      io::WeightStore rw(dir), sw(dir);
      models::T5Encoder resident(cfg, rw, dt);
      models::T5Encoder streamed(cfg, sw, dt, {}, /*resident=*/false);
      const size_t all = rw.loaded().total, head = sw.loaded().total;
      EXPECT_LT(head, all / 2) << "the streamed constructor built blocks";
      const auto want = resident.encode(ids, mask, 2, 7).to_vector();
      EXPECT_EQ(streamed.encode(ids, mask, 2, 7).to_vector(), want);
      EXPECT_EQ(sw.loaded().total, all) << "one encode reads every block once";
      EXPECT_EQ(streamed.encode(ids, {}, 2, 7).to_vector(),
                resident.encode(ids, {}, 2, 7).to_vector());
      EXPECT_EQ(sw.loaded().total, 2 * all - head);
    }
  }
}

TEST(T5Encoder, Bf16Compute) {
  EXPECT_LE(encoder_error(kModel + "/text_encoder", kGolden, "ids_120", "mask_120", "embeds_120",
                          DType::kBF16),
            5e-2);
}

}  // namespace
}  // namespace xdit
