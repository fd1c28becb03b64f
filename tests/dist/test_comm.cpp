// The communicator's operations under mpirun (and the single-rank one).
#include <gtest/gtest.h>

#include <numeric>

#include "comm/communicator.h"
#include "core/error.h"
#include "dist/world.h"
#include "models/block_hook.h"

namespace xdit::comm {
namespace {

using test::world;

TEST(Communicator, AllreduceAllgatherAlltoallBroadcast) {
  Communicator& w = world();
  const int n = w.size(), me = w.rank();
  std::vector<float> v = {1.0f + me, 10.0f * me, -3.0f};
  w.allreduce_sum(v.data(), v.size());
  EXPECT_FLOAT_EQ(v[0], n + n * (n - 1) / 2.0f);
  EXPECT_FLOAT_EQ(v[1], 10.0f * n * (n - 1) / 2.0f);
  EXPECT_FLOAT_EQ(v[2], -3.0f * n);
  // f64: a sum f32 cannot hold (1e8 + 1 per rank).
  std::vector<double> d = {1e8 + 1.0 + me, 0.25 * me};
  w.allreduce_sum(d.data(), d.size());
  EXPECT_EQ(d[0], n * (1e8 + 1.0) + n * (n - 1) / 2.0);
  EXPECT_EQ(d[1], 0.25 * n * (n - 1) / 2.0);

  std::vector<float> mine = {static_cast<float>(me), static_cast<float>(me * me)}, all(2 * n);
  w.allgather(mine.data(), all.data(), 2, Type::kF32);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(all[2 * i], i);
    EXPECT_EQ(all[2 * i + 1], i * i);
  }
  std::vector<float> send(n), recv(n);
  for (int j = 0; j < n; ++j) send[j] = 100.0f * me + j;  // block j to rank j
  w.alltoall(send.data(), recv.data(), 1, Type::kF32);
  for (int i = 0; i < n; ++i) EXPECT_EQ(recv[i], 100.0f * i + me);

  std::string msg = me == n - 1 ? "from the last rank" : std::string(18, '?');
  w.broadcast(msg.data(), msg.size(), Type::kByte, n - 1);
  EXPECT_EQ(msg, "from the last rank");
  w.barrier();
}

TEST(Communicator, RingOfNonBlockingSendsAndBlockingPairs) {
  Communicator& w = world();
  const int n = w.size(), me = w.rank();
  float out = static_cast<float>(me) + 0.5f, in = -1;
  auto r = w.irecv(&in, 1, Type::kF32, (me - 1 + n) % n, 7);
  auto s = w.isend(&out, 1, Type::kF32, (me + 1) % n, 7);
  r->wait();
  s->wait();
  EXPECT_EQ(in, static_cast<float>((me - 1 + n) % n) + 0.5f);
  EXPECT_TRUE(r->test());
  // Blocking pairs: even ranks send first.
  float got = -1;
  const int peer = me ^ 1;
  if (peer < n) {
    if (me % 2 == 0) {
      w.send(&out, 1, Type::kF32, peer, 8);
      w.recv(&got, 1, Type::kF32, peer, 8);
    } else {
      w.recv(&got, 1, Type::kF32, peer, 8);
      w.send(&out, 1, Type::kF32, peer, 8);
    }
    EXPECT_EQ(got, static_cast<float>(peer) + 0.5f);
  }
  EXPECT_GT(w.stats().bytes_sent, 0u);
}

TEST(Communicator, SplitGroupsByColorOrderedByKey) {
  Communicator& w = world();
  const int me = w.rank();
  auto half = w.split(me % 2, -me);  // reversed order inside each parity
  const int members = (w.size() + 1 - me % 2) / 2;
  EXPECT_EQ(half->size(), members);
  float v = static_cast<float>(me);
  half->allreduce_sum(&v, 1);
  float want = 0;
  for (int r = me % 2; r < w.size(); r += 2) want += r;
  EXPECT_EQ(v, want);
  EXPECT_EQ(half->rank(), members - 1 - me / 2);
}

TEST(Communicator, SingleRankCopiesAndRefusesPeers) {
  auto s = make_single();
  EXPECT_EQ(s->size(), 1);
  float a[3] = {1, 2, 3}, b[3] = {0, 0, 0};
  s->allgather(a, b, 3, Type::kF32);
  EXPECT_EQ(b[2], 3);
  s->allreduce_sum(a, 3);
  EXPECT_EQ(a[1], 2);
  EXPECT_THROW(s->send(a, 1, Type::kF32, 1, 0), Error);
  EXPECT_EQ(s->split(3, 0)->size(), 1);
}

// A block hook's decision, reduced over a group: one rank that says no makes
// every rank say no, so ranks that skip blocks together never split.
TEST(Communicator, BlockHookDecisionsAgreeOverTheGroup) {
  Communicator& w = world();
  EXPECT_TRUE(models::all_ranks_agree(w, true));
  EXPECT_FALSE(models::all_ranks_agree(w, false));
  EXPECT_FALSE(models::all_ranks_agree(w, w.rank() != w.size() - 1));       // the last says no
  EXPECT_EQ(models::all_ranks_agree(w, w.rank() % 2 == 0), w.size() == 1);  // odd ranks say no
}

}  // namespace
}  // namespace xdit::comm
