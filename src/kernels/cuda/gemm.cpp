#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check(cublasStatus_t st, const char* call, const GemmShape& s) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(call) + " failed: " + cublasLtGetStatusName(st) + " (" +
                cublasLtGetStatusString(st) + ") for " + s.str());
}

cudaDataType_t data_type(GemmType t) {
  return t == GemmType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Row-major y[M,N] = x[M,K] · w[N,K]ᵀ is, in cuBLASLt's column-major terms,
// yᵀ[N,M] = op(A) · B with A = w viewed as [K,N] (ld K, transposed: "T")
// and B = xᵀ viewed as [K,M] (ld K, "N"); D = yᵀ [N,M] (ld N). The bias
// runs along D's rows, i.e. along N, as the Linear's bias does.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Descriptors(const GemmShape& s) {
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate",
          s);
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
          "cublasLtMatmulDescSetAttribute(TRANSA)", s);
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n),
          "cublasLtMatmulDescSetAttribute(TRANSB)", s);
    if (s.epilogue == Epilogue::kGelu) {
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_GELU;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e),
            "cublasLtMatmulDescSetAttribute(EPILOGUE)", s);
    } else if (s.epilogue != Epilogue::kNone) {
      const cublasLtEpilogue_t e =
          s.epilogue == Epilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e),
            "cublasLtMatmulDescSetAttribute(EPILOGUE)", s);
      const cudaDataType_t bias_type = CUDA_R_32F;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                           sizeof bias_type),
            "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)", s);
    }
    check(cublasLtMatrixLayoutCreate(&a, data_type(s.in), static_cast<uint64_t>(s.k),
                                     static_cast<uint64_t>(s.n), s.k),
          "cublasLtMatrixLayoutCreate(w)", s);
    check(cublasLtMatrixLayoutCreate(&b, data_type(s.in), static_cast<uint64_t>(s.k),
                                     static_cast<uint64_t>(s.m), s.k),
          "cublasLtMatrixLayoutCreate(x)", s);
    check(cublasLtMatrixLayoutCreate(&d, data_type(s.out), static_cast<uint64_t>(s.n),
                                     static_cast<uint64_t>(s.m), s.n),
          "cublasLtMatrixLayoutCreate(y)", s);
  }
  ~Descriptors() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

void check_shape(const GemmShape& s) {
  if (s.m < 1 || s.n < 1 || s.k < 1)
    throw Error("cuBLASLt GEMM needs positive sizes, got " + s.str());
  if (s.accumulate && (s.epilogue == Epilogue::kGelu || s.epilogue == Epilogue::kGeluBias))
    throw Error("cuBLASLt GEMM: accumulate with a GELU epilogue, got " + s.str());
  if (s.in == GemmType::kBF16 && (s.k % 8 != 0 || s.n % 8 != 0))
    throw Error("cuBLASLt bf16 GEMM: K and N must be multiples of 8 (16-byte rows), got " +
                s.str());
}

}  // namespace

std::string GemmShape::str() const {
  auto t = [](GemmType x) { return x == GemmType::kBF16 ? "bf16" : "f32"; };
  std::string e = epilogue == Epilogue::kNone   ? ""
                  : epilogue == Epilogue::kBias ? " + bias"
                  : epilogue == Epilogue::kGelu ? ", gelu"
                                                : " + bias, gelu";
  if (accumulate) e += ", accumulate";
  return std::string(t(in)) + " [" + std::to_string(m) + " x " + std::to_string(k) + "] x [" +
         std::to_string(n) + " x " + std::to_string(k) + "]^T" + e + " -> " + t(out);
}

void check_gemm_descriptors(const GemmShape& s) {
  check_shape(s);
  Descriptors d(s);
}

struct Gemm::Plan {
  explicit Plan(const GemmShape& s) : desc(s) {}
  Descriptors desc;
  cublasLtMatmulAlgo_t algo{};
};

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  xdit::cuda::DeviceBuffer workspace;
  std::map<GemmShape, std::unique_ptr<Plan>> plans;
};

