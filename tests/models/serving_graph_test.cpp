// ServingGraph (models/transformer/serving_graph.h): the buckets and the padded starts on any
// machine; on cuda:0, graph replays that give the launched forward's results, for batches of one
// bucket and of another, and XLM-R's logits through them.
#include <catch2/catch.hpp>
#include <limits>

#include "devices/autograd/grad_mode.h"
#include "devices/backend.h"
#include "devices/captured_work.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "models/transformer/encoder.h"
#include "models/transformer/serving_graph.h"
#include "models/xlmr/xlmr.h"
#include "support/close.h"
#include "support/skip.h"
#include "support/tensors.h"

using namespace troupe;
using namespace troupe::models;

namespace {

bool same(const ServingBucket& b, int64_t rows, int64_t sequences) { return b.rows == rows && b.sequences == sequences; }

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t L : lengths) offsets.push_back(offsets.back() + L);
  return offsets;
}

}  // namespace

TEST_CASE("serving buckets: rows up to a quarter of their power of two (at least 64), slots a power of two", "[serving_graph]") {
  CHECK(same(serving_bucket(0, 0), 64, 8));
  CHECK(same(serving_bucket(16, 3), 64, 8));
  CHECK(serving_bucket(13, 2) == serving_bucket(16, 3));  // one graph serves both
  CHECK(same(serving_bucket(100, 2), 112, 8));           // [64, 128) in steps of 16
  CHECK(same(serving_bucket(4096, 1), 4096, 32));        // exact: no padding, 16 padding slots kept
  CHECK(same(serving_bucket(4097, 1), 5120, 32));
  CHECK(same(serving_bucket(8131, 64), 8192, 128));      // xlmr_bench's batch: 64 + 16 padding slots
  for (int64_t rows = 0; rows <= 20000; rows += 97) {
    const ServingBucket b = serving_bucket(rows, 3);
    INFO("rows " << rows << " -> " << b.rows);
    CHECK(b.rows >= rows);
    CHECK((b.rows == 64 || 4 * (b.rows - rows) < b.rows));  // under a quarter of the bucket is padding
    // Every batch of the bucket fits: the starts padded to it.
    const std::vector<int64_t> padded = bucket_offsets({0, rows / 3, rows / 2, rows}, b);
    REQUIRE(static_cast<int64_t>(padded.size()) == b.sequences + 1);
    CHECK(padded.back() == b.rows);
    for (size_t i = 4; i < padded.size(); ++i) {
      CHECK(padded[i] >= padded[i - 1]);
      CHECK(padded[i] - padded[i - 1] <= kPaddingSequenceRows);
    }
  }
  CHECK_THROWS_AS(serving_bucket(-1, 2), ValueError);
}

TEST_CASE("serving buckets: the batch's starts, padding sequences of at most 64 rows, then empty ones", "[serving_graph]") {
  CHECK(bucket_offsets({0, 3, 8, 16}, {64, 8}) == std::vector<int64_t>{0, 3, 8, 16, 64, 64, 64, 64, 64});
  CHECK(bucket_offsets({0, 5, 200}, {330, 8}) == std::vector<int64_t>{0, 5, 200, 264, 328, 330, 330, 330, 330});
  CHECK(bucket_offsets({0, 64}, {64, 8}) == std::vector<int64_t>{0, 64, 64, 64, 64, 64, 64, 64, 64});  // no padding
  CHECK(bucket_offsets({0, 0, 4}, {64, 8}) == std::vector<int64_t>{0, 0, 4, 64, 64, 64, 64, 64, 64});  // an empty sequence kept
  CHECK_THROWS_WITH(bucket_offsets({1, 3}, {64, 8}), Catch::Contains("start at 0 and never decrease, got [1, 3]"));
  CHECK_THROWS_AS(bucket_offsets({0, 5, 3}, {64, 8}), ValueError);
  CHECK_THROWS_AS(bucket_offsets({}, {64, 8}), ValueError);
  CHECK_THROWS_WITH(bucket_offsets({0, 100}, {64, 8}), Catch::Contains("do not fit a bucket of 8 sequences and 64 rows"));
  CHECK_THROWS_AS(bucket_offsets({0, 1, 2, 3, 4, 5, 6, 7, 8}, {64, 8}), ValueError);  // 8 sequences + padding: 9 slots
}

