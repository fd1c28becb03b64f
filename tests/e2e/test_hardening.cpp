// xdit under hostile input (issue "Hardening against bad input"): every case
// ends with one `xdit: error:` line and a non-zero exit, within 2 s of CPU
// time and 1 GB of memory, having written nothing and destroyed nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cli_util.h"
#include "e2e/hardening.h"
#include "io/json.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace xdit {
namespace {

// --- outputs -----------------------------------------------------------

TEST_F(Hardening, OutputOnADeviceNodeIsRefusedAndTheNodeKept) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a device node needs root";
  // A copy of /dev/null's node (char 1:3), made in the test's own folder.
  if (::mknod(path("null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0)
    GTEST_SKIP() << "cannot make a device node here: " << std::strerror(errno);
  expect_refused(xdit(generate("", "null")), "it is a character device", {"null"});
  EXPECT_TRUE(fs::is_character_file(path("null")));
}

TEST_F(Hardening, OutputOnAFifoSocketOrFolderIsRefusedAndKept) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0666), 0);
  expect_refused(xdit(generate("", "fifo")), "it is a FIFO", {"fifo"});
  EXPECT_TRUE(fs::is_fifo(path("fifo")));

  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path("sock").c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  expect_refused(xdit(generate("", "sock")), "it is a socket", {"fifo", "sock"});
  EXPECT_TRUE(fs::is_socket(path("sock")));
  ::close(s);

  fs::create_directory(path("folder"));
  expect_refused(xdit(generate("", "folder")), "it is a folder", {"fifo", "sock", "folder"});
  EXPECT_TRUE(fs::is_directory(path("folder")));
}

// An extension xdit cannot write is refused before any work (issue 68: -o
// v.gif wrote PNG bytes into v_f0000.gif …); .png and .mp4 in any case, and
// a name without an extension, are written.
TEST_F(Hardening, OutputExtensionsXditCannotWriteAreRefused) {
  expect_refused(xdit(generate("", "v.gif")), "not .gif ones");
  expect_refused(xdit(generate("", "v.jpeg")), "not .jpeg ones");
  expect_refused(xdit(generate("--output_type latent", "l.png")), "name it *.safetensors");
  expect_refused(xdit(generate("--output_type latent", "l.mp4")), "name it *.safetensors");
  const test::CommandResult png = xdit(generate("", "upper.PNG"));
  ASSERT_EQ(png.code, 0) << png.err;
  EXPECT_TRUE(fs::exists(path("upper.PNG")));
  const test::CommandResult bare = xdit(generate("", "bare"));
  ASSERT_EQ(bare.code, 0) << bare.err;
  EXPECT_EQ(io::read_png(path("bare")).width, 80) << "a PNG under the name given";
}

// A value echoed in an error stays on its one line (issue 68): control
// characters are escaped, here a newline and a tab in --model's path.
TEST_F(Hardening, ControlCharactersInAnEchoedValueStayOnOneLine) {
  expect_refused(xdit("generate --model '" + path("no\nsuch\tmodel") + "' --prompt x -o '" +
                      path("o.png") + "'"),
                 "no\\nsuch\\tmodel");
}

// xdit never writes through a link (issue 41): a link as the output, to a
// FIFO, to a file or dangling, is refused and neither it nor its target is
// touched. (Until then a link was followed and its target replaced: a link
// planted in a shared folder made xdit overwrite any file of its user.)
TEST_F(Hardening, ASymlinkAsTheOutputIsRefusedAndItsTargetKept) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0666), 0);
  fs::create_symlink(path("fifo"), path("link.png"));
  expect_refused(xdit(generate("", "link.png")), "it is a symbolic link", {"fifo", "link.png"});
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  EXPECT_TRUE(fs::is_symlink(path("link.png")));

  std::ofstream(path("victim.txt")) << "precious";
  fs::remove(path("link.png"));
  fs::create_symlink("victim.txt", path("link.png"));
  expect_refused(xdit(generate("", "link.png")), "never writes through a link",
                 {"fifo", "link.png", "victim.txt"});
  EXPECT_TRUE(fs::is_symlink(path("link.png")));
  std::ifstream in(path("victim.txt"));
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "precious");

  fs::create_symlink("new.png", path("dangling.png"));
  expect_refused(xdit(generate("", "dangling.png")), "it is a symbolic link",
                 {"fifo", "link.png", "victim.txt", "dangling.png"});
  EXPECT_FALSE(fs::exists(path("new.png")));
}

