// linear_bf16 on cuda (the op: devices/op_defs/matmul.cpp): one cuBLASLt
// GEMM on the tensor cores, bf16 operands accumulated in f32, written in the output's dtype (f32,
// or bf16 for a next linear_bf16) with bias and relu fused into its epilogue.
//
// Operands: a weight that comes in bf16 (TransformerEncoder converts its weights once, when its
// fastpath dtype is bf16 and it lives on a GPU) is read as it is; an f32 weight is rounded on each
// call (round to nearest even, as the CPU rounds). Likewise x. The bias is added in the output's
// dtype, as cuBLASLt's bias epilogue reads it; one in another dtype is converted per call.
//
// GELU: cuBLASLt's GELU epilogue is the tanh approximation and troupe's gelu is the erf form (the
// CPU kernel's, PyTorch's default), so gelu stays erf: the GEMM fuses the bias and writes its
// output, then one vectorised pass applies erf-GELU in place, rounding once more when the output
// is bf16 (as PyTorch's bf16 Linear followed by F.gelu does). gemm_epilogue.h says what is fused.
//
// cuBLASLt's descriptors and the algorithm its heuristic picks are made once per shape and kept
// (LtPlan, keyed by m, n, k, epilogue, output dtype and pointer alignment), per thread so that no
// lock is taken and a plan's bias pointer is set by one thread at a time; the workspace an
// algorithm asks for comes from the device's caching allocator, in the stream's order.
#include <cublasLt.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "devices/cuda/blas.h"
#include "devices/cuda/gemm_epilogue.h"
#include "devices/cuda/packed_access.cuh"
#include "devices/op_defs/matmul.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

constexpr int kMaxDevices = 64;
// What an algorithm may ask for: cuBLAS's own recommendation for Hopper's split-K kernels.
constexpr uint64_t kMaxWorkspaceBytes = uint64_t(32) << 20;

