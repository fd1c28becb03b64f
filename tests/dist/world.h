#pragma once

#include "comm/communicator.h"

namespace xdit::test {
extern comm::Communicator* g_world;  // set by dist/mpi_main.cpp
inline comm::Communicator& world() {
  return *g_world;
}
}  // namespace xdit::test
