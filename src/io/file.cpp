#include "io/file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <streambuf>

#include "core/error.h"

namespace xdit::io {

namespace fs = std::filesystem;

namespace {

// --- temporary files a signal removes ----------------------------------
//
// A signal handler may only use async-signal-safe calls: it walks a list of
// chunks of slots, each slot a malloc'd path or null, and unlink()s each
// path. Chunks are appended when every slot is taken and never freed, so
// the list has no fixed size and the handler never reads freed chunks. A
// path is freed only when the handler has not started (g_exiting, read
// after the slot is emptied: with sequentially consistent atomics either
// the handler sees the slot empty or the releaser sees g_exiting set).
constexpr int kChunkSlots = 256;
struct Chunk {
  std::atomic<char*> slots[kChunkSlots] = {};
  std::atomic<Chunk*> next{nullptr};
};
Chunk g_first;
std::atomic<bool> g_exiting{false};
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[std::size(kSignals)];

void unlink_temporaries() noexcept {
  g_exiting.store(true);
  for (Chunk* c = &g_first; c != nullptr; c = c->next.load())
    for (auto& s : c->slots)
      if (char* p = s.load()) ::unlink(p);
}

extern "C" void remove_temporaries_and_reraise(int sig) {
  unlink_temporaries();
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
  ignore_file_size_signal();
}

// Puts `name` (malloc'd; the list then owns it) into a free slot, appending
// a chunk when there is none; returns the slot.
std::atomic<char*>* register_temporary(char* name) {
  install_handlers();
  for (Chunk* c = &g_first;;) {
    for (auto& s : c->slots) {
      char* expected = nullptr;
      if (s.load(std::memory_order_relaxed) == nullptr && s.compare_exchange_strong(expected, name))
        return &s;
    }
    Chunk* next = c->next.load();
    if (next == nullptr) {
      auto* fresh = new Chunk;  // never freed: a signal handler may be walking it
      if (c->next.compare_exchange_strong(next, fresh))
        next = fresh;
      else
        delete fresh;  // another thread appended first: `next` is theirs
    }
    c = next;
  }
}

void unregister_temporary(void* slot) {
  if (slot == nullptr) return;
  char* p = static_cast<std::atomic<char*>*>(slot)->exchange(nullptr);
  if (!g_exiting.load()) std::free(p);  // else the handler may be reading it: leaked, we exit
}

const char* kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string errno_text(int e = errno) {
  return std::strerror(e);
}

// ".<target>.xdit-<16 hex digits>": 64 bits from the kernel's generator.
std::string temporary_name(const std::string& target) {
  uint64_t r = 0;
  XDIT_CHECK(::getrandom(&r, sizeof r, 0) == static_cast<ssize_t>(sizeof r),
             "cannot draw a random name for a temporary file: ", errno_text());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  // At most 200 bytes of the target's name: the whole stays under NAME_MAX.
  std::string name(1, '.');  // (appended: GCC 12 warns -Wrestrict on "." + …)
  name.append(target, 0, 200);
  name += ".xdit-";
  name += hex;
  return name;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Creates `name`'s temporary in `dir_fd` exclusively; returns its fd and
// sets `tmp`. `registered` (may be empty) is called with the temporary's
// name before the file exists, for the signal clean-up.
int create_temporary(int dir_fd, const std::string& name, std::string& tmp,
                     const std::function<void(const std::string&)>& registered,
                     const std::function<void()>& unregistered, const std::string& shown,
                     const std::string& dir_shown) {
  for (int attempt = 0;; ++attempt) {
    tmp = temporary_name(name);
    if (registered) registered(tmp);
    const int fd =
        ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;  // 0666 less the umask: the mode of any new file
    const int e = errno;
    if (unregistered) unregistered();
    XDIT_CHECK(e == EEXIST && attempt < 16, "cannot write ", shown,
               ": cannot create a file in folder ", dir_shown, ": ", errno_text(e));
  }
}

// An ostream's buffer over a file descriptor that remembers the first error.
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }
  bool flush_all() { return drain() && error_ == 0; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    while (p < pptr() && error_ == 0) {
      const ssize_t n = ::write(fd_, p, static_cast<size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        error_ = n < 0 ? errno : EIO;
      else
        p += n;
    }
    setp(buf_, buf_ + sizeof buf_);
    return error_ == 0;
  }
  int fd_;
  int error_ = 0;
  char buf_[1 << 16];
};

// Writes through `write` into `fd`; throws naming `shown` on any error.
void write_through(int fd, const std::function<void(std::ostream&)>& write,
                   const std::string& shown) {
  FdBuf buf(fd);
  std::ostream out(&buf);
  write(out);
  const bool ok = buf.flush_all() && out.good();
  const int e = buf.error();
  XDIT_CHECK(ok, "failed writing ", shown, ": ",
             e == 0 ? std::string("the stream failed") : errno_text(e),
             e == EFBIG    ? " (over the file size limit, ulimit -f)"
             : e == ENOSPC ? " (disk full)"
                           : "");
}

uint64_t dev_of(const struct stat& st) {
  return static_cast<uint64_t>(st.st_dev);
}

}  // namespace

void ignore_file_size_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    ::sigaction(SIGXFSZ, nullptr, &old);
    if (old.sa_handler == SIG_DFL) ::signal(SIGXFSZ, SIG_IGN);
  });
}

