// LoRAs per request in xdit serve (--lora_dir, `loras`): requests with LoRA
// A, then A + B, then none each give `xdit generate`'s image (the CLI
// merges at load, the server keeps side paths: within 1/255; without LoRAs
// bit for bit) from one load of the base weights; names that are paths,
// links out of the folder, missing files and LoRAs that do not fit are
// refused naming the field.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "io/file.h"
#include "io/safetensors.h"

#include "serve/lora_dir.h"
#include "serve/request_schema.h"
#include "serve_util.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;

const std::string kModels = XDIT_MODELS;

std::string lora(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/lora/" + name + ".safetensors";
}

using ServeLora = test::ServeTest;

TEST_F(ServeLora, RequestsSwitchLorasAndEqualXditGenerate) {
  const fs::path loras = dir_ / "loras";
  fs::create_directories(loras);
  for (const char* n : {"flux_a", "flux_b", "flux_te", "sd3_a"})
    fs::copy_file(lora(n), loras / (std::string(n) + ".safetensors"));
  fs::copy_file(lora("flux_a"), dir_ / "outside.safetensors");
  fs::create_symlink(dir_ / "outside.safetensors", loras / "escape.safetensors");
  fs::create_symlink(loras / "flux_a.safetensors", loras / "alias.safetensors");  // inside: fine
  // An adapter of CLIP's token embedding fits the model's shapes but no
  // side path (an embedding, not a linear layer): refused by the check,
  // before any rank runs it.
  const auto rnd = [](Shape sh, uint64_t seed) {
    return Tensor::from_vector(test::randn(static_cast<size_t>(shape_numel(sh)), seed), sh);
  };
  io::write_safetensors(
      (loras / "embedding.safetensors").string(),
      {{"text_encoder.embeddings.token_embedding.lora_A.weight", rnd({2, 48}, 1)},
       {"text_encoder.embeddings.token_embedding.lora_B.weight", rnd({744, 2}, 2)}});
  const std::string model = "--model '" + kModels + "/flux-schnell-tiny' --dtype f32";
  test::ServeProcess s(model + " --lora_dir '" + loras.string() + "'", dir_, 0,
                       "XDIT_VERBOSE=1 ");  // its log says when the transformer loads
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  const std::string request =
      R"("prompt": "a red fox", "num_inference_steps": 3, "seed": 5, "height": 48, "width": 80)";
  const std::string cli = model +
                          " --prompt 'a red fox' --num_inference_steps 3 --seed 5 "
                          "--height 48 --width 80";
  struct Case {
    std::string loras, flags, label;
    int most;  // largest per-pixel difference from the CLI's image
  };
  const std::vector<Case> cases = {
      {R"([{"name": "flux_a", "scale": 0.7}])", " --lora '" + lora("flux_a") + "':0.7",
       "flux_a.safetensors:0.7", 1},
      {R"([{"name": "alias.safetensors", "scale": 0.7}, {"name": "flux_b", "scale": -0.4}])",
       " --lora '" + lora("flux_a") + "':0.7 --lora '" + lora("flux_b") + "':-0.4",
       "flux_a.safetensors:0.7, flux_b.safetensors:-0.4", 1},
      {R"([{"name": "flux_te", "scale": 0.8}])", " --lora '" + lora("flux_te") + "':0.8",
       "flux_te.safetensors:0.8", 1},  // the transformer and the CLIP encoder
      {"[]", "", "", 0}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    SCOPED_TRACE(k.loras);
    const test::Reply r =
        test::post_json(c, "/generate", "{" + request + R"(, "loras": )" + k.loras + "}");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const io::PngImage served = test::png_of_base64(r.body["output"]);
    const io::PngImage want = generate(cli + k.flags, "cli" + std::to_string(i) + ".png");
    EXPECT_LE(test::max_pixel_diff(served, want), k.most);
    const auto label = served.text.find("lora");
    EXPECT_EQ(label == served.text.end() ? "" : label->second, k.label);
    if (i == 0) {  // the LoRA is visible
      EXPECT_GT(test::max_pixel_diff(served, generate(cli, "base.png")), 8);
    }
  }
  // Refused before the queue, naming the field.
  for (const auto& [loras_json, part] : std::vector<std::pair<std::string, std::string>>{
           {R"([{"name": "../outside"}])", "not a path"},
           {R"([{"name": "/etc/passwd"}])", "not a path"},
           {R"([{"name": "escape"}])", "symbolic link out of"},
           {R"([{"name": "nope"}])", "no such file"},
           {R"([{"name": "sd3_a"}])", "a LoRA for another model?"},
           {R"([{"name": "embedding"}])", "not in a linear layer with a low-rank side path"},
           {R"([{"name": "flux_a"}, {"name": "alias", "scale": 0.5}])", "name each LoRA once"},
           {R"([{"name": "flux_a", "scale": "x"}])", "scale must be a number"},
           {R"([{"name": "flux_a", "weight": 1}])", "not 'weight'"},
           {R"({"name": "flux_a"})", "must be an array"}}) {
    SCOPED_TRACE(loras_json);
    const test::Reply r =
        test::post_json(c, "/v1/images/generations",
                        R"({"prompt": "a red fox", "size": "80x48", "loras": )" + loras_json + "}");
    EXPECT_EQ(r.status, 400) << r.body.dump();
    const std::string message = r.body["error"]["message"].get<std::string>();
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(message.find(loras.string()), std::string::npos) << message;  // file names only
  }
  // Issue 68: a LoRA whose extra adapters match nothing (as peft makes them,
  // B all zeros, under a root the model lacks) is a 400 naming them; with
  // "ignore_unmatched" the valid adapters apply (flux_a's image) and the
  // answer and the PNG say how many were skipped.
  {
    std::map<std::string, Tensor> mixed = io::read_safetensors_f32(lora("flux_a"));
    constexpr int kJunk = 40;
    for (int i = 0; i < kJunk; ++i) {
      const std::string m = "transformer.nonexistent_blocks." + std::to_string(i) + ".to_q";
      mixed[m + ".lora_A.weight"] =
          Tensor::from_vector(test::randn(16, 30 + static_cast<uint64_t>(i)), {2, 8});
      mixed[m + ".lora_B.weight"] = Tensor::zeros({8, 2});
    }
    std::vector<std::pair<std::string, Tensor>> tensors(mixed.begin(), mixed.end());
    // (flux_a's metadata too: its lora_alpha)
    io::write_safetensors((loras / "mixed.safetensors").string(), tensors,
                          io::SafeTensorsFile(lora("flux_a")).metadata());
    const test::Reply refused =
        test::post_json(c, "/generate", "{" + request + R"(, "loras": [{"name": "mixed"}]})");
    EXPECT_EQ(refused.status, 400) << refused.body.dump();
    EXPECT_NE(refused.body.dump().find(std::to_string(kJunk) + " adapted modules match nothing"),
              std::string::npos)
        << refused.body.dump();
    const test::Reply r = test::post_json(
        c, "/generate",
        "{" + request + R"(, "loras": [{"name": "mixed", "ignore_unmatched": true}]})");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const std::string label =
        "mixed.safetensors:1 (" + std::to_string(kJunk) + " unmatched skipped)";
    EXPECT_EQ(r.body.value("lora", ""), label) << r.body.dump();
    const io::PngImage served = test::png_of_base64(r.body["output"]);
    EXPECT_EQ(served.text.count("lora") ? served.text.at("lora") : "", label);
    EXPECT_LE(test::max_pixel_diff(served,
                                   generate(cli + " --lora '" + lora("flux_a") + "'", "mixed.png")),
              1);
  }
  // A file of the folder rewritten in place while the server runs: the next
  // request reads it anew (flux_b now holds flux_a's adapters), and the
  // copy the server read before was never a mapping that could fault.
  {
    const std::string b = (loras / "flux_b.safetensors").string();
    const std::string a = io::read_small_file(lora("flux_a"), size_t{1} << 26, "LoRA");
    std::FILE* f = std::fopen(b.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(a.data(), 1, a.size(), f), a.size());
    std::fclose(f);
    fs::resize_file(b, a.size());
    fs::last_write_time(b, fs::last_write_time(b) + std::chrono::seconds(2));
    const test::Reply r = test::post_json(
        c, "/generate", "{" + request + R"(, "loras": [{"name": "flux_b", "scale": 0.7}]})");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_LE(test::max_pixel_diff(test::png_of_base64(r.body["output"]),
                                   generate(cli + cases[0].flags, "rewritten.png")),
              1);
  }
  s.stop();
  // One load of the transformer for every request.
  const std::string log = s.log();
  size_t loads = 0;
  for (size_t at = log.find("transformer loaded"); at != std::string::npos;
       at = log.find("transformer loaded", at + 1))
    ++loads;
  EXPECT_EQ(loads, 1u) << log;
}

