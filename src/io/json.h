// JSON files and typed, checked access to config values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace xdit::io {

using Json = nlohmann::json;

// Parses a JSON file; throws one clear line naming the file on a missing file
// or bad JSON. Python's json module writes the non-standard tokens Infinity,
// -Infinity and NaN (diffusers' lambda_min_clipped is -Infinity); they are
// read as the strings "Infinity", "-Infinity" and "NaN", which
// number_or() turns back into numbers.
Json read_json_file(const std::string& path);
Json parse_json_text(const std::string& text, const std::string& what);

// j[key] as a number; `fallback` when absent or null. Accepts the strings
// above. Throws naming `what` and the key when the value is not a number.
double number_or(const Json& j, const std::string& key, double fallback, const std::string& what);
int64_t int_or(const Json& j, const std::string& key, int64_t fallback, const std::string& what);
bool bool_or(const Json& j, const std::string& key, bool fallback, const std::string& what);
std::string string_or(const Json& j, const std::string& key, const std::string& fallback,
                      const std::string& what);

}  // namespace xdit::io
