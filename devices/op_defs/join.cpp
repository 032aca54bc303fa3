// cat: joins tensors along an existing dim; stack: along a new one (stack == cat of unsqueezed
// inputs). split and chunk: cut a tensor along a dim into pieces, views of the input.
// Kernels: devices/cpu/cat_stack.cpp and devices/cuda/join.cu; split's and chunk's, views with no
// device code, are here.
#include <algorithm>
#include <string>

#include "devices/registry.h"

namespace troupe {
namespace {

// Checks that every input has input 0's dtype and, except in dim `skip` (-1: none), its shape.
void check_alike(const OpInfer& c, int64_t skip) {
  const TensorMeta& first = c.inputs[0];
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const TensorMeta& other = c.inputs[i];
    if (other.dtype != first.dtype)
      throw DTypeError(std::string(c.op) + ": input " + std::to_string(i) + " is " + other.str() +
                       " but input 0 is " + first.str() + " (dtypes must match)");
    bool same = other.shape.size() == first.shape.size();
    for (size_t d = 0; same && d < first.shape.size(); ++d)
      same = static_cast<int64_t>(d) == skip || other.shape[d] == first.shape[d];
    if (!same)
      throw ShapeError(std::string(c.op) + ": input " + std::to_string(i) + " " + other.str() +
                       " does not match input 0 " + first.str() +
                       (skip >= 0 ? " outside dim " + std::to_string(skip) : std::string()));
  }
}

std::vector<TensorMeta> infer_cat(const OpInfer& c) {
  const TensorMeta& first = c.inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  if (rank == 0) throw ShapeError("cat: cannot concatenate 0-d tensors (" + first.str() + "); use stack");
  const int64_t dim = wrap_dim("cat", c.attrs.get<int64_t>("dim"), rank);
  check_alike(c, dim);
  TensorMeta out = first;
  out.shape[dim] = 0;
  for (const TensorMeta& m : c.inputs) out.shape[dim] += m.shape[dim];
  return {out};
}

std::vector<TensorMeta> infer_stack(const OpInfer& c) {
  const TensorMeta& first = c.inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  const int64_t dim = wrap_dim("stack", c.attrs.get<int64_t>("dim"), rank + 1);
  check_alike(c, -1);
  TensorMeta out = first;
  out.shape.insert(out.shape.begin() + dim, static_cast<int64_t>(c.inputs.size()));
  return {out};
}

const OpRegistrar cat_op{OpDef{
    .name = "cat",
    .doc = "joins tensors of one dtype along an existing dim; other dims must match",
    .min_inputs = 1,
    .max_inputs = -1,
    .attrs = {{"dim", AttrType::integer, int64_t{0}, "the dim to join along (negative counts from the end)"}},
    .infer = infer_cat}};

const OpRegistrar stack_op{OpDef{
    .name = "stack",
    .doc = "joins tensors of one shape and dtype along a new dim",
    .min_inputs = 1,
    .max_inputs = -1,
    .attrs = {{"dim", AttrType::integer, int64_t{0}, "where the new dim goes (0..rank, negative counts from the end)"}},
    .infer = infer_stack}};

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
    .infer = infer_split}};

const OpRegistrar chunk_op{OpDef{
    .name = "chunk",
    .doc = "cuts x along dim into at most `chunks` pieces of ceil(n / chunks) (torch.chunk); views",
    .attrs = {{"chunks", AttrType::integer, std::nullopt, "how many pieces at most"},
              {"dim", AttrType::integer, int64_t{0}, "the dim to cut"}},
    .infer = infer_chunk}};

// The pieces are views, which need no device code: one kernel serves cpu and cuda tensors.
const OpRegistrar split_kernel{"split", DeviceType::cpu, slice_pieces};
const OpRegistrar split_cuda_kernel{"split", DeviceType::cuda, slice_pieces};
const OpRegistrar chunk_kernel{"chunk", DeviceType::cpu, slice_pieces};
const OpRegistrar chunk_cuda_kernel{"chunk", DeviceType::cuda, slice_pieces};

}  // namespace
}  // namespace troupe
