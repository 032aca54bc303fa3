#include "devices/cpu/gemm_packed.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "devices/error.h"
#include "devices/threads.h"

namespace troupe {

namespace {

constexpr int64_t NR = PackedWeight::kPanelWidth;
constexpr int kMaxRows = 6;  // rows per register tile: 6 x 4 accumulators + 4 panel registers
// k per block: a panel's block (kKc x 64 floats, 256 KiB) stays in L2 while every row tile of the
// block of rows uses it; C is read and written once per block. Measured on 1 thread (Zen 5, 219
// GFLOP/s peak), [50 x 1024] @ [1024 x 4096]: kKc 128: 190 GFLOP/s, 256: 201, 512: 211, 1024: 220;
// [2500 x 1024] @ [1024 x 4096]: 256: 202, 512 and 1024: 208.
constexpr int64_t kKc = 1024;
// Rows per block: their kKc-slice of A (384 KiB) stays in L2 with the panel block while the panels
// stream past (48, 96 and 192 measured the same).
constexpr int64_t kMc = 96;

void check_sizes(const char* op, int64_t n, int64_t k, int64_t ld, const char* ld_name) {
  if (n < 0 || k < 0 || ld < std::max<int64_t>(1, k))
    throw ValueError(std::string(op) + ": bad sizes n=" + std::to_string(n) + " k=" + std::to_string(k) + " " +
                     ld_name + "=" + std::to_string(ld));
}

// C[rows, 64] (masked to the columns that exist) = A[rows, kn] @ panel block (+ scale * C when
// load_c). The accumulators start at zero and C is added at the end, its lines prefetched first:
// starting from C would stall every tile on its (cold) cache lines.
#if defined(__AVX512F__)
template <int MR>
void tile(int64_t kn, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t cols, bool load_c,
          float scale) {
  __mmask16 mask[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t left = std::clamp<int64_t>(cols - 16 * j, 0, 16);
    mask[j] = static_cast<__mmask16>((1u << left) - 1);
  }
  if (load_c)
    for (int r = 0; r < MR; ++r)
      for (int64_t j = 0; 16 * j < cols; ++j) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * j), _MM_HINT_T0);
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kn; ++p) {
    const __m512 b0 = _mm512_load_ps(b + p * NR), b1 = _mm512_load_ps(b + p * NR + 16);
    const __m512 b2 = _mm512_load_ps(b + p * NR + 32), b3 = _mm512_load_ps(b + p * NR + 48);
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + p]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(x, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(x, b3, acc[r][3]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) {
      float* out = c + r * ldc + 16 * j;
      __m512 v = acc[r][j];
      if (load_c) v = _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(mask[j], out), v);
      _mm512_mask_storeu_ps(out, mask[j], v);
    }
}
#else
// Portable build: the same tile in plain loops (the compiler vectorises the 64 columns).
template <int MR>
void tile(int64_t kn, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t cols, bool load_c,
          float scale) {
  float acc[MR][NR] = {};
  for (int64_t p = 0; p < kn; ++p)
    for (int r = 0; r < MR; ++r)
      for (int64_t j = 0; j < NR; ++j) acc[r][j] += a[r * lda + p] * b[p * NR + j];
  for (int r = 0; r < MR; ++r)
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = load_c ? acc[r][j] + scale * c[r * ldc + j] : acc[r][j];
}
#endif

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t, bool, float);
constexpr TileFn tiles[kMaxRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// Rows [r0, r1) by panels [p0, p1): k blocks outermost (C accumulates across them), then blocks
// of rows, then panels, then row tiles. A block of rows is cut into tiles of equal height (50
// rows: 5 x 6 + 4 x 5, not 8 x 6 + 2) so that no tile runs at a fraction of the width.
void product_block(int64_t r0, int64_t r1, int64_t p0, int64_t p1, const float* a, int64_t lda,
                   const PackedWeight& w, float beta, float* c, int64_t ldc) {
  const int64_t k = w.k(), n = w.n();
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kn = std::min(kKc, k - k0);
    // The first block scales C by beta (beta 0: C is not read); later ones accumulate onto it.
    const bool load_c = k0 > 0 || beta != 0.0f;
    const float scale = k0 > 0 ? 1.0f : beta;
    for (int64_t i0 = r0; i0 < r1; i0 += kMc) {
      const int64_t rows = std::min(kMc, r1 - i0);
      const int64_t count = (rows + kMaxRows - 1) / kMaxRows;
      for (int64_t p = p0; p < p1; ++p) {
        const float* b = w.panel(p) + k0 * NR;
        const int64_t cols = std::min(NR, n - p * NR);
        int64_t row = i0;
        for (int64_t t = 0; t < count; ++t) {
          const int64_t height = rows / count + (t < rows % count ? 1 : 0);
          tiles[height](kn, a + row * lda + k0, lda, b, c + row * ldc + p * NR, ldc, cols, load_c, scale);
          row += height;
        }
      }
    }
  }
}

}  // namespace