// xdit serve --transformer (a Q8_0 GGUF: its layers keep the blocks) with
// a request's LoRA as side paths over them: xdit generate's image with the
// same file and --lora_mode side, bit for bit; and without the LoRA.
TEST_F(ServeLora, QuantizedTransformerTakesRequestLoras) {
  const fs::path loras = dir_ / "loras";
  fs::create_directories(loras);
  fs::copy_file(lora("flux_a"), loras / "flux_a.safetensors");
  const std::string model = "--model '" + kModels + "/flux-schnell-tiny' --dtype f32 " +
                            "--transformer '" + XDIT_TEST_DATA +
                            "/flux_checkpoint/flux_tiny_q8_0.gguf'";
  test::ServeProcess s(model + " --lora_dir '" + loras.string() + "'", dir_);
  ASSERT_TRUE(s.listening()) << s.log();
  auto c = s.client();
  const std::string request =
      R"("prompt": "a red fox", "num_inference_steps": 3, "seed": 5, "height": 48, "width": 80)";
  const std::string cli =
      model + " --prompt 'a red fox' --num_inference_steps 3 --seed 5 --height 48 --width 80";
  std::vector<io::PngImage> served;
  for (const bool with_lora : {true, false}) {
    SCOPED_TRACE(with_lora);
    const test::Reply r = test::post_json(
        c, "/generate",
        "{" + request + (with_lora ? R"(, "loras": [{"name": "flux_a", "scale": 0.7}])" : "") +
            "}");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const io::PngImage want =
        generate(cli + (with_lora ? " --lora '" + lora("flux_a") + "':0.7 --lora_mode side" : ""),
                 with_lora ? "lora.png" : "base.png");
    served.push_back(test::png_of_base64(r.body["output"]));
    EXPECT_EQ(test::max_pixel_diff(served.back(), want), 0);
  }
  EXPECT_GT(test::max_pixel_diff(served[0], served[1]), 8);  // the LoRA is visible
}

TEST(ServeLoraDir, AServerWithoutOneRefusesLoras) {
  try {
    serve::LoraDir().resolve("style");
    FAIL() << "no error";
  } catch (const serve::BadRequest& b) {
    EXPECT_EQ(b.field(), "loras");
    EXPECT_NE(std::string(b.what()).find("--lora_dir"), std::string::npos) << b.what();
  }
  EXPECT_NE(test::error_message([] { serve::LoraDir("/no/such/folder"); }).find("not a folder"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit
