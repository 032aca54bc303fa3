#include "models/transformer/serving_graph.h"

#include <algorithm>
#include <string>

#include "devices/captured_work.h"
#include "devices/error.h"

namespace troupe::models {

namespace {

int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The grid rows are rounded to: a quarter of their power of two, at least 16.
int64_t row_step(int64_t rows) {
  int64_t top = 1;
  while (top * 2 <= rows) top *= 2;
  return std::max<int64_t>(16, top / 4);
}

constexpr int64_t kMinRows = 64, kMinSequences = 8;

std::string offsets_str(const std::vector<int64_t>& offsets) {
  std::string s = "[";
  for (size_t i = 0; i < offsets.size(); ++i) s += (i ? ", " : "") + std::to_string(offsets[i]);
  return s + "]";
}

}  // namespace

ServingBucket serving_bucket(int64_t rows, int64_t sequences) {
  if (rows < 0 || sequences < 0)
    throw ValueError("serving_bucket: rows and sequences must not be negative, got " + std::to_string(rows) + " rows, " +
                     std::to_string(sequences) + " sequences");
  const int64_t step = row_step(std::max(rows, kMinRows));
  const int64_t padded = std::max(kMinRows, (rows + step - 1) / step * step);
  // The padding is under one step (or the whole of kMinRows): its sequences fit in this many slots
  // for every batch of the bucket, so they all share its graph.
  const int64_t padding_sequences = (std::max(step, kMinRows) + kPaddingSequenceRows - 1) / kPaddingSequenceRows;
  return {padded, std::max(kMinSequences, next_power_of_two(sequences + padding_sequences))};
}

std::vector<int64_t> bucket_offsets(const std::vector<int64_t>& offsets, const ServingBucket& bucket) {
  bool ordered = !offsets.empty() && offsets.front() == 0;
  for (size_t i = 1; ordered && i < offsets.size(); ++i) ordered = offsets[i] >= offsets[i - 1];
  if (!ordered)
    throw ValueError("ServingGraph: sequence offsets must start at 0 and never decrease, got " + offsets_str(offsets));
  const int64_t rows = offsets.back(), sequences = static_cast<int64_t>(offsets.size()) - 1;
  const int64_t padding_sequences = (bucket.rows - rows + kPaddingSequenceRows - 1) / kPaddingSequenceRows;
  if (rows > bucket.rows || sequences + padding_sequences > bucket.sequences)
    throw ValueError("ServingGraph: " + std::to_string(sequences) + " sequences of " + std::to_string(rows) +
                     " rows do not fit a bucket of " + std::to_string(bucket.sequences) + " sequences and " +
                     std::to_string(bucket.rows) + " rows");
  std::vector<int64_t> padded(offsets);
  padded.reserve(static_cast<size_t>(bucket.sequences + 1));
  while (padded.back() < bucket.rows) padded.push_back(std::min(bucket.rows, padded.back() + kPaddingSequenceRows));
  while (static_cast<int64_t>(padded.size()) < bucket.sequences + 1) padded.push_back(bucket.rows);
  return padded;
}

// One bucket's graph and the tensors it reads and writes in place. Dropped in this order: the
// output (arena bytes, while the arena lives), the graph with its arena, the inputs.
struct ServingGraph::Entry {
  ~Entry() {
    output = Tensor();
    work.reset();
  }
  ServingBucket bucket;
  Tensor rows, starts;  // [bucket.rows, d], i64 [bucket.sequences + 1]: written before each replay
  std::unique_ptr<CapturedWork> work;
  Tensor output;  // [bucket.rows, d'], rewritten by each replay
};

ServingGraph::ServingGraph(PackedForward forward, size_t max_graphs)
    : forward_(std::move(forward)), max_graphs_(std::max<size_t>(1, max_graphs)) {}

ServingGraph::~ServingGraph() = default;

size_t ServingGraph::graphs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

std::vector<ServingBucket> ServingGraph::buckets() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ServingBucket> out;
  for (const auto& e : entries_) out.push_back(e->bucket);
  return out;
}

void ServingGraph::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

ServingGraph::Entry& ServingGraph::entry_for(const ServingBucket& bucket, const Tensor& tokens, bool& made) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->bucket != bucket) continue;
    entries_.splice(entries_.begin(), entries_, it);  // the most recently used first
    made = false;
    return *entries_.front();
  }
  while (entries_.size() >= max_graphs_) entries_.pop_back();
  auto entry = std::make_unique<Entry>();
  entry->bucket = bucket;
  // Zeros: the padding rows hold finite values, whatever batch came before.
  entry->rows = Tensor::zeros({bucket.rows, tokens.size(1)}, tokens.dtype(), tokens.device());
  entry->starts = Tensor::empty({bucket.sequences + 1}, DType::i64, tokens.device());
  entries_.push_front(std::move(entry));
  made = true;
  return *entries_.front();
}

NestedTensor ServingGraph::operator()(const NestedTensor& batch) {
  const Tensor& tokens = batch.tokens();
  if (tokens.device().is_cpu())
    throw DeviceError("ServingGraph: the batch's tokens " + tokens.meta().str() +
                      " are on the host; CUDA graphs serve batches on a CUDA device");
  if (tokens.dim() != 2)
    throw ShapeError("ServingGraph: expected packed tokens [rows, d], got " + tokens.meta().str());
  std::lock_guard<std::mutex> lock(mutex_);
  if (!lane_ || lane_->device() != tokens.device()) {
    entries_.clear();
    lane_ = Lane::make(tokens.device(), "serving graph");
  }
  const int64_t rows = tokens.size(0);
  const ServingBucket bucket = serving_bucket(rows, batch.batch());
  const std::vector<int64_t> offsets = bucket_offsets(batch.offsets(), bucket);
  // The batch was written on the caller's lane, or on the default stream by a thread without one,
  // and carries no ready event of its own: the graph's lane waits for that work before reading it.
  Lane* caller = Lane::current(tokens.device());
  const Event written = caller ? caller->mark() : default_stream_mark(tokens.device());
  LaneGuard on(*lane_);
  if (written.valid()) lane_->wait(written);
  bool made = false;
  Entry& e = entry_for(bucket, tokens, made);
  Tensor real_rows = e.rows.slice(0, 0, rows);
  copy_into(real_rows, tokens);
  copy_into(e.starts, Tensor::from_vector(offsets, {bucket.sequences + 1}));
  tokens.storage()->add_use(lane_->record());  // the caller's bytes are not reused before the lane has read them
  Tensor result;
  if (made) {
    try {
      // An ordinary run first: this batch's result, the libraries' handles and choices made (a
      // capture cannot make them), and the arena measured.
      const size_t bytes = measure_device_allocations(tokens.device(), [&] { result = forward_(e.rows, e.starts); });
      e.work = CapturedWork::capture(*lane_, bytes, [&] { e.output = forward_(e.rows, e.starts); });
    } catch (...) {
      entries_.pop_front();
      throw;
    }
  } else {
    e.work->replay();
    result = e.output;
  }
  result = result.slice(0, 0, rows).clone();  // leaves the arena, which the next replay rewrites
  result.storage()->set_ready(lane_->record());
  return batch.with_tokens(result);
}

}  // namespace troupe::models
