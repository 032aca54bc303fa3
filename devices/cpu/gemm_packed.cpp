#include "devices/cpu/gemm_packed.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "devices/cpu/gemm_tiles.h"
#include "devices/error.h"
#include "devices/host_allocator.h"
#include "devices/threads.h"

namespace troupe {

namespace {

constexpr int kMaxRows = GemmTiles::kMaxRows;

const GemmTiles& tiles_for(CpuIsa isa) { return isa >= CpuIsa::avx512 ? gemm_tiles_avx512 : gemm_tiles_avx2; }

void check_packed_sizes(const char* op, int64_t n, int64_t k, int64_t ld, const char* ld_name) {
  if (n < 0 || k < 0 || ld < std::max<int64_t>(1, k))
    throw ValueError(std::string(op) + ": bad sizes n=" + std::to_string(n) + " k=" + std::to_string(k) + " " +
                     ld_name + "=" + std::to_string(ld));
}

// The rows of A cut into tiles of equal height (50 rows: 5 x 6 + 4 x 5, not 8 x 6 + 2), so that
// no tile runs at a fraction of the width.
struct RowTiles {
  int64_t m, count;
  explicit RowTiles(int64_t rows) : m(rows), count((rows + kMaxRows - 1) / kMaxRows) {}
  int64_t first_row(int64_t t) const { return t * (m / count) + std::min(t, m % count); }
  int64_t height(int64_t t) const { return m / count + (t < m % count ? 1 : 0); }
};

// A's rows of tiles [t0, t1) packed tile by tile, k-major inside a tile (element (r, p) of tile t
// at first_row(t) * k + p * height(t) + r): a tile reads its rows' next values from one line
// instead of six rows that, a power of two apart, would share the same few L1 sets.
void pack_rows(const RowTiles& tiles, int64_t t0, int64_t t1, const float* a, int64_t lda, int64_t k, float* out) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t row = tiles.first_row(t), height = tiles.height(t);
    float* to = out + row * k;
    for (int64_t r = 0; r < height; ++r) {
      const float* from = a + (row + r) * lda;
      for (int64_t p = 0; p < k; ++p) to[p * height + r] = from[p];
    }
  }
}

// A as the tiles read it: packed by pack_rows (lda 0), or row-major where it lies, lda apart.
struct TileRows {
  const float* a;
  int64_t lda;
};

// Tiles [t0, t1) by panels [p0, p1): k blocks outermost (C accumulates across them), then blocks
// of tiles (their packed A stays in L2), then panels, then the tiles of the block (the panel's
// slice stays near the core). While a block's tiles pass one slice, they fetch the next one in
// shares, a line every 2^shift steps: the panels stream from memory (the LSTM's recurrent weights
// are 16 MiB each) and the first tile on a slice would otherwise wait for it.
void product_block(const GemmTiles& kernel, const RowTiles& tiles, int64_t t0, int64_t t1, int64_t p0, int64_t p1,
                   TileRows a, const PackedWeight& w, float beta, const float* bias, float* c, int64_t ldc) {
  const int64_t k = w.k(), n = w.n(), width = kernel.width;
  const int64_t kc = kernel.kc, tiles_per_block = std::max<int64_t>(1, kernel.mc / kMaxRows);
  for (int64_t k0 = 0; k0 < k; k0 += kc) {
    const int64_t kn = std::min(kc, k - k0);
    // The first block scales C by beta (beta 0: C is not read) and adds the bias; later ones
    // accumulate onto it.
    const bool load_c = k0 > 0 || beta != 0.0f;
    const float scale = k0 > 0 ? 1.0f : beta;
    const float* block_bias = k0 > 0 ? nullptr : bias;
    for (int64_t b0 = t0; b0 < t1; b0 += tiles_per_block) {
      const int64_t b1 = std::min(t1, b0 + tiles_per_block);
      const int64_t count = b1 - b0;
      const int shift = count >= 8 ? 3 : count >= 4 ? 2 : count >= 2 ? 1 : 0;
      const int64_t share = ((kn * width / 16) >> shift) * 16;  // each tile's floats of the next slice
      for (int64_t p = p0; p < p1; ++p) {
        const float* b = w.panel(p) + k0 * width;
        const float* next = (p + 1 < p1 ? w.panel(p + 1) : w.panel(p0)) + k0 * width;
        const int64_t cols = std::min(width, n - p * width);
        for (int64_t t = b0; t < b1; ++t) {
          const int64_t row = tiles.first_row(t), height = tiles.height(t);
          const int64_t part = std::min<int64_t>(t - b0, (int64_t{1} << shift) - 1);
          const float* rows = a.lda ? a.a + row * a.lda + k0 : a.a + row * k + k0 * height;
          (a.lda ? kernel.tile_in_place : kernel.tile)[height](kn, rows, a.lda, b, c + row * ldc + p * width, ldc,
                                                               cols, load_c, scale,
                                                               block_bias ? block_bias + p * width : nullptr,
                                                               next + part * share, shift);
        }
      }
    }
  }
}

