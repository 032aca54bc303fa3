// conv2d, conv2d_backward_input and conv2d_backward_weight on cuda through cuDNN (the ops:
// devices/op_defs/conv2d.cpp; NCHW input, OIHW weight, f32 or f64). Descriptors are made
// per call (microseconds); the algorithm is chosen once per geometry from cuDNN's heuristics and
// kept: the first one cuDNN ranks that runs without tensor cores (TF32 would round f32 inputs to
// 10 bits, the CPU does not) and, with deterministic kernels on (devices/determinism.h), that
// cuDNN reports as deterministic. Each call's workspace comes from the stream-ordered pool.
#include <map>
#include <mutex>
#include <tuple>

#include "devices/cuda/dnn.h"
#include "devices/determinism.h"
#include "devices/op_defs/conv2d.h"
#include "devices/registry.h"
#include "devices/tensor.h"

namespace troupe::cuda {

namespace {

// Beyond this a cheaper-in-memory algorithm is taken: a workspace of gigabytes would evict the model.
constexpr size_t kMaxWorkspace = size_t(1) << 30;

template <class T, auto Create, auto Destroy>
struct Descriptor {
  T d = nullptr;
  explicit Descriptor(int device) { check_dnn(Create(&d), "cudnnCreate*Descriptor", device); }
  ~Descriptor() { Destroy(d); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
};

using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

int dim(const Shape& s, size_t i) { return static_cast<int>(s[i]); }

// The descriptors of one convolution: x [N,C,H,W], w [O,C/g,kh,kw], y [N,O,OH,OW].
struct Conv {
  int device;
  cudnnDataType_t type;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  std::tuple<int, int, Shape, Shape, std::vector<int>> key;  // device, type, x, w, conv parameters