TEST_F(Hardening, AFolderWeCannotWriteFailsBeforeAnyWork) {
  const auto r = test::run_command(std::string("env XDIT_QUIET=1 '") + XDIT_BINARY + "' " +
                                       generate("", "") + "-o /proc/xdit_test.png",
                                   path("stderr.txt"));
  expect_refused(r, "cannot create a file in folder /proc");
  expect_refused(xdit(generate("", "missing/out.png")), "does not exist");
}

TEST_F(Hardening, TwoConcurrentWritersBothFinish) {
  const std::string cmd = std::string("env XDIT_QUIET=1 OMP_NUM_THREADS=1 '") + XDIT_BINARY + "' ";
  auto a = test::spawn_command(cmd + generate("--seed 1"), path("a.txt"));
  auto b = test::spawn_command(cmd + generate("--seed 2"), path("b.txt"));
  const auto ra = test::wait_command(a), rb = test::wait_command(b);
  EXPECT_EQ(ra.code, 0) << ra.err;
  EXPECT_EQ(rb.code, 0) << rb.err;
  io::PngImage png = io::read_png(path("out.png"));  // one of them, complete
  EXPECT_TRUE(png.text["seed"] == "1" || png.text["seed"] == "2");
  EXPECT_EQ(stray_files({"out.png", "a.txt", "b.txt"}), std::set<std::string>{});
}

TEST_F(Hardening, ASignalRemovesTheTemporaryFile) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string cmd =
        std::string("env XDIT_QUIET=1 OMP_NUM_THREADS=1 '") + XDIT_BINARY + "' ";
    auto s = test::spawn_command(cmd + generate("--num_inference_steps 1000"), path("s.txt"));
    // Wait until the run has reserved its output (the temporary file exists).
    bool reserved = false;
    for (int i = 0; i < 1000 && !reserved; ++i) {
      for (const auto& e : fs::directory_iterator(dir_))
        reserved |= e.path().filename().string().rfind(".out.png.xdit-", 0) == 0;
      if (!reserved) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(reserved) << "no temporary file appeared";
    ::kill(s.pid, sig);
    const auto r = test::wait_command(s);
    EXPECT_EQ(r.signal, sig) << r.err;
    EXPECT_EQ(stray_files({"s.txt"}), std::set<std::string>{}) << "signal " << sig;
  }
}

TEST_F(Hardening, InputsThatAreNotFilesAreRefusedWithoutWaiting) {
  // A FIFO would block a reader until someone writes to it.
  ASSERT_EQ(::mkfifo(path("embeds.safetensors").c_str(), 0666), 0);
  expect_refused(xdit("generate --model '" + model() + "' --prompt_embeds '" +
                      path("embeds.safetensors") + "' -o '" + path("out.png") + "'"),
                 "is not a regular file", {"embeds.safetensors"});
  fs::remove(fs::path(model()) / "vae" / "config.json");
  ASSERT_EQ(::mkfifo((fs::path(model()) / "vae" / "config.json").c_str(), 0666), 0);
  expect_refused(xdit(generate("")), "vae/config.json is not a regular file",
                 {"embeds.safetensors"});
}

// --- configs -----------------------------------------------------------

TEST_F(Hardening, ConfigValuesThatCrashedAreRefusedByName) {
  const std::string sixty_six = [] {
    std::string s = "[";
    for (int i = 0; i < 66; ++i) s += i ? ",8" : "8";
    return s + "]";
  }();
  const struct {
    const char* file;
    const char* key;
    std::string value;
    const char* expect;
  } cases[] = {
      {"vae/config.json", "norm_num_groups", "0", "\"norm_num_groups\" is 0"},
      {"vae/config.json", "layers_per_block", "-1", "\"layers_per_block\" is -1"},
      {"vae/config.json", "block_out_channels", sixty_six, "list of 1 … 8 integers"},
      {"vae/config.json", "block_out_channels", "[8, \"16\", 16, 24]", "should hold integers"},
      {"transformer/config.json", "num_attention_heads", "4611686018427387904",
       "\"num_attention_heads\" is 4611686018427387904"},
      {"text_encoder/config.json", "relative_attention_num_buckets", "0",
       "\"relative_attention_num_buckets\" is 0"},
      {"scheduler/scheduler_config.json", "num_train_timesteps", "-5",
       "\"num_train_timesteps\" is -5"},
  };
  for (const auto& c : cases) {
    TearDown();
    SetUp();
    set_config(c.file, c.key, c.value);
    SCOPED_TRACE(std::string(c.file) + " " + c.key);
    const auto r = xdit(generate(""));
    expect_refused(r, c.expect);
    EXPECT_NE(r.err.find(c.file), std::string::npos) << r.err;
  }
}

