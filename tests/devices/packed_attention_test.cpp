#include <catch2/catch.hpp>
#include <cmath>

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

TEST_CASE("packed_attention errors name the op, the shapes and the sequence", "[attention][errors]") {
  const Tensor qkv = Tensor::zeros({10, 24});
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 4, 10}), 5), Catch::Contains("packed_attention") && Catch::Contains("5 heads"));
  CHECK_THROWS_AS(packed_attention(qkv.to(DType::f64), i64({0, 10}), 2), ShapeError);
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 4, 9}), 2), Catch::Contains("from 0 to the 10 rows"));
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 6, 4, 10}), 2), Catch::Contains("decrease at sequence 1"));
  CHECK_THROWS_WITH(packed_attention(qkv, i64({0, 4, 10}), 2, i64({5, 6})),
                    Catch::Contains("key_lengths[0] is 5, sequence 0 has 4 tokens"));
  CHECK_THROWS_AS(packed_attention(qkv, i64({0, 4, 10}), 2, i64({4})), ShapeError);
  CHECK_THROWS_AS(packed_attention(qkv, i64({0, 4, 10}), 0), ValueError);
}
