#include "comm/communicator.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace xdit::comm {

size_t type_size(Type t) {
  return t == Type::kF32 ? 4 : 1;
}

namespace {

class DoneRequest : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SingleComm : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void send(const void*, size_t, Type, int dest, int) override {
    XDIT_FAIL("single-rank communicator: send to rank ", dest, " (no other ranks)");
  }
  void recv(void*, size_t, Type, int src, int) override {
    XDIT_FAIL("single-rank communicator: recv from rank ", src, " (no other ranks)");
  }
  std::unique_ptr<Request> isend(const void*, size_t, Type, int dest, int) override {
    XDIT_FAIL("single-rank communicator: isend to rank ", dest);
  }
  std::unique_ptr<Request> irecv(void*, size_t, Type, int src, int) override {
    XDIT_FAIL("single-rank communicator: irecv from rank ", src);
  }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allgather(const void* s, void* r, size_t n, Type t) override { copy(s, r, n, t); }
  void alltoall(const void* s, void* r, size_t n, Type t) override { copy(s, r, n, t); }
  void broadcast(void*, size_t, Type, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SingleComm>(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  static void copy(const void* s, void* r, size_t n, Type t) {
    if (s != r) std::memmove(r, s, n * type_size(t));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single() {
  return std::make_unique<SingleComm>();
}

}  // namespace xdit::comm
