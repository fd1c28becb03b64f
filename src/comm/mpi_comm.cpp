// The MPI communicator (OpenMPI). Every MPI call is checked (XDIT_MPI).
// The C API only: OpenMPI's deprecated C++ bindings stay out.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdlib>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "io/file.h"

#define XDIT_MPI(call)                                                          \
  do {                                                                          \
    const int xdit_mpi_rc = (call);                                             \
    if (xdit_mpi_rc != MPI_SUCCESS) ::xdit::comm::mpi_fail(#call, xdit_mpi_rc); \
  } while (0)

namespace xdit::comm {

[[noreturn]] void mpi_fail(const char* call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  XDIT_FAIL("MPI call failed: ", call, ": ", std::string(msg, static_cast<size_t>(len)));
}

namespace {

MPI_Datatype mpi_type(Type t) {
  return t == Type::kF32 ? MPI_FLOAT : MPI_BYTE;
}

using Timer = CommTimer;

class MpiRequest : public Request {
 public:
  MpiRequest(CommStats& s) : stats_(s) {}
  MPI_Request req = MPI_REQUEST_NULL;
  void wait() override {
    Timer t(stats_);
    WatchedCall watched("MPI_Wait");
    if (req != MPI_REQUEST_NULL) XDIT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
  }
  bool test() override {
    int done = 1;
    if (req != MPI_REQUEST_NULL) XDIT_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  ~MpiRequest() override {
    if (req != MPI_REQUEST_NULL)
      MPI_Wait(&req, MPI_STATUS_IGNORE);  // never leave a request dangling
  }

 private:
  CommStats& stats_;
};

int to_int(size_t n) {
  XDIT_CHECK(n <= static_cast<size_t>(INT32_MAX), "MPI message of ", n, " elements is too large");
  return static_cast<int>(n);
}

class MpiComm : public Communicator {
 public:
  MpiComm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    XDIT_MPI(MPI_Comm_rank(comm_, &rank_));
    XDIT_MPI(MPI_Comm_size(comm_, &size_));
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void send(const void* buf, size_t n, Type t, int dest, int tag) override {
    Timer tm(stats_, n * type_size(t));
    WatchedCall watched("MPI_Send");
    XDIT_MPI(MPI_Send(buf, to_int(n), mpi_type(t), dest, tag, comm_));
  }
  void recv(void* buf, size_t n, Type t, int src, int tag) override {
    Timer tm(stats_);
    WatchedCall watched("MPI_Recv");
    XDIT_MPI(MPI_Recv(buf, to_int(n), mpi_type(t), src, tag, comm_, MPI_STATUS_IGNORE));
  }
  std::unique_ptr<Request> isend(const void* buf, size_t n, Type t, int dest, int tag) override {
    Timer tm(stats_, n * type_size(t));
    auto r = std::make_unique<MpiRequest>(stats_);
    XDIT_MPI(MPI_Isend(buf, to_int(n), mpi_type(t), dest, tag, comm_, &r->req));
    return r;
  }
  std::unique_ptr<Request> irecv(void* buf, size_t n, Type t, int src, int tag) override {
    Timer tm(stats_);
    auto r = std::make_unique<MpiRequest>(stats_);
    XDIT_MPI(MPI_Irecv(buf, to_int(n), mpi_type(t), src, tag, comm_, &r->req));
    return r;
  }
  void allreduce_sum(float* buf, size_t n) override {
    Timer tm(stats_, n * 4);
    WatchedCall watched("MPI_Allreduce");
    XDIT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, to_int(n), MPI_FLOAT, MPI_SUM, comm_));
  }
  void allreduce_sum(double* buf, size_t n) override {
    Timer tm(stats_, n * 8);
    WatchedCall watched("MPI_Allreduce");
    XDIT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, to_int(n), MPI_DOUBLE, MPI_SUM, comm_));
  }
  void allgather(const void* s, void* r, size_t n, Type t) override {
    Timer tm(stats_, n * type_size(t) * static_cast<size_t>(size_ - 1));
    WatchedCall watched("MPI_Allgather");
    XDIT_MPI(MPI_Allgather(s, to_int(n), mpi_type(t), r, to_int(n), mpi_type(t), comm_));
  }
  void alltoall(const void* s, void* r, size_t n, Type t) override {
    Timer tm(stats_, n * type_size(t) * static_cast<size_t>(size_ - 1));
    WatchedCall watched("MPI_Alltoall");
    XDIT_MPI(MPI_Alltoall(s, to_int(n), mpi_type(t), r, to_int(n), mpi_type(t), comm_));
  }
  void broadcast(void* buf, size_t n, Type t, int root) override {
    Timer tm(stats_, rank_ == root ? n * type_size(t) : 0);
    WatchedCall watched("MPI_Bcast");
    XDIT_MPI(MPI_Bcast(buf, to_int(n), mpi_type(t), root, comm_));
  }
  void barrier() override {
    Timer tm(stats_);
    WatchedCall watched("MPI_Barrier");
    XDIT_MPI(MPI_Barrier(comm_));
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c;
    WatchedCall watched("MPI_Comm_split");
    XDIT_MPI(MPI_Comm_split(comm_, color, key, &c));
    return std::make_unique<MpiComm>(c, true);
  }
  [[noreturn]] void abort(int code) override {
    io::remove_temporaries();  // no destructor runs after this: no partial output stays
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

bool g_mpi_started = false;

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

int local_process_count() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int n = local != nullptr ? std::atoi(local) : 1;
  return n > 1 ? n : 1;
}

std::unique_ptr<Communicator> init_world(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && !launched_by_mpi()) return make_single();
  if (!initialized) {
    int provided = 0;
    XDIT_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    g_mpi_started = true;
  }
  // Errors come back as return codes (checked by XDIT_MPI), not aborts without a message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
}

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_mpi_started && !finalized) MPI_Finalize();
}

}  // namespace xdit::comm
