// packed_attention: the transformer fastpath's self-attention over packed sequences (a nested
// tensor's tokens back to back), from the fused QKV projection to the heads' concatenated context:
//
//   qkv [rows, 3d] (q | k | v, heads of d / heads columns each), offsets i64 [B + 1] from 0 to rows,
//   key_lengths i64 [B] (optional: sequence i attends to its first key_lengths[i] keys only)
//   -> context [rows, d]: per sequence and head, softmax(q k^T / sqrt(d / heads)) v
//
// One task per (sequence, head), spread over the intra-op threads: each computes its scores into
// a buffer of its own (one GEMM), the softmax in place and its context columns (a second GEMM)
// straight into the output, so no padded position, permuted copy or concatenation is made. The
// products read q and the scores where they lie (ARead::in_place): at k = 64 or a sequence's
// keys, packing them first took 13% of the time. A
// task's arithmetic does not depend on the thread count. Rows whose key_lengths is 0 attend to
// nothing: NaN, as a softmax over keys all masked gives.
//
// The GEMMs are the packed ones linear uses, the head's keys and values packed once per task:
// oneDNN's sgemm was slower at these shapes (k = 64, or 250 keys): with the faster row maximum and
// exp of this change, the XLM-R-shaped encoder's attention (24 layers, lengths 4, 5, 250) went
// from 115 to 92 ms on an AMD EPYC Zen 3 (AVX2, 2 threads).
//
// qkv may be bf16 (the bf16 encoder's projection): the context is then bf16 too, computed here in
// f32 from the widened qkv and rounded once at the end, the contract the cuda kernel keeps with f32
// accumulation on tensor cores.
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "devices/cpu/activations.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/cpu/loops.h"
#include "devices/op_defs/attention.h"
#include "devices/registry.h"
#include "devices/threads.h"

namespace troupe {

namespace {

// A task's products run on the thread that runs the task (the tasks are the parallelism).
struct OneThreadPerProduct {
  int outer = thread_intra_op_threads();
  OneThreadPerProduct() { set_thread_intra_op_threads(1); }
  ~OneThreadPerProduct() { set_thread_intra_op_threads(outer); }
};

std::vector<Tensor> packed_attention_cpu(const OpCall& c) {
  const DType dtype = c.inputs[0].dtype();
  const Tensor qkv = c.inputs[0].to(DType::f32).contiguous();
  const std::vector<int64_t> offsets = c.inputs[1].to_vector<int64_t>();
  const PackedAttentionDims dims = packed_attention_dims(qkv.shape(), c.attrs);
  const int64_t rows = dims.rows, d = dims.width, heads = dims.heads, hd = dims.head_width;
  const int64_t B = static_cast<int64_t>(offsets.size()) - 1;
  if (offsets.front() != 0 || offsets.back() != rows)
    throw ValueError("packed_attention: offsets must run from 0 to the " + std::to_string(rows) + " rows of qkv, got " +
                     std::to_string(offsets.front()) + ".." + std::to_string(offsets.back()));
  for (int64_t i = 0; i < B; ++i)
    if (offsets[i + 1] < offsets[i])
      throw ValueError("packed_attention: offsets decrease at sequence " + std::to_string(i));
  std::vector<int64_t> keys(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) keys[i] = offsets[i + 1] - offsets[i];
  if (c.inputs.size() > 2) {
    const std::vector<int64_t> given = c.inputs[2].to_vector<int64_t>();
    for (int64_t i = 0; i < B; ++i) {
      if (given[i] < 0 || given[i] > keys[i])
        throw ValueError("packed_attention: key_lengths[" + std::to_string(i) + "] is " + std::to_string(given[i]) +
                         ", sequence " + std::to_string(i) + " has " + std::to_string(keys[i]) + " tokens");
      keys[i] = given[i];
    }
  }

  Tensor out = Tensor::empty({rows, d}, DType::f32);
  const float* base = qkv.data<float>();
  float* context = out.mutable_data<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<int64_t> tasks;  // sequence * heads + head, the sequences with tokens
  double flops = 0;
  for (int64_t i = 0; i < B; ++i)
    if (offsets[i + 1] > offsets[i]) {
      for (int64_t h = 0; h < heads; ++h) tasks.push_back(i * heads + h);
      flops += 4.0 * double(offsets[i + 1] - offsets[i]) * double(keys[i]) * double(d);
    }
  const int64_t count = static_cast<int64_t>(tasks.size());
  auto run_task = [&](int64_t t, std::vector<float>& buffer) {
    const int64_t i = tasks[t] / heads, h = tasks[t] % heads;
    const int64_t first = offsets[i], L = offsets[i + 1] - first, n = keys[i];
    const float* q = base + first * 3 * d + h * hd;
    float* out_rows = context + first * d + h * hd;
    if (n == 0) {
      for (int64_t r = 0; r < L; ++r) std::fill(out_rows + r * d, out_rows + r * d + hd, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    // Rows of scores a multiple of 1 KiB apart would share L1 sets when the tiles read them.
    const int64_t ld = n % 256 == 0 ? n + 16 : n;
    buffer.resize(static_cast<size_t>(L * ld + L));
    float* scores = buffer.data();
    float* inverse_sums = scores + L * ld;
    const PackedWeight keys_packed(q + d, n, hd, 3 * d);  // C = q @ k^T: k is W
    gemm_packed_f32(L, q, 3 * d, keys_packed, 0.0f, scores, ld, nullptr, ARead::in_place);
    // softmax(scores / sqrt(hd)), its division by the row's sum left to the context rows (hd
    // values, not n): the scale is positive, so the maximum is the same before and after it.
    for (int64_t r = 0; r < L; ++r) {
      float* row = scores + r * ld;
      exp_shifted_f32(row, row, n, fold_row<float>(row, n, NanMax{}), scale);
      inverse_sums[r] = 1.0f / sum_row<float>(row, n);
    }
    const PackedWeight values_packed = PackedWeight::from_transposed(q + 2 * d, hd, n, 3 * d);  // C = P @ v
    gemm_packed_f32(L, scores, ld, values_packed, 0.0f, out_rows, d, nullptr, ARead::in_place);
    for (int64_t r = 0; r < L; ++r)
      for (int64_t j = 0; j < hd; ++j) out_rows[r * d + j] *= inverse_sums[r];
  };
  const int threads = flops < 4e6 ? 1 : intra_op_threads();
  if (threads <= 1) {
    OneThreadPerProduct one_thread;
    std::vector<float> buffer;
    for (int64_t t = 0; t < count; ++t) run_task(t, buffer);
    return {out.to(dtype)};
  }
  apply_intra_op_threads();
#pragma omp parallel num_threads(threads)
  {
    OneThreadPerProduct one_thread;
    std::vector<float> buffer;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < count; ++t) run_task(t, buffer);
  }
  return {out.to(dtype)};
}

const OpRegistrar packed_attention_kernel{"packed_attention", DeviceType::cpu, packed_attention_cpu};

}  // namespace
}  // namespace troupe
