// The communication watchdog (--comm_timeout): a rank blocked in one
// communication call (a send, receive, wait or collective) for longer than
// the timeout ends with one line naming itself and the call, and its exit
// makes mpirun end every other rank. Without it a stopped or hung rank
// (kill -STOP, a deadlock) holds the whole job for as long as it lasts.
#pragma once

namespace xdit::comm {

// The limit in seconds for every communication call of this process; 0
// turns the watchdog off (the default until this is called).
void set_comm_timeout(double seconds);
double comm_timeout();

// Marks one blocking communication call for its scope (calls do not nest;
// the communicator wraps each of its own). `op` is a string literal.
class WatchedCall {
 public:
  explicit WatchedCall(const char* op);
  ~WatchedCall();
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;
};

}  // namespace xdit::comm
