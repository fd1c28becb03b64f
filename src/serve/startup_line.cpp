#include "serve/startup_line.h"

#include <cstdio>
#include <regex>

namespace xdit::serve {

std::string startup_line(const Startup& s) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "xdit: serving %s on http://%s:%d %s; %d request%s at a time, queue %d, "
                "timeout %g s; SIGTERM to pid %d stops it",
                s.model.c_str(), s.host.c_str(), s.port,
                s.loopback ? "(this machine only; --host 0.0.0.0 serves other machines)"
                           : "(on a network interface, as --host asked: anyone who can reach it "
                             "may generate)",
                s.groups, s.groups == 1 ? "" : "s", s.max_queue, s.request_timeout, s.pid);
  return buf;
}

bool parse_startup_line(const std::string& text, int* port, int* pid) {
  static const std::regex line("xdit: serving .* on http://[^ ]+:([0-9]+) .* pid ([0-9]+) ");
  std::smatch m;
  if (!std::regex_search(text, m, line)) return false;
  *port = std::stoi(m[1]);
  *pid = std::stoi(m[2]);
  return true;
}

}  // namespace xdit::serve
