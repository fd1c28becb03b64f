// LoRA merging against diffusers' (tools/goldens/make_lora.py): two peft
// LoRAs on the tiny FLUX.1 [schnell], SD3, SD3.5, Z-Image and Qwen-Image — one with adapter
// metadata (alpha ≠ rank), one without (alpha = rank), overlapping on to_q — at scales 0.7 and −0.4
// give every adapted weight diffusers' fuse_lora gives, whole and as tensor-parallel shares, and
// diffusers' images; every bad file or setting is one line before a weight is read.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "io/json.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "lora_request.h"
#include "nn/lora.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/lora/" + name;
}

// The tiny model of a golden family ("flux", "sd3", "sd35", "zimage", "qwen_image").
std::string model_dir(const std::string& family = "flux") {
  return test::models_dir() + (family == "flux"         ? "/flux-schnell-tiny"
                               : family == "sd3"        ? "/sd3-tiny"
                               : family == "zimage"     ? "/zimage-tiny"
                               : family == "qwen_image" ? "/qwen-image-tiny"
                                                        : "/sd35-tiny");
}

// make_lora.py's FAMILIES[family]["image"] as the images file's metadata records it.
pipeline::ImageRequest recorded_request(const std::string& family) {
  io::SafeTensorsFile f(data(family + "_images.safetensors"));
  const io::Json m = io::parse_json_text(f.metadata().at("request"), "request");
  pipeline::ImageRequest r;
  r.prompts = {m["prompt"].get<std::string>()};
  if (m.contains("negative_prompt")) r.negative_prompt = m["negative_prompt"].get<std::string>();
  r.height = m["height"].get<int64_t>();
  r.width = m["width"].get<int64_t>();
  r.num_inference_steps = m["num_inference_steps"].get<int64_t>();
  if (m.contains("guidance_scale")) r.guidance_scale = m["guidance_scale"].get<double>();
  r.max_sequence_length = m["max_sequence_length"].get<int64_t>();
  r.seed = m["seed"].get<uint64_t>();
  return r;
}

std::string transformer_dir() {
  return model_dir() + "/transformer";
}

std::vector<nn::LoraUse> both(double a = 0.7, double b = -0.4, const std::string& family = "flux") {
  return {{std::make_shared<nn::LoraFile>(data(family + "_a.safetensors")), a},
          {std::make_shared<nn::LoraFile>(data(family + "_b.safetensors")), b}};
}

class LoraFamily : public testing::TestWithParam<std::string> {};

TEST_P(LoraFamily, MergedWeightsAreDiffusers) {
  const std::string family = GetParam();
  const io::WeightStore base(model_dir(family) + "/transformer");
  const nn::LoraWeights merged(base, both(0.7, -0.4, family), "transformer");
  const auto want = io::read_safetensors_f32(data(family + "_merged.safetensors"));
  ASSERT_EQ(merged.adapted(), want.size());
  int checked = 0;
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    const Tensor got = merged.get(name, w.shape());
    const Tensor plain = base.get(name, w.shape()).as(DType::kF32, Device{});
    EXPECT_LE(test::rel_max_err(got.to_vector(), w.to_vector()), 1e-5);
    EXPECT_GT(test::rel_max_err(plain.to_vector(), w.to_vector()), 1e-2) << "the LoRA changes it";
    // A tensor-parallel share: rows (column-parallel layers) and columns
    // (row-parallel ones), each an uneven part.
    const int64_t rows = w.dim(0) / 3, cols = w.dim(1) / 3;
    const Tensor r = merged.get_slice(name, w.shape(), 0, 1, rows);
    const Tensor c = merged.get_slice(name, w.shape(), 1, 2, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < w.dim(1); ++j)
        ASSERT_NEAR(r.data<float>()[i * w.dim(1) + j], w.data<float>()[(1 + i) * w.dim(1) + j],
                    1e-5);
    for (int64_t i = 0; i < w.dim(0); ++i)
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_NEAR(c.data<float>()[i * cols + j], w.data<float>()[i * w.dim(1) + 2 + j], 1e-5);
    ++checked;
  }
  EXPECT_GE(checked, 20);
  // An unadapted weight passes through untouched (each family's final projection).
  const std::string last = family == "zimage" ? "all_final_layer.2-1.linear.bias" : "proj_out.bias";
  const Shape bias{base.shape(last)};
  EXPECT_EQ(merged.get(last, bias).to_vector(), base.get(last, bias).to_vector());
}

