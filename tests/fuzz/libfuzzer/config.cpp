// libFuzzer entry for the config loaders (see ../fuzz_targets.h).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xdit::fuzz::config_bytes(data, size);
  return 0;
}