OutputFile::OutputFile(const std::string& path) : path_(path) {
  XDIT_CHECK(!path.empty(), "an output path is empty: give a file name with -o");
  const fs::path p(path);
  name_ = p.filename().string();
  XDIT_CHECK(!name_.empty() && name_ != "." && name_ != "..", "cannot write ", path,
             ": it names a folder, not a file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  dir_ = fs::absolute(dir).lexically_normal().string();
  const std::string dir_shown = dir.lexically_normal().string();
  Fd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd < 0) {
    const int e = errno;
    XDIT_CHECK(e != ENOENT, "cannot write ", path, ": folder ", dir_shown, " does not exist");
    XDIT_FAIL("cannot write ", path, ": cannot open folder ", dir_shown, ": ", errno_text(e));
  }
  struct stat st {};
  if (::fstatat(d.fd, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    XDIT_CHECK(S_ISREG(st.st_mode), "cannot write ", path, ": it is ", kind_of(st.st_mode),
               S_ISLNK(st.st_mode)
                   ? " (xdit never writes through a link: give the path of the file itself)"
                   : ", not a regular file (xdit only creates or replaces regular files)");
  } else {
    XDIT_CHECK(errno == ENOENT, "cannot write ", path, ": ", errno_text());
  }
  XDIT_CHECK(::fstat(d.fd, &st) == 0, "cannot write ", path, ": ", errno_text());
  dir_dev_ = dev_of(st);
  dir_ino_ = st.st_ino;
  const Fd f(create_temporary(
      d.fd, name_, tmp_name_,
      [&](const std::string& tmp) {
        const std::string full = (fs::path(dir_) / tmp).string();
        char* copy = ::strdup(full.c_str());
        XDIT_CHECK(copy != nullptr, "out of memory");
        slot_ = register_temporary(copy);
      },
      [&] {
        unregister_temporary(slot_);
        slot_ = nullptr;
      },
      path, dir_shown));
  if (::fstat(f.fd, &st) != 0) {
    const int e = errno;
    discard();  // (a throwing constructor runs no destructor)
    XDIT_FAIL("cannot write ", path, ": ", errno_text(e));
  }
  tmp_dev_ = dev_of(st);
  tmp_ino_ = st.st_ino;
  // Closed until commit: thousands of reserved outputs must not hold
  // thousands of descriptors.
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)),
      dir_(std::move(o.dir_)),
      name_(std::move(o.name_)),
      tmp_name_(std::move(o.tmp_name_)),
      dir_dev_(o.dir_dev_),
      dir_ino_(o.dir_ino_),
      tmp_dev_(o.tmp_dev_),
      tmp_ino_(o.tmp_ino_),
      slot_(o.slot_) {
  o.tmp_name_.clear();
  o.slot_ = nullptr;
}

OutputFile::~OutputFile() {
  discard();
}