TEST_CASE("a batch padded to its bucket: the encoder's real rows are the unpadded batch's (on the host)", "[serving_graph]") {
  const EncoderLayerOptions o{.d_model = 16, .nhead = 2, .dim_feedforward = 32, .activation = "gelu", .batch_first = true};
  manual_seed(8);
  TransformerEncoder encoder(o, 2, /*final_norm=*/true);
  encoder.eval();
  NoGradGuard no_grad;
  for (const std::vector<int64_t>& lengths : std::vector<std::vector<int64_t>>{{3, 5, 8}, {500, 1, 529}}) {
    const std::vector<int64_t> offsets = offsets_of(lengths);
    const int64_t rows = offsets.back();
    const ServingBucket bucket = serving_bucket(rows, static_cast<int64_t>(lengths.size()));
    INFO(rows << " rows in a bucket of " << bucket.rows);  // 16 -> 64; 1030 -> 1280 (4 padding sequences)
    const Tensor x = rand_uniform({rows, 16}, -1, 1);
    const Tensor filler = rand_uniform({bucket.rows - rows, 16}, -100, 100);  // whatever a batch before left there
    const std::vector<int64_t> padded = bucket_offsets(offsets, bucket);
    const Tensor starts = Tensor::from_vector(padded, {bucket.sequences + 1});
    const Tensor got = encoder.forward_packed(cat({x, filler}, 0), PackedSequences(starts)).slice(0, 0, rows);
    CHECK(relative_error(got, encoder(NestedTensor(x, offsets)).tokens()) < 1e-5);
  }
}

TEST_CASE("a serving graph serves CUDA batches only: host tokens are a DeviceError", "[serving_graph]") {
  int calls = 0;
  ServingGraph graph([&](const Tensor& rows, const Tensor&) {
    ++calls;
    return rows;
  });
  const NestedTensor batch(Tensor::zeros({5, 4}), {0, 2, 5});
  CHECK_THROWS_WITH(graph(batch), Catch::Contains("are on the host; CUDA graphs serve batches on a CUDA device"));
  CHECK(calls == 0);
  CHECK(graph.graphs() == 0);
}

TEST_CASE("cuda serving graph: replays give the launched encoder's results, in one bucket and another", "[cuda][serving_graph]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const EncoderLayerOptions o{.d_model = 32, .nhead = 4, .dim_feedforward = 64, .activation = "gelu", .batch_first = true};
  manual_seed(5);
  TransformerEncoder cpu(o, 2, /*final_norm=*/true);
  manual_seed(5);
  TransformerEncoder cuda(o, 2, /*final_norm=*/true);
  cuda.to(gpu);
  cpu.eval();
  cuda.eval();
  NoGradGuard no_grad;
  ServingGraph graph([&](const Tensor& rows, const Tensor& starts) { return cuda.forward_packed(rows, PackedSequences(starts)); },
                     /*max_graphs=*/2);
  struct Batch {
    std::vector<int64_t> lengths;
    ServingBucket bucket;
  };
  // Two batches of the bucket {64 rows, 8 slots} (16 and 13 rows), one of {112, 8}, the first again.
  const std::vector<Batch> batches{{{3, 5, 8}, {64, 8}}, {{7, 6}, {64, 8}}, {{40, 1, 59}, {112, 8}}, {{3, 5, 8}, {64, 8}}};
  std::vector<Tensor> inputs;
  for (const Batch& b : batches) {
    const std::vector<int64_t> offsets = offsets_of(b.lengths);
    INFO("lengths of " << offsets.back() << " rows");
    REQUIRE(serving_bucket(offsets.back(), int64_t(b.lengths.size())) == b.bucket);
    const Tensor x = rand_uniform({offsets.back(), 32}, -1, 1);
    const NestedTensor host(x, offsets), device(x.to(gpu), offsets);
    const Tensor launched = cuda(device).tokens();
    const Tensor got = graph(device).tokens();
    const Tensor replayed = graph(device).tokens();  // the bucket's graph now, whatever ran first
    CHECK(got.device() == gpu);
    REQUIRE(replayed.shape() == launched.shape());
    CHECK(relative_error(replayed.to(Device::cpu()), launched.to(Device::cpu())) < 1e-5);
    CHECK(relative_error(got.to(Device::cpu()), launched.to(Device::cpu())) < 1e-5);
    CHECK(relative_error(replayed.to(Device::cpu()), cpu(host).tokens()) < 1e-4);
  }
  CHECK(graph.graphs() == 2);
  CHECK(graph.buckets().front() == ServingBucket{64, 8});  // the most recently used
}

