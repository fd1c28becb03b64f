#include "serve/output_root.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "serve/request_schema.h"

namespace xdit::serve {

namespace {

constexpr size_t kMaxRelativeBytes = 1024;
constexpr int kMaxDepth = 32;

[[noreturn]] void refuse(const std::string& relative, const std::string& why) {
  throw BadRequest(400, "save_disk_path",
                   "field 'save_disk_path' '" + relative + "' " + why +
                       " (a folder under the server's --output_dir, named relative to it)");
}

// The components of `relative`, checked: no NUL, not absolute, no "..".
std::vector<std::string> components(const std::string& relative) {
  if (relative.find('\0') != std::string::npos) refuse("", "holds a NUL byte");
  if (relative.size() > kMaxRelativeBytes)
    refuse(relative.substr(0, 64) + "...",
           "is longer than " + std::to_string(kMaxRelativeBytes) + " bytes");
  if (!relative.empty() && relative[0] == '/') refuse(relative, "is an absolute path");
  std::vector<std::string> parts;
  size_t b = 0;
  while (b <= relative.size()) {
    size_t e = relative.find('/', b);
    if (e == std::string::npos) e = relative.size();
    const std::string part = relative.substr(b, e - b);
    if (part == "..") refuse(relative, "leads out of its folder with '..'");
    if (!part.empty() && part != ".") parts.push_back(part);
    b = e + 1;
  }
  if (parts.size() > static_cast<size_t>(kMaxDepth))
    refuse(relative, "is more than " + std::to_string(kMaxDepth) + " folders deep");
  return parts;
}

}  // namespace

OutputRoot::OutputRoot(const std::string& dir) : path_(dir) {
  XDIT_CHECK(!dir.empty(), "--output_dir is empty: give the folder the server may write into");
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    XDIT_FAIL("--output_dir ", dir, ": ",
              e == ENOENT    ? std::string("no such folder (create it first)")
              : e == ENOTDIR ? std::string("not a folder")
                             : std::string(std::strerror(e)));
  }
  if (::faccessat(fd_, ".", W_OK, AT_EACCESS) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    XDIT_FAIL("--output_dir ", dir, ": this process cannot write into it (", std::strerror(e), ")");
  }
  io::ignore_file_size_signal();
}

OutputRoot::~OutputRoot() {
  if (fd_ >= 0) ::close(fd_);
}

int OutputRoot::open_folder(const std::string& relative) const {
  const std::vector<std::string> parts = components(relative);  // before any file access
  if (fd_ < 0)
    throw BadRequest(400, "save_disk_path",
                     "field 'save_disk_path': this server writes no files (it was started "
                     "without --output_dir); leave the field out to get the image in the answer");
  int cur = ::dup(fd_);
  XDIT_CHECK(cur >= 0, "cannot open --output_dir: ", std::strerror(errno));
  std::string walked;
  for (const std::string& part : parts) {
    walked += (walked.empty() ? "" : "/") + part;
    // O_NOFOLLOW: a link as any component fails instead of leading elsewhere.
    const int next = ::openat(cur, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int e = errno;
    if (next < 0) {
      struct stat st {};
      const bool exists = ::fstatat(cur, part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      ::close(cur);
      if (!exists) refuse(relative, "names a folder that does not exist ('" + walked + "')");
      if (S_ISLNK(st.st_mode))
        refuse(relative,
               "has a symbolic link as a component ('" + walked + "'): links are not followed");
      if (!S_ISDIR(st.st_mode))
        refuse(relative, "has a component that is not a folder ('" + walked + "')");
      refuse(relative, "cannot be opened ('" + walked + "': " + std::strerror(e) + ")");
    }
    ::close(cur);
    cur = next;
  }
  if (::faccessat(cur, ".", W_OK, AT_EACCESS) != 0) {
    ::close(cur);
    refuse(relative, "is a folder this server cannot write into");
  }
  return cur;
}

void OutputRoot::check(const std::string& relative) const {
  ::close(open_folder(relative));
}

std::string OutputRoot::write(const std::string& relative, const std::vector<uint8_t>& bytes,
                              const std::string& extension) const {
  const int dir = open_folder(relative);
  const std::string name = "xdit_" + std::to_string(std::time(nullptr)) + "_" +
                           std::to_string(::getpid()) + "_" + std::to_string(written_++) +
                           extension;
  std::filesystem::path shown = std::filesystem::path(path_);
  for (const std::string& part : components(relative)) shown /= part;
  shown /= name;
  try {
    io::write_file_at(dir, name, bytes.data(), bytes.size(), shown.string());
  } catch (...) {
    ::close(dir);
    throw;
  }
  ::close(dir);
  return shown.string();
}

}  // namespace xdit::serve