void OutputFile::discard() noexcept {
  if (!tmp_name_.empty()) {
    // Through the folder we checked: a folder swapped for another since is
    // not searched for a file of that name.
    const int d = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st {};
    if (d >= 0 && ::fstat(d, &st) == 0 && dev_of(st) == dir_dev_ && st.st_ino == dir_ino_)
      ::unlinkat(d, tmp_name_.c_str(), 0);
    if (d >= 0) ::close(d);
  }
  tmp_name_.clear();
  unregister_temporary(slot_);
  slot_ = nullptr;
}

void OutputFile::commit(const std::function<void(std::ostream&)>& write) {
  XDIT_CHECK(!tmp_name_.empty(), "output ", path_, " was already written");
  try {
    const Fd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat st {};
    XDIT_CHECK(
        d.fd >= 0 && ::fstat(d.fd, &st) == 0 && dev_of(st) == dir_dev_ && st.st_ino == dir_ino_,
        "cannot write ", path_, ": its folder was removed or replaced while xdit ran");
    const Fd f(::openat(d.fd, tmp_name_.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
    XDIT_CHECK(f.fd >= 0 && ::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode) &&
                   dev_of(st) == tmp_dev_ && st.st_ino == tmp_ino_,
               "cannot write ", path_, ": its temporary file ", tmp_name_,
               " was removed or replaced while xdit ran");
    XDIT_CHECK(::ftruncate(f.fd, 0) == 0, "cannot write ", path_, ": ", errno_text());
    write_through(f.fd, write, path_);
    XDIT_CHECK(::renameat(d.fd, tmp_name_.c_str(), d.fd, name_.c_str()) == 0, "cannot write ",
               path_, ": ", errno_text());
  } catch (...) {
    discard();
    throw;
  }
  tmp_name_.clear();  // renamed: nothing left to remove
  unregister_temporary(slot_);
  slot_ = nullptr;
}

void OutputFile::commit(const void* data, size_t bytes) {
  commit([&](std::ostream& f) {
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  });
}

void write_file_at(int dir_fd, const std::string& name, const void* bytes, size_t size,
                   const std::string& shown) {
  ignore_file_size_signal();
  XDIT_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
             "cannot write ", shown, ": not a file name");
  std::string tmp;
  const Fd f(create_temporary(dir_fd, name, tmp, {}, {}, shown, "of " + shown));
  try {
    write_through(
        f.fd,
        [&](std::ostream& o) {
          o.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
        },
        shown);
    XDIT_CHECK(::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) == 0, "cannot write ", shown,
               ": ", errno_text());
  } catch (...) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    throw;
  }
}

std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what) {
  // O_NONBLOCK: a FIFO must not wait for a writer; fstat then refuses it.
  const Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (f.fd < 0) {
    const int e = errno;
    XDIT_CHECK(e != ENOENT, "missing file ", path);
    XDIT_FAIL("cannot read ", what, " ", path, ": ", errno_text(e));
  }
  struct stat st {};
  XDIT_CHECK(::fstat(f.fd, &st) == 0, "cannot read ", what, " ", path, ": ", errno_text());
  XDIT_CHECK(S_ISREG(st.st_mode), path, " is not a regular file (it is ", kind_of(st.st_mode), ")");
  const auto size = static_cast<size_t>(st.st_size);
  XDIT_CHECK(size <= max_bytes, what, " ", path, " is ", size, " bytes; at most ", max_bytes,
             " are read (is it the right file?)");
  std::string s(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(f.fd, s.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    XDIT_CHECK(n >= 0, "cannot read ", what, " ", path, ": ", errno_text());
    if (n == 0) break;  // shrank meanwhile: what is there
    got += static_cast<size_t>(n);
  }
  s.resize(got);
  return s;
}

void remove_temporaries() noexcept {
  unlink_temporaries();
}

void check_side_file(const std::string& path, size_t max_bytes, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    XDIT_CHECK(e != ENOENT, "missing file ", path);
    XDIT_FAIL("cannot read ", what, " ", path, ": ", errno_text(e));
  }
  XDIT_CHECK(S_ISREG(st.st_mode), path, " is not a regular file (it is ", kind_of(st.st_mode), ")");
  XDIT_CHECK(static_cast<size_t>(st.st_size) <= max_bytes, what, " ", path, " is ",
             static_cast<size_t>(st.st_size), " bytes; at most ", max_bytes,
             " are read (is it the right file?)");
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
