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
// keys, packing them first took 13% of the time. A task's arithmetic does not depend on the
// thread count. Rows whose key_lengths is 0 attend to nothing: NaN, as a softmax over keys all
// masked gives.
//
// The GEMMs are the packed ones linear uses, the head's keys and values packed once per task:
// oneDNN's sgemm was slower at these shapes (k = 64, or 250 keys): with the faster row maximum and
// exp of this change, the XLM-R-shaped encoder's attention (24 layers, lengths 4, 5, 250) went
// from 115 to 92 ms on an AMD EPYC Zen 3 (AVX2, 2 threads).
//
// qkv may be bf16 (the bf16 encoder's projection): the context is then bf16 too, computed here in
// f32 from the widened qkv and rounded once at the end, the contract the cuda kernel keeps with f32
// accumulation on tensor cores. Each task widens its head's rows into its own buffer and rounds its
// context from another: widening the whole qkv first sent it through memory twice more.
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

// One head of one sequence: context = softmax(q k^T * scale) v for L queries over n keys, q's row r
// at q + r * ldq and the keys' and values' columns `part` and 2 * part after q's. scores (L rows,
// ld apart) and inverse_sums (L) are the caller's buffers.
void attend(int64_t L, int64_t n, int64_t hd, const float* q, int64_t ldq, int64_t part, float scale, float* scores,
            int64_t ld, float* inverse_sums, float* context, int64_t ldc) {
  const PackedWeight keys_packed(q + part, n, hd, ldq);  // C = q @ k^T: k is W
  gemm_packed_f32(L, q, ldq, keys_packed, 0.0f, scores, ld, nullptr, ARead::in_place);
  // softmax(scores * scale), its division by the row's sum left to the context rows (hd values,
  // not n): the scale is positive, so the maximum is the same before and after it.
  for (int64_t r = 0; r < L; ++r) {
    float* row = scores + r * ld;
    exp_shifted_f32(row, row, n, fold_row<float>(row, n, NanMax{}), scale);
    inverse_sums[r] = 1.0f / sum_row<float>(row, n);
  }
  const PackedWeight values_packed = PackedWeight::from_transposed(q + 2 * part, hd, n, ldq);  // C = P @ v
  gemm_packed_f32(L, scores, ld, values_packed, 0.0f, context, ldc, nullptr, ARead::in_place);
  for (int64_t r = 0; r < L; ++r)
    for (int64_t j = 0; j < hd; ++j) context[r * ldc + j] *= inverse_sums[r];
}

std::vector<Tensor> packed_attention_cpu(const OpCall& c) {
  const DType dtype = c.inputs[0].dtype();
  const bool bf16 = dtype == DType::bf16;
  const Tensor qkv = bf16 ? c.inputs[0].contiguous() : c.inputs[0].to(DType::f32).contiguous();
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

  Tensor out = Tensor::empty({rows, d}, bf16 ? DType::bf16 : DType::f32);
  const float* qkv_f32 = bf16 ? nullptr : qkv.data<float>();
  const BFloat16* qkv_bf16 = bf16 ? qkv.data<BFloat16>() : nullptr;
  float* out_f32 = bf16 ? nullptr : out.mutable_data<float>();
  BFloat16* out_bf16 = bf16 ? out.mutable_data<BFloat16>() : nullptr;
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
    // Rows of scores a multiple of 1 KiB apart would share L1 sets when the tiles read them.
    const int64_t ld = n % 256 == 0 ? n + 16 : n;
    buffer.resize(static_cast<size_t>(L * ld + L + (bf16 ? 4 * L * hd : 0)));
    float* scores = buffer.data();
    float* inverse_sums = scores + L * ld;
    // q's row r at q + r * ldq, its keys' and values' columns `part` and 2 * part further.
    const float* q;
    int64_t ldq, part;
    float* out_rows;  // the context's row r at out_rows + r * ldo
    int64_t ldo;
    if (bf16) {
      float* wide = inverse_sums + L;
      const BFloat16* from = qkv_bf16 + first * 3 * d + h * hd;
      for (int64_t r = 0; r < L; ++r)
        for (int64_t k = 0; k < 3; ++k)
          for (int64_t j = 0; j < hd; ++j) wide[(r * 3 + k) * hd + j] = float(from[r * 3 * d + k * d + j]);
      q = wide, ldq = 3 * hd, part = hd;
      out_rows = wide + 3 * L * hd, ldo = hd;
    } else {
      q = qkv_f32 + first * 3 * d + h * hd, ldq = 3 * d, part = d;
      out_rows = out_f32 + first * d + h * hd, ldo = d;
    }
    if (n == 0)
      for (int64_t r = 0; r < L; ++r) std::fill(out_rows + r * ldo, out_rows + r * ldo + hd, std::numeric_limits<float>::quiet_NaN());
    else
      attend(L, n, hd, q, ldq, part, scale, scores, ld, inverse_sums, out_rows, ldo);
    if (bf16) {
      BFloat16* to = out_bf16 + first * d + h * hd;
      for (int64_t r = 0; r < L; ++r)
        for (int64_t j = 0; j < hd; ++j) to[r * d + j] = BFloat16(out_rows[r * hd + j]);
    }
  };
  const int threads = flops < 4e6 ? 1 : intra_op_threads();
  if (threads <= 1) {
    OneThreadPerProduct one_thread;
    std::vector<float> buffer;
    for (int64_t t = 0; t < count; ++t) run_task(t, buffer);
    return {out};
  }
  apply_intra_op_threads();
#pragma omp parallel num_threads(threads)
  {
    OneThreadPerProduct one_thread;
    std::vector<float> buffer;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < count; ++t) run_task(t, buffer);
  }
  return {out};
}

const OpRegistrar packed_attention_kernel{"packed_attention", DeviceType::cpu, packed_attention_cpu};

}  // namespace
}  // namespace troupe
