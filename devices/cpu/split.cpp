// split and chunk: cut a tensor along a dim into pieces. The pieces are views of the input
// (no copies): tensors are copy-on-write, so a piece can never change under its owner. Views
// need no device code, so the same kernel serves cpu and cuda tensors.
#include <algorithm>

#include "devices/registry.h"

namespace troupe {
namespace {

int64_t split_dim(const OpInfer& c, const TensorMeta& x) {
  if (x.shape.empty()) throw ShapeError(std::string(c.op) + ": cannot split a 0-d tensor " + x.str());
  return wrap_dim(std::string(c.op).c_str(), c.attrs.get<int64_t>("dim"), static_cast<int64_t>(x.shape.size()));
}

// Pieces of `size` along a dim of length n, the last smaller; a dim of length 0 gives one empty piece.
std::vector<int64_t> even_sizes(int64_t n, int64_t size) {
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += size) sizes.push_back(std::min(size, n - start));
  if (sizes.empty()) sizes.push_back(0);
  return sizes;
}

std::vector<int64_t> split_sizes(const OpInfer& c, const TensorMeta& x, int64_t n) {
  const int64_t size = c.attrs.get<int64_t>("size");
  const auto& sizes = c.attrs.get<std::vector<int64_t>>("sizes");
  if ((size != 0) == !sizes.empty())
    throw ValueError("split: give exactly one of size (got " + std::to_string(size) + ") and sizes (got " +
                     to_string(AttrValue(sizes)) + ")");
  if (!sizes.empty()) {
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) throw ValueError("split: negative size in sizes " + to_string(AttrValue(sizes)));
      total += s;
    }
    if (total != n)
      throw ShapeError("split: sizes " + to_string(AttrValue(sizes)) + " sum to " + std::to_string(total) +
                       ", but the dim has size " + std::to_string(n) + " in " + x.str());
    return sizes;
  }
  if (size < 0) throw ValueError("split: size must be positive, got " + std::to_string(size));
  return even_sizes(n, size);
}

// torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks` of them; a dim of
// length 0 gives `chunks` empty pieces.
std::vector<int64_t> chunk_sizes(const OpInfer& c, int64_t n) {
  const int64_t chunks = c.attrs.get<int64_t>("chunks");
  if (chunks <= 0) throw ValueError("chunk: chunks must be positive, got " + std::to_string(chunks));
  if (n == 0) return std::vector<int64_t>(static_cast<size_t>(chunks), 0);
  return even_sizes(n, (n + chunks - 1) / chunks);
}

std::vector<TensorMeta> pieces(const TensorMeta& x, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<TensorMeta> out(sizes.size(), x);
  for (size_t i = 0; i < sizes.size(); ++i) out[i].shape[dim] = sizes[i];
  return out;
}

std::vector<TensorMeta> infer_split(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const int64_t dim = split_dim(c, x);
  return pieces(x, dim, split_sizes(c, x, x.shape[dim]));
}

std::vector<TensorMeta> infer_chunk(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const int64_t dim = split_dim(c, x);
  return pieces(x, dim, chunk_sizes(c, x.shape[dim]));
}

// Slices the input into the pieces inference described.
std::vector<Tensor> slice_pieces(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const int64_t dim = wrap_dim("split", c.attrs.get<int64_t>("dim"), x.dim());
  std::vector<Tensor> out;
  out.reserve(c.outputs.size());
  int64_t start = 0;
  for (const TensorMeta& piece : c.outputs) {
    const int64_t size = piece.shape[dim];
    out.push_back(x.slice(dim, start, start + size));
    start += size;
  }
  return out;
}

const OpRegistrar split_op{OpDef{
    .name = "split",
    .doc = "cuts x along dim into pieces of `size` (the last smaller) or of the given `sizes`; views",
    .attrs = {{"size", AttrType::integer, int64_t{0}, "length of each piece (0: use sizes)"},
              {"sizes", AttrType::int_list, std::vector<int64_t>{}, "lengths of the pieces, summing to the dim"},
              {"dim", AttrType::integer, int64_t{0}, "the dim to cut"}},
    .infer = infer_split,
    .kernels = {{DeviceType::cpu, slice_pieces}, {DeviceType::cuda, slice_pieces}}}};

const OpRegistrar chunk_op{OpDef{
    .name = "chunk",
    .doc = "cuts x along dim into at most `chunks` pieces of ceil(n / chunks) (torch.chunk); views",
    .attrs = {{"chunks", AttrType::integer, std::nullopt, "how many pieces at most"},
              {"dim", AttrType::integer, int64_t{0}, "the dim to cut"}},
    .infer = infer_chunk,
    .kernels = {{DeviceType::cpu, slice_pieces}, {DeviceType::cuda, slice_pieces}}}};

}  // namespace
}  // namespace troupe
