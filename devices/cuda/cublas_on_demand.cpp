// cuBLAS and cuBLASLt, loaded on the first call rather than with the program. Linked, they cost every
// process about 25,000 page faults and 74 ms of CPU as it starts (cuBLASLt's constructors; an idle
// 2-core Zen 4), GPU or not: for a CPU-only run, a command line tool or a rank started again in an
// elastic job, that was most of its start-up (`dist_sgd --help`: 90-100 ms, now 14 ms). So the
// library defines, hidden (visible to its own code only), the functions of the two that its
// kernels call; each resolves the real one once, from libcublas.so.N / libcublasLt.so.N found as
// the dynamic loader finds libraries, else next to libcudart. A program that links cuBLAS itself
// (examples/cuda_bench) is unaffected.
//
// A function used by the kernels but missing here is an undefined symbol when troupe_devices
// links (it links neither library): add it below, with the header's exact parameters (the
// compiler checks them against the declaration).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

#include "devices/error.h"

namespace troupe::cuda {
namespace {

// The loader's own search first (LD_LIBRARY_PATH, this library's run path, ld.so.cache), then the
// directory libcudart came from.
void* open_library(const std::string& soname) {
  if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  std::string why = dlerror();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) != 0 && info.dli_fname) {
    std::string path = info.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + soname;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    why += "; " + std::string(dlerror());
  }
  throw DeviceError("cuda: cannot load " + soname + " (cuBLAS, for the GPU's matrix products): " + why);
}

enum class Library { blas, blas_lt };

void* resolve(Library library, const char* name) {
  static void* const blas_lt = open_library("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  static void* const blas = open_library("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  void* f = dlsym(library == Library::blas ? blas : blas_lt, name);
  if (!f) throw DeviceError(std::string("cuda: cuBLAS has no ") + name + " (a cuBLAS older than this build's headers?)");
  return f;
}

}  // namespace
}  // namespace troupe::cuda

// The real function, resolved on the first call of each.
#define TROUPE_REAL(library, name)                                                                               \
  static const auto real = reinterpret_cast<decltype(&name)>(                                                    \
      troupe::cuda::resolve(troupe::cuda::Library::library, #name));                                            \
  return real
#define TROUPE_HIDDEN extern "C" __attribute__((visibility("hidden")))

// ---- cuBLAS ----

TROUPE_HIDDEN cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) { TROUPE_REAL(blas, cublasCreate_v2)(handle); }
TROUPE_HIDDEN cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) { TROUPE_REAL(blas, cublasDestroy_v2)(handle); }
TROUPE_HIDDEN cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  TROUPE_REAL(blas, cublasSetStream_v2)(handle, stream);
}
TROUPE_HIDDEN cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  TROUPE_REAL(blas, cublasSetWorkspace_v2)(handle, workspace, bytes);
}
TROUPE_HIDDEN const char* cublasGetStatusName(cublasStatus_t status) { TROUPE_REAL(blas, cublasGetStatusName)(status); }
TROUPE_HIDDEN const char* cublasGetStatusString(cublasStatus_t status) {
  TROUPE_REAL(blas, cublasGetStatusString)(status);
}
TROUPE_HIDDEN cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                             int64_t m, int64_t n, int64_t k, const void* alpha, const void* a,
                                             cudaDataType a_type, int64_t lda, const void* b, cudaDataType b_type,
                                             int64_t ldb, const void* beta, void* c, cudaDataType c_type, int64_t ldc,
                                             cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  TROUPE_REAL(blas, cublasGemmEx_64)(handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c,
                                     c_type, ldc, compute, algo);
}
TROUPE_HIDDEN cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
    const void* alpha, const void* a, cudaDataType a_type, int64_t lda, long long int stride_a, const void* b,
    cudaDataType b_type, int64_t ldb, long long int stride_b, const void* beta, void* c, cudaDataType c_type,
    int64_t ldc, long long int stride_c, int64_t batches, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  TROUPE_REAL(blas, cublasGemmStridedBatchedEx_64)(handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b,
                                                   b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, batches,
                                                   compute, algo);
}
TROUPE_HIDDEN cublasStatus_t cublasSgeam_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                            int64_t m, int64_t n, const float* alpha, const float* a, int64_t lda,
                                            const float* beta, const float* b, int64_t ldb, float* c, int64_t ldc) {
  TROUPE_REAL(blas, cublasSgeam_64)(handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}

// ---- cuBLASLt ----

TROUPE_HIDDEN cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { TROUPE_REAL(blas_lt, cublasLtCreate)(handle); }
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                      cudaDataType_t scale) {
  TROUPE_REAL(blas_lt, cublasLtMatmulDescCreate)(desc, compute, scale);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  TROUPE_REAL(blas_lt, cublasLtMatmulDescDestroy)(desc);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                            cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                            size_t bytes) {
  TROUPE_REAL(blas_lt, cublasLtMatmulDescSetAttribute)(desc, attr, buf, bytes);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  TROUPE_REAL(blas_lt, cublasLtMatmulPreferenceCreate)(pref);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  TROUPE_REAL(blas_lt, cublasLtMatmulPreferenceDestroy)(pref);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  const void* buf, size_t bytes) {
  TROUPE_REAL(blas_lt, cublasLtMatmulPreferenceSetAttribute)(pref, attr, buf, bytes);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                        uint64_t rows, uint64_t cols, int64_t ld) {
  TROUPE_REAL(blas_lt, cublasLtMatrixLayoutCreate)(layout, type, rows, cols, ld);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  TROUPE_REAL(blas_lt, cublasLtMatrixLayoutDestroy)(layout);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t results[], int* returned) {
  TROUPE_REAL(blas_lt, cublasLtMatmulAlgoGetHeuristic)(handle, desc, a, b, c, d, pref, requested, results, returned);
}
TROUPE_HIDDEN cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                            const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                                            cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                                            cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,
                                            const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                            cudaStream_t stream) {
  TROUPE_REAL(blas_lt, cublasLtMatmul)(handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d, d_layout,
                                       algo, workspace, workspace_bytes, stream);
}
