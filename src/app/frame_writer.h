// The writer of xdit generate's images and videos: per prompt its frames as
// one H.264 MP4 (an output named *.mp4) or as PNG files, each with the run's
// parameters (the PNG text chunks; the MP4 container's metadata).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/file.h"
#include "pipeline/request.h"

namespace xdit::app {

// Whether `path` names an MP4 file (".mp4", any case).
bool is_mp4_path(const std::string& path);
// Before any work: one line when `path`'s extension (any case) is not one
// xdit writes — .png or .mp4 for images and videos, .safetensors for
// latents (`latents`); a name without an extension is written as it is.
void check_output_extension(const std::string& path, bool latents);
// Before any work: the path an MP4 output is written to — itself, or where
// this FFmpeg build has no H.264 encoder, NAME.png (PNG frames NAME_f0000.png,
// …), said in one line.
std::string mp4_or_png_frames(const std::string& path);
// Before the run, with the size it writes: H.264 in yuv420p needs even sides.
void check_mp4_size(const std::string& path, int64_t width, int64_t height);

// Writes `res` to `outputs`, which were reserved for one file per prompt
// (io::output_paths(path, prompts)). An MP4 path: each prompt's frames as one
// video at `fps`. A PNG path: one frame per prompt into those files, several
// as one PNG per frame (out_f0000.png, … or out_1_f0002.png; reserved here),
// each with a `frame` text chunk. `text_of(p)`: prompt p's parameters.
void write_frames(std::vector<io::OutputFile>& outputs, const std::string& path,
                  const pipeline::ImageResult& res, int fps,
                  const std::function<std::map<std::string, std::string>(size_t)>& text_of);

}  // namespace xdit::app
