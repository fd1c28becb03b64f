#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.h"

namespace xdit::io {

namespace fs = std::filesystem;

namespace {

// Temporary files to remove when a signal ends the process. A signal handler
// may only use async-signal-safe calls: it walks this fixed table and
// unlink()s each path (each a malloc'd copy owned by its slot).
constexpr int kSlots = 4096;
std::atomic<char*> g_slots[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[std::size(kSignals)];

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (auto& s : g_slots)
    if (char* p = s.load(std::memory_order_acquire)) ::unlink(p);
  for (size_t i = 0; i < std::size(kSignals); ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);  // the disposition the process had before: usually the default, ending it
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      struct sigaction old {};
      ::sigaction(kSignals[i], nullptr, &old);
      if (old.sa_handler == SIG_IGN) continue;  // e.g. nohup: leave an ignored signal ignored
      struct sigaction sa {};
      sa.sa_handler = remove_temporaries_and_reraise;
      sigemptyset(&sa.sa_mask);
      g_previous[i] = old;
      ::sigaction(kSignals[i], &sa, nullptr);
    }
  });
}

// Puts `name` (malloc'd) into the table, which then owns it; -1 (and `name`
// freed) when the table is full. The handlers are installed first, and the
// caller lets mkstemp fill in `name` in place afterwards, so there is no
// moment when the file exists but a signal would not remove it.
int register_temporary(char* name) {
  install_handlers();
  for (int i = 0; i < kSlots; ++i) {
    char* expected = nullptr;
    if (g_slots[i].compare_exchange_strong(expected, name, std::memory_order_acq_rel)) return i;
  }
  std::free(name);  // table full: the file is still removed on every error path
  return -1;
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  std::free(g_slots[slot].exchange(nullptr, std::memory_order_acq_rel));
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

mode_t file_mode() {
  static const mode_t mode = [] {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return static_cast<mode_t>(0666 & ~mask);
  }();
  return mode;
}

// The file a rename must replace for `path`: symlinks followed (also one
// whose target does not exist yet, which the write then creates).
fs::path resolve_target(const std::string& path) {
  fs::path p = fs::absolute(path);
  for (int hops = 0;; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    XDIT_CHECK(hops < 40, "cannot write ", path, ": too many levels of symbolic links");
    const fs::path link = fs::read_symlink(p, ec);
    XDIT_CHECK(!ec, "cannot write ", path, ": cannot read the symbolic link ", p.string(), ": ",
               ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
}

}  // namespace

OutputFile::OutputFile(const std::string& path) : path_(path) {
  XDIT_CHECK(!path.empty(), "an output path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    XDIT_CHECK(S_ISREG(st.st_mode), "cannot write ", path, ": it is ", kind_of(st.st_mode),
               ", not a regular file (xdit only creates or replaces regular files)");
  } else {
    XDIT_CHECK(errno == ENOENT, "cannot write ", path, ": ", std::strerror(errno));
  }
  const fs::path target = resolve_target(path);
  const fs::path dir = target.parent_path();
  std::error_code ec;
  XDIT_CHECK(fs::is_directory(dir, ec), "cannot write ", path, ": folder ", dir.string(),
             " does not exist");
  target_ = target.string();
  std::string name(1, '.');  // a hidden name beside the target
  name += target.filename().string();
  name += ".xdit-XXXXXX";
  const std::string tmpl = (dir / name).string();
  char* buf = ::strdup(tmpl.c_str());
  XDIT_CHECK(buf != nullptr, "out of memory");
  std::string unregistered = tmpl;  // the name's storage when the signal table is full
  slot_ = register_temporary(buf);
  if (slot_ < 0) buf = unregistered.data();
  const int fd = ::mkstemp(buf);  // fills in the XXXXXX of the registered name
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    unregister_temporary(slot_);
    slot_ = -1;
    XDIT_FAIL("cannot write ", path, ": cannot create a file in folder ",
              dir.lexically_normal().string(), ": ", why);
  }
  ::fchmod(fd, file_mode());  // mkstemp makes 0600; a finished output has the usual mode
  ::close(fd);
  tmp_ = buf;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)),
      target_(std::move(o.target_)),
      tmp_(std::move(o.tmp_)),
      slot_(o.slot_) {
  o.tmp_.clear();
  o.slot_ = -1;
}

OutputFile::~OutputFile() {
  discard();
}

void OutputFile::discard() noexcept {
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  unregister_temporary(slot_);
  slot_ = -1;
}

void OutputFile::commit(const std::function<void(std::ostream&)>& write) {
  XDIT_CHECK(!tmp_.empty(), "output ", path_, " was already written");
  try {
    std::ofstream f(tmp_, std::ios::binary | std::ios::trunc);
    XDIT_CHECK(f.good(), "cannot write ", path_, ": ", std::strerror(errno));
    write(f);
    f.flush();
    XDIT_CHECK(f.good(), "failed writing ", path_, " (disk full?)");
    f.close();
    XDIT_CHECK(!f.fail(), "failed writing ", path_, " (disk full?)");
    XDIT_CHECK(std::rename(tmp_.c_str(), target_.c_str()) == 0, "cannot write ", path_, ": ",
               std::strerror(errno));
  } catch (...) {
    discard();
    throw;
  }
  tmp_.clear();  // renamed: nothing left to remove
  unregister_temporary(slot_);
  slot_ = -1;
}

void OutputFile::commit(const void* data, size_t bytes) {
  commit([&](std::ostream& f) {
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  });
}

std::vector<std::string> output_paths(const std::string& path, size_t items, int64_t frames) {
  const fs::path p(path);
  const auto named = [&](const std::string& suffix) {
    return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
  };
  std::vector<std::string> v;
  for (size_t i = 0; i < items; ++i) {
    std::string item;  // (not "_" + to_string: GCC 12 warns -Wrestrict on that)
    if (items > 1) item = '_' + std::to_string(i);
    if (frames == 1) {
      v.push_back(items == 1 ? path : named(item));
      continue;
    }
    for (int64_t f = 0; f < frames; ++f) {
      char frame[32];
      std::snprintf(frame, sizeof frame, "_f%04lld", static_cast<long long>(f));
      v.push_back(named(item + frame));
    }
  }
  return v;
}

}  // namespace xdit::io