// One cuBLASLt handle per device, made on first use and kept for the process (a handle is not
// bound to a stream: each matmul names its own).
cublasLtHandle_t lt_handle(int device) {
  thread_local cublasLtHandle_t seen[kMaxDevices] = {};
  if (seen[device]) return seen[device];
  static std::mutex mutex;
  static cublasLtHandle_t handles[kMaxDevices] = {};
  std::lock_guard lock(mutex);
  if (!handles[device]) {
    DeviceGuard on(device);
    check_blas(cublasLtCreate(&handles[device]), "cublasLtCreate", device);
  }
  return seen[device] = handles[device];
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::relu: return CUBLASLT_EPILOGUE_RELU;
    case LtEpilogue::relu_bias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case LtEpilogue::none: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_bias(LtEpilogue e) { return e == LtEpilogue::bias || e == LtEpilogue::relu_bias; }

// The largest power of two up to 16 that divides every address: cuBLASLt's fast kernels need 16.
unsigned alignment_of(std::initializer_list<const void*> pointers) {
  unsigned align = 16;
  for (const void* p : pointers)
    while (p && reinterpret_cast<uintptr_t>(p) % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  int device;
  int64_t m, n, k;
  LtEpilogue epilogue;
  bool bf16_out;
  unsigned alignment;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = std::hash<int64_t>()(key.m);
    for (int64_t v : {key.n, key.k, int64_t(key.epilogue), int64_t(key.bf16_out), int64_t(key.alignment),
                      int64_t(key.device)})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

// Column-major, as cuBLASLt reads: out^T [n x m] = weight [n x k] (stored as k x n, transposed)
// @ rows^T [k x m]. found() is false when the heuristic offers no algorithm for the epilogue.
class LtPlan {
 public:
  LtPlan(const PlanKey& key, const void* bias) {
    const int device = key.device;
    check_blas(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", device);
    const cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue = lt_epilogue(key.epilogue);
    set(CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose), device);
    set(CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain), device);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue), device);
    if (has_bias(key.epilogue)) set_bias(bias, device);  // the heuristic reads its alignment
    const cudaDataType_t out_type = key.bf16_out ? CUDA_R_16BF : CUDA_R_32F;
    check_blas(cublasLtMatrixLayoutCreate(&weight_, CUDA_R_16BF, key.k, key.n, key.k), "cublasLtMatrixLayoutCreate", device);
    check_blas(cublasLtMatrixLayoutCreate(&rows_, CUDA_R_16BF, key.k, key.m, key.k), "cublasLtMatrixLayoutCreate", device);
    check_blas(cublasLtMatrixLayoutCreate(&out_, out_type, key.n, key.m, key.n), "cublasLtMatrixLayoutCreate", device);
    cublasLtMatmulPreference_t preference = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate", device);
    const uint32_t align = key.alignment;
    const uint64_t max_workspace = kMaxWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                         sizeof(max_workspace));
    for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &align, sizeof(align));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_handle(device), desc_, weight_, rows_, out_, out_,
                                                                 preference, 1, &result, &count);
    cublasLtMatmulPreferenceDestroy(preference);
    found_ = status == CUBLAS_STATUS_SUCCESS && count > 0;
    if (found_) {
      algo_ = result.algo;
      workspace_ = result.workspaceSize;
    }
  }
  ~LtPlan() {
    if (out_) cublasLtMatrixLayoutDestroy(out_);
    if (rows_) cublasLtMatrixLayoutDestroy(rows_);
    if (weight_) cublasLtMatrixLayoutDestroy(weight_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;

  bool found() const { return found_; }

  void run(const PlanKey& key, const void* weight, const void* rows, const void* bias, void* out, cudaStream_t stream) {
    const int device = key.device;
    if (has_bias(key.epilogue)) set_bias(bias, device);
    Tensor workspace;
    if (workspace_ > 0) workspace = Tensor::empty({static_cast<int64_t>(workspace_)}, DType::u8, Device::cuda(device));
    const float one = 1.0f, zero = 0.0f;
    check_blas(cublasLtMatmul(lt_handle(device), desc_, &one, weight, weight_, rows, rows_, &zero, out, out_, out, out_,
                              &algo_, workspace.defined() ? workspace.mutable_raw_data() : nullptr, workspace_, stream),
               "cublasLtMatmul", device);
  }

 private:
  void set(cublasLtMatmulDescAttributes_t attribute, const void* value, size_t bytes, int device) {
    check_blas(cublasLtMatmulDescSetAttribute(desc_, attribute, value, bytes), "cublasLtMatmulDescSetAttribute", device);
  }
  void set_bias(const void* bias, int device) { set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias), device); }

  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t weight_ = nullptr, rows_ = nullptr, out_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
  bool found_ = false;
};

// A serving batch's row count m varies from call to call, so a long-running process meets many
// shapes: past this many plans a thread starts its cache afresh (a plan costs one heuristic query
// to make again, tens of microseconds) rather than growing without bound.
constexpr size_t kMaxPlansPerThread = 4096;

// The calling thread's plan for key, made on first use. The reference lives until the thread's
// next call (which may start the cache afresh).
LtPlan& plan_for(const PlanKey& key, const void* bias) {
  thread_local std::unordered_map<PlanKey, std::unique_ptr<LtPlan>, PlanKeyHash> plans;
  if (plans.size() >= kMaxPlansPerThread && !plans.count(key)) plans.clear();
  std::unique_ptr<LtPlan>& plan = plans[key];
  if (!plan) plan = std::make_unique<LtPlan>(key, bias);
  return *plan;
}

__device__ __forceinline__ float activated(float v, Activation act) {
  if (act == Activation::relu) return v < 0.0f ? 0.0f : v;
  if (act == Activation::gelu) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  return v;
}

// In place: out[i] = act(out[i] + bias[i % cols]), any layout of sizes.
template <class O>
__global__ void epilogue_pass(O* out, const O* bias, int64_t n, int64_t cols, Activation act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = convert_to<float>(out[i]);
    if (bias) v += convert_to<float>(bias[i % cols]);
    out[i] = convert_to<O>(activated(v, act));
  }
}

