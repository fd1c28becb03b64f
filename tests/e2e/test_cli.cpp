// The xdit CLI end to end: a latent generation matching diffusers, and one
// clear error line (non-zero exit, no output file) for each kind of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;
const std::string kData = XDIT_TEST_DATA;

struct Result {
  int code;
  std::string err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("xdit_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Inputs split out of the golden the way a user would supply them.
    auto g = io::read_safetensors_f32(kData + "/goldens/pixart_alpha_loop.safetensors");
    io::write_safetensors(
        path("embeds.safetensors"),
        {{"prompt_embeds", g["prompt_embeds"]},
         {"prompt_attention_mask", g["prompt_attention_mask"]},
         {"negative_prompt_embeds", g["negative_prompt_embeds"]},
         {"negative_prompt_attention_mask", g["negative_prompt_attention_mask"]}});
    io::write_safetensors(path("pos_only.safetensors"), {{"prompt_embeds", g["prompt_embeds"]}});
    io::write_safetensors(path("latents.safetensors"), {{"latents", g["latents"]}});
    Tensor wide = Tensor::from_vector(test::randn(7 * 40, 1), {1, 7, 40});
    io::write_safetensors(path("wide.safetensors"),
                          {{"prompt_embeds", wide}, {"negative_prompt_embeds", wide}});
    golden_ = g["output"];
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  // A copy of the tiny α model that a test may damage.
  std::string model_copy() const {
    const fs::path m = dir_ / "model";
    if (!fs::exists(m)) fs::copy(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", m, fs::copy_options::recursive);
    return m.string();
  }

  Result xdit(const std::string& args) const {
    const std::string err = path("stderr.txt");
    const std::string cmd =
        std::string("XDIT_QUIET=1 '") + XDIT_BINARY + "' " + args + " >/dev/null 2>'" + err + "'";
    const int status = std::system(cmd.c_str());
    std::ifstream in(err);
    std::stringstream ss;
    ss << in.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, ss.str()};
  }

  std::string generate_args(const std::string& model, const std::string& extra = "") const {
    return "generate --model '" + model + "' --prompt_embeds '" + path("embeds.safetensors") +
           "' --latents '" + path("latents.safetensors") +
           "' --height 48 --width 80 --num_inference_steps 5 --guidance_scale 4.5 " +
           "--dtype f32 -o '" + path("out.safetensors") + "' " + extra;
  }

  // The run failed with one line that contains `expect`, and wrote nothing.
  void expect_error(const Result& r, const std::string& expect) const {
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_EQ(r.err.rfind("xdit: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << "expected '" << expect << "' in: " << r.err;
    EXPECT_FALSE(fs::exists(path("out.safetensors")));
  }

  fs::path dir_;
  Tensor golden_;
};

TEST_F(Cli, GenerateLatentsMatchesDiffusers) {
  Result r = xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny"));
  ASSERT_EQ(r.code, 0) << r.err;
  io::SafeTensorsFile out(path("out.safetensors"));
  EXPECT_EQ(out.metadata().at("steps"), "5");
  Tensor lat = out.get("latents").to(DType::kF32);
  EXPECT_LE(test::rel_max_err(lat.to_vector(), golden_.to_vector()), 1e-3);
}

TEST_F(Cli, ZeroStepsWritesTheInitialLatentsOfTheSeed) {
  Result r =
      xdit("generate --model '" + std::string(XDIT_MODELS) + "/pixart-alpha-tiny' --prompt_embeds '" +
           path("pos_only.safetensors") +
           "' --height 48 --width 80 --num_inference_steps 0 --guidance_scale 1 --seed 42 -o '" +
           path("out.safetensors") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  auto rng = io::read_safetensors_f32(kData + "/goldens/torch_randn.safetensors");
  auto lat = io::read_safetensors_f32(path("out.safetensors"));
  EXPECT_EQ(lat["latents"].to_vector(), rng["seed42_1x4x6x10"].to_vector());
}

TEST_F(Cli, MissingModelFolder) {
  expect_error(xdit(generate_args(path("nope"))), "does not exist");
}

TEST_F(Cli, FolderWithoutModelIndex) {
  const std::string m = model_copy();
  fs::remove(fs::path(m) / "model_index.json");
  expect_error(xdit(generate_args(m)), "model_index.json");
}

TEST_F(Cli, MissingTransformerFolder) {
  const std::string m = model_copy();
  fs::remove_all(fs::path(m) / "transformer");
  expect_error(xdit(generate_args(m)), "transformer/");
}

TEST_F(Cli, MalformedConfig) {
  const std::string m = model_copy();
  std::ofstream(fs::path(m) / "transformer" / "config.json") << "{\"num_layers\": 2,";
  expect_error(xdit(generate_args(m)), "malformed JSON");
}

TEST_F(Cli, MissingSchedulerConfig) {
  const std::string m = model_copy();
  fs::remove(fs::path(m) / "scheduler" / "scheduler_config.json");
  expect_error(xdit(generate_args(m)), "scheduler_config.json");
}

TEST_F(Cli, MissingWeights) {
  const std::string m = model_copy();
  for (const auto& e : fs::directory_iterator(fs::path(m) / "transformer"))
    if (e.path().string().find(".safetensors") != std::string::npos) fs::remove(e.path());
  expect_error(xdit(generate_args(m)), "no safetensors weights");
}

TEST_F(Cli, TruncatedWeights) {
  const std::string m = model_copy();
  const fs::path w = fs::path(m) / "transformer" / "diffusion_pytorch_model-00002-of-00004.safetensors";
  ASSERT_TRUE(fs::exists(w));
  fs::resize_file(w, fs::file_size(w) - 100);
  expect_error(xdit(generate_args(m)), "truncated");
}

TEST_F(Cli, WeightOfWrongShape) {
  // A config that disagrees with the weights (3 heads → 4 heads of 6).
  const std::string m = model_copy();
  const fs::path c = fs::path(m) / "transformer" / "config.json";
  std::ifstream in(c);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  s.replace(s.find("\"num_layers\": 2"), 15, "\"num_layers\": 3");
  std::ofstream(c) << s;
  expect_error(xdit(generate_args(m)), "transformer_blocks.2");
}

TEST_F(Cli, SizeNotOnThePatchGrid) {
  expect_error(xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", "--height 56")), "multiples of 16");
}

TEST_F(Cli, EmbeddingsOfWrongHiddenSize) {
  Result r = xdit("generate --model '" + std::string(XDIT_MODELS) + "/pixart-alpha-tiny' --prompt_embeds '" +
                  path("wide.safetensors") + "' --height 48 --width 80 -o '" +
                  path("out.safetensors") + "'");
  expect_error(r, "hidden size 40");
}

TEST_F(Cli, GuidanceWithoutNegativeEmbeddings) {
  Result r =
      xdit("generate --model '" + std::string(XDIT_MODELS) + "/pixart-alpha-tiny' --prompt_embeds '" +
           path("pos_only.safetensors") + "' --height 48 --width 80 --guidance_scale 4.5 -o '" +
           path("out.safetensors") + "'");
  expect_error(r, "negative_prompt_embeds");
}

TEST_F(Cli, LatentsOfWrongShape) {
  expect_error(xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", "--height 64")),
               "latents have shape");
}

TEST_F(Cli, UnwritableOutput) {
  Result r = xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny",
                                "-o '" + path("no/such/dir/x.safetensors") + "'"));
  expect_error(r, "does not exist");
}

TEST_F(Cli, MalformedEmbeddingsFile) {
  std::ofstream(path("embeds.safetensors"), std::ios::trunc) << "garbage";
  expect_error(xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny")), "embeds.safetensors");
}

}  // namespace
}  // namespace xdit
