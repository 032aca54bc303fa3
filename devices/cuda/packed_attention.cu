// packed_attention on cuda (the CPU op's contract: devices/cpu/packed_attention.cpp): softmax(q k^T
// / sqrt(hd)) v per sequence and head over the packed tokens, computing no padded position.
//
// The offsets live on the device with qkv, and the host may not wait to read them, so no per-
// sequence GEMM can be sized there. Instead one warp per (query row, head) finds its sequence by
// binary search over the offsets and walks that sequence's keys once with an online softmax (the
// running maximum rescales the running sum and context), its lanes splitting the head's columns:
// the exact arithmetic of the CPU kernel up to the order of the additions. Offsets are not
// validated as on the CPU (that needs them on the host); a row with no keys gets NaN, as there.
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxColumnsPerLane = 8;  // head width up to 256

__global__ void attention_rows(const float* qkv, const int64_t* offsets, const int64_t* key_lengths, float* out,
                               int64_t rows, int64_t sequences, int64_t d, int64_t heads, float scale) {
  const int64_t task = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (task >= rows * heads) return;  // the whole warp leaves together
  const int64_t r = task / heads, h = task % heads, hd = d / heads;
  // The sequence: the last i with offsets[i] <= r (empty sequences before it share its offset).
  int64_t lo = 0, hi = sequences - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r) lo = mid; else hi = mid - 1;
  }
  const int64_t first = offsets[lo], length = offsets[lo + 1] - first;
  int64_t n = key_lengths ? key_lengths[lo] : length;
  n = n < 0 ? 0 : (n > length ? length : n);
  float* o = out + r * d + h * hd;
  if (n == 0) {
    for (int64_t c = lane; c < hd; c += 32) o[c] = NAN;
    return;
  }
  const float* q = qkv + r * 3 * d + h * hd;
  const float* keys = qkv + first * 3 * d + d + h * hd;
  float qc[kMaxColumnsPerLane], acc[kMaxColumnsPerLane];
#pragma unroll
  for (int s = 0; s < kMaxColumnsPerLane; ++s) {
    const int64_t c = lane + 32 * s;
    qc[s] = c < hd ? q[c] : 0.0f;
    acc[s] = 0.0f;
  }
  float top = -INFINITY, total = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys + j * 3 * d;
    float dot = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxColumnsPerLane; ++s) {
      const int64_t c = lane + 32 * s;
      if (c < hd) dot += qc[s] * k[c];
    }
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * scale;
    const float next = (score > top || score != score) ? score : top;  // a NaN wins, as the CPU's NanMax
    const float rescale = expf(top - next), weight = expf(score - next);
    total = total * rescale + weight;
    const float* v = k + d;
#pragma unroll
    for (int s = 0; s < kMaxColumnsPerLane; ++s) {
      const int64_t c = lane + 32 * s;
      if (c < hd) acc[s] = acc[s] * rescale + weight * v[c];
    }
    top = next;
  }
  const float inverse = 1.0f / total;
#pragma unroll
  for (int s = 0; s < kMaxColumnsPerLane; ++s) {
    const int64_t c = lane + 32 * s;
    if (c < hd) o[c] = acc[s] * inverse;
  }
}

std::vector<Tensor> packed_attention_cuda(const OpCall& call) {
  const Tensor qkv = call.inputs[0].contiguous(), offsets = call.inputs[1].contiguous();
  const Tensor key_lengths = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  const int64_t rows = qkv.size(0), d = qkv.size(1) / 3, heads = call.attrs.get<int64_t>("heads");
  const int64_t hd = d / heads;
  if (hd > 32 * kMaxColumnsPerLane)
    throw DeviceError("packed_attention: the cuda kernel takes heads up to " + std::to_string(32 * kMaxColumnsPerLane) +
                      " columns wide, qkv " + qkv.meta().str() + " with " + std::to_string(heads) + " heads has " +
                      std::to_string(hd));
  const int device = qkv.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty({rows, d}, DType::f32, qkv.device());
  const int64_t tasks = rows * heads;
  if (tasks == 0) return {out};
  const int64_t blocks = (tasks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT32_MAX) throw DeviceError("packed_attention: too many rows for the cuda kernel: " + qkv.meta().str());
  attention_rows<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, current_stream(device)>>>(
      device_read<float>(qkv), device_read<int64_t>(offsets), key_lengths.defined() ? device_read<int64_t>(key_lengths) : nullptr,
      device_write<float>(out), rows, offsets.numel() - 1, d, heads, 1.0f / std::sqrt(static_cast<float>(hd)));
  check_launch("packed_attention", device);
  return {out};
}

const OpRegistrar packed_attention_kernel{"packed_attention", DeviceType::cuda, packed_attention_cuda};

}  // namespace

}  // namespace troupe::cuda
