// Writing output files safely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace xdit::io {

// The files of `items` outputs (one per prompt) of `frames` frames each,
// named from `path`, item-major: one item of one frame is `path` itself;
// several items are stem_0.ext, stem_1.ext, …; several frames add _f0000,
// _f0001, … to each item's stem (out_f0000.png, …; out_1_f0002.png).
std::vector<std::string> output_paths(const std::string& path, size_t items, int64_t frames = 1);

// An output file reserved before the work that produces it:
// - the target must be a regular file or not exist (a symlink is followed and
//   its target checked): a device, FIFO, socket or folder is refused;
// - a temporary file with a unique name (mkstemp) is created beside the
//   target at once, so a folder we cannot write to fails before any work;
// - commit() writes the temporary file and renames it over the target, so a
//   failure never leaves a partial file and the target never stops being a
//   complete file;
// - the temporary file is removed when the OutputFile is destroyed without a
//   commit (every error path) and when the process gets SIGINT, SIGTERM or
//   SIGHUP.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return path_; }  // as given
  // Writes through `write` into the temporary file, then renames it into place.
  void commit(const std::function<void(std::ostream&)>& write);
  void commit(const void* data, size_t bytes);

 private:
  void discard() noexcept;
  std::string path_;    // as the user gave it (for messages)
  std::string target_;  // the file the rename replaces (symlinks resolved)
  std::string tmp_;     // empty once committed or discarded
  int slot_ = -1;       // in the signal-cleanup table
};

}  // namespace xdit::io
