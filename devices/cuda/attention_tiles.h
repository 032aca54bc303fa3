#pragma once
// How the cuda packed_attention shares its work out without the host reading the offsets (they live
// on the device, and reading them would wait for the stream): the grid covers the packed rows in
// tiles of a fixed height, one block per (tile, head), and each block finds the sequences its tile
// holds by a binary search over the offsets. A tile that straddles sequences is computed one
// sequence at a time; a row past the last is never computed. Host and device share these functions,
// so the host tests check the same walk the kernels make.
//
//   for_each_tile_segment(offsets, sequences, tile_begin, tile_end,
//                         [&](int64_t s, int64_t begin, int64_t end) { /* rows [begin, end) of s */ });
#include <cstdint>

#ifdef __CUDACC__
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

namespace troupe::cuda {

// The sequence holding packed row `row` (offsets[0] <= row < offsets[sequences]): the last s with
// offsets[s] <= row, so that the empty sequences before it, which share its start, are passed over.
TROUPE_HOST_DEVICE inline int64_t sequence_of_row(const int64_t* offsets, int64_t sequences, int64_t row) {
  int64_t lo = 0, hi = sequences - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The keys sequence s attends to: key_lengths[s] (when given) clamped to its length. The host does
// not validate device offsets or key lengths, so a bad one must still stay inside the sequence.
TROUPE_HOST_DEVICE inline int64_t keys_of(const int64_t* offsets, const int64_t* key_lengths, int64_t s) {
  const int64_t length = offsets[s + 1] - offsets[s];
  const int64_t n = key_lengths ? key_lengths[s] : length;
  return n < 0 ? 0 : (n > length ? length : n);
}

// Calls fn(s, begin, end) for each sequence s with rows in [tile_begin, tile_end), in order, with
// the rows [begin, end) of s inside the tile. Every thread of a block walks the same segments, so a
// kernel may synchronise its block inside fn.
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class Fn>
TROUPE_HOST_DEVICE void for_each_tile_segment(const int64_t* offsets, int64_t sequences, int64_t tile_begin,
                                              int64_t tile_end, Fn&& fn) {
  for (int64_t s = sequence_of_row(offsets, sequences, tile_begin); s < sequences && offsets[s] < tile_end; ++s) {
    const int64_t begin = offsets[s] > tile_begin ? offsets[s] : tile_begin;
    const int64_t end = offsets[s + 1] < tile_end ? offsets[s + 1] : tile_end;
    if (begin < end) fn(s, begin, end);
  }
}

// Which kernel computes a call. Tensor cores (mma.sync bf16 -> f32) take bf16 heads of 64 or 128
// columns (XLM-R's and BERT's 64) when qkv starts on a 16-byte boundary (its rows, 3 x heads x 64
// bf16 long, then do too), which their 16-byte copies into shared memory need; every other call (f32, other head widths up to 256) goes to the
// f32 FMA kernel tiled through shared memory, which reads and writes either dtype.
enum class AttentionKernel { tensor_cores_64, tensor_cores_128, tiled_fma };

inline AttentionKernel attention_kernel_for(bool bf16, int64_t head_dim, uintptr_t qkv_address) {
  const bool aligned = qkv_address % 16 == 0;
  if (bf16 && aligned && head_dim == 64) return AttentionKernel::tensor_cores_64;
  if (bf16 && aligned && head_dim == 128) return AttentionKernel::tensor_cores_128;
  return AttentionKernel::tiled_fma;
}

}  // namespace troupe::cuda
