// main() for the distributed tests: MPI up, GoogleTest, MPI down. Each test
// runs on every rank; a failure on any rank fails the mpirun.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/communicator.h"
#include "dist/world.h"

namespace xdit::test {
comm::Communicator* g_world = nullptr;
}

int main(int argc, char** argv) {
  auto world = xdit::comm::init_world(&argc, &argv);
  xdit::test::g_world = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  // One rank reports (XDIT_TEST_ALL_RANKS=1: every rank); the others still
  // fail the job by exit code.
  if (world->rank() != 0 && std::getenv("XDIT_TEST_ALL_RANKS") == nullptr) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  world.reset();
  xdit::comm::finalize();
  return rc;
}
