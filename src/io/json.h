// JSON files and typed, checked access to config values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace xdit::io {

using Json = nlohmann::json;

// Parses a JSON file; throws one clear line naming the file on a missing file
// or bad JSON.
Json read_json_file(const std::string& path);

}  // namespace xdit::io
