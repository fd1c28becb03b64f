// Internal oneDNN helpers shared by the CPU kernels: the engine, a stream per
// thread, a cache of matmul primitives keyed by shape, and user-managed
// scratchpads so one primitive may run on several threads at once.
#pragma once

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace xdit::kernels::cpu {

dnnl::engine& engine();
dnnl::stream& thread_stream();

// Scratchpad memory for `pd`, from a per-thread buffer that only grows.
dnnl::memory thread_scratchpad(const dnnl::primitive_desc_base& pd);

// Strided matmul C[M,N] (+)= A[M,K] · B[K,N] with leading dimensions in
// elements. B is either row-major (ldb between rows of K) or, with b_trans,
// stored as [N, K] rows (ldb between rows of N). A, B share `dt` (f32 or
// bf16); C is f32.
//
// With b_blocked, gemm() takes B in the blocked layout oneDNN chooses for the
// shape (VNNI pairs and AMX tiles for bf16), made once by gemm_pack_b from
// the plain B that ldb / b_trans describe. A B reused by many products (the
// keys and values of attention) is cheaper to pack once than to let every
// product re-pack a plain B on the fly.
struct GemmShape {
  int64_t m, n, k, lda, ldb, ldc;
  bool b_trans;
  bool accumulate;
  dnnl::memory::data_type dt;
  bool b_blocked = false;
  // batch > 1: that many products in one call, each operand's matrices one
  // after the other (A every m·lda elements, B every k·ldb or n·ldb, C every
  // m·ldc; a blocked B as gemm_pack_b lays out all of them).
  int64_t batch = 1;
};
// Runs on the calling thread's stream (single-threaded inside an OpenMP region).
void gemm(const GemmShape& s, const void* a, const void* b, float* c);
// Bytes of B in the blocked layout of a b_blocked shape.
size_t gemm_b_bytes(const GemmShape& s);
// Plain B (as s.ldb / s.b_trans describe it) → the blocked layout of `s`.
void gemm_pack_b(const GemmShape& s, const void* plain, void* blocked);
// The oneDNN implementation gemm() runs for `s` (creates the primitive).
std::string gemm_implementation(const GemmShape& s);

// oneDNN's scalar reference implementations ("ref:any", ...): correct, but
// orders of magnitude slower than its JIT kernels.
bool is_reference_impl(const std::string& impl);
// One warning per (op, shape) when a primitive still runs a reference kernel.
void warn_if_reference(const std::string& impl, const char* op, const std::string& shape);

// Thrown oneDNN errors become xdit::Error with `what` as context.
[[noreturn]] void rethrow_dnnl(const dnnl::error& e, const std::string& what);

}  // namespace xdit::kernels::cpu
