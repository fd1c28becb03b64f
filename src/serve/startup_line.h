// The line `xdit serve` prints when it starts listening (even under
// XDIT_QUIET), and its reading by whatever starts a server and needs its
// port and pid (xdit bench serve, the tests): the format in one place.
#pragma once

#include <string>

namespace xdit::serve {

struct Startup {
  std::string model, host;
  int port = 0;
  bool loopback = true;  // the host serves this machine only
  int groups = 1;        // requests at a time (data-parallel groups)
  int max_queue = 0;
  double request_timeout = 0;
  int pid = 0;  // the process SIGTERM stops (rank 0)
};

// "xdit: serving M on http://H:P (this machine only; …); 1 request at a
// time, queue 16, timeout 600 s; SIGTERM to pid N stops it" (no newline).
std::string startup_line(const Startup& s);

// Finds the start-up line in `text` (a server's stderr so far): its port and
// pid. False while it is not there.
bool parse_startup_line(const std::string& text, int* port, int* pid);

}  // namespace xdit::serve
