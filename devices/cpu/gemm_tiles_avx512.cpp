// The packed GEMM's AVX-512 tiles: up to 6 rows x 64 columns, 24 accumulators + 4 panel registers
// of the 32 zmm registers. Compiled for the baseline and marked avx512f, so the same binary runs
// on AVX2 CPUs, where the driver never calls these.
#include <immintrin.h>

#include <algorithm>

#include "devices/cpu/gemm_tiles.h"

namespace troupe {

namespace avx512_tiles {

constexpr int64_t W = 64;

// NV of the panel's four 16-column vectors: a panel's last columns, or a weight of few rows (an
// attention head's keys: the serving batch's short sentences), cost only the vectors they fill.
template <int MR, int NV, bool kInPlace>
[[gnu::target("avx512f")]] void tile_vectors(int64_t kn, const float* a, int64_t lda, const float* b, float* c,
                                             int64_t ldc, int64_t cols, bool load_c, float scale, const float* bias) {
  __mmask16 mask[NV];
  for (int j = 0; j < NV; ++j) {
    const int64_t left = std::clamp<int64_t>(cols - 16 * j, 0, 16);
    mask[j] = static_cast<__mmask16>((1u << left) - 1);
  }
  // C's lines are fetched while the products run (starting from C would stall on them).
  if (load_c)
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NV; ++j) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * j), _MM_HINT_T0);
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kn; ++p) {
    __m512 bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = _mm512_load_ps(b + p * W + 16 * j);
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(kInPlace ? a[r * lda + p] : a[p * MR + r]);
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_fmadd_ps(x, bv[j], acc[r][j]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) {
      float* out = c + r * ldc + 16 * j;
      __m512 v = acc[r][j];
      if (load_c) v = _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(mask[j], out), v);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[j], bias + 16 * j));
      _mm512_mask_storeu_ps(out, mask[j], v);
    }
}

template <int MR, bool kInPlace>
void tile(int64_t kn, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t cols, bool load_c,
          float scale, const float* bias, const float*, int) {
  switch ((cols + 15) / 16) {
    case 1: return tile_vectors<MR, 1, kInPlace>(kn, a, lda, b, c, ldc, cols, load_c, scale, bias);
    case 2: return tile_vectors<MR, 2, kInPlace>(kn, a, lda, b, c, ldc, cols, load_c, scale, bias);
    case 3: return tile_vectors<MR, 3, kInPlace>(kn, a, lda, b, c, ldc, cols, load_c, scale, bias);
    default: return tile_vectors<MR, 4, kInPlace>(kn, a, lda, b, c, ldc, cols, load_c, scale, bias);
  }
}

}  // namespace avx512_tiles

// kc and mc as measured on 1 thread, AMD EPYC Zen 5 (219 GFLOP/s peak), [50 x 1024] @ [1024 x 4096]:
// kc 128: 190 GFLOP/s, 256: 201, 512: 211, 1024: 220; [2500 x 1024] @ [1024 x 4096]: 256: 202,
// 512 and 1024: 208; mc 48, 96 and 192 the same.
const GemmTiles gemm_tiles_avx512{
    "avx512 6x64", avx512_tiles::W, 1024, 96,
    {nullptr, avx512_tiles::tile<1, false>, avx512_tiles::tile<2, false>, avx512_tiles::tile<3, false>,
     avx512_tiles::tile<4, false>, avx512_tiles::tile<5, false>, avx512_tiles::tile<6, false>},
    {nullptr, avx512_tiles::tile<1, true>, avx512_tiles::tile<2, true>, avx512_tiles::tile<3, true>,
     avx512_tiles::tile<4, true>, avx512_tiles::tile<5, true>, avx512_tiles::tile<6, true>}};

}  // namespace troupe