// The graph runs on a lane of its own: a batch the caller is still writing on the default stream
// (behind a few milliseconds of products here) must be waited for, not read as it was before.
TEST_CASE("cuda serving graph: a batch still being written on the default stream is read once written", "[cuda][serving_graph]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const EncoderLayerOptions o{.d_model = 32, .nhead = 4, .dim_feedforward = 64, .activation = "gelu", .batch_first = true};
  manual_seed(7);
  TransformerEncoder cuda(o, 2, /*final_norm=*/true);
  cuda.to(gpu);
  cuda.eval();
  NoGradGuard no_grad;
  ServingGraph graph([&](const Tensor& rows, const Tensor& starts) { return cuda.forward_packed(rows, PackedSequences(starts)); });
  const std::vector<int64_t> offsets = offsets_of({3, 5, 8});
  const Tensor x = rand_uniform({16, 32}, -1, 1);
  const Tensor want = cuda(NestedTensor(x.to(gpu), offsets)).tokens().to(Device::cpu());
  graph(NestedTensor(x.to(gpu), offsets));  // captured
  const Tensor square = rand_uniform({2048, 2048}, -1, 1).to(gpu);
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    // NaN until the products end and x is copied over it: read early, the result is NaN.
    Tensor late = Tensor::full({16, 32}, std::numeric_limits<double>::quiet_NaN(), DType::f32, gpu);
    Tensor busy = square;
    for (int i = 0; i < 8; ++i) busy = matmul(busy, square);
    copy_into(late, add(mul(busy.slice(0, 0, 16).slice(1, 0, 32), 0.0), x.to(gpu)));
    CHECK(relative_error(graph(NestedTensor(late, offsets)).tokens().to(Device::cpu()), want) < 1e-5);
  }
}

TEST_CASE("cuda serving graph: XLM-R's logits through it are the CPU's", "[cuda][serving_graph]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const XLMRConfig config = XLMRConfig::tiny(50, 3);
  XLMR cpu(config, 9), cuda(config, 9);
  cuda.to(gpu);
  cpu.eval();
  cuda.eval();
  cuda.set_serving_graph(true);
  NoGradGuard no_grad;
  const Tensor first = Tensor::from_vector<int64_t>({0, 7, 8, 9, 2, 0, 11, 2, 1, 1}, {2, 5});
  const Tensor second = Tensor::from_vector<int64_t>({0, 12, 13, 2, 0, 2, 1, 1, 0, 14, 15, 2}, {3, 4});
  for (int round = 0; round < 2; ++round) {  // captured, then replayed
    INFO("round " << round);
    CHECK(relative_error(cuda(first).to(Device::cpu()), cpu(first)) < 1e-4);
    CHECK(relative_error(cuda(second).to(Device::cpu()), cpu(second)) < 1e-4);
  }
  REQUIRE(cuda.serving_graph());
  CHECK(cuda.serving_graph()->graphs() == 1);  // 8 and 10 rows: one bucket
}
