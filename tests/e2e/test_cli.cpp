// The xdit CLI end to end: a latent generation matching diffusers, and one
// clear error line (non-zero exit, no output file) for each kind of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "cli_util.h"
#include "io/json.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"
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
    dir_ = test::make_test_dir("xdit_cli_");
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
    if (!fs::exists(m))
      fs::copy(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", m, fs::copy_options::recursive);
    return m.string();
  }

  Result xdit(const std::string& args) const {
    const auto r = test::run_command(std::string("env XDIT_QUIET=1 '") + XDIT_BINARY + "' " + args,
                                     path("stderr.txt"));
    return {r.code, r.err};
  }

  std::string generate_args(const std::string& model, const std::string& extra = "") const {
    return "generate --model '" + model + "' --prompt_embeds '" + path("embeds.safetensors") +
           "' --latents '" + path("latents.safetensors") +
           "' --height 48 --width 80 --num_inference_steps 5 --guidance_scale 4.5 " +
           "--dtype f32 --output_type latent -o '" + path("out.safetensors") + "' " + extra;
  }

  // The run failed with one line that contains `expect`, and wrote nothing.
  void expect_error(const Result& r, const std::string& expect) const {
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_EQ(r.err.rfind("xdit: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << "expected '" << expect << "' in: " << r.err;
    EXPECT_FALSE(fs::exists(path("out.safetensors")));
    EXPECT_FALSE(fs::exists(path("out.png")));
    EXPECT_FALSE(fs::exists(path("out.png.tmp")));
  }

  // `generate` from a prompt on a model folder, PNG out.
  std::string prompt_args(const std::string& model, const std::string& extra = "") const {
    return "generate --model '" + model +
           "' --prompt 'a red fox in the snow' --height 48 --width 80 " +
           "--num_inference_steps 4 --guidance_scale 4.5 --seed 0 --no_resolution_binning --dtype "
           "f32 -o '" +
           path("out.png") + "' " + extra;
  }

  // The largest difference (of 255) between `png` and diffusers' image for
  // prompt_args' request on the tiny α model (tools/goldens/make_pixart.py,
  // alpha; [H, W, 3] in [0, 1]); 256 when the sizes differ.
  static int worst_against_alpha_golden(const io::PngImage& png) {
    const auto want =
        io::read_safetensors_f32(kData + "/goldens/pipeline_alpha.safetensors")["image"]
            .to_vector();
    EXPECT_EQ(want.size(), png.rgb.size());
    if (want.size() != png.rgb.size()) return 256;
    int worst = 0;
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst,
                       std::abs(static_cast<int>(std::nearbyint(want[i] * 255.0f)) - png.rgb[i]));
    return worst;
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
  Result r = xdit("generate --model '" + std::string(XDIT_MODELS) +
                  "/pixart-alpha-tiny' --prompt_embeds '" + path("pos_only.safetensors") +
                  "' --height 48 --width 80 --num_inference_steps 0 --guidance_scale 1 --seed 42 "
                  "--output_type latent -o '" +
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
  // (Such a folder takes the weights from --transformer FILE.)
  expect_error(xdit(generate_args(m)), "transformer has no weights (no *.safetensors in");
}

TEST_F(Cli, TruncatedWeights) {
  const std::string m = model_copy();
  const fs::path w =
      fs::path(m) / "transformer" / "diffusion_pytorch_model-00002-of-00004.safetensors";
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
  expect_error(xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", "--height 56")),
               "multiples of 16");
}

TEST_F(Cli, EmbeddingsOfWrongHiddenSize) {
  Result r = xdit("generate --model '" + std::string(XDIT_MODELS) +
                  "/pixart-alpha-tiny' --prompt_embeds '" + path("wide.safetensors") +
                  "' --height 48 --width 80 -o '" + path("out.png") + "'");
  expect_error(r, "hidden size 40");
}

TEST_F(Cli, GuidanceWithoutNegativeEmbeddings) {
  Result r = xdit("generate --model '" + std::string(XDIT_MODELS) +
                  "/pixart-alpha-tiny' --prompt_embeds '" + path("pos_only.safetensors") +
                  "' --height 48 --width 80 --guidance_scale 4.5 -o '" + path("out.png") + "'");
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
  expect_error(xdit(generate_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny")),
               "embeds.safetensors");
}

TEST_F(Cli, PromptToPngWithMetadataMatchesDiffusers) {
  Result r = xdit(prompt_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny"));
  ASSERT_EQ(r.code, 0) << r.err;
  io::PngImage png = io::read_png(path("out.png"));
  EXPECT_EQ(png.width, 80);
  EXPECT_EQ(png.height, 48);
  EXPECT_EQ(png.text["prompt"], "a red fox in the snow");
  EXPECT_EQ(png.text["seed"], "0");
  EXPECT_EQ(png.text["num_inference_steps"], "4");
  EXPECT_EQ(png.text["size"], "80x48");
  EXPECT_NE(png.text["guidance_scale"].find("4.5"), std::string::npos);
  EXPECT_NE(png.text["model"].find("pixart-alpha-tiny"), std::string::npos);
  EXPECT_NE(png.text["parallel"].find("serial"), std::string::npos);
  EXPECT_EQ(png.text["software"], std::string("xdit ") + XDIT_VERSION);
  EXPECT_LE(worst_against_alpha_golden(png), 1);
}

TEST_F(Cli, SeveralPromptsWriteOneFileEach) {
  Result r = xdit(prompt_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny",
                              "--prompt 'a blue bird' --num_inference_steps 2"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(path("out.png")));
  EXPECT_EQ(io::read_png(path("out_0.png")).text["prompt"], "a red fox in the snow");
  EXPECT_EQ(io::read_png(path("out_1.png")).text["prompt"], "a blue bird");
}

// Neither --model nor --prompt: the demo model (models/demo-shapes) draws
// its default caption at its own size (test_demo_model.cpp checks what it
// draws); a prompt of one's own goes to the same model.
TEST_F(Cli, BuiltInModelWhenNoModelIsGiven) {
  Result r = xdit("generate --num_inference_steps 2 -o '" + path("out.png") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("built-in demo model demo-shapes"), std::string::npos) << r.err;
  io::PngImage png = io::read_png(path("out.png"));
  EXPECT_EQ(png.width, 256);
  EXPECT_EQ(png.height, 256);
  EXPECT_EQ(png.text["prompt"], "a large red circle on the left on a blue background");
  EXPECT_NE(png.text["model"].find("demo-shapes"), std::string::npos);
  r = xdit(
      "generate --prompt 'a small white square at the top on a black background' --height 32 "
      "--width 32 --num_inference_steps 1 --no_resolution_binning -o '" +
      path("own.png") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  png = io::read_png(path("own.png"));
  EXPECT_EQ(png.width, 32);
  EXPECT_EQ(png.text["prompt"], "a small white square at the top on a black background");
}

TEST_F(Cli, LongPromptIsTruncatedWithAWarning) {
  std::string long_prompt;
  for (int i = 0; i < 60; ++i) long_prompt += "a small blue bird sits ";
  Result r = xdit(prompt_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny",
                              "--prompt '" + long_prompt + "' --num_inference_steps 1"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("longer than 120 T5 tokens"), std::string::npos) << r.err;
}

TEST_F(Cli, MissingTokenizerFolder) {
  const std::string m = model_copy();
  fs::remove_all(fs::path(m) / "tokenizer");
  expect_error(xdit(prompt_args(m)), "tokenizer/");
}

TEST_F(Cli, MissingTextEncoderFolder) {
  const std::string m = model_copy();
  fs::remove_all(fs::path(m) / "text_encoder");
  expect_error(xdit(prompt_args(m)), "text_encoder/");
}

TEST_F(Cli, MissingVaeFolder) {
  const std::string m = model_copy();
  fs::remove_all(fs::path(m) / "vae");
  expect_error(xdit(prompt_args(m)), "vae/");
}

TEST_F(Cli, TruncatedTextEncoderShard) {
  const std::string m = model_copy();
  fs::path w;
  for (const auto& e : fs::directory_iterator(fs::path(m) / "text_encoder"))
    if (e.path().extension() == ".safetensors") w = e.path();
  ASSERT_FALSE(w.empty());
  fs::resize_file(w, fs::file_size(w) / 2);
  expect_error(xdit(prompt_args(m)), "truncated");
}

TEST_F(Cli, UnwritablePngPath) {
  expect_error(xdit(prompt_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny",
                                "-o '" + path("nope/x.png") + "'")),
               "does not exist");
}

TEST_F(Cli, SizeOffTheGridWithoutBinning) {
  expect_error(xdit(prompt_args(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", "--height 50")),
               "multiples of 16");
}

TEST_F(Cli, InfoDescribesTheModel) {
  const std::string out = path("info.txt");
  const int rc = std::system((std::string("'") + XDIT_BINARY + "' info --model '" + XDIT_MODELS +
                              "/pixart-sigma-tiny' > '" + out + "' 2>&1")
                                 .c_str());
  ASSERT_EQ(rc, 0);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  for (const char* want : {"PixArtSigmaPipeline", "3 blocks", "T5 encoder",
                           "max sequence length 300", "AutoencoderKL", "memory (estimate"})
    EXPECT_NE(ss.str().find(want), std::string::npos) << want << " in:\n" << ss.str();
}

// A server without native bf16, as ONEDNN_MAX_CPU_ISA=AVX2 makes this one:
// `--dtype bf16` runs, says once that it computes in f32, and gives
// diffusers' image; `xdit info` names the level the kernels run at.
TEST_F(Cli, CpuWithoutNativeBf16SaysSoOnceAndMatchesDiffusers) {
  if (kernels::cpu_hardware_isa() < kernels::CpuIsa::kAvx2)
    GTEST_SKIP() << "the CPU has no AVX2 to cap at";
  const std::string model = std::string(XDIT_MODELS) + "/pixart-alpha-tiny";
  const auto r = test::run_command(
      std::string("env XDIT_QUIET=1 ONEDNN_MAX_CPU_ISA=AVX2 '") + XDIT_BINARY +
          "' generate --model '" + model +
          "' --prompt 'a red fox in the snow' --height 48 --width 80 --num_inference_steps 4 "
          "--guidance_scale 4.5 --seed 0 --no_resolution_binning --dtype bf16 -o '" +
          path("out.png") + "'",
      path("stderr.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  size_t lines = 0;
  for (size_t at = r.err.find("no native bf16"); at != std::string::npos;
       at = r.err.find("no native bf16", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << r.err;
  EXPECT_NE(r.err.find("computing in f32"), std::string::npos) << r.err;
  EXPECT_LE(worst_against_alpha_golden(io::read_png(path("out.png"))), 1);

  for (const auto& [cap, level] : {std::pair<std::string, std::string>{"AVX2", "AVX2 kernels"},
                                   {"SSE41", "x86-64 baseline kernels"}}) {
    const std::string out = path("info.txt");
    ASSERT_EQ(std::system(("env ONEDNN_MAX_CPU_ISA=" + cap + " '" + XDIT_BINARY +
                           "' info --model '" + model + "' > '" + out + "' 2>&1")
                              .c_str()),
              0);
    std::ifstream in(out);
    std::stringstream info;
    info << in.rdbuf();
    EXPECT_NE(info.str().find("cpu:          " + level), std::string::npos) << info.str();
  }
}

// FLUX.1 [dev] from the prompt with true CFG: the PNG within 1/255 of
// diffusers' FluxPipeline (tools/goldens/make_flux.py, dev case 1), and the
// metadata naming the pipeline.
TEST_F(Cli, FluxPromptToPngWithTrueCfgMatchesDiffusers) {
  // Not quiet: xdit says which T5 length and guidance it used.
  const auto r = test::run_command(
      std::string("env -u XDIT_QUIET '") + XDIT_BINARY + "' generate --model '" + XDIT_MODELS +
          "/flux-dev-tiny' --prompt 'an astronaut riding a horse' --negative_prompt "
          "'blurry, low quality' --true_cfg_scale 2.5 --height 40 --width 64 "
          "--num_inference_steps 3 --seed 3 --max_sequence_length 32 --dtype f32 -o '" +
          path("out.png") + "'",
      path("stderr.txt"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("FLUX.1 [dev]: 3 steps, guidance_scale 3.5, max_sequence_length 32"),
            std::string::npos)
      << r.err;  // dev's default guidance
  io::PngImage png = io::read_png(path("out.png"));
  EXPECT_EQ(png.text["max_sequence_length"], "32");
  EXPECT_EQ(png.text["pipeline"], "FLUX.1 [dev] (FluxPipeline)");
  EXPECT_EQ(png.text["negative_prompt"], "blurry, low quality");
  EXPECT_NE(png.text["true_cfg_scale"].find("2.5"), std::string::npos);
  EXPECT_NE(png.text["model"].find("flux-dev-tiny"), std::string::npos);
  auto g = io::read_safetensors_f32(kData + "/goldens/flux_dev_pipeline.safetensors");
  const Tensor& want = g["case1.image"];  // [1, 3, H, W] in [-1, 1]
  ASSERT_EQ(png.height, want.dim(2));
  ASSERT_EQ(png.width, want.dim(3));
  EXPECT_LE(test::worst_pixel_difference(png.rgb, want.data<float>(), want.dim(2), want.dim(3)), 1);
}

std::string flux_args(const std::string& model, const std::string& out,
                      const std::string& extra = "") {
  return "generate --model '" + model + "' --prompt 'a red fox' --height 48 --width 80 " +
         "--num_inference_steps 2 --max_sequence_length 16 --dtype f32 -o '" + out + "' " + extra;
}

TEST_F(Cli, FluxSizeOffTheGridIsFlooredWithAWarning) {
  // The tiny VAE's factor is 4: sizes are multiples of 8 (16 for FLUX.1's VAE).
  Result r = xdit(flux_args(std::string(XDIT_MODELS) + "/flux-schnell-tiny", path("out.png"),
                            "--height 53 --width 70"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("using 48x64"), std::string::npos) << r.err;
  io::PngImage png = io::read_png(path("out.png"));
  EXPECT_EQ(png.height, 48);
  EXPECT_EQ(png.width, 64);
}

TEST_F(Cli, FluxSchnellWarnsThatGuidanceHasNoEffect) {
  Result r = xdit(flux_args(std::string(XDIT_MODELS) + "/flux-schnell-tiny", path("out.png"),
                            "--guidance_scale 7"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("has no guidance embedding: guidance_scale 7 has no effect"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(io::read_png(path("out.png")).text["num_inference_steps"], "2");
}

TEST_F(Cli, FluxFolderWithoutT5) {
  for (const char* c : {"text_encoder_2", "tokenizer_2"}) {
    SCOPED_TRACE(c);
    const fs::path m = dir_ / (std::string("flux_") + c);
    fs::copy(std::string(XDIT_MODELS) + "/flux-dev-tiny", m, fs::copy_options::recursive);
    fs::remove_all(m / c);
    expect_error(xdit(flux_args(m.string(), path("out.png"))), std::string("no ") + c + "/");
  }
}

TEST_F(Cli, InfoDescribesFlux) {
  const std::string out = path("info.txt");
  const int rc = std::system((std::string("'") + XDIT_BINARY + "' info --model '" + XDIT_MODELS +
                              "/flux-dev-tiny' > '" + out + "' 2>&1")
                                 .c_str());
  ASSERT_EQ(rc, 0);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  for (const char* want :
       {"FluxPipeline: FLUX.1 [dev]", "2 double-stream + 3 single-stream blocks",
        "CLIP text encoder", "T5 encoder", "max sequence length 512", "16 latent channels",
        "28 steps, guidance_scale 3.5", "memory (estimate"})
    EXPECT_NE(ss.str().find(want), std::string::npos) << want << " in:\n" << ss.str();
}

// SD3.5 from the prompt with CFG and skip-layer guidance from the CLI flags:
// the PNG within 1/255 of diffusers' StableDiffusion3Pipeline
// (tools/goldens/make_sd3.py, sd35 case 0).
TEST_F(Cli, Sd35PromptToPngWithSkipLayerGuidanceMatchesDiffusers) {
  Result r = xdit("generate --model '" + std::string(XDIT_MODELS) +
                  "/sd35-tiny' --prompt 'an astronaut riding a horse' --negative_prompt "
                  "'low quality' --height 40 --width 64 --num_inference_steps 5 "
                  "--guidance_scale 5 --seed 3 --max_sequence_length 16 "
                  "--skip_guidance_layers 1 --skip_layer_guidance_scale 2.8 "
                  "--skip_layer_guidance_start 0.01 --skip_layer_guidance_stop 0.6 --dtype f32 "
                  "-o '" +
                  path("out.png") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  io::PngImage png = io::read_png(path("out.png"));
  EXPECT_EQ(png.text["pipeline"], "Stable Diffusion 3.5 (StableDiffusion3Pipeline)");
  EXPECT_EQ(png.text["skip_guidance_layers"].rfind("1 scale 2.8", 0), 0u)
      << png.text["skip_guidance_layers"];
  auto g = io::read_safetensors_f32(kData + "/goldens/sd35_pipeline.safetensors");
  const Tensor& want = g["case0.image"];
  ASSERT_EQ(png.height, want.dim(2));
  ASSERT_EQ(png.width, want.dim(3));
  EXPECT_LE(test::worst_pixel_difference(png.rgb, want.data<float>(), want.dim(2), want.dim(3)), 1);
}

std::string sd3_args(const std::string& model, const std::string& out,
                     const std::string& extra = "") {
  return "generate --model '" + model + "' --prompt 'a red fox' --height 48 --width 48 " +
         "--num_inference_steps 2 --max_sequence_length 16 --dtype f32 -o '" + out + "' " + extra;
}

TEST_F(Cli, Sd3BadInput) {
  const std::string sd3 = std::string(XDIT_MODELS) + "/sd3-tiny";
  // Only some of the three text encoders.
  const fs::path m = dir_ / "sd3_partial";
  fs::copy(sd3, m, fs::copy_options::recursive);
  fs::remove_all(m / "text_encoder_3");
  expect_error(xdit(sd3_args(m.string(), path("out.png"))), "but not text_encoder_3/");
  // A copy of the model with one config value changed (the weights kept).
  const auto with_config = [&](const std::string& name, const std::string& component,
                               const std::string& from, const std::string& to) {
    const fs::path copy = dir_ / name;
    fs::copy(sd3, copy, fs::copy_options::recursive);
    const fs::path cfg = copy / component / "config.json";
    std::ifstream in(cfg);
    std::stringstream ss;
    ss << in.rdbuf();
    in.close();
    std::string c = ss.str();
    const size_t at = c.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) c.replace(at, from.size(), to);
    std::ofstream(cfg) << c;
    return copy.string();
  };
  // A T5 whose width is not the transformer's joint_attention_dim.
  expect_error(xdit(sd3_args(with_config("sd3_t5_width", "text_encoder_3", "\"d_model\": 32",
                                         "\"d_model\": 48"),
                             path("out.png"))),
               "text_encoder_3/ has width (d_model) 48 but the transformer takes text of width 32");
  // CLIP features wider than the transformer takes: named as such, before the
  // weight headers (which no longer match the config) are read.
  expect_error(xdit(sd3_args(with_config("sd3_clip_width", "text_encoder_2", "\"hidden_size\": 16",
                                         "\"hidden_size\": 24"),
                             path("out.png"))),
               "the CLIP encoders' features (12 + 24 = 36) are wider than the transformer's "
               "joint_attention_dim 32");
  // Skip-guidance layers outside the blocks; on a model without them.
  expect_error(xdit(sd3_args(sd3, path("out.png"), "--skip_guidance_layers 1,3")),
               "skip-guidance layer 3 is outside the model's blocks 0 … 2");
  expect_error(xdit(sd3_args(std::string(XDIT_MODELS) + "/flux-dev-tiny", path("out.png"),
                             "--skip_guidance_layers 1")),
               "is a Stable Diffusion 3 option");
  // Beyond pos_embed_max_size (24) x patch (2) x the VAE factor (4) = 192 px.
  expect_error(xdit(sd3_args(sd3, path("out.png"), "--height 208")), "must be at most 192 px");
  // Off the 8-px grid: refused, as diffusers refuses it.
  expect_error(xdit(sd3_args(sd3, path("out.png"), "--height 52")), "multiples of 8");
}

// xdit tokenize prints what transformers' tokenizers give (the CLIP goldens of
// tools/goldens/make_clip.py; the T5 ids the PixArt goldens were made from).
TEST_F(Cli, TokenizePrintsTransformersIdsAsJson) {
  const auto tokenize = [&](const std::string& args) {
    const std::string out = path("tokens.json");
    const int rc = std::system((std::string("'") + XDIT_BINARY + "' tokenize " + args + " > '" +
                                out + "' 2> '" + path("tokenize_err.txt") + "'")
                                   .c_str());
    EXPECT_EQ(rc, 0) << args;
    std::ifstream in(out);
    std::string line;
    std::getline(in, line);
    return io::parse_json_text(line, "xdit tokenize output");
  };
  const io::Json g = io::read_json_file(kData + "/goldens/clip_tokens.json");
  for (const char* name : {"tokenizer", "tokenizer_2"})
    for (const size_t i : {1u, 3u, 12u, 16u}) {  // "!!!", contractions, special text, too long
      const std::string prompt = g["prompts"][i].get<std::string>();
      std::string quoted = "'";
      for (const char c : prompt) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
      const io::Json j =
          tokenize("--model '" + kData + "/clip' --tokenizer " + name + " --prompt " + quoted);
      EXPECT_EQ(j["ids"], g[name]["input_ids"][i]) << name << " " << i;
      EXPECT_EQ(j["mask"], g[name]["attention_mask"][i]) << name << " " << i;
      EXPECT_EQ(j["kind"], "clip");
      EXPECT_EQ(j["max_length"], 77);
      EXPECT_EQ(j["truncated"], i == 16u) << i;
      EXPECT_EQ(j["tokens"].size(), 77u);
    }
  // T5 (the tiny PixArt folder) at a given length: EOS last, then padding.
  const io::Json t = tokenize("--model '" + std::string(XDIT_MODELS) +
                              "/pixart-alpha-tiny' --prompt 'a red fox in the snow' "
                              "--max_sequence_length 12");
  EXPECT_EQ(t["kind"], "t5");
  ASSERT_EQ(t["ids"].size(), 12u);
  const int64_t n = t["length"].get<int64_t>();
  ASSERT_GT(n, 1);
  EXPECT_EQ(t["ids"][n - 1], 1) << "EOS";
  EXPECT_EQ(t["tokens"][n - 1], "</s>");
  EXPECT_EQ(t["mask"][n], 0);
  EXPECT_EQ(t["ids"][n], 0) << "pad";

  expect_error(xdit("tokenize --model '" + kData + "/clip' --tokenizer tokenizer_3 --prompt x"),
               "has no tokenizer_3/ folder");
  expect_error(xdit("tokenize --model '" + kData + "/clip' --prompt x --max-length 1"), "--max");
}

}  // namespace
}  // namespace xdit