// The 8x8 block of src at (row j, column i) stored transposed at dst[i * ldd + j]: eight rows in
// registers, interleaved by pairs, then by fours, then by halves.
void transpose_8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8], t[8], s[8];
  for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(src + q * lds);
  for (int q = 0; q < 8; q += 2) {
    t[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);  // columns 0, 1 | 4, 5 of rows q, q + 1
    t[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);  // columns 2, 3 | 6, 7
  }
  for (int q = 0; q < 8; q += 4) {
    s[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);  // column 0 | 4 of four rows
    s[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xee);  // column 1 | 5
    s[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);  // column 2 | 6
    s[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xee);  // column 3 | 7
  }
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(dst + q * ldd, _mm256_permute2f128_ps(s[q], s[q + 4], 0x20));
    _mm256_storeu_ps(dst + (q + 4) * ldd, _mm256_permute2f128_ps(s[q], s[q + 4], 0x31));
  }
}

// dst[i * ldd + j] = src[j * lds + i] for j < rows, i < cols: W's rows into a panel's columns.
// By 8x8 blocks in registers: one element at a time, a weight's packing took 11% of attention.
void transpose_into(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int64_t j = 0; j < rows8; j += 8)
    for (int64_t i = 0; i < cols8; i += 8) transpose_8x8(src + j * lds + i, lds, dst + i * ldd + j, ldd);
  for (int64_t j = 0; j < rows; ++j)  // the edges: the last columns of every row, every column of the last rows
    for (int64_t i = j < rows8 ? cols8 : 0; i < cols; ++i) dst[i * ldd + j] = src[j * lds + i];
}

// The calling thread's buffer for packed rows, grown to the largest product it ran and kept: a
// fresh one per call would fault its pages in again every time.
struct RowsBuffer {
  float* data = nullptr;
  size_t floats = 0;
  ~RowsBuffer() {
    if (data) host_deallocate(data, floats * sizeof(float));
  }
};

float* packed_rows_buffer(size_t floats) {
  thread_local RowsBuffer buffer;
  if (buffer.floats < floats) {
    if (buffer.data) host_deallocate(buffer.data, buffer.floats * sizeof(float));
    buffer.data = nullptr;
    buffer.floats = 0;
    buffer.data = static_cast<float*>(host_allocate(floats * sizeof(float)));
    buffer.floats = floats;
  }
  return buffer.data;
}

}  // namespace

PackedWeight::PackedWeight(int64_t n, int64_t k, CpuIsa isa)
    : n_(n), k_(k), isa_(isa), width_(tiles_for(isa).width), panels_((n + width_ - 1) / width_) {
  if (isa > cpu_isa_detected())
    throw ValueError(std::string("PackedWeight: packed for ") + cpu_isa_name(isa) + ", but this CPU offers " +
                     cpu_isa_name(cpu_isa_detected()) + " at most");
  data_ = Tensor::empty({panels_ * k_ * width_});
}

PackedWeight::PackedWeight(const float* w, int64_t n, int64_t k, int64_t ldw, CpuIsa isa)
    : PackedWeight((check_packed_sizes("PackedWeight", n, k, ldw, "ldw"), n), k, isa) {
  float* out = data_.mutable_data<float>();
  for (int64_t p = 0; p < panels_; ++p) {
    const int64_t cols = std::min(width_, n - p * width_);
    float* panel = out + p * k * width_;
    if (cols < width_) std::memset(panel, 0, sizeof(float) * k * width_);
    transpose_into(w + p * width_ * ldw, ldw, cols, k, panel, width_);
  }
}

