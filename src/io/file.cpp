#include "io/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace xdit::io {

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    XDIT_CHECK(f.good(), "cannot write ", path, ": ", std::strerror(errno));
    try {
      write(f);
    } catch (...) {
      f.close();
      std::remove(tmp.c_str());
      throw;
    }
    f.flush();
    if (!f.good()) {
      f.close();
      std::remove(tmp.c_str());
      XDIT_FAIL("failed writing ", path, " (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    XDIT_FAIL("cannot write ", path, ": ", why);
  }
}

}  // namespace xdit::io
