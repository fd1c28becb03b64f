// Writing output files safely, and reading small side files with a bound.
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
// - the target must be a regular file or not exist: a symbolic link, device,
//   FIFO, socket or folder is refused (xdit never writes through a link);
// - a temporary file with an unpredictable name (64 random bits) is created
//   exclusively beside the target at once (O_CREAT | O_EXCL | O_NOFOLLOW), so
//   a folder we cannot write to fails before any work and no file or link
//   planted by someone else is ever opened;
// - commit() reopens the folder and the temporary file, checks that both are
//   the ones created (device and inode), writes, and renames it over the
//   target with renameat, which replaces a link put there meanwhile instead
//   of following it: a failure never leaves a partial file, and the target
//   never stops being a complete file;
// - the temporary file is removed when the OutputFile is destroyed without a
//   commit (every error path, a write error such as a full disk or
//   `ulimit -f` included: SIGXFSZ is ignored, so the write fails with EFBIG)
//   and when the process gets SIGINT, SIGTERM or SIGHUP, however many
//   outputs are reserved.
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
  std::string path_;      // as the user gave it (for messages)
  std::string dir_;       // the target's folder, absolute (symlinks not resolved)
  std::string name_;      // the target's name in dir_
  std::string tmp_name_;  // empty once committed or discarded
  uint64_t dir_dev_ = 0, dir_ino_ = 0, tmp_dev_ = 0, tmp_ino_ = 0;
  void* slot_ = nullptr;  // in the signal-cleanup list
};

// Writes `bytes` as `name` inside the folder open as `dir_fd` the same way
// (an exclusive temporary with an unpredictable name, written, renamed with
// renameat), for a process that removes no files on signals (xdit serve,
// which finishes its writes before it exits). `shown` names the file in
// errors. Throws xdit::Error; nothing is left behind on failure.
void write_file_at(int dir_fd, const std::string& name, const void* bytes, size_t size,
                   const std::string& shown);

// SIGXFSZ (a write past `ulimit -f`) would end the process without clean-up:
// ignored, writes fail with EFBIG and take the error path. Idempotent; a
// disposition other than the default is left alone.
void ignore_file_size_signal();

// The whole of a small side file (a config, a tokenizer file, a ref): opened
// without blocking and refused unless it is a regular file of at most
// `max_bytes` (checked from fstat, before any byte is read). `what` says
// what the file is, for messages ("config", "tokenizer file").
std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what);

// Removes every temporary file of an OutputFile not yet renamed into place:
// for the exits that run no destructors (the communication watchdog's
// _Exit, an MPI abort). Async-signal-safe (unlink() only); the process must
// end right after.
void remove_temporaries() noexcept;

// Refuses (one line naming `path`) a path that is not a regular file, or
// one larger than `max_bytes`: for files a library opens by name
// (SentencePiece's model), checked before it does.
void check_side_file(const std::string& path, size_t max_bytes, const std::string& what);

}  // namespace xdit::io