PackedWeight PackedWeight::from_transposed(const float* wt, int64_t n, int64_t k, int64_t ldwt, CpuIsa isa) {
  if (n < 0 || k < 0 || ldwt < std::max<int64_t>(1, n))
    throw ValueError("PackedWeight::from_transposed: bad sizes n=" + std::to_string(n) + " k=" + std::to_string(k) +
                     " ldwt=" + std::to_string(ldwt));
  PackedWeight packed(n, k, isa);
  float* out = packed.data_.mutable_data<float>();
  const int64_t width = packed.width_;
  for (int64_t p = 0; p < packed.panels_; ++p) {
    const int64_t cols = std::min(width, n - p * width);
    float* panel = out + p * k * width;
    // A panel's row i is W^T's row i, columns [p * width, p * width + cols): a copy.
    for (int64_t i = 0; i < k; ++i) {
      std::memcpy(panel + i * width, wt + i * ldwt + p * width, sizeof(float) * cols);
      if (cols < width) std::memset(panel + i * width + cols, 0, sizeof(float) * (width - cols));
    }
  }
  return packed;
}

void gemm_packed_f32(int64_t m, const float* a, int64_t lda, const PackedWeight& w, float beta, float* c,
                     int64_t ldc, const float* bias, ARead read) {
  const int64_t n = w.n(), k = w.k();
  if (m < 0) throw ValueError("gemm_packed_f32: negative m=" + std::to_string(m));
  check_packed_sizes("gemm_packed_f32", n, k, lda, "lda");
  if (ldc < std::max<int64_t>(1, n))
    throw ValueError("gemm_packed_f32: ldc=" + std::to_string(ldc) + " too small for n=" + std::to_string(n));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]) + (bias ? bias[j] : 0.0f);
    return;
  }
  const GemmTiles& kernel = tiles_for(w.isa());
  const RowTiles tiles(m);
  const bool pack = read == ARead::packed;
  float* packed_a = pack ? packed_rows_buffer(static_cast<size_t>(m) * static_cast<size_t>(k)) : nullptr;
  const TileRows rows = pack ? TileRows{packed_a, 0} : TileRows{a, lda};
  // Threads take chunks in turn: on a shared machine a descheduled thread holds up only its
  // current chunk, not a fixed half of the product (a static split made the 2-thread recurrence
  // slower than 1 thread while other processes ran). Chunks are groups of panels, or groups of
  // row tiles when there are few panels; either way each element sums over k in the same order,
  // so results do not depend on the thread count. Products under ~4 MFLOP stay on one thread.
  const int64_t panels = w.panels();
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const int threads = flops < 4e6 ? 1 : intra_op_threads();
  const bool by_panels = panels >= 2 * threads;
  const int64_t units = by_panels ? panels : tiles.count;
  const int64_t chunks = std::min<int64_t>(units, 8 * threads);
  if (threads <= 1 || chunks < 2) {
    if (pack) pack_rows(tiles, 0, tiles.count, a, lda, k, packed_a);
    product_block(kernel, tiles, 0, tiles.count, 0, panels, rows, w, beta, bias, c, ldc);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    if (pack) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles.count; ++t) pack_rows(tiles, t, t + 1, a, lda, k, packed_a);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < chunks; ++i) {
      const int64_t begin = units * i / chunks, end = units * (i + 1) / chunks;
      if (by_panels)
        product_block(kernel, tiles, 0, tiles.count, begin, end, rows, w, beta, bias, c, ldc);
      else
        product_block(kernel, tiles, begin, end, 0, panels, rows, w, beta, bias, c, ldc);
    }
  }
}

const char* gemm_packed_kernel() { return tiles_for(cpu_isa()).name; }

// ---- The cache of packed weights ----

namespace {

WeightCache<PackedWeight>& packed_cache() {
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
  const int64_t width = tiles_for(cpu_isa()).width;
  const size_t bytes = static_cast<size_t>((n + width - 1) / width * k * width) * sizeof(float);
  return packed_cache().get(w, when, bytes, [&] {
    const bool rows_readable = w.strides()[1] == 1 && (n <= 1 || w.strides()[0] >= k);
    const Tensor rows = rows_readable ? w : w.contiguous();
    const int64_t ldw = n <= 1 ? std::max<int64_t>(1, k) : rows.strides()[0];
    return std::make_shared<const PackedWeight>(rows.data<float>(), n, k, ldw);
  });
}

size_t packed_weight_cache_bytes() { return packed_cache().bytes(); }
void clear_packed_weight_cache() { packed_cache().clear(); }

}  // namespace troupe
