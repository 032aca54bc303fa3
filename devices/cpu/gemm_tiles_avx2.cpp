// The packed GEMM's AVX2 tiles: up to 6 rows x 16 columns, 12 accumulators + 2 panel registers +
// 1 broadcast of the 16 ymm registers. The accumulators are named variables, not an array: GCC
// kept an array's members in registers but also stored them to the stack on every step.
#include <immintrin.h>

#include "devices/cpu/gemm_tiles.h"

namespace troupe {

namespace avx2_tiles {

constexpr int64_t W = 16;

#define TROUPE_AVX2 [[gnu::target("avx2,fma")]]

// Row r's two accumulators += A[r][p] * the panel's row p.
#define ROW_STEP(r)                                                               \
  if constexpr (MR > r) {                                                         \
    const __m256 x = _mm256_broadcast_ss(kInPlace ? a + r * lda + p : a + q + r); \
    acc##r##0 = _mm256_fmadd_ps(x, b0, acc##r##0);                                \
    acc##r##1 = _mm256_fmadd_ps(x, b1, acc##r##1);                                \
  }

template <int MR, bool kInPlace>
TROUPE_AVX2 void tile(int64_t kn, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t cols, bool load_c,
                      float scale, const float* bias, const float* next, int next_shift) {
  // C's lines are fetched while the products run: they are cold (other panels and k blocks
  // wrote them last), and a tile stalled on them at its end would idle the FMA units.
  for (int r = 0; r < MR; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + W - 1), _MM_HINT_T0);
  }
  __m256 acc00 = _mm256_setzero_ps(), acc01 = acc00, acc10 = acc00, acc11 = acc00, acc20 = acc00, acc21 = acc00,
         acc30 = acc00, acc31 = acc00, acc40 = acc00, acc41 = acc00, acc50 = acc00, acc51 = acc00;
  for (int64_t p = 0; p < kn; ++p) {
    const __m256 b0 = _mm256_load_ps(b + p * W), b1 = _mm256_load_ps(b + p * W + 8);
    const int64_t q = p * MR;
    _mm_prefetch(reinterpret_cast<const char*>(next + ((p >> next_shift) << 4)), _MM_HINT_T0);
    ROW_STEP(0)
    ROW_STEP(1)
    ROW_STEP(2)
    ROW_STEP(3)
    ROW_STEP(4)
    ROW_STEP(5)
  }
  const __m256 acc[6][2] = {{acc00, acc01}, {acc10, acc11}, {acc20, acc21},
                            {acc30, acc31}, {acc40, acc41}, {acc50, acc51}};
  const __m256 s = _mm256_set1_ps(scale);
  for (int r = 0; r < MR; ++r) {
    float* out = c + r * ldc;
    if (cols == W) {
      __m256 v0 = acc[r][0], v1 = acc[r][1];
      if (load_c) {
        v0 = _mm256_fmadd_ps(s, _mm256_loadu_ps(out), v0);
        v1 = _mm256_fmadd_ps(s, _mm256_loadu_ps(out + 8), v1);
      }
      if (bias) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(bias));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(bias + 8));
      }
      _mm256_storeu_ps(out, v0);
      _mm256_storeu_ps(out + 8, v1);
    } else {  // the last panel of a weight whose n is no multiple of 16
      alignas(32) float row[W];
      _mm256_store_ps(row, acc[r][0]);
      _mm256_store_ps(row + 8, acc[r][1]);
      for (int64_t j = 0; j < cols; ++j)
        out[j] = (load_c ? row[j] + scale * out[j] : row[j]) + (bias ? bias[j] : 0.0f);
    }
  }
}

#undef ROW_STEP
#undef TROUPE_AVX2

}  // namespace avx2_tiles

// kc 1024: fewer passes over C and calls of the tiles beat keeping the panel's slice in L1 (64 KiB
// of it stay in L2); mc 96: the block's packed A (384 KiB) stays in L2 beside it. Medians of 60
// runs interleaved, 1 thread, AMD EPYC Zen 3 (FMA peak 94 GFLOP/s), [50 x 1024] @ [1024 x 4096]:
// kc 256: 59-74 GFLOP/s, 512: 64-76, 1024: 68-79; [2500 x 1024] @ [1024 x 4096]: kc 512: 78-84,
// 1024: 81-82.
const GemmTiles gemm_tiles_avx2{
    "avx2 6x16", avx2_tiles::W, 1024, 96,
    {nullptr, avx2_tiles::tile<1, false>, avx2_tiles::tile<2, false>, avx2_tiles::tile<3, false>,
     avx2_tiles::tile<4, false>, avx2_tiles::tile<5, false>, avx2_tiles::tile<6, false>},
    {nullptr, avx2_tiles::tile<1, true>, avx2_tiles::tile<2, true>, avx2_tiles::tile<3, true>,
     avx2_tiles::tile<4, true>, avx2_tiles::tile<5, true>, avx2_tiles::tile<6, true>}};

}  // namespace troupe