Gemm::Gemm() : impl_(std::make_unique<Impl>()) {
  const cublasStatus_t st = cublasLtCreate(&impl_->handle);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cublasLtCreate failed: ") + cublasLtGetStatusName(st) + " (" +
                cublasLtGetStatusString(st) + ")");
  impl_->workspace = xdit::cuda::DeviceBuffer(kWorkspaceBytes);
}

Gemm::~Gemm() {
  impl_->plans.clear();
  if (impl_->handle != nullptr) cublasLtDestroy(impl_->handle);
}

size_t Gemm::plans() const {
  return impl_->plans.size();
}

void Gemm::run(const GemmShape& s, const void* x, const void* w, const float* bias, void* y,
               Stream st) {
  auto it = impl_->plans.find(s);
  if (it == impl_->plans.end()) {
    check_shape(s);
    auto plan = std::make_unique<Plan>(s);
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", s);
    const uint64_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(impl_->handle, plan->desc.op, plan->desc.a, plan->desc.b,
                                       plan->desc.d, plan->desc.d, pref, 1, &best, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    check(hs, "cublasLtMatmulAlgoGetHeuristic", s);
    if (found == 0) throw Error("cuBLASLt has no algorithm for " + s.str());
    plan->algo = best.algo;
    it = impl_->plans.emplace(s, std::move(plan)).first;
  }
  Plan& p = *it->second;
  if (s.epilogue == Epilogue::kBias || s.epilogue == Epilogue::kGeluBias) {
    if (bias == nullptr) throw Error("cuBLASLt GEMM " + s.str() + ": the bias is missing");
    check(cublasLtMatmulDescSetAttribute(p.desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof bias),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", s);
  }
  const float alpha = 1.f, beta = s.accumulate ? 1.f : 0.f;
  check(
      cublasLtMatmul(impl_->handle, p.desc.op, &alpha, w, p.desc.a, x, p.desc.b, &beta, y, p.desc.d,
                     y, p.desc.d, &p.algo, impl_->workspace.data(), impl_->workspace.bytes(), st),
      "cublasLtMatmul", s);
}

DeviceLinear::DeviceLinear(const float* w_f32, const float* bias, int64_t in, int64_t out,
                           bool bf16, bool gelu)
    : in_(in),
      out_(out),
      bf16_(bf16 && in % 8 == 0 && out % 8 == 0),
      gelu_(gelu),
      has_bias_(bias != nullptr) {
  w_ = upload_values(w_f32, static_cast<size_t>(in * out), bf16_);
  if (has_bias_) bias_ = upload_values(bias, static_cast<size_t>(out), false);
}

void DeviceLinear::forward(const void* x, bool x_bf16, int64_t m, void* y, bool y_bf16,
                           bool accumulate, Stream st) const {
  if (m == 0) return;
  GemmShape s;
  s.m = m;
  s.n = out_;
  s.k = in_;
  s.in = bf16_ ? GemmType::kBF16 : GemmType::kF32;
  s.out = y_bf16 ? GemmType::kBF16 : GemmType::kF32;
  s.epilogue = has_bias_ ? (gelu_ ? Epilogue::kGeluBias : Epilogue::kBias)
                         : (gelu_ ? Epilogue::kGelu : Epilogue::kNone);
  s.accumulate = accumulate;
  if (y_bf16 && !bf16_) throw Error("CUDA linear: bf16 output from an f32 layer " + s.str());
  const void* src = x;
  if (bf16_ && !x_bf16) {
    src = bf16_rows_in(ScratchSlot::kLinearIn, static_cast<const float*>(x), in_, m, in_, st);
  } else if (!bf16_ && x_bf16) {
    auto* c = static_cast<float*>(
        device_scratch(ScratchSlot::kLinearIn, static_cast<size_t>(m * in_) * 4));
    from_bf16_rows(static_cast<const uint16_t*>(x), m, in_, c, in_, st);
    src = c;
  }
  device_gemm().run(s, src, w_.data(), has_bias_ ? bias_.as<float>() : nullptr, y, st);
}

}  // namespace xdit::kernels::cuda
