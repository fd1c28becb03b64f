#include "io/png.h"

#include <spng.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "io/file.h"

namespace xdit::io {

namespace {
using Ctx = std::unique_ptr<spng_ctx, decltype(&spng_ctx_free)>;
void check(int rc, const char* what, const std::string& path) {
  XDIT_CHECK(rc == 0, what, " ", path, ": ", spng_strerror(rc));
}
}  // namespace

void write_png(const std::string& path, int64_t width, int64_t height,
               const std::vector<uint8_t>& rgb, const std::map<std::string, std::string>& text) {
  OutputFile out(path);
  write_png(out, width, height, rgb, text);
}

std::vector<uint8_t> encode_png(int64_t width, int64_t height, const std::vector<uint8_t>& rgb,
                                const std::map<std::string, std::string>& text,
                                const std::string& path) {
  XDIT_CHECK(width > 0 && height > 0 && rgb.size() == static_cast<size_t>(width * height * 3),
             "PNG ", path, ": pixel buffer does not match ", width, "x", height, " RGB");
  Ctx ctx(spng_ctx_new(SPNG_CTX_ENCODER), spng_ctx_free);
  XDIT_CHECK(ctx != nullptr, "cannot create a PNG encoder");
  check(spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1), "PNG encoder option for", path);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  check(spng_set_ihdr(ctx.get(), &ihdr), "PNG header for", path);
  std::vector<spng_text> chunks;
  for (const auto& [k, v] : text) {
    if (v.empty()) continue;  // libspng rejects empty text; an absent key reads the same
    spng_text t{};
    XDIT_CHECK(!k.empty() && k.size() < sizeof(t.keyword), "PNG text keyword '", k,
               "' must be 1-79 bytes");
    std::snprintf(t.keyword, sizeof(t.keyword), "%s", k.c_str());
    t.type = SPNG_TEXT;
    t.length = v.size();
    t.text = const_cast<char*>(v.c_str());
    chunks.push_back(t);
  }
  if (!chunks.empty())
    check(spng_set_text(ctx.get(), chunks.data(), static_cast<uint32_t>(chunks.size())),
          "PNG text for", path);
  check(spng_encode_image(ctx.get(), rgb.data(), rgb.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE),
        "encoding PNG", path);
  size_t len = 0;
  int rc = 0;
  std::unique_ptr<void, decltype(&std::free)> buf(spng_get_png_buffer(ctx.get(), &len, &rc),
                                                  std::free);
  check(rc, "encoding PNG", path);
  const auto* b = static_cast<const uint8_t*>(buf.get());
  return std::vector<uint8_t>(b, b + len);
}

void write_png(OutputFile& out, int64_t width, int64_t height, const std::vector<uint8_t>& rgb,
               const std::map<std::string, std::string>& text) {
  const std::vector<uint8_t> png = encode_png(width, height, rgb, text, out.path());
  out.commit(png.data(), png.size());
}

PngImage read_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  XDIT_CHECK(in.good(), "cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  return decode_png(data.data(), data.size(), path);
}

PngImage decode_png(const void* data, size_t size, const std::string& what) {
  Ctx ctx(spng_ctx_new(0), spng_ctx_free);
  XDIT_CHECK(ctx != nullptr, "cannot create a PNG decoder");
  check(spng_set_png_buffer(ctx.get(), data, size), "reading PNG", what);
  spng_ihdr ihdr{};
  check(spng_get_ihdr(ctx.get(), &ihdr), "reading PNG header of", what);
  PngImage img;
  img.width = ihdr.width;
  img.height = ihdr.height;
  size_t bytes = 0;
  check(spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &bytes), "sizing PNG", what);
  img.rgb.resize(bytes);
  check(spng_decode_image(ctx.get(), img.rgb.data(), bytes, SPNG_FMT_RGB8, 0), "decoding PNG",
        what);
  uint32_t n = 0;
  if (spng_get_text(ctx.get(), nullptr, &n) == 0 && n > 0) {
    std::vector<spng_text> t(n);
    check(spng_get_text(ctx.get(), t.data(), &n), "reading PNG text of", what);
    for (const auto& c : t) img.text[c.keyword] = std::string(c.text, c.length);
  }
  return img;
}

}  // namespace xdit::io