// Prompt to image on the tiny FLUX.1 [schnell] and SD3 (CFG) against
// diffusers with the adapters loaded (unfused) and set_adapters' weights:
// within 1/255.
TEST_P(LoraFamily, ImagesAreDiffusers) {
  const std::string family = GetParam();
  const auto want = io::read_safetensors_f32(data(family + "_images.safetensors"));
  std::map<std::string, std::vector<nn::LoraUse>> cases = {
      {"none", {}},
      {"one", {{std::make_shared<nn::LoraFile>(data(family + "_a.safetensors")), 1.0}}},
      {"two", both(0.7, -0.4, family)}};
  if (family == "flux" ||
      family == "sd3")  // the transformer and the CLIP encoders diffusers adapts
    cases["te"] = {{std::make_shared<nn::LoraFile>(data(family + "_te.safetensors")), 0.8}};
  std::map<std::string, std::vector<uint8_t>> got;
  for (const auto& [name, loras] : cases) {
    SCOPED_TRACE(name);
    pipeline::Pipeline pipe(model_dir(family), DType::kF32);
    pipe.set_loras(loras);
    pipeline::ImageRequest r;  // make_lora.py's FAMILIES[family]["image"]
    r.prompts = {"a red fox in the snow"};
    r.num_inference_steps = 4;
    r.max_sequence_length = 32;
    if (family == "flux") {
      r.height = 48;
      r.width = 80;
      r.guidance_scale = 0.0;
      r.seed = 0;
    } else if (family == "sd3") {
      r.negative_prompt = "blurry";
      r.height = 48;
      r.width = 64;
      r.guidance_scale = 5.0;
      r.seed = 1;
    } else if (family == "sd35") {
      r = test::sd35_lora_request();
    } else {
      r = recorded_request(family);
    }
    const pipeline::ImageResult out = pipe.generate(r);
    ASSERT_EQ(out.rgb.size(), 1u);
    EXPECT_LE(test::worst_pixel_difference(out.rgb, want.at(name).data<float>()), 1)
        << "largest per-pixel difference (of 255)";
    EXPECT_EQ(pipe.lora_label().empty(), loras.empty()) << pipe.lora_label();
    got[name] = out.rgb[0];
  }
  EXPECT_NE(got["one"], got["none"]) << "the LoRA must change the picture";
  EXPECT_NE(got["two"], got["one"]);
  if (got.count("te")) {
    EXPECT_NE(got["te"], got["none"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LoraFamily,
                         testing::Values("flux", "sd3", "sd35", "zimage", "qwen_image"));

// Merged while int8 layers load (--weights_dtype int8 with --lora): the
// merged weight is the same f32 one (its layer then quantizes it once).
TEST(Lora, MergeUnderAQuantizingLoadIsTheSame) {
  const io::WeightStore base(transformer_dir());
  const nn::LoraWeights merged(base, both(0.7, -0.4), "transformer");
  const auto f32 = io::read_safetensors_f32(data("flux_merged.safetensors"));
  for (const auto& [name, w] : f32) {
    SCOPED_TRACE(name);
    const std::vector<float> plain = merged.get(name, w.shape()).to_vector();
    const kernels::WeightFormatScope int8(kernels::WeightFormat::kInt8);
    EXPECT_EQ(merged.get(name, w.shape()).to_vector(), plain);
  }
}

// bf16 layers: the merged weight is formed in f32 and rounded once when the
// layer packs it — the f32 merge rounded equals the f32 golden rounded (up
// to ties the 1e-5 agreement moves). diffusers' bf16 fuse rounds A and B to
// bf16 first, then the delta, then the sum: within 2 % of the weight's
// largest value of ours.
TEST(Lora, Bf16MergeRoundsOnce) {
  const io::WeightStore base(transformer_dir());
  const nn::LoraWeights merged(base, both(0.7, -0.4), "transformer");
  const auto f32 = io::read_safetensors_f32(data("flux_merged.safetensors"));
  const auto peft = io::read_safetensors_f32(data("flux_merged_bf16.safetensors"));
  ASSERT_EQ(peft.size(), f32.size());
  const auto round = [](const std::vector<float>& v) {
    std::vector<uint16_t> r(v.size());
    convert_from_f32(v.data(), r.data(), DType::kBF16, v.size());
    std::vector<float> back(v.size());
    convert_to_f32(r.data(), DType::kBF16, back.data(), back.size());
    return back;
  };
  size_t values = 0, ours_exact = 0, peft_equal = 0;
  for (const auto& [name, w] : f32) {
    SCOPED_TRACE(name);
    const Tensor got = merged.get(name, w.shape());
    ASSERT_EQ(got.dtype(), DType::kF32) << "handed to the layer unrounded";
    const std::vector<float> ours = round(got.to_vector()), want = round(w.to_vector());
    const std::vector<float> p = peft.at(name).to_vector();
    float largest = 0, worst = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      ours_exact += ours[i] == want[i];
      peft_equal += ours[i] == p[i];
      largest = std::max(largest, std::abs(ours[i]));
      worst = std::max(worst, std::abs(ours[i] - p[i]));
    }
    EXPECT_LE(worst, 0.02f * largest);
    values += ours.size();
  }
  EXPECT_GE(static_cast<double>(ours_exact), 0.999 * static_cast<double>(values));
  std::printf("bf16 merge: %zu values, %.3f %% equal the rounded f32 golden, %.1f %% peft's\n",
              values, 100.0 * static_cast<double>(ours_exact) / static_cast<double>(values),
              100.0 * static_cast<double>(peft_equal) / static_cast<double>(values));
}

TEST(Lora, ScaleZeroIsTheBaseModel) {
  const io::WeightStore base(transformer_dir());
  const nn::LoraWeights merged(base, both(0.0, 0.0), "transformer");
  const std::string name = "transformer_blocks.0.attn.to_q.weight";
  const Shape s = base.shape(name);
  EXPECT_EQ(merged.get(name, s).to_vector(),
            base.get(name, s).as(DType::kF32, Device{}).to_vector());
}

class LoraBadInput : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xdit_lora_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A LoRA file of A [ra, in] and B [out, rb] on `module`, first value `first`.
  std::string write(const std::string& module, int64_t ra, int64_t in, int64_t out, int64_t rb,
                    float first = 0.5f) {
    Tensor a = Tensor::from_vector(test::randn(static_cast<size_t>(ra * in), 1), {ra, in});
    Tensor b = Tensor::from_vector(test::randn(static_cast<size_t>(out * rb), 2), {out, rb});
    a.data<float>()[0] = first;
    const std::string path = (dir_ / (module + std::to_string(++n_) + ".safetensors")).string();
    io::write_safetensors(path, {{"transformer." + module + ".lora_A.weight", a},
                                 {"transformer." + module + ".lora_B.weight", b}});
    return path;
  }
  std::string error(const std::string& path, double scale = 1.0, bool ignore = false) {
    return test::error_message([&] {
      const io::WeightStore base(transformer_dir());
      nn::LoraWeights w(base, {{std::make_shared<nn::LoraFile>(path), scale}}, "transformer",
                        ignore);
    });
  }
  fs::path dir_;
  int n_ = 0;
};

TEST_F(LoraBadInput, EachIsOneLine) {
  const io::WeightStore base(transformer_dir());
  const Shape q = base.shape("transformer_blocks.0.attn.to_q.weight");
  const std::string mod = "transformer_blocks.0.attn.to_q";
  const auto expect = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  expect(error(write(mod, 4, q[1] + 1, q[0], 4)), "a LoRA for another model?");
  expect(error(write(mod, 4, q[1], q[0], 3)), "rank mismatch");
  expect(error(write(mod, 4, q[1], q[0], 4, std::numeric_limits<float>::quiet_NaN())),
         "NaN or Inf");
  expect(error(write("no_such_block.attn", 2, 8, 8, 2)), "match nothing in the model's");
  EXPECT_EQ(error(write("no_such_block.attn", 2, 8, 8, 2), 1.0, true), "(no error)");  // ignored
  expect(error(write(mod, 4, q[1], q[0], 4), std::numeric_limits<double>::infinity()),
         "is not a finite number");
  // Another format, and a truncated file.
  const std::string other = (dir_ / "other.safetensors").string();
  io::write_safetensors(other, {{"lora_unet_x.lora_down.weight", Tensor::zeros({2, 2})}});
  expect(error(other), "no adapter in it of a known format");
  const std::string control = (dir_ / "control.safetensors").string();
  io::write_safetensors(control, {{"double_blocks.0.img_attn.norm.query_norm.scale",
                                   Tensor::from_vector({1, 1, 1, 1}, {4})}});
  expect(error(control), "a Flux Control LoRA");
  // A component FLUX.1 has not (text_encoder_3): refused, or left out when
  // asked. (All-zero adapters change nothing and are left out: random ones.)
  const auto rnd = [](Shape s, uint64_t seed) {
    return Tensor::from_vector(test::randn(static_cast<size_t>(shape_numel(s)), seed), s);
  };
  const std::string te = (dir_ / "te.safetensors").string();
  io::write_safetensors(te, {{"transformer." + mod + ".lora_A.weight", rnd({2, q[1]}, 5)},
                             {"transformer." + mod + ".lora_B.weight", rnd({q[0], 2}, 6)},
                             {"text_encoder_3.encoder.x.lora_A.weight", rnd({2, 4}, 7)},
                             {"text_encoder_3.encoder.x.lora_B.weight", rnd({4, 2}, 8)}});
  const auto set = [&](bool ignore) {
    return test::error_message([&] {
      pipeline::Pipeline pipe(model_dir(), DType::kF32);
      pipe.set_loras({{std::make_shared<nn::LoraFile>(te), 1.0}}, ignore);
    });
  };
  expect(set(false), "adapts the text_encoder_3; xdit adapts");
  EXPECT_EQ(set(true), "(no error)");
  // Tensors no module takes (a DoRA scale, an all-zero diff_b): listed and
  // refused whatever their values (issue 68), or skipped when asked.
  const Tensor dora = Tensor::from_vector(test::randn(4, 3), {4});
  io::write_safetensors(te, {{"transformer." + mod + ".lora_A.weight", rnd({2, q[1]}, 5)},
                             {"transformer." + mod + ".lora_B.weight", rnd({q[0], 2}, 6)},
                             {"transformer." + mod + ".dora_scale", dora},
                             {"transformer.zero.diff_b", Tensor::zeros({4})}});
  const std::string unread = set(false);
  expect(unread, "2 tensors adapt nothing xdit applies: transformer." + mod + ".dora_scale");
  expect(unread, "transformer.zero.diff_b");
  EXPECT_EQ(set(true), "(no error)");
  const std::string good = write(mod, 4, q[1], q[0], 4);
  fs::resize_file(good, fs::file_size(good) - 16);
  const std::string truncated = error(good);
  EXPECT_NE(truncated, "(no error)");
  EXPECT_EQ(truncated.find('\n'), std::string::npos) << truncated;
}

// Issue 68: every module is matched before all-zero adapters are left
// out. A LoRA whose extra adapters sit under a root the model lacks — as
// peft initialises them, B all zeros — is refused naming them (it passed
// with the base image before); --lora_ignore_unmatched applies the valid
// one, counts the rest, and the label says so.
TEST_F(LoraBadInput, ZeroAdaptersThatMatchNothingAreRefusedNotDropped) {
  const io::WeightStore base(transformer_dir());
  const Shape q = base.shape("transformer_blocks.0.attn.to_q.weight");
  const std::string mod = "transformer_blocks.0.attn.to_q";
  const auto rnd = [](Shape sh, uint64_t seed) {
    return Tensor::from_vector(test::randn(static_cast<size_t>(shape_numel(sh)), seed), sh);
  };
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"transformer." + mod + ".lora_A.weight", rnd({2, q[1]}, 5)},
      {"transformer." + mod + ".lora_B.weight", rnd({q[0], 2}, 6)}};
  constexpr int kJunk = 300;
  for (int i = 0; i < kJunk; ++i) {
    const std::string m = "transformer.nonexistent_blocks." + std::to_string(i) + ".to_q";
    tensors.emplace_back(m + ".lora_A.weight", rnd({2, 8}, 10 + static_cast<uint64_t>(i)));
    tensors.emplace_back(m + ".lora_B.weight", Tensor::zeros({8, 2}));
  }
  const std::string mixed = (dir_ / "mixed.safetensors").string();
  io::write_safetensors(mixed, tensors);
  const std::string e = error(mixed);
  EXPECT_NE(e.find(std::to_string(kJunk) + " adapted modules match nothing"), std::string::npos)
      << e;
  EXPECT_NE(e.find("nonexistent_blocks."), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // Skipped when asked: the valid adapter applied, the rest counted.
  const nn::LoraWeights w(base, {{std::make_shared<nn::LoraFile>(mixed), 1.0}}, "transformer",
                          /*ignore_unmatched=*/true);
  EXPECT_EQ(w.adapted(), 1u);
  EXPECT_EQ(w.skipped(), kJunk);
  EXPECT_NE(w.get(mod + ".weight", q).to_vector(),
            base.get(mod + ".weight", q).as(DType::kF32, Device{}).to_vector())
      << "the valid adapter changes its weight";
  pipeline::Pipeline pipe(model_dir(), DType::kF32);
  pipe.set_loras({{std::make_shared<nn::LoraFile>(mixed), 1.0}}, true);
  EXPECT_NE(pipe.lora_label().find("; " + std::to_string(kJunk) + " unmatched skipped"),
            std::string::npos)
      << pipe.lora_label();
  // A zero adapter on a real block but a module name the model lacks, too.
  const std::string wrong = (dir_ / "wrong.safetensors").string();
  io::write_safetensors(
      wrong, {{"transformer.transformer_blocks.0.attn.to_nothing.lora_A.weight", rnd({2, q[1]}, 7)},
              {"transformer.transformer_blocks.0.attn.to_nothing.lora_B.weight",
               Tensor::zeros({q[0], 2})}});
  EXPECT_NE(error(wrong).find("1 adapted modules match nothing"), std::string::npos)
      << error(wrong);
  // A zero adapter on a module the model has changes nothing and passes.
  const std::string zero = (dir_ / "zero.safetensors").string();
  io::write_safetensors(zero,
                        {{"transformer." + mod + ".lora_A.weight", rnd({2, q[1]}, 8)},
                         {"transformer." + mod + ".lora_B.weight", Tensor::zeros({q[0], 2})}});
  EXPECT_EQ(error(zero), "(no error)");
  const nn::LoraWeights z(base, {{std::make_shared<nn::LoraFile>(zero), 1.0}}, "transformer");
  EXPECT_EQ(z.adapted(), 0u);
}