TEST_F(Hardening, WeightsThatContradictTheVaeConfigAreCaughtBeforeDenoising) {
  set_config("vae/config.json", "layers_per_block", "2");
  expect_refused(xdit(generate("--num_inference_steps 50")),
                 "'decoder.up_blocks.0.resnets.2.norm1.weight' is missing");
}

TEST_F(Hardening, AnUnknownPipelineClassListsTheSupportedOnes) {
  set_config("model_index.json", "_class_name", "\"StableDiffusionXLPipeline\"");
  expect_refused(xdit(generate("")),
                 "StableDiffusionXLPipeline\", which xdit does not run; supported pipelines: "
                 "PixArtAlphaPipeline, PixArtSigmaPipeline");
}

TEST_F(Hardening, AModelFolderThatLoopsIsNamed) {
  fs::create_symlink(path("loop_b"), path("loop_a"));
  fs::create_symlink(path("loop_a"), path("loop_b"));
  const auto r =
      xdit("generate --model '" + path("loop_a") + "' --prompt x -o '" + path("out.png") + "'");
  expect_refused(r, "loop_a", {"loop_a", "loop_b"});
  EXPECT_NE(r.err.find("symbolic links"), std::string::npos) << r.err;
}

// --- non-finite values -------------------------------------------------

TEST_F(Hardening, NanTransformerWeightStopsAtTheFirstStep) {
  poison("transformer", "proj_out.bias");
  expect_refused(xdit(generate("")), "NaN/Inf value(s) after denoising step 1 of 2");
}

TEST_F(Hardening, NanTextEncoderWeightStopsAfterEncoding) {
  poison("text_encoder", "encoder.final_layer_norm.weight");
  expect_refused(xdit(generate("")), "the text encoder produced");
}

TEST_F(Hardening, NanVaeWeightWritesNoBlackImage) {
  poison("vae", "decoder.conv_out.bias");
  expect_refused(xdit(generate("")), "the VAE decoder produced");
}

TEST_F(Hardening, NanEmbeddingsAreRefusedBeforeWork) {
  auto v = test::randn(2 * 7 * 32, 5);
  v[17] = std::nanf("");
  io::write_safetensors(path("embeds.safetensors"),
                        {{"prompt_embeds", Tensor::from_vector(v, {2, 7, 32})}});
  expect_refused(
      xdit("generate --model '" + model() + "' --prompt_embeds '" + path("embeds.safetensors") +
           "' --guidance_scale 1 --height 48 --width 80 " + "-o '" + path("out.png") + "'"),
      "prompt_embeds hold 1 NaN/Inf value(s)", {"embeds.safetensors"});
}

TEST_F(Hardening, GuidanceMustBeFiniteAndAnOverflowStopsTheRun) {
  for (const char* g : {"inf", "-inf", "nan", "1e999"})
    expect_refused(xdit(generate(std::string("--guidance_scale ") + g)), "finite number");
  // Finite, but the guided prediction overflows f32.
  expect_refused(xdit(generate("--guidance_scale 3e38")), "after denoising step 1");
}

TEST_F(Hardening, CheckWeightsNamesNonFiniteTensors) {
  auto r = xdit("info --model '" + model() + "' --check-weights");
  EXPECT_EQ(r.code, 0) << r.err;
  poison("vae", "decoder.conv_out.bias");
  poison("transformer", "proj_out.bias");
  const std::string out = path("info.txt");
  r = test::run_command(std::string("sh -c \"'") + XDIT_BINARY + "' info --model '" + model() +
                            "' --check-weights > '" + out + "'\"",
                        path("stderr.txt"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("2 weight tensor(s) hold NaN/Inf values"), std::string::npos) << r.err;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("vae/decoder.conv_out.bias [3]: 1 NaN/Inf of 3 values"),
            std::string::npos)
      << ss.str();
  EXPECT_NE(ss.str().find("transformer/proj_out.bias [32]: 1 NaN/Inf"), std::string::npos)
      << ss.str();
}

