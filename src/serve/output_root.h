// Where xdit serve may write files: one folder given at start
// (--output_dir), the only root a request's save_disk_path is taken under.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace xdit::serve {

class OutputRoot {
 public:
  OutputRoot() = default;  // none: every save_disk_path is refused
  // Opens `dir` (a folder this process can write; throws xdit::Error with
  // one line otherwise) and keeps it open: a request's folders are found
  // from this descriptor, never from a path.
  explicit OutputRoot(const std::string& dir);
  ~OutputRoot();
  OutputRoot(const OutputRoot&) = delete;
  OutputRoot& operator=(const OutputRoot&) = delete;

  bool enabled() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // Checks a request's save_disk_path: a relative path of folders under the
  // root ("" and "." are the root itself) that exist, are not symbolic
  // links, and this process can write into. `..`, an absolute path, a NUL
  // byte, a link or a missing folder throw BadRequest(400, "save_disk_path").
  void check(const std::string& relative) const;

  // Writes `bytes` into that folder under a fresh name
  // (xdit_<unix time>_<pid>_<n><extension>), created exclusively and renamed into
  // place (io::write_file_at); returns the path written (the root's path
  // joined with the relative one). The folders are walked again, links
  // refused: BadRequest as check(); a write error throws xdit::Error.
  std::string write(const std::string& relative, const std::vector<uint8_t>& bytes,
                    const std::string& extension = ".png") const;

 private:
  int open_folder(const std::string& relative) const;  // a new descriptor; the caller closes it
  int fd_ = -1;
  std::string path_;
  mutable std::atomic<uint64_t> written_{0};
};

}  // namespace xdit::serve