// alpha / rank from the file's `.alpha`, else the metadata's lora_alpha,
// else rank; an alpha of 0 (either) leaves its adapter out: it changes nothing.
TEST_F(LoraBadInput, AlphaComesFromTheFileTheMetadataOrTheRank) {
  const auto rnd = [](Shape sh, uint64_t seed) {
    return Tensor::from_vector(test::randn(static_cast<size_t>(shape_numel(sh)), seed), sh);
  };
  const std::string path = (dir_ / "alpha.safetensors").string();
  const auto pair = [&](const std::string& m, uint64_t seed) {
    return std::vector<std::pair<std::string, Tensor>>{
        {"transformer." + m + ".lora_A.weight", rnd({2, 8}, seed)},
        {"transformer." + m + ".lora_B.weight", rnd({8, 2}, seed + 1)}};
  };
  std::vector<std::pair<std::string, Tensor>> t;
  for (const char* m : {"a", "b", "c"})
    for (auto& kv : pair(m, t.size() + 1)) t.push_back(kv);
  t.push_back({"transformer.a.alpha", Tensor::from_vector({6.0f}, {1})});
  t.push_back({"transformer.b.alpha", Tensor::from_vector({0.0f}, {1})});
  io::write_safetensors(path, t, {{"lora_adapter_metadata", R"({"transformer.lora_alpha": 3})"}});
  const nn::LoraFile with_meta(path);
  const auto& m = with_meta.modules("transformer");
  EXPECT_EQ(m.at("a").alpha, 6.0);  // its own
  EXPECT_TRUE(m.at("b").zero);      // alpha 0: matched, then left out
  EXPECT_EQ(m.at("c").alpha, 3.0);  // the metadata's
  io::write_safetensors(path, t, {{"lora_adapter_metadata", R"({"transformer.lora_alpha": 0})"}});
  EXPECT_TRUE(nn::LoraFile(path).modules("transformer").at("c").zero);
  io::write_safetensors(path, t);
  EXPECT_EQ(nn::LoraFile(path).modules("transformer").at("c").alpha, 2.0);  // the rank
}

