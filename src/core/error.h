// Errors: xdit::Error carries a user-facing message plus where it was raised.
// XDIT_CHECK(cond, parts...) throws with the parts streamed together, the way
// TensorRT-LLM's CHECK does; the library never aborts, the front end reports.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace xdit {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string where = {})
      : std::runtime_error(std::move(message)), where_(std::move(where)) {}
  // "file:line" of the throw, for XDIT_VERBOSE logs; empty when not known.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream s;
  (s << ... << std::forward<Parts>(parts));
  return s.str();
}
[[noreturn]] void throw_error(const char* file, int line, std::string message);
}  // namespace detail

}  // namespace xdit

#define XDIT_FAIL(...) \
  ::xdit::detail::throw_error(__FILE__, __LINE__, ::xdit::detail::concat(__VA_ARGS__))
#define XDIT_CHECK(cond, ...)            \
  do {                                   \
    if (!(cond)) XDIT_FAIL(__VA_ARGS__); \
  } while (0)
