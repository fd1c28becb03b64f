// xdit under mpirun end to end: parallel runs write the serial run's pixels,
// configuration errors are one clear line, and a rank that fails (by an error
// or by dying) ends the whole job quickly with its message — never a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <map>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "dist/cli_mpi.h"
#include "io/json.h"
#include "io/png.h"
#include "test_util.h"

namespace xdit {
namespace {

namespace fs = std::filesystem;
using test::binary;
using test::CliMpi;
using test::models;
using test::mpiexec;
using test::Result;

TEST_F(CliMpi, ParallelRunsWriteTheSerialImages) {
  expect_serial_pixels(
      [&](const std::string& out, const std::string& flags) { return args(out, flags); },
      Runs{{2, "--use_cfg_parallel"},
           {2, "--ulysses_degree 2"},
           {2, "--ring_degree 2"},
           {2, "--data_parallel_degree 2"},
           {4, "--use_cfg_parallel --ulysses_degree 2"},
           {4, "--data_parallel_degree 2 --ring_degree 2"},
           // PipeFusion warmed up on every step is exact
           {2, "--pipefusion_parallel_degree 2 --warmup_steps 3"},
           {4,
            "--data_parallel_degree 2 --pipefusion_parallel_degree 2 "
            "--num_pipeline_patch 4 --warmup_steps 3"},
           {4, "--pipefusion_parallel_degree 2 --ulysses_degree 2 --warmup_steps 3"},
           {4,
            "--pipefusion_parallel_degree 2 --ring_degree 2 --num_pipeline_patch 4 "
            "--warmup_steps 3"},
           // DistriFusion exchanging fresh K/V every step is exact
           {2, "--parallelism patch --sync_mode full_sync"},  // the parallel VAE by default
           {2, "--ring_degree 2 --patch_weights dynamic"},
           {4, "--data_parallel_degree 2 --ring_degree 2 --patch_weights dynamic"},
           {2, "--parallelism patch --sync_mode full_sync --use_parallel_vae=false"},
           {4, "--use_cfg_parallel --patch_parallel_degree 2 --sync_mode full_sync"},
           // the patch-parallel VAE on other layouts (bands over each replica)
           {2, "--ulysses_degree 2 --use_parallel_vae"},
           {4, "--data_parallel_degree 2 --use_cfg_parallel --use_parallel_vae"},
           // tensor parallelism (the T5 encoder split too), alone and in hybrids
           {2, "--tensor_parallel_degree 2"},
           {4, "--tensor_parallel_degree 2 --use_cfg_parallel"},
           {4, "--tensor_parallel_degree 2 --pipefusion_parallel_degree 2 --warmup_steps 3"},
           // the hybrids: every method of the mesh at once, 8 ranks
           {8,
            "--use_cfg_parallel --pipefusion_parallel_degree 2 --ulysses_degree 2 "
            "--warmup_steps 3"},
           {8,
            "--data_parallel_degree 2 --pipefusion_parallel_degree 2 --ring_degree 2 "
            "--warmup_steps 3"}});
}

// FLUX.1 [dev] with true CFG from the prompts: every method on the same
// engine writes the serial run's pixels.
TEST_F(CliMpi, FluxParallelRunsWriteTheSerialImages) {
  const auto flux = [&](const std::string& out, const std::string& extra) {
    return "generate --model '" + models() +
           "/flux-dev-tiny' --prompt 'a red fox' --prompt 'a cat on a mat' --negative_prompt "
           "'blurry' --true_cfg_scale 2.5 --height 64 --width 40 --num_inference_steps 3 --seed 5 "
           "--max_sequence_length 16 --dtype f32 -o '" +
           path(out) + "' " + extra;
  };
  expect_serial_pixels(
      flux, Runs{{2, "--use_cfg_parallel"},
                 {2, "--ulysses_degree 2"},
                 {2, "--ring_degree 2"},
                 {2, "--data_parallel_degree 2"},
                 {2, "--pipefusion_parallel_degree 2 --warmup_steps 3"},
                 {4, "--ulysses_degree 2 --ring_degree 2"},
                 {4, "--use_cfg_parallel --pipefusion_parallel_degree 2 --warmup_steps 3"},
                 {4, "--pipefusion_parallel_degree 2 --ulysses_degree 2 --warmup_steps 3"},
                 {2, "--patch_parallel_degree 2 --warmup_steps 3"},
                 {2, "--tensor_parallel_degree 2"},
                 {4, "--tensor_parallel_degree 2 --ring_degree 2"}});
  // 7 patch rows (56 px) split unevenly over the sequence-parallel ranks.
  expect_serial_pixels([&](const std::string& out,
                           const std::string& flags) { return flux(out, flags + " --height 56"); },
                       Runs{{4, "--ulysses_degree 2 --ring_degree 2"}, {2, "--ring_degree 2"}},
                       "h56_");
  // CFG parallel needs FLUX's true CFG: a negative prompt and true_cfg_scale > 1.
  Result r =
      run(2, "generate --model '" + models() +
                 "/flux-dev-tiny' --prompt x --height 32 --width 32 --use_cfg_parallel -o '" +
                 path("x.png") + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--use_cfg_parallel needs classifier-free guidance (a negative prompt and "
                       "--true_cfg_scale > 1)"),
            std::string::npos)
      << r.err;
  // 2 heads over Ulysses 4.
  r = run(4, "generate --model '" + models() +
                 "/flux-dev-tiny' --prompt x --height 32 --width 32 --ulysses_degree 4 -o '" +
                 path("x.png") + "'");
  EXPECT_NE(r.err.find("2 attention heads are not divisible by --ulysses_degree 4"),
            std::string::npos)
      << r.err;
}

// SD3.5 (dual attention, qk-norm) with CFG from the prompts, skip-layer
// guidance included: every method writes the serial run's pixels.
TEST_F(CliMpi, Sd35ParallelRunsWriteTheSerialImages) {
  const auto sd35 = [&](const std::string& out, const std::string& extra) {
    return "generate --model '" + models() +
           "/sd35-tiny' --prompt 'a red fox' --prompt 'a cat on a mat' --height 64 --width 40 "
           "--num_inference_steps 3 --guidance_scale 5 --seed 5 --max_sequence_length 16 "
           "--dtype f32 -o '" +
           path(out) + "' " + extra;
  };
  expect_serial_pixels(sd35, Runs{{2, "--use_cfg_parallel"},
                                  {2, "--ulysses_degree 2"},
                                  {2, "--pipefusion_parallel_degree 2 --warmup_steps 3"},
                                  {4, "--use_cfg_parallel --ring_degree 2"},
                                  {4,
                                   "--use_cfg_parallel --pipefusion_parallel_degree 2 "
                                   "--warmup_steps 3"},
                                  {2, "--tensor_parallel_degree 2"},
                                  {4, "--tensor_parallel_degree 2 --use_cfg_parallel"}});
  expect_serial_pixels(
      [&](const std::string& out, const std::string& flags) {
        return sd35(out, flags + " --skip_guidance_layers 1 --skip_layer_guidance_stop 1");
      },
      Runs{{2, "--use_cfg_parallel"}, {4, "--use_cfg_parallel --ulysses_degree 2"}}, "slg_");
}

TEST_F(CliMpi, DegreesThatDoNotMatchTheRanks) {
  Result r = run(2, args("x.png", "--ulysses_degree 2 --ring_degree 2"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("xdit: error: [rank 0/2] the parallel degrees multiply to 4"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("x_0.png")));
}

// mpirun's MPMD form starts ranks with different commands: a different
// size (which corrupted the heap), step count (which hung) or seed (which
// wrote a mixed image with exit 0) ends every rank before any work, with
// one line naming the option; --threads may differ.
TEST_F(CliMpi, RanksStartedWithDifferentCommandsAreRefused) {
  auto mpmd = [&](const std::string& a, const std::string& b) {
    return run_mpmd("-np 1 '" + binary() + "' " + a + " : -np 1 '" + binary() + "' " + b);
  };

  const std::string dp = " --data_parallel_degree 2";
  for (const auto& [other, option] : std::vector<std::pair<std::string, std::string>>{
           {"--height 96", "--height"},
           {"--num_inference_steps 2", "--num_inference_steps"},
           {"--seed 6", "--seed"}}) {
    SCOPED_TRACE(option);
    const Result r = mpmd(args("x.png", dp), args("x.png", dp + " " + other));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("rank 1 was started with a different " + option + " than rank 0"),
              std::string::npos)
        << r.err;
    EXPECT_LT(r.seconds, 60);
    EXPECT_FALSE(fs::exists(path("x_0.png")));
  }
  // Another subcommand on rank 1.
  const Result s = mpmd(args("x.png", dp), "serve --port 0" + dp);
  EXPECT_NE(s.code, 0);
  EXPECT_NE(s.err.find("rank 1 was started with a different subcommand than rank 0"),
            std::string::npos)
      << s.err;
  // The same command with different --threads runs.
  const Result t = mpmd(args("t.png", dp + " --threads 1"), args("t.png", dp + " --threads 2"));
  EXPECT_EQ(t.code, 0) << t.err;
}

// --device cuda under mpirun: where there is a GPU, each rank takes its local
// rank's (two ranks share a lone GPU through the host-staged communicator)
// and u2, r2 and pp2 write the serial GPU run's images; cuda:1 is refused in
// one line. Without one, every rank says why in one line before any work.
TEST_F(CliMpi, DeviceCudaRunsTheParallelMethodsOrSaysWhyNot) {
  if (!test::no_gpu().empty()) {
    Result r = run(2, args("x.png", "--ulysses_degree 2 --device cuda"));
    EXPECT_NE(r.code, 0);
    for (const char* rank : {"[rank 0/2] --device cuda:0: ", "[rank 1/2] --device cuda:0: "})
      EXPECT_NE(r.err.find(rank), std::string::npos) << r.err;
    EXPECT_TRUE(r.err.find("no CUDA device") != std::string::npos ||
                r.err.find("without the CUDA backend") != std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(path("x_0.png")));
    return;
  }
  expect_serial_pixels(
      [&](const std::string& out, const std::string& flags) {
        return args(out, flags + " --device cuda");
      },
      Runs{{2, "--ulysses_degree 2"},
           {2, "--ring_degree 2"},
           {2, "--pipefusion_parallel_degree 2 --warmup_steps 3"}},
      "gpu_");
  Result r = run(2, args("x.png", "--ulysses_degree 2 --device cuda:1"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("each rank takes the GPU of its local rank"), std::string::npos) << r.err;
}

TEST_F(CliMpi, HeadsNotDivisible) {
  // PixArt-α tiny has 3 heads.
  Result r =
      run(2, "generate --model '" + models() +
                 "/pixart-alpha-tiny' --prompt x --height 64 --width 64 --no_resolution_binning "
                 "--ulysses_degree 2 -o '" +
                 path("x.png") + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("3 attention heads are not divisible by --ulysses_degree 2"),
            std::string::npos)
      << r.err;
}

// Tensor-parallel degrees the model cannot take: one line on every rank,
// before any weight loads, and no image.
TEST_F(CliMpi, TensorParallelDegreesTheHeadsDoNotAllow) {
  const auto gen = [&](const std::string& model, const std::string& flags) {
    return "generate --model '" + models() + "/" + model +
           "' --prompt x --height 64 --width 64 --no_resolution_binning " + flags + " -o '" +
           path("x.png") + "'";
  };
  struct Case {
    int np;
    std::string model, flags, message;
  };
  for (const Case& c :
       {Case{2, "pixart-alpha-tiny", "--tensor_parallel_degree 2",
             "the 3 attention heads of the transformer are not divisible by "
             "--tensor_parallel_degree 2"},
        Case{4, "pixart-sigma-tiny", "--tensor_parallel_degree 4",
             "--tensor_parallel_degree 4 is larger than the 2 attention heads of the transformer"},
        Case{4, "flux-dev-tiny", "--tensor_parallel_degree 2 --ulysses_degree 2",
             "2 attention heads (1 per --tensor_parallel_degree 2 rank) are not divisible by "
             "--ulysses_degree 2"}}) {
    SCOPED_TRACE(c.model + " " + c.flags);
    Result r = run(c.np, gen(c.model, c.flags));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("x_0.png")) || fs::exists(path("x.png")));
  }
}

// --patch_weights auto: one calibration step sets (and logs) the weights;
// the exact methods still write the serial images. PipeFusion refuses it.
TEST_F(CliMpi, PatchWeightsAutoCalibratesLogsAndWritesTheSerialImages) {
  expect_serial_pixels(
      [&](const std::string& out, const std::string& flags) { return args(out, flags); },
      Runs{{2, "--ulysses_degree 2 --patch_weights auto"},
           {2, "--patch_parallel_degree 2 --sync_mode full_sync --patch_weights auto"}},
      "auto_");
  Result r = run(2, args("a.png", "--ring_degree 2 --patch_weights auto"), "XDIT_QUIET=0");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--patch_weights auto: calibrated on one step: weights "), std::string::npos)
      << r.err;
  r = run(2, args("b.png", "--pipefusion_parallel_degree 2 --patch_weights auto"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--patch_weights auto calibrates the ranks that split the rows"),
            std::string::npos)
      << r.err;
}

TEST_F(CliMpi, CfgParallelWithoutGuidanceAndTooManyDpGroups) {
  Result r = run(2, args("x.png", "--use_cfg_parallel --guidance_scale 1"));
  EXPECT_NE(r.err.find("--use_cfg_parallel needs classifier-free guidance"), std::string::npos)
      << r.err;
  r = run(4, args("x.png", "--data_parallel_degree 4"));
  EXPECT_NE(r.err.find("more than the 2 prompts"), std::string::npos) << r.err;
}

TEST_F(CliMpi, PipeFusionStagesWithoutAPatchEach) {
  // 32 px: 2 rows of patches, 1 per ring rank, for 2 stages.
  Result r = run(4, "generate --model '" + models() +
                        "/pixart-sigma-tiny' --prompt x --height 32 --width 64 "
                        "--no_resolution_binning --pipefusion_parallel_degree 2 --ring_degree 2 "
                        "-o '" +
                        path("x.png") + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("2 rows of patches (1 per sequence-parallel rank), fewer than the 2 "
                       "PipeFusion stages"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("x_0.png")));
}

TEST_F(CliMpi, AFailingRankEndsTheJobWithItsMessage) {
  Result r = run(2, args("x.png", "--use_cfg_parallel"), "XDIT_FAULT_RANK=1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: the job hung";
  EXPECT_NE(r.err.find("xdit: error: [rank 1/2] injected fault"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30.0);
}

TEST_F(CliMpi, AKilledRankEndsTheJob) {
  Result r = run(2, args("x.png", "--ulysses_degree 2"), "XDIT_FAULT_RANK=0 XDIT_FAULT=kill");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: the job hung";
  EXPECT_LT(r.seconds, 30.0);
}

// A stopped rank (kill -STOP) held the job for as long as it was stopped:
// the other rank's watchdog ends the job after --comm_timeout with one line
// naming itself and the call it waited in.
TEST_F(CliMpi, AStoppedRankEndsTheJobAfterTheCommTimeout) {
  Result r = run(2, args("x.png", "--ulysses_degree 2 --comm_timeout 3"),
                 "XDIT_FAULT_RANK=1 XDIT_FAULT=stop");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: the job hung";
  EXPECT_NE(r.err.find("xdit: error: [rank 0/2] MPI_"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("made no progress for 3 s (--comm_timeout 3 s)"), std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 60.0);
  EXPECT_FALSE(fs::exists(path("x_0.png")));
  // No partial output either (issue 68): the watchdog's exit runs no
  // destructor, so it removes rank 0's hidden temporary files itself.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".xdit-"), std::string::npos)
        << e.path() << " left behind";
  // Off (0), the same stop is waited for: the outer timeout ends it.
  r = run(2, args("x.png", "--ulysses_degree 2 --comm_timeout 0"),
          "XDIT_FAULT_RANK=1 XDIT_FAULT=stop", 8);
  EXPECT_EQ(r.code, 124) << r.err;
  // A limit that is not a number of seconds is refused before any work.
  for (const char* bad : {"-1", "nan", "1e308"}) {
    r = run(2, args("x.png", std::string("--ulysses_degree 2 --comm_timeout ") + bad));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("--comm_timeout must be from 0 (off)"), std::string::npos)
        << bad << ": " << r.err;
  }
}

// Machines can hold different files under one path: ranks started in two
// working folders, each with a model folder "m" that differs in one
// config value, are refused before any work, naming the file.
TEST_F(CliMpi, RanksReadingDifferentModelFilesAreRefused) {
  for (const char* side : {"a", "b"}) {
    fs::create_directories(path(side));
    fs::copy(models() + "/pixart-sigma-tiny", path(side) + "/m", fs::copy_options::recursive);
  }
  const std::string sched = path("b") + "/m/scheduler/scheduler_config.json";
  auto j = io::read_json_file(sched);
  j["beta_end"] = 0.021;
  std::ofstream(sched) << j.dump();
  auto side = [&](const char* dir, const std::string& out) {
    return "-wdir '" + path(dir) + "' -np 1 '" + binary() +
           "' generate --model m --prompt 'a red fox' --height 64 --width 64 "
           "--num_inference_steps 2 --seed 5 --use_cfg_parallel -o '" +
           path(out) + "'";
  };
  auto mpmd = [&](const std::string& out) {
    return run_mpmd(side("a", out) + " : " + side("b", out));
  };

  auto r = mpmd("x.png");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1 reads a different model file scheduler/scheduler_config.json "
                       "than rank 0"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("x.png")));
  // The same files in both folders run.
  fs::copy_file(path("a") + "/m/scheduler/scheduler_config.json", sched,
                fs::copy_options::overwrite_existing);
  r = mpmd("y.png");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(path("y.png")));
}

TEST_F(CliMpi, PipeFusionTraceShowsEachStagesPatches) {
  // pp 2, M 4, 3 steps with 1 warm-up: each stage computes 1 + 4·2 times.
  Result r =
      run(2, args("t.png", "--pipefusion_parallel_degree 2 --num_pipeline_patch 4 --trace '" +
                               path("trace.json") + "'"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(path("trace.json"));
  const auto j = nlohmann::json::parse(in);
  std::map<std::pair<int, std::string>, int> count;
  for (const auto& e : j.at("traceEvents")) {
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_GE(e.at("dur").get<int64_t>(), 0);
    ++count[{e.at("pid").get<int>(), e.at("cat").get<std::string>()}];
  }
  EXPECT_EQ((count[{0, "compute"}]), 9);
  EXPECT_EQ((count[{1, "compute"}]), 9);
  EXPECT_EQ((count[{1, "scheduler"}]), 8);  // the last stage steps each patch
  EXPECT_GT((count[{0, "comm"}]), 0);
  // The layout beside the events: what makes this trace's numbers.
  EXPECT_EQ(j.at("otherData").at("parallel"),
            "dp=1 cfg=1 pp=2 ulysses=1 ring=1 tp=1; pipefusion patches 4; sync_mode async, "
            "warmup 1 of 3 steps; stale");
}

// The PNG's "parallel" text says how the image was made and whether it is the
// serial run's: exact, stale (PipeFusion / DistriFusion after the warm-up)
// or approximate (naive patch, which also warns once).
TEST_F(CliMpi, MetadataSaysExactStaleOrApproximate) {
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"--ulysses_degree 2", "dp=1 cfg=1 pp=1 ulysses=2 ring=1 tp=1; exact"},
      {"--pipefusion_parallel_degree 2",
       "; pipefusion patches 2; sync_mode async, warmup 1 of 3 "
       "steps; stale"},
      {"--pipefusion_parallel_degree 2 --sync_mode full_sync",
       "; pipefusion patches 2; sync_mode full_sync, warmup 3 of 3 steps; exact"},
      {"--patch_parallel_degree 2 --warmup_steps 2",
       "patch=2 (displaced) parallel_vae; "
       "sync_mode async, warmup 2 of 3 steps; stale"},
      {"--patch_parallel_degree 2 --patch_mode naive", "patch=2 (naive) parallel_vae; approximate"},
  };
  for (const auto& [flags, want] : runs) {
    SCOPED_TRACE(flags);
    fs::remove(path("m_0.png"));
    const Result r = run(2, args("m.png", flags));
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string text = io::read_png(path("m_0.png")).text["parallel"];
    EXPECT_NE(text.find(want), std::string::npos) << text;
    EXPECT_EQ(text.size() - text.rfind(want), want.size()) << text;  // at the end
    const bool naive = flags.find("naive") != std::string::npos;
    EXPECT_EQ(r.err.find("warning: --patch_mode naive is approximate") != std::string::npos, naive)
        << r.err;
  }
}

// A flag of a method the layout does not have changes nothing: the run goes
// on with one note line, as xDiT's scripts pass --warmup_steps and
// --sync_mode to every layout; so does --warmup_steps with --sync_mode
// full_sync. The legacy sync modes are accepted with a note too.
TEST_F(CliMpi, FlagsOfAnAbsentMethodRunWithANote) {
  const std::vector<std::pair<std::string, std::string>> noted = {
      {"--ulysses_degree 2 --num_pipeline_patch 4", "--num_pipeline_patch applies to PipeFusion"},
      {"--ring_degree 2 --warmup_steps 2", "--warmup_steps applies to PipeFusion and DistriFusion"},
      {"--ulysses_degree 2 --patch_mode naive", "--patch_mode applies to patch parallelism"},
      {"--use_cfg_parallel --sync_mode full_sync", "--sync_mode full_sync applies to PipeFusion"},
      {"--ulysses_degree 2 --attn_layer_num_for_pp 1,1", "--attn_layer_num_for_pp applies to "},
      {"--pipefusion_parallel_degree 2 --warmup_steps 2 --sync_mode full_sync",
       "--warmup_steps 2 with --sync_mode full_sync: every step is synchronous already"},
  };
  for (const auto& [flags, want] : noted) {
    SCOPED_TRACE(flags);
    fs::remove(path("x_0.png"));
    const Result r = run(2, args("x.png", flags));
    ASSERT_EQ(r.code, 0) << r.err;
    const size_t at = r.err.find(want);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(want, at + 1), std::string::npos) << "one line, not one per rank";
    EXPECT_TRUE(fs::exists(path("x_0.png")));
  }
  const Result legacy = run(2, args("l.png", "--patch_parallel_degree 2 --sync_mode stale_gn"));
  ASSERT_EQ(legacy.code, 0) << legacy.err;
  EXPECT_NE(legacy.err.find("stale_gn and corrected_async_gn differ in how DistriFusion corrects "
                            "a GroupNorm across patches; a transformer has none"),
            std::string::npos)
      << legacy.err;
}