// The files requests name are read into memory: one truncated or removed
// after the read is still whole in the cache; one rewritten is read anew;
// the least recently used go past the capacity.
TEST_F(LoraBadInput, RequestCacheCopiesAndRereadsChangedFiles) {
  const io::WeightStore base(transformer_dir());
  const Shape q = base.shape("transformer_blocks.0.attn.to_q.weight");
  const std::string mod = "transformer_blocks.0.attn.to_q";
  nn::LoraFileCache cache(2);
  const std::string a = write(mod, 2, q[1], q[0], 2, 0.25f);
  const auto first = cache.get(a);
  EXPECT_EQ(cache.get(a), first);  // unchanged: the same copy
  const std::vector<float> down = first->down(first->modules("transformer").at(mod)).to_vector();
  fs::resize_file(a, 8);  // a mapping would fault (SIGBUS) here
  EXPECT_EQ(first->down(first->modules("transformer").at(mod)).to_vector(), down);
  fs::remove(a);
  EXPECT_EQ(first->down(first->modules("transformer").at(mod)).to_vector()[0], 0.25f);
  EXPECT_NE(test::error_message([&] { cache.get(a); }).find("missing file"), std::string::npos);
  // Rewritten (another first value, a later time): read anew.
  const std::string b = write(mod, 2, q[1], q[0], 2, 0.5f);
  const auto old_b = cache.get(b);
  fs::copy_file(write(mod, 2, q[1], q[0], 2, -0.75f), b, fs::copy_options::overwrite_existing);
  fs::last_write_time(b, fs::last_write_time(b) + std::chrono::seconds(2));
  const auto new_b = cache.get(b);
  EXPECT_NE(new_b, old_b);
  EXPECT_EQ(new_b->down(new_b->modules("transformer").at(mod)).to_vector()[0], -0.75f);
  EXPECT_EQ(old_b->down(old_b->modules("transformer").at(mod)).to_vector()[0], 0.5f);
  // Capacity 2: a third file evicts the least recently used (b's path was used last).
  const std::string c = write(mod, 2, q[1], q[0], 2), d = write(mod, 2, q[1], q[0], 2);
  cache.get(c);
  cache.get(b);
  cache.get(d);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get(b), new_b);  // kept
}

}  // namespace
}  // namespace xdit
