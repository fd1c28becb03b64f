#include "core/error.h"

namespace xdit::detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), concat(file, ":", line));
}

}  // namespace xdit::detail