PackedWeight::PackedWeight(const float* w, int64_t n, int64_t k, int64_t ldw)
    : n_(n), k_(k), panels_((n + NR - 1) / NR) {
  check_sizes("PackedWeight", n, k, ldw, "ldw");
  data_ = Tensor::empty({panels_ * k_ * NR});
  float* out = data_.mutable_data<float>();
  for (int64_t p = 0; p < panels_; ++p) {
    const int64_t cols = std::min(NR, n - p * NR);
    float* panel = out + p * k * NR;
    if (cols < NR) std::memset(panel, 0, sizeof(float) * k * NR);
    // Reading W row by row (unit stride) and scattering into the panel's column.
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = w + (p * NR + j) * ldw;
      for (int64_t i = 0; i < k; ++i) panel[i * NR + j] = src[i];
    }
  }
}

void gemm_packed_f32(int64_t m, const float* a, int64_t lda, const PackedWeight& w, float beta, float* c,
                     int64_t ldc) {
  const int64_t n = w.n(), k = w.k();
  if (m < 0) throw ValueError("gemm_packed_f32: negative m=" + std::to_string(m));
  check_sizes("gemm_packed_f32", n, k, lda, "lda");
  if (ldc < std::max<int64_t>(1, n))
    throw ValueError("gemm_packed_f32: ldc=" + std::to_string(ldc) + " too small for n=" + std::to_string(n));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // Threads take chunks in turn: on a shared machine a descheduled thread holds up only its
  // current chunk, not a fixed half of the product (a static split made the 2-thread recurrence
  // slower than 1 thread while other processes ran). Chunks are groups of panels, or blocks of
  // rows when there are few panels; either way each element sums over k in the same order, so
  // results do not depend on the thread count. Products under ~4 MFLOP stay on one thread.
  const int64_t panels = w.panels();
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const int threads = flops < 4e6 ? 1 : intra_op_threads();
  const bool by_panels = panels >= 2 * threads;
  const int64_t units = by_panels ? panels : (m + kMaxRows - 1) / kMaxRows;
  const int64_t chunks = std::min<int64_t>(units, 8 * threads);
  if (threads <= 1 || chunks < 2) {
    product_block(0, m, 0, panels, a, lda, w, beta, c, ldc);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t begin = units * i / chunks, end = units * (i + 1) / chunks;
    if (by_panels)
      product_block(0, m, begin, end, a, lda, w, beta, c, ldc);
    else
      product_block(begin * kMaxRows, std::min(m, end * kMaxRows), 0, panels, a, lda, w, beta, c, ldc);
  }
}

// ---- The cache of packed weights ----

namespace {

WeightCache<PackedWeight>& cache() {
  static auto* instance = new WeightCache<PackedWeight>;  // never destroyed: tasks may still run at exit
  return *instance;
}

}  // namespace

std::shared_ptr<const PackedWeight> packed_weight(const Tensor& w, PackWhen when) {
  if (!w.defined()) throw ValueError("packed_weight: the weight is undefined");
  if (w.dtype() != DType::f32) throw DTypeError("packed_weight: expects an f32 weight, got " + w.meta().str());
  if (w.dim() != 2) throw ShapeError("packed_weight: expects a 2-d weight [n, k], got " + w.meta().str());
  if (!w.device().is_cpu()) throw DeviceError("packed_weight: expects a host weight, got " + w.meta().str());
  const int64_t n = w.size(0), k = w.size(1);
  const size_t bytes = static_cast<size_t>((n + NR - 1) / NR * k * NR) * sizeof(float);
  return cache().get(w, when, bytes, [&] {
    const bool rows_readable = w.strides()[1] == 1 && (n <= 1 || w.strides()[0] >= k);
    const Tensor rows = rows_readable ? w : w.contiguous();
    const int64_t ldw = n <= 1 ? std::max<int64_t>(1, k) : rows.strides()[0];
    return std::make_shared<const PackedWeight>(rows.data<float>(), n, k, ldw);
  });
}

size_t packed_weight_cache_bytes() { return cache().bytes(); }
void clear_packed_weight_cache() { cache().clear(); }

}  // namespace troupe
