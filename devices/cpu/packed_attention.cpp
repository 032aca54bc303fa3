// packed_attention: the transformer fastpath's self-attention over packed sequences (a nested
// tensor's tokens back to back), from the fused QKV projection to the heads' concatenated context:
//
//   qkv [rows, 3d] (q | k | v, heads of d / heads columns each), offsets i64 [B + 1] from 0 to rows,
//   key_lengths i64 [B] (optional: sequence i attends to its first key_lengths[i] keys only)
//   -> context [rows, d]: per sequence and head, softmax(q k^T / sqrt(d / heads)) v
//
// One task per (sequence, head), spread over the intra-op threads: each computes its scores into
// a buffer of its own (one GEMM), the softmax in place and its context columns (a second GEMM)
// straight into the output, so no padded position, permuted copy or concatenation is made. A
// task's arithmetic does not depend on the thread count. Rows whose key_lengths is 0 attend to
// nothing: NaN, as a softmax over keys all masked gives.
//
// qkv may be bf16 (the bf16 encoder's projection): the context is then bf16 too, computed here in
// f32 from the widened qkv and rounded once at the end, the contract the cuda kernel keeps with f32
// accumulation on tensor cores.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "devices/cpu/activations.h"
#include "devices/cpu/loops.h"
#include "devices/op_defs/attention.h"
#include "devices/registry.h"
#include "devices/threads.h"

namespace troupe {

namespace {

// oneDNN's sgemm splits a product over omp_get_max_threads() when it is not inside a parallel
// region, and the split changes its rounding; a task's products run on one thread either way, so
// the result does not depend on how many tasks a call has (a pipeline's micro-batches).
struct OneThreadOutsideRegions {
  int outer = omp_get_max_threads();
  OneThreadOutsideRegions() { omp_set_num_threads(1); }
  ~OneThreadOutsideRegions() { omp_set_num_threads(outer); }
};

void sgemm(char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float* c, int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm('N', trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
  if (status != dnnl_success)
    throw ValueError("packed_attention: dnnl_sgemm failed with status " + std::to_string(static_cast<int>(status)));
}

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
  auto run_task = [&](int64_t t, std::vector<float>& scores) {
    const int64_t i = tasks[t] / heads, h = tasks[t] % heads;
    const int64_t first = offsets[i], L = offsets[i + 1] - first, n = keys[i];
    const float* q = base + first * 3 * d + h * hd;
    float* out_rows = context + first * d + h * hd;
    if (n == 0) {
      for (int64_t r = 0; r < L; ++r) std::fill(out_rows + r * d, out_rows + r * d + hd, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    scores.resize(static_cast<size_t>(L * n));
    sgemm('T', L, n, hd, scale, q, 3 * d, q + d, 3 * d, scores.data(), n);  // q k^T / sqrt(hd)
    for (int64_t r = 0; r < L; ++r) {
      float* row = scores.data() + r * n;
      const float top = fold_row<float>(row, n, NanMax{});
      for (int64_t j = 0; j < n; ++j) row[j] -= top;
      exp_f32(row, row, n);
      const float inverse = 1.0f / sum_row<float>(row, n);
      for (int64_t j = 0; j < n; ++j) row[j] *= inverse;
    }
    sgemm('N', L, hd, n, 1.0f, scores.data(), n, q + 2 * d, 3 * d, out_rows, d);  // weights @ v
  };
  const int threads = flops < 4e6 ? 1 : intra_op_threads();
  if (threads <= 1) {
    OneThreadOutsideRegions one_thread;
    std::vector<float> scores;
    for (int64_t t = 0; t < count; ++t) run_task(t, scores);
    return {out.to(dtype)};
  }
  apply_intra_op_threads();
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < count; ++t) run_task(t, scores);
  }
  return {out.to(dtype)};
}

const OpRegistrar packed_attention_kernel{"packed_attention", DeviceType::cpu, packed_attention_cpu};

}  // namespace
}  // namespace troupe
