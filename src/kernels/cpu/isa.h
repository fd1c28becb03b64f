// Which instruction sets the CPU kernels written here use, and the three
// builds of a plain loop that follow that choice.
#pragma once

namespace xdit::kernels {

// The levels of the kernels written here, in order. The level is what the
// CPU has, capped by the ISA oneDNN dispatches to: ONEDNN_MAX_CPU_ISA=AVX2
// (oneDNN's own setting) moves oneDNN's primitives and these kernels
// together, so an AVX-512 machine runs, and the tests check, the code an
// AVX2-only or a baseline x86-64 server runs (tests/CMakeLists.txt).
//   kAvx2:       AVX2 + FMA
//   kAvx512:     AVX-512 F, DQ, BW, VL (every AVX-512 server CPU)
//   kAvx512Bf16: and AVX-512-bf16 (native bf16 dot products)
//   kAmx:        and oneDNN runs bf16 on AMX tiles
enum class CpuIsa { kBaseline, kAvx2, kAvx512, kAvx512Bf16, kAmx };

CpuIsa detect_cpu_isa();
// The CPU's own level, whatever ONEDNN_MAX_CPU_ISA says.
CpuIsa cpu_hardware_isa();
const char* cpu_isa_level_name(CpuIsa isa);

// Read once; inline because row kernels ask at every call.
inline CpuIsa cpu_isa() {
  static const CpuIsa isa = detect_cpu_isa();
  return isa;
}

}  // namespace xdit::kernels

// Defines `ret name params` from `name##_body`, an XDIT_ISA_BODY function
// with the same parameters: the body built three times, for AVX-512, AVX2
// and the x86-64 baseline, and the build cpu_isa() allows chosen at each
// call. (GCC's target_clones picks a build by the CPU alone, in an ifunc
// resolver at load, so it could not follow the cap above.) `args` names the
// parameters in parentheses.
#define XDIT_ISA_BODY inline __attribute__((always_inline))
#define XDIT_ISA_CLONES(ret, name, params, args)                             \
  __attribute__((target("avx512f"))) ret name##_avx512 params {              \
    return name##_body args;                                                 \
  }                                                                          \
  __attribute__((target("avx2,fma"))) ret name##_avx2 params {               \
    return name##_body args;                                                 \
  }                                                                          \
  ret name##_baseline params {                                               \
    return name##_body args;                                                 \
  }                                                                          \
  ret name params {                                                          \
    const ::xdit::kernels::CpuIsa isa_ = ::xdit::kernels::cpu_isa();         \
    if (isa_ >= ::xdit::kernels::CpuIsa::kAvx512) return name##_avx512 args; \
    if (isa_ >= ::xdit::kernels::CpuIsa::kAvx2) return name##_avx2 args;     \
    return name##_baseline args;                                             \
  }
