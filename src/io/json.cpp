#include "io/json.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace xdit::io {

Json read_json_file(const std::string& path) {
  XDIT_CHECK(std::filesystem::is_regular_file(path), "missing file ", path);
  std::ifstream in(path);
  XDIT_CHECK(in.good(), "cannot read ", path);
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    XDIT_FAIL("malformed JSON in ", path, ": ", e.what());
  }
}

}  // namespace xdit::io
