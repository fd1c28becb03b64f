// The GPU ranks' communicators under mpirun: NCCL (one GPU per rank on the
// machine) and host-staged (ranks may share a GPU), each with every
// operation on device buffers against the values the host communicator's
// test checks, plus a split group and a Ring-style exchange (send to the
// next rank and receive from the previous one before either waits). Without
// a GPU (or an NCCL build) the cases skip, saying why.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist/world.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace xdit::comm {
namespace {

using test::world;

// The choice needs no GPU: NCCL when every rank here has a GPU of its own.
TEST(DeviceComm, ChoosesNcclOrHostStagingWithOneLine) {
  std::string note;
  EXPECT_EQ(choose_device_comm(4, 4, true, &note), "nccl");
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_device_comm(1, 2, true, &note), "host-staged");
  EXPECT_NE(note.find("2 ranks share 1 GPU"), std::string::npos) << note;
  EXPECT_EQ(note.find('\n'), std::string::npos);
  EXPECT_EQ(choose_device_comm(8, 2, false, &note), "host-staged");
  EXPECT_NE(note.find("no NCCL"), std::string::npos) << note;
  EXPECT_THROW(choose_device_comm(0, 2, true, &note), Error);
}

#ifdef XDIT_HAVE_CUDA
Tensor up(const std::vector<float>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to_device(current_device());
}

// Every operation on device buffers.
void check_operations(Communicator& c) {
  const int n = c.size(), me = c.rank();
  Tensor v = up({1.0f + me, 10.0f * me, -3.0f});
  c.allreduce_sum(v.data<float>(), 3);
  auto got = v.to_vector();
  EXPECT_FLOAT_EQ(got[0], n + n * (n - 1) / 2.0f);
  EXPECT_FLOAT_EQ(got[1], 10.0f * n * (n - 1) / 2.0f);
  EXPECT_FLOAT_EQ(got[2], -3.0f * n);
  Tensor mine = up({static_cast<float>(me), static_cast<float>(me * me)});
  Tensor all = Tensor::empty({2 * n}, DType::kF32, current_device());
  c.allgather(mine.data<float>(), all.data<float>(), 2, Type::kF32);
  got = all.to_vector();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got[2 * i], i);
    EXPECT_EQ(got[2 * i + 1], i * i);
  }
  std::vector<float> s(static_cast<size_t>(3 * n));
  for (int j = 0; j < n; ++j)
    for (int e = 0; e < 3; ++e) s[static_cast<size_t>(3 * j + e)] = 100.0f * me + j + 0.25f * e;
  Tensor send = up(s), recv = Tensor::empty({3 * n}, DType::kF32, current_device());
  c.alltoall(send.data<float>(), recv.data<float>(), 3, Type::kF32);
  got = recv.to_vector();
  for (int i = 0; i < n; ++i)
    for (int e = 0; e < 3; ++e)
      EXPECT_EQ(got[static_cast<size_t>(3 * i + e)], 100.0f * i + me + 0.25f * e);
  Tensor b = up({me == n - 1 ? 7.5f : -1.0f, me == n - 1 ? 8.5f : -1.0f});
  c.broadcast(b.data<float>(), 2, Type::kF32, n - 1);
  EXPECT_EQ(b.to_vector(), (std::vector<float>{7.5f, 8.5f}));
  // Ring: to the next rank, from the previous one, both posted before a wait.
  Tensor out = up({static_cast<float>(me), 3.0f * me}),
         in = Tensor::empty({2}, DType::kF32, current_device());
  auto r = c.irecv(in.data<float>(), 2, Type::kF32, (me + n - 1) % n, 5);
  auto w = c.isend(out.data<float>(), 2, Type::kF32, (me + 1) % n, 5);
  r->wait();
  w->wait();
  const int prev = (me + n - 1) % n;
  EXPECT_EQ(in.to_vector(), (std::vector<float>{static_cast<float>(prev), 3.0f * prev}));
  c.barrier();
}

struct OnLocalGpu {
  std::string skip;
  int gpus = 0;
  std::unique_ptr<DeviceScope> scope;
  OnLocalGpu() {
    gpus = cuda::device_count(&skip);
    if (gpus == 0) return;
    scope = std::make_unique<DeviceScope>(Device{Device::Kind::kCuda, local_rank() % gpus});
  }
};

TEST(DeviceComm, HostStagedOperationsAndSplit) {
  OnLocalGpu g;
  if (g.gpus == 0) GTEST_SKIP() << "CUDA cases skipped: " << g.skip;
  auto host = std::shared_ptr<Communicator>(world().split(0, world().rank()));
  auto c = make_host_staged(host);
  check_operations(*c);
  auto half = c->split(c->rank() % 2, c->rank());
  check_operations(*half);
}

#ifdef XDIT_HAVE_NCCL
TEST(DeviceComm, NcclOperationsAndSplit) {
  OnLocalGpu g;
  if (g.gpus == 0) GTEST_SKIP() << "CUDA cases skipped: " << g.skip;
  std::string note;
  if (choose_device_comm(g.gpus, local_process_count(), true, &note) != "nccl")
    GTEST_SKIP() << "NCCL case skipped: " << note;
  auto host = std::shared_ptr<Communicator>(world().split(0, world().rank()));
  auto c = make_nccl(host, 60);
  check_operations(*c);
  auto half = c->split(c->rank() % 2, c->rank());
  check_operations(*half);
}
#endif
#endif

}  // namespace
}  // namespace xdit::comm