  Conv(std::string_view op, DType dtype, const Shape& xs, const Shape& ws, const Shape& ys, const Attrs& attrs,
       int device_index)
      : device(device_index), type(dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT), x(device), y(device),
        w(device), conv(device) {
    if (dtype != DType::f32 && dtype != DType::f64)
      throw DeviceError(std::string(op) + ": no cuda kernel for " + name(dtype));
    const Conv2dAttrs a = conv2d_attrs(op, attrs);
    const int sh = static_cast<int>(a.stride.h), sw = static_cast<int>(a.stride.w);
    const int ph = static_cast<int>(a.padding.h), pw = static_cast<int>(a.padding.w);
    const int dh = static_cast<int>(a.dilation.h), dw = static_cast<int>(a.dilation.w);
    const int groups = static_cast<int>(a.groups);
    check_dnn(cudnnSetTensor4dDescriptor(x.d, CUDNN_TENSOR_NCHW, type, dim(xs, 0), dim(xs, 1), dim(xs, 2), dim(xs, 3)),
              "cudnnSetTensor4dDescriptor", device);
    check_dnn(cudnnSetTensor4dDescriptor(y.d, CUDNN_TENSOR_NCHW, type, dim(ys, 0), dim(ys, 1), dim(ys, 2), dim(ys, 3)),
              "cudnnSetTensor4dDescriptor", device);
    check_dnn(cudnnSetFilter4dDescriptor(w.d, type, CUDNN_TENSOR_NCHW, dim(ws, 0), dim(ws, 1), dim(ws, 2), dim(ws, 3)),
              "cudnnSetFilter4dDescriptor", device);
    check_dnn(cudnnSetConvolution2dDescriptor(conv.d, ph, pw, sh, sw, dh, dw, CUDNN_CROSS_CORRELATION, type),
              "cudnnSetConvolution2dDescriptor", device);
    check_dnn(cudnnSetConvolutionGroupCount(conv.d, groups), "cudnnSetConvolutionGroupCount", device);
    check_dnn(cudnnSetConvolutionMathType(conv.d, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType", device);
    key = {device, static_cast<int>(type), xs, ws, {sh, sw, ph, pw, dh, dw, groups}};
  }
};

enum class Pass { forward, backward_data, backward_filter };

struct Choice {
  int algo = 0;
  size_t workspace = 0;
};

// The first of cuDNN's ranked algorithms that suits (see the file's comment), found once per
// geometry, pass and determinism setting.
template <class Perf>
Choice choose(const char* op, const Conv& c, const Perf* perf, int count) {
  const bool deterministic = deterministic_kernels();
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    return {static_cast<int>(p.algo), p.memory};
  }
  throw DeviceError(std::string(op) + ": cuDNN offers no " + (deterministic ? "deterministic " : "") +
                    "algorithm without tensor cores for this geometry (cuda:" + std::to_string(c.device) + ")");
}

Choice algorithm(const char* op, const Conv& c, Pass pass) {
  using Key = std::tuple<decltype(c.key), int, bool>;
  static std::mutex mutex;
  static std::map<Key, Choice> chosen;
  const Key key{c.key, static_cast<int>(pass), deterministic_kernels()};
  {
    std::lock_guard lock(mutex);
    if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  }
  cudnnHandle_t h = dnn_handle(c.device);
  int count = 0;
  Choice choice;
  if (pass == Pass::forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.d, c.w.d, c.conv.d, c.y.d, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                     &count, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7", c.device);
    choice = choose(op, c, perf, count);
  } else if (pass == Pass::backward_data) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    check_dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w.d, c.y.d, c.conv.d, c.x.d,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7", c.device);
    choice = choose(op, c, perf, count);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    check_dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x.d, c.y.d, c.conv.d, c.w.d,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7", c.device);
    choice = choose(op, c, perf, count);
  }
  std::lock_guard lock(mutex);
  chosen.emplace(key, choice);
  return choice;
}

// cuDNN's scaling factors: double for double data, float otherwise.
struct Scale {
  double d;
  float f;
  explicit Scale(double v) : d(v), f(static_cast<float>(v)) {}
  const void* of(const Conv& c) const { return c.type == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d) : &f; }
};

Tensor workspace(const Choice& choice, Device device) {
  return Tensor::empty({static_cast<int64_t>(choice.workspace)}, DType::u8, device);
}

void* ptr(Tensor& t) { return t.mutable_raw_data(); }

std::vector<Tensor> conv2d_cuda(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous(), w = call.inputs[1].contiguous();
  const TensorMeta& meta = call.outputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  Tensor y = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (y.numel() == 0) return {y};
  const Conv c("conv2d", x.dtype(), x.shape(), w.shape(), meta.shape, call.attrs, device);
  const Choice choice = algorithm("conv2d", c, Pass::forward);
  Tensor space = workspace(choice, x.device());
  const Scale one(1), zero(0);
  check_dnn(cudnnConvolutionForward(dnn_handle(device), one.of(c), c.x.d, x.raw_data(), c.w.d, w.raw_data(), c.conv.d,
                                    static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ptr(space), choice.workspace,
                                    zero.of(c), c.y.d, ptr(y)),
            "cudnnConvolutionForward", device);
  if (call.inputs.size() > 2) {
    const Tensor bias = call.inputs[2].contiguous();
    TensorDesc b(device);
    check_dnn(cudnnSetTensor4dDescriptor(b.d, CUDNN_TENSOR_NCHW, c.type, 1, dim(meta.shape, 1), 1, 1),
              "cudnnSetTensor4dDescriptor", device);
    check_dnn(cudnnAddTensor(dnn_handle(device), one.of(c), b.d, bias.raw_data(), one.of(c), c.y.d, ptr(y)),
              "cudnnAddTensor", device);
  }
  return {y};
}

std::vector<Tensor> conv2d_backward_input_cuda(const OpCall& call) {
  const Tensor grad = call.inputs[0].contiguous(), w = call.inputs[1].contiguous();
  const TensorMeta& meta = call.outputs[0];
  const int device = grad.device().index;
  DeviceGuard on(device);
  Tensor dx = Tensor::empty(meta.shape, meta.dtype, grad.device());
  if (dx.numel() == 0) return {dx};
  const Conv c("conv2d_backward_input", meta.dtype, meta.shape, w.shape(), grad.shape(), call.attrs, device);
  const Choice choice = algorithm("conv2d_backward_input", c, Pass::backward_data);
  Tensor space = workspace(choice, grad.device());
  const Scale one(1), zero(0);
  check_dnn(cudnnConvolutionBackwardData(dnn_handle(device), one.of(c), c.w.d, w.raw_data(), c.y.d, grad.raw_data(),
                                         c.conv.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), ptr(space),
                                         choice.workspace, zero.of(c), c.x.d, ptr(dx)),
            "cudnnConvolutionBackwardData", device);
  return {dx};
}

std::vector<Tensor> conv2d_backward_weight_cuda(const OpCall& call) {
  const Tensor grad = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const TensorMeta& meta = call.outputs[0];
  const bool bias = call.attrs.get<bool>("bias");
  const int device = grad.device().index;
  DeviceGuard on(device);
  Tensor dw = Tensor::empty(meta.shape, meta.dtype, grad.device());
  Tensor db = bias ? Tensor::empty(call.outputs[1].shape, meta.dtype, grad.device()) : Tensor();
  if (grad.numel() == 0) {  // N == 0: no terms in the sums (and cuDNN takes no empty tensors)
    const cudaStream_t stream = current_stream(device);
    check(cudaMemsetAsync(ptr(dw), 0, dw.nbytes(), stream), "cudaMemsetAsync", device);
    if (bias) check(cudaMemsetAsync(ptr(db), 0, db.nbytes(), stream), "cudaMemsetAsync", device);
    return bias ? std::vector<Tensor>{dw, db} : std::vector<Tensor>{dw};
  }
  const Conv c("conv2d_backward_weight", meta.dtype, x.shape(), meta.shape, grad.shape(), call.attrs, device);
  const Choice choice = algorithm("conv2d_backward_weight", c, Pass::backward_filter);
  Tensor space = workspace(choice, grad.device());
  const Scale one(1), zero(0);
  check_dnn(cudnnConvolutionBackwardFilter(dnn_handle(device), one.of(c), c.x.d, x.raw_data(), c.y.d, grad.raw_data(),
                                           c.conv.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo),
                                           ptr(space), choice.workspace, zero.of(c), c.w.d, ptr(dw)),
            "cudnnConvolutionBackwardFilter", device);
  if (!bias) return {dw};
  TensorDesc b(device);
  check_dnn(cudnnSetTensor4dDescriptor(b.d, CUDNN_TENSOR_NCHW, c.type, 1, dim(meta.shape, 0), 1, 1),
            "cudnnSetTensor4dDescriptor", device);
  check_dnn(cudnnConvolutionBackwardBias(dnn_handle(device), one.of(c), c.y.d, grad.raw_data(), zero.of(c), b.d,
                                         ptr(db)),
            "cudnnConvolutionBackwardBias", device);
  return {dw, db};
}

const OpRegistrar conv2d_kernel{"conv2d", DeviceType::cuda, conv2d_cuda};
const OpRegistrar conv2d_backward_input_kernel{"conv2d_backward_input", DeviceType::cuda, conv2d_backward_input_cuda};
const OpRegistrar conv2d_backward_weight_kernel{"conv2d_backward_weight", DeviceType::cuda,
                                                conv2d_backward_weight_cuda};

}  // namespace

}  // namespace troupe::cuda