// Every component the family lists is scanned, the second and third text
// encoders included (SD3: text_encoder_3 is its T5), not a fixed set of folders.
TEST_F(Hardening, CheckWeightsScansEveryComponentTheFamilyHas) {
  fs::remove_all(model());
  fs::copy(std::string(XDIT_MODELS) + "/sd3-tiny", model(), fs::copy_options::recursive);
  poison("text_encoder_3", "encoder.block.0.layer.0.SelfAttention.q.weight");
  poison("text_encoder_2", "text_model.final_layer_norm.bias");
  const auto r = xdit("info --model '" + model() + "' --check-weights");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("2 weight tensor(s) hold NaN/Inf values"), std::string::npos) << r.err;
}

// --- limits before work ------------------------------------------------

TEST_F(Hardening, HugeSizesAreRefusedWithTheEstimateAndTheLimit) {
  auto r = xdit(generate("--height 100000 --width 100000"));
  expect_refused(r, "this request needs about");
  EXPECT_NE(r.err.find("is available"), std::string::npos) << r.err;
  expect_refused(xdit(generate("--height 99999999999")), "at most 1048576 px");
  // With binning the model runs at 1024 px; the resize to 100000 px is what cannot fit.
  const std::string binned = "generate --model '" + model() +
                             "' --prompt x --height 100000 --width 100000 -o '" + path("out.png") +
                             "'";
  r = xdit(binned);
  expect_refused(r, "this request needs about");
  EXPECT_NE(r.err.find("images "), std::string::npos) << r.err;
}

TEST_F(Hardening, TextLengthIsBoundedByTheModel) {
  expect_refused(xdit(generate("--max_sequence_length 100000000")),
                 "max_sequence_length 100000000 exceeds the 512 tokens");
}

TEST_F(Hardening, ThreadCountIsBounded) {
  for (const char* t : {"100000", "-3", "0", "two"})
    expect_refused(xdit(generate(std::string("--threads ") + t)), "--threads: must be 1 …");
}

TEST_F(Hardening, ProcessCountsAndParallelFlagsAreBounded) {
  expect_refused(xdit("launch -n 100000 -- generate --prompt x"), "not in range 1 to 1024");
  expect_refused(
      xdit(generate("--ulysses_degree 65536 --ring_degree 65536 --data_parallel_degree 65536")),
      "multiply to more than 2^40");
  expect_refused(xdit(generate("--warmup_steps -1")), "--warmup_steps must be at least 0");
  expect_refused(xdit(generate("--attn_layer_num_for_pp -1,3")),
                 "--attn_layer_num_for_pp entries must be at least 1");
}

// The planner knows the model's positional tables (issue 68): frames or a
// size beyond them are refused in one line before any work, not in the model
// after queueing.
TEST_F(Hardening, FramesBeyondThePositionalTableAreRefusedByThePlanner) {
  const std::string wan = "generate --model '" + std::string(XDIT_MODELS) +
                          "/wan21-tiny' --prompt x --height 48 --width 80 "
                          "--num_inference_steps 1 -o '" +
                          path("v.png") + "' ";
  // 4097 frames: 1025 latent frames, one more than the tiny Wan's 1024.
  expect_refused(xdit(wan + "--num_frames 4097"), "positional table covers 1024 latent frames");
  expect_refused(xdit(wan + "--num_frames 5 --height 16400"),
                 "positional table covers 1024 x 1024");
}

TEST_F(Hardening, StepsAreBoundedBeforeAnythingLoads) {
  expect_refused(xdit(generate("--num_inference_steps 100000")),
                 "num_inference_steps 100000 exceeds the scheduler's 1000 training timesteps");
}

TEST_F(Hardening, SeedsOutsideTorchsRangeAreRefusedAndNegativeOnesWrap) {
  expect_refused(xdit(generate("--seed 18446744073709551616")), "is not a seed");
  expect_refused(xdit(generate("--seed -9223372036854775809")), "is not a seed");
  const std::string zero_steps =
      "generate --model '" + model() +
      "' --prompt x --height 48 --width 80 --num_inference_steps 0 --output_type latent ";
  auto a = xdit(zero_steps + "--seed -1 -o '" + path("a.safetensors") + "'");
  auto b = xdit(zero_steps + "--seed 18446744073709551615 -o '" + path("b.safetensors") + "'");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(io::read_safetensors_f32(path("a.safetensors"))["latents"].to_vector(),
            io::read_safetensors_f32(path("b.safetensors"))["latents"].to_vector());
}

}  // namespace
}  // namespace xdit
