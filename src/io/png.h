// PNG files through libspng: 8-bit RGB with tEXt chunks (generation parameters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xdit::io {

class OutputFile;

// Writes rgb (height·width·3 bytes, row-major) with the given text chunks
// (entries with empty values are left out).
// Writes a temporary file and renames it: no partial file on failure.
void write_png(const std::string& path, int64_t width, int64_t height,
               const std::vector<uint8_t>& rgb, const std::map<std::string, std::string>& text);
// The PNG's bytes (an HTTP response body); `path` names it in errors.
std::vector<uint8_t> encode_png(int64_t width, int64_t height, const std::vector<uint8_t>& rgb,
                                const std::map<std::string, std::string>& text,
                                const std::string& path = "(in memory)");
// The same into an output reserved before the work (io/file.h).
void write_png(OutputFile& out, int64_t width, int64_t height, const std::vector<uint8_t>& rgb,
               const std::map<std::string, std::string>& text);

struct PngImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::map<std::string, std::string> text;
};
PngImage read_png(const std::string& path);
// A PNG held in memory; `what` names it in errors.
PngImage decode_png(const void* data, size_t size, const std::string& what);

}  // namespace xdit::io
