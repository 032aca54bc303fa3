#pragma once
// ServingGraph: a forward over packed sequences (a serving batch on the encoder's nested fastpath)
// replayed from a CUDA graph, one graph per bucket of packed row counts, so a forward's ~300
// kernel launches become one. A batch's rows are padded up to its bucket only: the padding rows
// form sequences of their own (of at most kPaddingSequenceRows rows each, so attention over them
// stays cheap), which attention never mixes with the real ones and row-wise ops (GEMMs, layer
// norm) keep apart; their outputs are dropped. The sequence starts live in a device tensor written
// before each replay, so one graph serves every batch of its bucket.
//
//   ServingGraph graph([&](const Tensor& rows, const Tensor& starts) {
//     return encoder.forward_packed(rows, PackedSequences(starts));   // rows [n, d], starts i64 [s + 1]
//   });
//   NestedTensor y = graph(NestedTensor::from_padded(x, mask));       // x on cuda: captured the first
//   NestedTensor z = graph(other);                                    // time, replayed for a batch of the same bucket
//
// The wrapped forward must be a function of its two tensors only (as CapturedWork requires: no
// host reads of device values, shapes from the inputs' shapes), and what it reads besides them
// (weights) must stay where it is while the graphs live: clear() after moving or reloading them.
// Each graph keeps an arena of every byte one forward allocates (captured_work.h), so at most
// max_graphs are kept, the least recently used dropped first.
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "devices/lane.h"
#include "models/transformer/nested_tensor.h"

namespace troupe::models {

// A graph's size: the packed rows it computes, and its sequence slots (starts has slots + 1
// entries): the batch's sequences, the padding sequences, then empty sequences.
struct ServingBucket {
  int64_t rows = 0, sequences = 0;
  bool operator==(const ServingBucket& o) const { return rows == o.rows && sequences == o.sequences; }
  bool operator!=(const ServingBucket& o) const { return !(*this == o); }
};

// Padding rows per padding sequence at most: attention over the padding costs rows x this.
constexpr int64_t kPaddingSequenceRows = 64;

// The bucket of a batch of `sequences` sequences and `rows` packed rows: rows rounded up to a
// quarter of their power of two (rows in [2^k, 2^(k+1)) to a multiple of 2^(k-2), at least 64:
// under a quarter more rows than asked, four graphs per doubling), slots the next power of two
// (at least 8) that holds the sequences and the padding sequences. ValueError for negative counts.
ServingBucket serving_bucket(int64_t rows, int64_t sequences);

// The starts of a batch (offsets: sequences + 1, from 0 to its rows, never decreasing) padded to
// bucket: the batch's, then padding sequences up to bucket.rows, then empty ones (bucket.sequences
// + 1 entries in all). ValueError when offsets are malformed or do not fit the bucket.
std::vector<int64_t> bucket_offsets(const std::vector<int64_t>& offsets, const ServingBucket& bucket);

class ServingGraph {
 public:
  // rows [n, d] and starts i64 [s + 1] (on the rows' device) -> rows [n, d'].
  using PackedForward = std::function<Tensor(const Tensor& rows, const Tensor& starts)>;

  explicit ServingGraph(PackedForward forward, size_t max_graphs = 4);
  ~ServingGraph();
  ServingGraph(const ServingGraph&) = delete;
  ServingGraph& operator=(const ServingGraph&) = delete;

  // The forward of batch (tokens contiguous rows on a CUDA device): a bucket's first batch runs
  // the forward (its result returned) and captures it; later ones copy their rows and starts in
  // and replay. The result is ready on the device (consumers on other lanes wait for it), on the
  // graphs' own lane. DeviceError when the tokens are on the host.
  NestedTensor operator()(const NestedTensor& batch);

  size_t graphs() const;                     // kept now
  std::vector<ServingBucket> buckets() const;  // of the kept graphs, the most recently used first
  void clear();                              // drops every graph

 private:
  struct Entry;
  Entry& entry_for(const ServingBucket& bucket, const Tensor& tokens, bool& made);

  PackedForward forward_;
  size_t max_graphs_;
  mutable std::mutex mutex_;
  std::unique_ptr<Lane> lane_;
  std::list<std::unique_ptr<Entry>> entries_;  // the most recently used first
};

}  // namespace troupe::models