// The same over whole packs: cols a multiple of the pack, out and bias 16-byte aligned, n < 2^31.
template <class O>
__global__ void epilogue_pass_packed(O* out, const O* bias, uint32_t packs, uint32_t cols, Activation act) {
  using P = Pack<O>;
  for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += gridDim.x * blockDim.x) {
    P x = P::load(out + p * P::kSize);
    P b{};
    if (bias) b = P::load(bias + (p * P::kSize) % cols);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) {
      float v = convert_to<float>(x.v[j]);
      if (bias) v += convert_to<float>(b.v[j]);
      x.v[j] = convert_to<O>(activated(v, act));
    }
    x.store(out + p * P::kSize);
  }
}

template <class O>
void launch_epilogue_pass(O* out, const O* bias, int64_t n, int64_t cols, const EpilogueSplit& split, cudaStream_t stream) {
  const O* b = split.pass_bias ? bias : nullptr;
  if (cols % Pack<O>::kSize == 0 && vectorisable(n, {out, b}))
    epilogue_pass_packed<<<blocks_for_packs<O>(n), kThreads, 0, stream>>>(
        out, b, static_cast<uint32_t>(n / Pack<O>::kSize), static_cast<uint32_t>(cols), split.pass_activation);
  else
    epilogue_pass<<<blocks_for(n), kThreads, 0, stream>>>(out, b, n, cols, split.pass_activation);
}

std::vector<Tensor> linear_bf16_cuda(const OpCall& call) {
  const TensorMeta& meta = call.outputs[0];
  const Tensor& x = call.inputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  const int64_t k = call.inputs[1].size(1), n = call.inputs[1].size(0);
  const bool bf16_out = meta.dtype == DType::bf16;
  const Tensor rows = x.reshape({numel(Shape(x.shape().begin(), x.shape().end() - 1)), k}).to(DType::bf16).contiguous();
  const Tensor weight = call.inputs[1].to(DType::bf16).contiguous();  // no copy when it is bf16 and contiguous
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2].to(meta.dtype).contiguous() : Tensor();
  const int64_t m = rows.size(0);
  Tensor out = Tensor::empty({m, n}, meta.dtype, x.device());
  if (out.numel() == 0) return {out.view(meta.shape)};
  const cudaStream_t stream = current_stream(device);
  void* po = out.mutable_raw_data();
  const void* pb = bias.defined() ? bias.raw_data() : nullptr;
  const LinearActivation named = linear_bf16_attrs(call.attrs).activation;
  const Activation act = named == LinearActivation::relu   ? Activation::relu
                         : named == LinearActivation::gelu ? Activation::gelu
                                                           : Activation::none;
  EpilogueSplit split = unfused(bias.defined(), act);
  if (k == 0) {
    check(cudaMemsetAsync(po, 0, itemsize(meta.dtype) * m * n, stream), "cudaMemsetAsync", device);
  } else {
    const void* pw = weight.raw_data();
    const void* pr = rows.raw_data();
    split = split_epilogue(bias.defined(), act);
    PlanKey key{device, m, n, k, split.fused, bf16_out, alignment_of({pw, pr, po, pb})};
    LtPlan* plan = &plan_for(key, pb);
    if (!plan->found() && split.fused != LtEpilogue::none) {  // no fused algorithm here: the pass does it all
      split = unfused(bias.defined(), act);
      key.epilogue = LtEpilogue::none;
      plan = &plan_for(key, pb);
    }
    if (!plan->found())
      throw DeviceError("linear_bf16: cuBLASLt has no algorithm for rows " + rows.meta().str() + " @ weight " +
                        weight.meta().str() + " -> " + name(meta.dtype) + " (alignment " +
                        std::to_string(key.alignment) + " bytes)");
    plan->run(key, pw, pr, pb, po, stream);
  }
  if (split.needs_pass()) {
    if (bf16_out)
      launch_epilogue_pass(static_cast<__nv_bfloat16*>(po), static_cast<const __nv_bfloat16*>(pb), m * n, n, split, stream);
    else
      launch_epilogue_pass(static_cast<float*>(po), static_cast<const float*>(pb), m * n, n, split, stream);
    check_launch("linear_bf16", device);
  }
  return {out.view(meta.shape)};
}

const OpRegistrar linear_bf16_kernel{"linear_bf16", DeviceType::cuda, linear_bf16_cuda};

}  // namespace

}  // namespace troupe::cuda
