// JSON files and typed, checked access to config values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xdit::io {

using Json = nlohmann::json;

// Parses a JSON file; throws one clear line naming the file on a missing file
// or bad JSON. Python's json module writes the non-standard tokens Infinity,
// -Infinity and NaN (diffusers' lambda_min_clipped is -Infinity); they are
// read as the strings "Infinity", "-Infinity" and "NaN", which
// number_or() turns back into numbers.
// The file is read only when it is a regular file of at most `max_bytes`
// (from fstat: a FIFO or a config with a gigabyte appended is refused before
// any byte is read); a NUL byte, or anything after the document, is refused.
constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;  // CLIP's vocab.json is 2 MB
Json read_json_file(const std::string& path, size_t max_bytes = kMaxJsonFileBytes);
Json parse_json_text(const std::string& text, const std::string& what);

// A config file's top level must be an object: throws naming `what` otherwise.
void require_object(const Json& j, const std::string& what);

// j[key] as a number; `fallback` when absent or null. Accepts the strings
// above; NaN is refused, and ±Infinity unless `allow_infinite`. Throws
// naming `what` and the key when the value is not such a number.
double number_or(const Json& j, const std::string& key, double fallback, const std::string& what,
                 bool allow_infinite = false);
int64_t int_or(const Json& j, const std::string& key, int64_t fallback, const std::string& what);
// An integer in [lo, hi] (sizes and counts: bounded so that products of a
// few of them cannot overflow); throws naming the file, key, value and range.
int64_t int_in(const Json& j, const std::string& key, int64_t fallback, int64_t lo, int64_t hi,
               const std::string& what);
// A list of 1 … max_len integers, each in [lo, hi].
std::vector<int64_t> int_list_in(const Json& j, const std::string& key,
                                 const std::vector<int64_t>& fallback, size_t max_len, int64_t lo,
                                 int64_t hi, const std::string& what);
bool bool_or(const Json& j, const std::string& key, bool fallback, const std::string& what);
std::string string_or(const Json& j, const std::string& key, const std::string& fallback,
                      const std::string& what);

}  // namespace xdit::io
