#include "app/frame_writer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/png.h"
#include "io/video.h"

namespace xdit::app {

namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

bool is_mp4_path(const std::string& path) {
  return path.size() >= 4 && lowercase(path.substr(path.size() - 4)) == ".mp4";
}

void check_output_extension(const std::string& path, bool latents) {
  const std::string ext = lowercase(std::filesystem::path(path).extension().string());
  if (ext.empty()) return;
  if (latents) {
    XDIT_CHECK(ext == ".safetensors", "--output ", path,
               ": --output_type latent writes a safetensors file; name it *.safetensors");
    return;
  }
  XDIT_CHECK(ext == ".png" || ext == ".mp4", "--output ", path, ": xdit writes PNG (.png) and ",
             "H.264 MP4 (.mp4) files, not ", ext, " ones; name it *.png or *.mp4");
}

std::string mp4_or_png_frames(const std::string& path) {
  if (!io::h264_encoder().empty()) return path;
  const std::string png = path.substr(0, path.size() - 4) + ".png";
  XDIT_WARN("--output ", path,
            ": this FFmpeg build has no H.264 encoder (libx264 or another): writing PNG frames "
            "instead, ",
            png, " numbered per frame");
  return png;
}

void check_mp4_size(const std::string& path, int64_t width, int64_t height) {
  XDIT_CHECK(width % 2 == 0 && height % 2 == 0, "--output ", path, ": H.264 needs even sides, ",
             width, "x", height,
             " has an odd one (choose an even --width and --height, or PNG "
             "output)");
}

void write_frames(std::vector<io::OutputFile>& outputs, const std::string& path,
                  const pipeline::ImageResult& res, int fps,
                  const std::function<std::map<std::string, std::string>(size_t)>& text_of) {
  const auto frames = static_cast<size_t>(res.frames);
  const size_t prompts = res.rgb.size() / frames;
  if (is_mp4_path(path)) {
    for (size_t p = 0; p < prompts; ++p) {
      const std::vector<std::vector<uint8_t>> clip(
          res.rgb.begin() + static_cast<long>(p * frames),
          res.rgb.begin() + static_cast<long>((p + 1) * frames));
      auto meta = text_of(p);
      meta["frames"] = std::to_string(frames);
      meta["fps"] = std::to_string(fps);
      io::write_mp4(outputs.at(p), clip, res.width, res.height, fps, meta);
    }
    return;
  }
  if (frames > 1) {
    outputs.clear();
    for (const auto& p : io::output_paths(path, prompts, res.frames)) outputs.emplace_back(p);
  }
  for (size_t i = 0; i < res.rgb.size(); ++i) {
    auto text = text_of(i / frames);
    if (frames > 1) text["frame"] = std::to_string(i % frames) + " of " + std::to_string(frames);
    io::write_png(outputs.at(i), res.width, res.height, res.rgb[i], text);
  }
}

}  // namespace xdit::app
