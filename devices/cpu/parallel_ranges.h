#pragma once
// Splitting a large elementwise or row-wise pass over the intra-op threads (threads.h), one
// contiguous range each; small passes stay on the calling thread, where a fork-join costs more
// than it saves. Each item is computed by the same code whatever the split, so results do not
// depend on the thread count.
//
//   parallel_ranges(n, /*min_per_thread=*/1 << 16, /*align=*/64,
//                   [&](int64_t begin, int64_t end) { gelu_f32(x + begin, y + begin, end - begin); });
#include <algorithm>
#include <cstdint>

#include "devices/threads.h"

namespace troupe {

template <class F>
void parallel_ranges(int64_t n, int64_t min_per_thread, int64_t align, F f) {
  const int64_t most = std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread));
  const int threads = static_cast<int>(std::min<int64_t>(intra_op_threads(), most));
  if (threads <= 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  apply_intra_op_threads();
  const int64_t chunk = ((n + threads - 1) / threads + align - 1) / align * align;  // threads * chunk >= n
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) f(begin, end);
  }
}

}  // namespace troupe
