// Video files through FFmpeg's libavformat / libavcodec / libswscale
// (Debian's libraries): H.264 in yuv420p inside MP4, the format every player
// and browser opens, with the generation parameters in the container's
// metadata.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xdit::io {

class OutputFile;

// The H.264 encoder this FFmpeg build has (libx264 first; the environment's
// XDIT_H264_ENCODER names another, or "none"), or "" when none.
std::string h264_encoder();

// frames: each width·height·3 RGB bytes, row-major. H.264 needs even sides;
// `fps` > 0. Metadata entries with empty values are left out. Throws one
// line (no encoder, odd size, ...).
std::vector<uint8_t> encode_mp4(const std::vector<std::vector<uint8_t>>& frames, int64_t width,
                                int64_t height, int fps,
                                const std::map<std::string, std::string>& metadata);
// The same into an output reserved before the work (io/file.h): nothing is
// written unless the whole video encoded.
void write_mp4(OutputFile& out, const std::vector<std::vector<uint8_t>>& frames, int64_t width,
               int64_t height, int fps, const std::map<std::string, std::string>& metadata);

// What a video file holds, as FFmpeg reads it back (tests, xdit info).
struct VideoInfo {
  std::string container, codec, pixel_format;
  int64_t width = 0, height = 0, frames = 0;
  double fps = 0;
  std::map<std::string, std::string> metadata;
  std::vector<std::vector<uint8_t>> rgb;  // decoded frames, when asked for
};
VideoInfo read_video(const std::string& path, bool decode_frames = false);

}  // namespace xdit::io
