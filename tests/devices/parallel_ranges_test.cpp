#include <catch2/catch.hpp>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "devices/cpu/gemm.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/threads.h"
#include "support/close.h"

using namespace troupe;

TEST_CASE("parallel_ranges covers every item exactly once, whatever n, grain and alignment", "[threads]") {
  const int previous = intra_op_threads();
  for (int threads : {1, 2, 3}) {
    set_intra_op_threads(threads);
    for (int64_t n : {0, 1, 63, 64, 127, 129, 259, 1000, 4097})
      for (int64_t align : {1, 64}) {
        INFO("threads " << threads << " n " << n << " align " << align);
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        parallel_ranges(n, 1, align, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)]++;
        });
        int64_t wrong = 0;
        for (auto& s : seen) wrong += s.load() != 1;
        CHECK(wrong == 0);
      }
  }
  set_intra_op_threads(previous);
}

// The ops that split their work: odd sizes above the split threshold, against the same op on
// slices small enough to run on one thread.
TEST_CASE("split elementwise ops and layer_norm give every row and element", "[threads]") {
  Generator generator(5);
  const Tensor x = rand_uniform({259, 1024}, -2, 2, DType::f32, generator);
  const Tensor y = rand_uniform({259, 1024}, -2, 2, DType::f32, generator);
  const Tensor w = rand_uniform({1024}, -1, 1, DType::f32, generator), b = rand_uniform({1024}, -1, 1, DType::f32, generator);
  const Tensor normed = layer_norm(x, {1024}, w, b, 1e-5), sums = add(x, y), activated = gelu(x);
  for (int64_t row : {0, 128, 129, 257, 258}) {
    INFO("row " << row);
    const Tensor one = x.slice(0, row, row + 1);
    check_close(normed.slice(0, row, row + 1), layer_norm(one, {1024}, w, b, 1e-5));
    check_close(sums.slice(0, row, row + 1), add(one, y.slice(0, row, row + 1)));
    check_close(activated.slice(0, row, row + 1), gelu(one));
  }
}

TEST_CASE("OpenBLAS's workers do not spin in a process that has not called it, and return for a parallel call",
          "[threads]") {
  const auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  };
  // Left running, the workers OpenBLAS starts as it loads spin on sched_yield for about 0.1 s.
  const double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(cpu_seconds() - before < 0.03);

  // A product large enough for OpenBLAS to split across the cores is still right.
  const int64_t n = 384;
  std::vector<double> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size()), expected(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>(i % 7) - 3;
    b[i] = static_cast<double>(i % 5) * 0.5;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < n; ++p)
      for (int64_t j = 0; j < n; ++j) expected[i * n + j] += a[i * n + p] * b[p * n + j];
  set_intra_op_threads(hardware_cores());
  gemm_f64(false, false, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
  CHECK(c == expected);  // small integers and halves: exact in double
}
