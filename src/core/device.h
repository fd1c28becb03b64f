// Where a run computes: the CPU, or a CUDA device. Parsed from --device
// (cpu, cuda, cuda:N) and checked against this build and this machine
// before anything loads.
#pragma once

#include <string>

namespace xdit {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // cuda:N
  bool cuda() const { return kind == Kind::kCuda; }
  std::string str() const;  // "cpu", "cuda:0"
};

// "cpu", "cuda" (= cuda:0) or "cuda:N"; throws one line for anything else.
Device parse_device(const std::string& text);

// Throws one line when `d` cannot be used here: a build without the CUDA
// backend, or no CUDA device ("no CUDA device (driver error 35: …)"), or
// an index past the devices there are.
void check_device(const Device& d);

// Whether this build has the CUDA backend (nvcc was found at configure time).
bool built_with_cuda();

}  // namespace xdit
