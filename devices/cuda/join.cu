// cat and stack on cuda (devices/cpu/cat_stack.cpp has the semantics; stack is cat of the inputs
// unsqueezed at dim). Each input is copied by one launch into its columns of the output: for each
// index of the dims before dim, an input fills one run of the output row. Inputs are read through
// their strides (no contiguous copies) and moved as elements of their width, whatever the dtype.
#include "devices/cuda/gather_util.cuh"
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// out[o * out_row + column + r] = input element o * run + r (row-major over the input's shape).
template <class E>
__global__ void copy_columns(const E* in, Strided<1> layout, E* out, int64_t run, int64_t out_row, int64_t column,
                             int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    layout.offsets(i, off);
    const int64_t o = i / run;
    out[o * out_row + column + (i - o * run)] = in[off[0]];
  }
}

Tensor concatenate(const char* op, const std::vector<Tensor>& inputs, int64_t dim, const TensorMeta& meta) {
  const int device = inputs[0].device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, inputs[0].device());
  if (out.numel() == 0) return out;
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= meta.shape[d];
  const int64_t out_row = out.numel() / outer;
  void* dst = out.mutable_raw_data();
  int64_t column = 0;  // where this input's run starts within an output row, in elements
  for (const Tensor& input : inputs) {
    const int64_t n = input.numel(), run = n / outer;
    if (n == 0) continue;
    Tensor src = input;
    Strided<1> layout;
    if (!make_strided<1>(src.shape(), {&src.strides()}, layout)) {
      src = src.contiguous();  // too many dims for the kernel's index
      make_strided<1>(src.shape(), {&src.strides()}, layout);
    }
    dispatch_width(itemsize(meta.dtype), [&](auto tag) {
      using E = typename decltype(tag)::type;
      copy_columns<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
          static_cast<const E*>(src.raw_data()), layout, static_cast<E*>(dst), run, out_row, column, n);
    });
    check_launch(op, device);
    column += run;
  }
  return out;
}

std::vector<Tensor> cat_cuda(const OpCall& call) {
  const int64_t dim = wrap_dim("cat", call.attrs.get<int64_t>("dim"), call.inputs[0].dim());
  return {concatenate("cat", call.inputs, dim, call.outputs[0])};
}

std::vector<Tensor> stack_cuda(const OpCall& call) {
  const int64_t dim = wrap_dim("stack", call.attrs.get<int64_t>("dim"), call.inputs[0].dim() + 1);
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(call.inputs.size());
  for (const Tensor& t : call.inputs) unsqueezed.push_back(t.unsqueeze(dim));
  return {concatenate("stack", unsqueezed, dim, call.outputs[0])};
}

const OpRegistrar cat_cuda_kernel{"cat", DeviceType::cuda, cat_cuda};
const OpRegistrar stack_cuda_kernel{"stack", DeviceType::cuda, stack_cuda};

}  // namespace

}  // namespace troupe::cuda
