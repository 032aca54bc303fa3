#pragma once
// The elementwise reductions collectives apply to contiguous buffers (internal to net/).
//
//   reduce_buffers(acc, acc, incoming, n, DType::f32, ReduceOp::sum);  // acc[i] += incoming[i]
//   divide_buffer(acc, n, DType::f32, world);                          // the avg's final step
#include <cstddef>

#include "devices/dtype.h"
#include "net/frame.h"

namespace troupe::net::collectives {

// Whether op can reduce dtype: every op on the numeric dtypes, max/min on bool, avg on floats.
bool reduction_supports(DType dtype, ReduceOp op);

// out[i] = a[i] op b[i] for n elements; out may be a or b. avg reduces as sum (scale afterwards).
// f16 and bf16 are computed in f32 and rounded once per call. max/min propagate NaN.
void reduce_buffers(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op);

// The same, then divided by divisor (avg's last step; 1: not divided), into an out that is neither
// a nor b and will not be read again soon (a large result): streaming stores skip reading out's
// lines first. Falls back to reduce_buffers when out is not 64-byte aligned or the CPU has no
// AVX-512.
void reduce_buffers_streaming(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op,
                              int divisor = 1);

// data[i] /= divisor, in the dtype's precision (f16/bf16 via f32); floating dtypes only.
void divide_buffer(void* data, size_t n, DType dtype, int divisor);

}  // namespace troupe::net::collectives
