// Which instruction sets the CPU kernels use (kernels/cpu/isa.h), and the
// ISA oneDNN dispatches to (kernels.h).
#include "kernels/cpu/isa.h"

#include "kernels/cpu/dnnl_util.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {

// The CPU's level, and with `capped` no higher than oneDNN's effective ISA.
CpuIsa isa_level(bool capped) {
  __builtin_cpu_init();
  // oneDNN's ISAs are bit sets, each holding the ones below it.
  const auto dnnl_has =
      [capped, isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa())](dnnl::cpu_isa level) {
        return !capped || (isa & static_cast<unsigned>(level)) == static_cast<unsigned>(level);
      };
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        dnnl_has(dnnl::cpu_isa::avx2)))
    return CpuIsa::kBaseline;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        dnnl_has(dnnl::cpu_isa::avx512_core)))
    return CpuIsa::kAvx2;
  if (!(__builtin_cpu_supports("avx512bf16") && dnnl_has(dnnl::cpu_isa::avx512_core_bf16)))
    return CpuIsa::kAvx512;
  // AMX as oneDNN sees it (it also asks the OS for the tile state); the
  // CPU's own flag only for the uncapped level, which is for messages.
  const bool amx =
      capped ? dnnl_has(dnnl::cpu_isa::avx512_core_amx) : __builtin_cpu_supports("amx-bf16") != 0;
  return amx ? CpuIsa::kAmx : CpuIsa::kAvx512Bf16;
}

}  // namespace

CpuIsa detect_cpu_isa() {
  return isa_level(true);
}

CpuIsa cpu_hardware_isa() {
  static const CpuIsa isa = isa_level(false);
  return isa;
}

const char* cpu_isa_level_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx:
      return "AMX";
    case CpuIsa::kAvx512Bf16:
      return "AVX-512-bf16";
    case CpuIsa::kAvx512:
      return "AVX-512";
    case CpuIsa::kAvx2:
      return "AVX2";
    case CpuIsa::kBaseline:
      break;
  }
  return "x86-64 baseline";
}

bool cpu_has_bf16() {
  return cpu_isa() >= CpuIsa::kAvx512Bf16;
}

bool cpu_has_amx() {
  return cpu_isa() == CpuIsa::kAmx;
}

const char* cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    default:
      return "baseline";
  }
}

}  // namespace xdit::kernels
