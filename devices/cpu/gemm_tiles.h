#pragma once
// The register tiles of the packed GEMM (gemm_packed.cpp), one set per instruction set, each in
// its own file compiled for the baseline and marked with its target, so the driver picks one at
// run time (isa.h). A tile computes
//   C[rows, cols] = A[rows, kn] @ B[kn, width]  (+ scale * C when load_c) (+ bias[cols] when given)
// with A packed k-major for the tile (`tile`: a[p * rows + r]) or row-major where it lies
// (`tile_in_place`: a[r * lda + p]), B a slice of one weight panel (b[p * width + j], 32-byte
// aligned), C row-major (columns past cols untouched). While it runs, a tile may fetch a line of
// `next` every 2^next_shift steps (the next weight slice's share of it).
#include <cstdint>

namespace troupe {

using GemmTileFn = void (*)(int64_t kn, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t cols,
                            bool load_c, float scale, const float* bias, const float* next, int next_shift);

struct GemmTiles {
  static constexpr int kMaxRows = 6;
  const char* name;  // "avx2 6x16": the instruction set and the largest tile
  int64_t width;     // columns per weight panel (and per tile)
  int64_t kc;        // k per block: the tiles' slice of a panel stays near the core while rows pass
  int64_t mc;        // rows per block: their packed A stays in L2 while panels pass
  GemmTileFn tile[kMaxRows + 1];           // A packed (lda unused), by the tile's height 1..kMaxRows
  GemmTileFn tile_in_place[kMaxRows + 1];  // A row-major, lda apart
};

extern const GemmTiles gemm_tiles_avx2;
extern const GemmTiles gemm_tiles_avx512;

}  // namespace troupe
