// Writing output files safely.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace xdit::io {

// Writes `path` through `write` into a temporary file beside it and renames it
// into place, so a failure (or a crash) never leaves a partial file.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace xdit::io
