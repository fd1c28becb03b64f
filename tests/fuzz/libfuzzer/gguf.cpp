// libFuzzer entry for the GGUF reader (see ../fuzz_targets.h).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xdit::fuzz::gguf_bytes(data, size);
  return 0;
}
