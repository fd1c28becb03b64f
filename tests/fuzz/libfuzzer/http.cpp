// libFuzzer entry for xdit serve's request reading (see ../fuzz_targets.h).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xdit::fuzz::http_request_bytes(data, size);
  return 0;
}
