// gather_nd: ONNX GatherND. With b = batch_dims and m = indices.shape[-1], each index row
// indices[i_0..i_{q-2}, :] addresses dims b..b+m-1 of data within batch (i_0..i_{b-1}), and the
// slice data[batch, row, ...] lands at out[i_0..i_{q-2}, ...]:
//
//   out.shape = indices.shape[:-1] + data.shape[b + m:]
//
// Two passes: the first checks every index and turns each row into the element offset of its
// slice, so the second is pure copying (one copy per row when the slice is contiguous in data,
// which it is for any contiguous data). The copy is memory-bound: a large one is split over the
// intra-op threads (the actor runtime's budget: a forked task gets its share), and writes whole
// cache lines with streaming stores, which skip reading the output's lines first (4096 rows of
// 1 KiB: 357 us on one thread with memcpy, 132 us on two streaming).
#include <algorithm>
#include <cstring>

#include <immintrin.h>

#include "devices/registry.h"
#include "devices/threads.h"

namespace troupe {
namespace {

// "[2,0,1]": the multi-index of element `flat` of a row-major tensor of this shape.
std::string position(const Shape& shape, int64_t flat) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return to_string(index);
}

// Storage offset (in elements) of the slice each index row picks; IndexError for an index
// outside [-n, n) of its dim (negative ones wrap).
std::vector<int64_t> slice_offsets(const Tensor& data, const Tensor& indices, int64_t b) {
  const std::vector<int64_t> idx = indices.to_vector<int64_t>();
  const int64_t m = indices.shape().back();
  const int64_t rows = static_cast<int64_t>(idx.size()) / m;
  int64_t batches = 1;
  for (int64_t d = 0; d < b; ++d) batches *= indices.shape()[d];
  const Shape& size = data.shape();
  const Strides& stride = data.strides();
  std::vector<int64_t> offsets(static_cast<size_t>(rows));
  if (rows == 0) return offsets;
  const int64_t rows_per_batch = rows / batches;
  for (int64_t batch = 0; batch < batches; ++batch) {
    int64_t base = data.offset();
    for (int64_t d = b - 1, rest = batch; d >= 0; --d) {
      base += (rest % size[d]) * stride[d];
      rest /= size[d];
    }
    for (int64_t row = batch * rows_per_batch; row < (batch + 1) * rows_per_batch; ++row) {
      int64_t offset = base;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t n = size[b + j];
        int64_t i = idx[row * m + j];
        if (i < -n || i >= n)
          throw IndexError("gather_nd: index " + std::to_string(i) + " at indices" +
                           position(indices.shape(), row * m + j) + " is out of range for dim " +
                           std::to_string(b + j) + " of size " + std::to_string(n) + " (data " + data.meta().str() +
                           ")");
        if (i < 0) i += n;
        offset += i * stride[b + j];
      }
      offsets[row] = offset;
    }
  }
  return offsets;
}

// Whether the trailing dims (shape, strides) are laid out contiguously.
bool dense(const Shape& shape, const Strides& strides) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// One element per row: fixed-size copies the compiler inlines instead of a memcpy call each.
template <size_t Bytes>
void gather_elements(const char* base, const std::vector<int64_t>& offsets, char* out) {
  for (int64_t offset : offsets) {
    std::memcpy(out, base + offset * static_cast<int64_t>(Bytes), Bytes);
    out += Bytes;
  }
}

// dst[row] = the slice_bytes at base + offsets[row] * item, for every row.
void copy_rows(const char* base, const std::vector<int64_t>& offsets, size_t item, size_t slice_bytes, char* dst) {
  const int64_t rows = static_cast<int64_t>(offsets.size());
  const size_t total = slice_bytes * offsets.size();
  const int threads = total < (size_t(1) << 20) ? 1 : intra_op_threads();
  // Streaming stores when every row starts on a cache line and the output outgrows the caches
  // that would keep it for its reader anyway. AVX2's 32-byte stores, two per line, fill the same
  // write-combining buffer as one AVX-512 store (the baseline every CPU of this build has).
  const bool stream = total >= (size_t(2) << 20) && slice_bytes % 64 == 0 && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
  apply_intra_op_threads();
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const char* from = base + offsets[row] * static_cast<int64_t>(item);
      char* to = dst + row * static_cast<int64_t>(slice_bytes);
      if (stream) {
        for (size_t b = 0; b < slice_bytes; b += 32)
          _mm256_stream_si256(reinterpret_cast<__m256i*>(to + b),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + b)));
        continue;
      }
      std::memcpy(to, from, slice_bytes);
    }
    if (stream) _mm_sfence();  // each thread's streamed lines are visible before the tensor is handed on
  }
}

std::vector<Tensor> gather_nd_cpu(const OpCall& c) {
  const Tensor& data = c.inputs[0];
  const int64_t b = c.attrs.get<int64_t>("batch_dims");
  const std::vector<int64_t> offsets = slice_offsets(data, c.inputs[1], b);
  const TensorMeta& meta = c.outputs[0];
  Tensor out = Tensor::empty(meta.shape, meta.dtype);
  if (out.numel() == 0) return {out};

  const int64_t first = b + c.inputs[1].shape().back();  // the first dim a slice keeps
  const Shape slice_shape(data.shape().begin() + first, data.shape().end());
  const Strides slice_strides(data.strides().begin() + first, data.strides().end());
  const size_t item = itemsize(data.dtype());
  const size_t slice_bytes = static_cast<size_t>(numel(slice_shape)) * item;
  const auto* base = static_cast<const char*>(data.storage()->data());
  auto* dst = static_cast<char*>(out.mutable_raw_data());

  if (numel(slice_shape) == 1) {
    switch (item) {
      case 1: gather_elements<1>(base, offsets, dst); return {out};
      case 2: gather_elements<2>(base, offsets, dst); return {out};
      case 4: gather_elements<4>(base, offsets, dst); return {out};
      case 8: gather_elements<8>(base, offsets, dst); return {out};
    }
  }
  if (dense(slice_shape, slice_strides)) {
    copy_rows(base, offsets, item, slice_bytes, dst);
  } else {  // a strided view of data: each slice through the strided copy loop
    for (int64_t offset : offsets) {
      copy_elements(Tensor(data.storage(), data.dtype(), slice_shape, slice_strides, offset), data.dtype(), dst);
      dst += slice_bytes;
    }
  }
  return {out};
}

const OpRegistrar gather_nd_kernel{"gather_nd", DeviceType::cpu, gather_nd_cpu};

}  // namespace
}  // namespace troupe
