// Replays every committed fuzz input through the fuzz targets: the seed
// corpora (tests/fuzz/corpus/) and every past finding (tests/fuzz/crashes/,
// each once a crash or a sanitizer report, now a regression test). Runs on
// every build, with or without clang's libFuzzer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz/fuzz_targets.h"

namespace xdit::fuzz {
namespace {

namespace fs = std::filesystem;
const fs::path kFuzz = fs::path(XDIT_TEST_DATA).parent_path() / "fuzz";

// Feeds each file under corpus/<name>/ and crashes/<name>/ to `target`;
// returns how many it fed.
int replay(const std::string& name, void (*target)(const uint8_t*, size_t)) {
  int n = 0;
  for (const char* dir : {"corpus", "crashes"}) {
    const fs::path d = kFuzz / dir / name;
    if (!fs::is_directory(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file() || e.path().filename().string().front() == '.') continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      SCOPED_TRACE(e.path().string());
      target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  return n;
}

TEST(FuzzCorpus, SafetensorsInputsAreHandled) {
  EXPECT_GE(replay("safetensors", safetensors_bytes), 3);
}

TEST(FuzzCorpus, GgufInputsAreHandled) {
  EXPECT_GE(replay("gguf", gguf_bytes), 2);
}

TEST(FuzzCorpus, ConfigInputsAreHandled) {
  EXPECT_GE(replay("config", config_bytes), 5);
}

TEST(FuzzCorpus, HttpRequestsAreHandled) {
  EXPECT_GE(replay("http", http_request_bytes), 8);
}

}  // namespace
}  // namespace xdit::fuzz
