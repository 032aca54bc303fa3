#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>

#include "devices/cuda/attention_tiles.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "support/close.h"

using namespace troupe;

namespace {

// Sequence by sequence and head by head with the general ops: softmax(q k^T * scale) v.
Tensor reference(const Tensor& qkv, const std::vector<int64_t>& offsets, int64_t heads,
                 const std::vector<int64_t>& key_lengths) {
  const int64_t d = qkv.size(1) / 3, hd = d / heads;
  Tensor out = Tensor::zeros({qkv.size(0), d});
  std::vector<Tensor> rows;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const int64_t L = offsets[i + 1] - offsets[i];
    if (L == 0) continue;
    const int64_t keys = key_lengths.empty() ? L : key_lengths[i];
    const Tensor seq = qkv.slice(0, offsets[i], offsets[i + 1]);
    std::vector<Tensor> per_head;
    for (int64_t h = 0; h < heads; ++h) {
      const Tensor q = seq.slice(1, h * hd, (h + 1) * hd);
      const Tensor k = seq.slice(0, 0, keys).slice(1, d + h * hd, d + (h + 1) * hd);
      const Tensor v = seq.slice(0, 0, keys).slice(1, 2 * d + h * hd, 2 * d + (h + 1) * hd);
      per_head.push_back(matmul(softmax(mul(matmul(q, k, false, true), 1.0 / std::sqrt(double(hd))), -1), v));
    }
    rows.push_back(cat(per_head, 1));
  }
  return cat(rows, 0);
}

Tensor i64(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

}  // namespace

TEST_CASE("packed_attention equals softmax(q k^T / sqrt(hd)) v per sequence and head", "[attention]") {
  Generator generator(3);
  // Ragged sequences, an empty one, one long enough to use every thread; then a prefix of keys.
  const std::vector<int64_t> offsets{0, 3, 3, 10, 210};
  const Tensor qkv = rand_uniform({210, 3 * 64}, -1, 1, DType::f32, generator);
  check_close(packed_attention(qkv, i64(offsets), 4), reference(qkv, offsets, 4, {}), {.rtol = 1e-5, .atol = 1e-6});
  const std::vector<int64_t> keys{2, 0, 7, 150};
  check_close(packed_attention(qkv, i64(offsets), 4, i64(keys)), reference(qkv, offsets, 4, keys),
              {.rtol = 1e-5, .atol = 1e-6});
  // A row that may attend to nothing is NaN, as a softmax over keys all masked gives.
  const Tensor none = packed_attention(qkv, i64(offsets), 4, i64({0, 0, 7, 200}));
  CHECK(std::isnan(none.select(0, 1).select(0, 5).item<float>()));
  CHECK_FALSE(std::isnan(none.select(0, 3).select(0, 5).item<float>()));
}

TEST_CASE("packed_attention at 256 and 512 keys, where the scores' rows are padded apart", "[attention]") {
  Generator generator(4);
  const std::vector<int64_t> offsets{0, 256, 261, 773};
  const Tensor qkv = rand_uniform({773, 3 * 32}, -2, 2, DType::f32, generator);
  check_close(packed_attention(qkv, i64(offsets), 2), reference(qkv, offsets, 2, {}), {.rtol = 1e-5, .atol = 1e-6});
}

TEST_CASE("packed_attention in bf16 is the f32 result of the same values, rounded once", "[attention]") {
  Generator generator(5);
  const std::vector<int64_t> offsets{0, 1, 8, 8, 72};
  const Tensor qkv = rand_uniform({72, 3 * 64}, -1, 1, DType::f32, generator).to(DType::bf16);
  const std::vector<int64_t> keys{1, 5, 0, 64};
  const Tensor got = packed_attention(qkv, i64(offsets), 2, i64(keys));
  CHECK(got.dtype() == DType::bf16);
  CHECK(got.shape() == Shape{72, 64});
  // The contract the cuda kernel shares: widen, attend in f32, round to bf16 at the end.
  check_close(got, packed_attention(qkv.to(DType::f32), i64(offsets), 2, i64(keys)).to(DType::bf16));
  const Tensor none = packed_attention(qkv, i64(offsets), 2, i64({0, 5, 0, 64}));
  CHECK(std::isnan(none.select(0, 0).select(0, 3).to(DType::f32).item<float>()));
}