TEST_F(CliMpi, NonFiniteLatentsEndEveryRankAndWriteNothing) {
  fs::copy(models() + "/pixart-sigma-tiny", dir_ / "model", fs::copy_options::recursive);
  ASSERT_TRUE(test::poison_f32(dir_ / "model" / "transformer", "proj_out.bias"));
  for (const char* layout : {"--ulysses_degree 2", "--pipefusion_parallel_degree 2"}) {
    Result r = run(2, "generate --model '" + path("model") +
                          "' --prompt x --height 64 --width 48 --no_resolution_binning "
                          "--num_inference_steps 3 -o '" +
                          path("nan.png") + "' " + layout);
    EXPECT_NE(r.code, 0) << layout;
    EXPECT_NE(r.code, 124) << "timed out: the job hung";
    EXPECT_NE(r.err.find("NaN/Inf value(s) after denoising step 1 of 3"), std::string::npos)
        << layout << ": " << r.err;
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find("nan.png"), std::string::npos)
          << layout << " left " << e.path();
  }
}

TEST_F(CliMpi, OutputOnAFifoIsRefusedBeforeAnyRankWorks) {
  // Two prompts write x_0.png and x_1.png; the second is a FIFO.
  ASSERT_EQ(::mkfifo(path("x_1.png").c_str(), 0666), 0);
  Result r = run(2, args("x.png", "--use_cfg_parallel"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cannot write " + path("x_1.png") + ": it is a FIFO"), std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::is_fifo(path("x_1.png")));
  EXPECT_FALSE(fs::exists(path("x_0.png")));
}

TEST_F(CliMpi, LaunchRunsMpirun) {
  Result r = run(0, "launch -n 2 -- " + args("l.png", "--use_cfg_parallel"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(path("l_0.png")));
  EXPECT_TRUE(fs::exists(path("l_1.png")));
}

}  // namespace
}  // namespace xdit
