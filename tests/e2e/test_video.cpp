// MP4 output through FFmpeg's libraries: 9 frames of 48 x 32 written as
// H.264 yuv420p at 16 fps with the generation parameters in the container,
// read back by libavformat and by FFmpeg's own ffprobe (frames, size, codec,
// pixel format, rate), decoded close to the pictures; bad input is refused
// with one line and leaves no file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/error.h"
#include "io/file.h"
#include "io/video.h"

namespace xdit::io {
namespace {

constexpr int64_t kW = 48, kH = 32, kFrames = 9;

// A smooth moving picture: gradients and a square that moves a pixel a frame.
std::vector<std::vector<uint8_t>> frames() {
  std::vector<std::vector<uint8_t>> out;
  for (int64_t t = 0; t < kFrames; ++t) {
    std::vector<uint8_t> f(static_cast<size_t>(kW * kH * 3));
    for (int64_t y = 0; y < kH; ++y)
      for (int64_t x = 0; x < kW; ++x) {
        uint8_t* p = f.data() + (y * kW + x) * 3;
        const bool square = x >= 8 + t && x < 20 + t && y >= 10 && y < 22;
        p[0] = static_cast<uint8_t>(square ? 230 : 40 + 4 * x);
        p[1] = static_cast<uint8_t>(square ? 60 : 30 + 6 * y);
        p[2] = static_cast<uint8_t>(square ? 50 : 120 + 10 * t);
      }
    out.push_back(std::move(f));
  }
  return out;
}

double psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += std::pow(double(a[i]) - double(b[i]), 2);
  return 10 * std::log10(255.0 * 255.0 / std::max(se / static_cast<double>(a.size()), 1e-9));
}

TEST(Video, Mp4ReadsBackAsWritten) {
  if (h264_encoder().empty()) GTEST_SKIP() << "this FFmpeg build has no H.264 encoder";
  const auto dir = test::make_test_dir("xdit_video_");
  const std::string path = (dir / "clip.mp4").string();
  const auto pictures = frames();
  {
    OutputFile out(path);
    write_mp4(out, pictures, kW, kH, 16, {{"prompt", "a red square"}, {"seed", "7"}, {"x", ""}});
  }
  const VideoInfo v = read_video(path, true);
  EXPECT_NE(v.container.find("mp4"), std::string::npos) << v.container;
  EXPECT_EQ(v.codec, "h264");
  EXPECT_EQ(v.pixel_format, "yuv420p");
  EXPECT_EQ(v.width, kW);
  EXPECT_EQ(v.height, kH);
  EXPECT_EQ(v.frames, kFrames);
  EXPECT_DOUBLE_EQ(v.fps, 16.0);
  EXPECT_EQ(v.metadata.at("prompt"), "a red square");
  EXPECT_EQ(v.metadata.at("seed"), "7");
  EXPECT_EQ(v.metadata.count("x"), 0u) << "empty values are left out";
  ASSERT_EQ(v.rgb.size(), pictures.size());
  // yuv420p halves the colour resolution: the saturated square's edges on a
  // 48 x 32 frame cost most of what is lost (about 29-30 dB at CRF 18).
  for (size_t i = 0; i < pictures.size(); ++i)
    EXPECT_GT(psnr(v.rgb[i], pictures[i]), 26.0) << "frame " << i;
  std::filesystem::remove_all(dir);
}

TEST(Video, FfprobeOpensTheMp4) {
  if (h264_encoder().empty()) GTEST_SKIP() << "this FFmpeg build has no H.264 encoder";
  if (std::system("ffprobe -version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "ffprobe (Debian's ffmpeg package) is not installed";
  const auto dir = test::make_test_dir("xdit_video_");
  const std::string path = (dir / "clip.mp4").string();
  {
    OutputFile out(path);
    write_mp4(out, frames(), kW, kH, 16, {});
  }
  const std::string json = (dir / "probe.json").string();
  const auto r = test::run_command(
      "ffprobe -v error -select_streams v:0 -count_frames -show_entries "
      "stream=codec_name,width,height,nb_read_frames,pix_fmt,r_frame_rate -of json -o '" +
          json + "' '" + path + "'",
      (dir / "probe.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in).at("streams").at(0);
  EXPECT_EQ(j.at("codec_name"), "h264");
  EXPECT_EQ(j.at("pix_fmt"), "yuv420p");
  EXPECT_EQ(j.at("width"), kW);
  EXPECT_EQ(j.at("height"), kH);
  EXPECT_EQ(j.at("nb_read_frames"), std::to_string(kFrames));
  EXPECT_EQ(j.at("r_frame_rate"), "16/1");
  std::filesystem::remove_all(dir);
}

TEST(Video, BadInputIsOneLineAndLeavesNoFile) {
  if (h264_encoder().empty()) GTEST_SKIP() << "this FFmpeg build has no H.264 encoder";
  const auto dir = test::make_test_dir("xdit_video_");
  const std::string path = (dir / "bad.mp4").string();
  const auto error_of = [&](const std::vector<std::vector<uint8_t>>& f, int64_t w, int64_t h,
                            int fps) {
    try {
      OutputFile out(path);
      write_mp4(out, f, w, h, fps, {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error_of(frames(), 47, 32, 16).find("even sides"), std::string::npos);
  EXPECT_NE(error_of({}, kW, kH, 16).find("no frames"), std::string::npos);
  EXPECT_NE(error_of(frames(), kW, kH, 0).find("fps"), std::string::npos);
  EXPECT_NE(error_of({std::vector<uint8_t>(10)}, kW, kH, 16).find("holds 10 bytes"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path)) << "a failed write leaves no file";
  std::filesystem::remove_all(dir);
}

// xdit generate --output NAME.mp4 on the tiny Wan2.1 folder: one H.264 MP4
// of the rounded frame count at the requested size, which ffprobe opens, with
// the run's parameters in the container; PNG output writes one file per frame.
TEST(Video, GenerateWritesAnMp4ThatFfprobeOpens) {
  if (h264_encoder().empty()) GTEST_SKIP() << "this FFmpeg build has no H.264 encoder";
  if (std::system("ffprobe -version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "ffprobe (Debian's ffmpeg package) is not installed";
  const auto dir = test::make_test_dir("xdit_video_");
  const std::string path = (dir / "fox.mp4").string();
  const std::string run = std::string("env XDIT_QUIET=1 OMP_NUM_THREADS=1 '") + XDIT_BINARY +
                          "' generate --model '" + XDIT_MODELS +
                          "/wan21-tiny' --prompt 'a fox' --height 48 --width 80 "
                          "--num_inference_steps 2 --max_sequence_length 8 --dtype f32 ";
  auto r = test::run_command(run + "--num_frames 8 --fps 12 -o '" + path + "'",
                             (dir / "run.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("using 9 as diffusers does"), std::string::npos) << r.err;
  const std::string json = (dir / "probe.json").string();
  r = test::run_command(
      "ffprobe -v error -select_streams v:0 -count_frames -show_entries "
      "stream=codec_name,width,height,nb_read_frames,pix_fmt,r_frame_rate:format_tags -of json "
      "-o '" +
          json + "' '" + path + "'",
      (dir / "probe.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  const auto& v = j.at("streams").at(0);
  EXPECT_EQ(v.at("codec_name"), "h264");
  EXPECT_EQ(v.at("pix_fmt"), "yuv420p");
  EXPECT_EQ(v.at("width"), 80);
  EXPECT_EQ(v.at("height"), 48);
  EXPECT_EQ(v.at("nb_read_frames"), "9");
  EXPECT_EQ(v.at("r_frame_rate"), "12/1");
  const auto& tags = j.at("format").at("tags");
  EXPECT_EQ(tags.at("prompt"), "a fox");
  EXPECT_EQ(tags.at("frames"), "9");
  // PNG output: one file per frame.
  r = test::run_command(run + "--num_frames 5 -o '" + (dir / "fox.png").string() + "'",
                        (dir / "png.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  for (int f = 0; f < 5; ++f)
    EXPECT_TRUE(std::filesystem::exists(dir / ("fox_f000" + std::to_string(f) + ".png"))) << f;
  EXPECT_FALSE(std::filesystem::exists(dir / "fox_f0005.png"));
  // An odd size cannot be H.264: refused before any work, no file left.
  r = test::run_command(std::string("env XDIT_QUIET=1 '") + XDIT_BINARY + "' generate --model '" +
                            XDIT_MODELS + "/pixart-alpha-tiny' --prompt x --height 61 -o '" +
                            (dir / "odd.mp4").string() + "'",
                        (dir / "odd.err").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("H.264 needs even sides"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "odd.mp4"));
  std::filesystem::remove_all(dir);
}

// Without an H.264 encoder (XDIT_H264_ENCODER=none stands in for such an
// FFmpeg build) an .mp4 output falls back to PNG frames, said in one line,
// and no .mp4 file is left.
TEST(Video, NoEncoderFallsBackToPngFrames) {
  const auto dir = test::make_test_dir("xdit_video_nocodec_");
  const std::string run = std::string("env XDIT_H264_ENCODER=none OMP_NUM_THREADS=1 '") +
                          XDIT_BINARY + "' generate --model '" + XDIT_MODELS +
                          "/wan21-tiny' --prompt 'a fox' --height 32 --width 48 "
                          "--num_inference_steps 1 --max_sequence_length 8 --dtype f32 "
                          "--num_frames 5 -o '" +
                          (dir / "fox.mp4").string() + "'";
  const auto r = test::run_command(run, (dir / "run.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("has no H.264 encoder (libx264 or another): writing PNG frames instead"),
            std::string::npos)
      << r.err;
  for (int f = 0; f < 5; ++f)
    EXPECT_TRUE(std::filesystem::exists(dir / ("fox_f000" + std::to_string(f) + ".png"))) << f;
  EXPECT_FALSE(std::filesystem::exists(dir / "fox.mp4"));
  std::filesystem::remove_all(dir);
}

// Wan2.2's two experts from the command line: --guidance_scale_2 reaches
// the run and the container's metadata.
TEST(Video, Wan22GuidanceScale2InTheMp4) {
  if (h264_encoder().empty()) GTEST_SKIP() << "this FFmpeg build has no H.264 encoder";
  if (std::system("ffprobe -version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "ffprobe (Debian's ffmpeg package) is not installed";
  const auto dir = test::make_test_dir("xdit_video_wan22_");
  const std::string path = (dir / "fox.mp4").string();
  auto r = test::run_command(std::string("env -u XDIT_QUIET OMP_NUM_THREADS=1 '") + XDIT_BINARY +
                                 "' generate --model '" + XDIT_MODELS +
                                 "/wan22-tiny' --prompt 'a fox' --height 32 --width 48 "
                                 "--num_inference_steps 4 --max_sequence_length 8 --dtype f32 "
                                 "--num_frames 5 --guidance_scale_2 2.5 -o '" +
                                 path + "'",
                             (dir / "run.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("guidance_scale_2 2.5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loading transformer_2 (the low-noise expert)"), std::string::npos) << r.err;
  const std::string tag = (dir / "tag.txt").string();
  r = test::run_command(
      "ffprobe -v error -show_entries format_tags=guidance_scale_2 -of "
      "default=nw=1:nk=1 -o '" +
          tag + "' '" + path + "'",
      (dir / "probe.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::string value;
  std::ifstream(tag) >> value;
  EXPECT_EQ(value, "2.500000");
  std::filesystem::remove_all(dir);
}

// xdit bench wan_parallel: the serial row, then Ulysses 2 and Ring 2 on two
// ranks (mpirun, started by the bench), each with its efficiency.
TEST(Video, BenchWanParallelRowsRun) {
  if (std::system("mpirun --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun (OpenMPI) is not installed";
  const auto dir = test::make_test_dir("xdit_bench_wan_");
  const std::string rows_file = (dir / "rows.json").string();
  const auto r = test::run_command(std::string("sh -c \"env XDIT_QUIET=1 '") + XDIT_BINARY +
                                       "' bench wan_parallel --resolutions 32 --dtypes f32 "
                                       "--warmup 0 --json > '" +
                                       rows_file + "'\"",
                                   (dir / "run.err").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<nlohmann::json> rows = test::json_lines(rows_file);
  ASSERT_EQ(rows.size(), 3u) << r.err;
  EXPECT_FALSE(rows[0].contains("layout"));
  EXPECT_EQ(rows[1]["layout"], "ulysses");
  EXPECT_EQ(rows[2]["layout"], "ring");
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["ranks"], 2);
    EXPECT_EQ(rows[i]["video_tokens"], rows[0]["video_tokens"]);
    EXPECT_GT(rows[i]["efficiency"].get<double>(), 0.0);
    EXPECT_GT(rows[i]["comm_bytes_per_step"].get<double>(), 0.0) << "the split sends its shares";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace xdit::io