TEST_CASE("packed_attention errors name the op, the shapes and the sequence", "[attention][errors]") {
  const Tensor qkv = Tensor::zeros({10, 24});
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 4, 10}), 5), Catch::Contains("packed_attention") && Catch::Contains("5 heads"));
  CHECK_THROWS_AS(packed_attention(qkv.to(DType::f64), i64({0, 10}), 2), ShapeError);
  CHECK_THROWS_WITH(packed_attention(qkv.to(DType::f16), i64({0, 10}), 2), Catch::Contains("f32[rows, 3d] or bf16"));
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 4, 9}), 2), Catch::Contains("from 0 to the 10 rows"));
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 6, 4, 10}), 2), Catch::Contains("decrease at sequence 1"));
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 4, 10}), 2, i64({5, 6})),
                    Catch::Contains("key_lengths[0] is 5, sequence 0 has 4 tokens"));
  CHECK_THROWS_AS(packed_attention(qkv, i64({0, 4, 10}), 2, i64({4})), ShapeError);
  CHECK_THROWS_AS(packed_attention(qkv, i64({0, 4, 10}), 0), ValueError);
}

TEST_CASE("the cuda kernels' tiles cover every packed row once, with its own sequence", "[attention]") {
  // Empty sequences first, between and last; lengths 1, 7, 64, 65; tiles of 64 and 32 rows.
  const std::vector<int64_t> offsets{0, 0, 1, 8, 8, 72, 137, 137};
  const int64_t sequences = static_cast<int64_t>(offsets.size()) - 1, rows = offsets.back();
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t s = cuda::sequence_of_row(offsets.data(), sequences, row);
    CHECK(offsets[s] <= row);
    CHECK(row < offsets[s + 1]);
  }
  for (const int64_t tile : {64, 32}) {
    INFO("tiles of " << tile);
    std::vector<int> seen(static_cast<size_t>(rows), 0);
    std::vector<std::vector<int64_t>> segments;
    for (int64_t begin = 0; begin < rows; begin += tile)
      cuda::for_each_tile_segment(offsets.data(), sequences, begin, std::min(begin + tile, rows),
                                  [&](int64_t s, int64_t first, int64_t last) {
                                    segments.push_back({s, first, last});
                                    for (int64_t r = first; r < last; ++r) {
                                      ++seen[static_cast<size_t>(r)];
                                      CHECK(offsets[s] <= r);
                                      CHECK(r < offsets[s + 1]);
                                    }
                                  });
    CHECK(seen == std::vector<int>(static_cast<size_t>(rows), 1));
    if (tile == 64)  // the first tile straddles sequences 1, 2 and 4; the third holds 9 rows of one
      CHECK(segments == std::vector<std::vector<int64_t>>{{1, 0, 1}, {2, 1, 8}, {4, 8, 64}, {4, 64, 72}, {5, 72, 128},
                                                          {5, 128, 137}});
  }
  // Key counts: key_lengths clamped into the sequence (the device does not validate them).
  const std::vector<int64_t> given{5, -1, 3, 9, 64, 70, 0};
  CHECK(cuda::keys_of(offsets.data(), nullptr, 4) == 64);
  CHECK(cuda::keys_of(offsets.data(), given.data(), 1) == 0);
  CHECK(cuda::keys_of(offsets.data(), given.data(), 2) == 3);
  CHECK(cuda::keys_of(offsets.data(), given.data(), 5) == 65);
}

TEST_CASE("the cuda kernel for a call: tensor cores for aligned bf16 heads of 64 or 128", "[attention]") {
  using cuda::AttentionKernel;
  CHECK(cuda::attention_kernel_for(true, 64, 4096) == AttentionKernel::tensor_cores_64);
  CHECK(cuda::attention_kernel_for(true, 128, 4096) == AttentionKernel::tensor_cores_128);
  CHECK(cuda::attention_kernel_for(true, 64, 4098) == AttentionKernel::tiled_fma);  // a view 2 bytes in
  CHECK(cuda::attention_kernel_for(true, 80, 4096) == AttentionKernel::tiled_fma);
  CHECK(cuda::attention_kernel_for(false, 64, 4096) == AttentionKernel::tiled_fma);  // f32 stays f32
}
