#pragma once
// PyTorch's nn.MultiheadAttention (self-attention), nn.TransformerEncoderLayer and
// nn.TransformerEncoder, with their parameter names (layers.0.self_attn.in_proj_weight,
// layers.0.self_attn.out_proj.weight, layers.0.linear1.weight, layers.0.norm1.weight, ...), so a
// state dict saved from PyTorch as safetensors loads unchanged.
//
//   EncoderLayerOptions o{.d_model = 1024, .nhead = 16, .dim_feedforward = 4096, .batch_first = true};
//   TransformerEncoder encoder(o, /*num_layers=*/24);
//   encoder.load(read_safetensors("encoder.safetensors"));
//   encoder.eval();
//   NoGradGuard no_grad;                         // inference: the fastpath
//   Tensor y = encoder(x, key_padding_mask);     // x [B, S, d]; mask bool [B, S], true = padding
//   NestedTensor z = encoder(NestedTensor::from_padded(x, key_padding_mask));
//
// Two paths, as in PyTorch. The general path is dense (padded positions are computed and masked),
// built from registered ops, so autograd records it: use it to train. The fastpath is taken when
// the module is in eval mode and grad mode is off: one fused QKV GEMM over packed tokens (a
// NestedTensor: padding is never computed), attention per sequence on its real tokens, and the
// output projection and feed-forward GEMMs over the real tokens only; the padded positions of
// its dense output are zeros (as PyTorch's nested fastpath returns). With set_nested(false) the
// fastpath computes every padded position like a token, attending only to real keys (PyTorch's
// dense fastpath): those rows hold whatever that computes, not zeros. set_fastpath(false) forces
// the general path (benchmarks); set_fastpath_dtype(DType::bf16) runs the fastpath in bf16 (below).
// The fastpath's residual connections and norms are one op each (add_layer_norm).
//
// On a GPU (encoder.to(Device::cuda()), src there too) every path runs there. The key padding mask
// may stay on the host: the fastpaths read it there to pack the tokens (a mask on the device costs
// one counted host sync, devices/sync.h), and the general path copies it to src's device.
#include <memory>
#include <string>
#include <vector>

#include "models/nn/bf16_copy.h"
#include "models/nn/layers.h"
#include "models/transformer/nested_tensor.h"

namespace troupe::models {

struct EncoderLayerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // relu | gelu
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // false: [S, B, d], like PyTorch's default
  bool norm_first = false;   // true: pre-LN
};

// A fastpath batch's packing as packed_attention reads it: sequence starts (i64 [B + 1]) and, for the
// dense fastpath, key lengths (i64 [B]; undefined: every key of a sequence is attended). Made once
// per forward on the tokens' device, not once per layer: on a GPU each is a host-to-device copy.
struct PackedSequences {
  PackedSequences(const std::vector<int64_t>& offsets, const std::vector<int64_t>& key_lengths, Device device);
  // Already on the device (a CUDA graph's inputs, serving_graph.h).
  explicit PackedSequences(Tensor starts, Tensor key_lengths = {})
      : starts(std::move(starts)), key_lengths(std::move(key_lengths)) {}
  Tensor starts, key_lengths;
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t d, double eps);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight, bias;
  double eps;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0,
                     Generator& generator = thread_generator());
  // Self-attention over x [B, S, d] (batch first); key_padding_mask bool [B, S] or undefined.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {}) const;
  // The fastpath: packed tokens [rows, d] with sequence offsets, attention within each sequence;
  // key_lengths (optional, one per sequence): only a sequence's first keys are attended (the dense
  // fastpath over padded sequences).
  // matmul_dtype bf16: the projections in bf16 (linear_bf16); the result is in the fastpath's
  // activation dtype (fastpath_activation_dtype: bf16 on a GPU, f32 on the host).
  Tensor forward_packed(const Tensor& tokens, const std::vector<int64_t>& offsets,
                        const std::vector<int64_t>& key_lengths = {}, DType matmul_dtype = DType::f32) const;
  Tensor forward_packed(const Tensor& tokens, const PackedSequences& packing, DType matmul_dtype) const;
  // Makes the bf16 copies of the weights now (on a GPU; nothing on the host), not at the next forward.
  void prepare_bf16() const;

  int64_t embed_dim, num_heads;
  double dropout;
  Tensor in_proj_weight, in_proj_bias;  // [3d, d], [3d]
  Linear out_proj;

 private:
  Bf16Copy in_proj_weight_bf16_, in_proj_bias_bf16_, out_proj_weight_bf16_, out_proj_bias_bf16_;
};

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const EncoderLayerOptions& options, Generator& generator = thread_generator());
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {}) const;       // batch first, general
  // The fastpath; the result is in the activation dtype (fastpath_activation_dtype), tokens in
  // another dtype are converted first.
  Tensor forward_packed(const Tensor& tokens, const std::vector<int64_t>& offsets,
                        const std::vector<int64_t>& key_lengths = {},
                        DType matmul_dtype = DType::f32) const;
  Tensor forward_packed(const Tensor& tokens, const PackedSequences& packing, DType matmul_dtype) const;
  // Makes the bf16 copies of the weights now (on a GPU; nothing on the host), not at the next forward.
  void prepare_bf16() const;

  EncoderLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2;
  Dropout dropout, dropout1, dropout2;

 private:
  Tensor feed_forward(const Tensor& x) const;
  Tensor feed_forward_bf16(const Tensor& x, DType out_dtype) const;
  Bf16Copy linear1_weight_bf16_, linear1_bias_bf16_, linear2_weight_bf16_, linear2_bias_bf16_;
  Bf16Copy norm1_weight_bf16_, norm1_bias_bf16_;  // pre-norm: norm1 reads the bf16 residual stream
};

// The dtype of the fastpath's activations between ops: bf16 for the bf16 fastpath on a GPU
// (GEMM outputs, attention, residual adds and norms all bf16, norms computing in f32 inside);
// f32 otherwise (on the host the bf16 GEMMs read and write f32 rows: the CPU's other kernels
// compute in f32 anyway, and an f32 residual stream keeps the CPU's results as they were).
DType fastpath_activation_dtype(DType fastpath_dtype, Device device);

class TransformerEncoder : public Module {
 public:
  // Weights as PyTorch initialises them, drawn from generator (by default the calling thread's).
  TransformerEncoder(const EncoderLayerOptions& options, int num_layers, bool final_norm = false,
                     Generator& generator = thread_generator());
  // src [B, S, d] (batch_first) or [S, B, d]; key_padding_mask bool [B, S], true = padding.
  Tensor forward(const Tensor& src, const Tensor& key_padding_mask = {}) const;
  Tensor operator()(const Tensor& src, const Tensor& key_padding_mask = {}) const { return forward(src, key_padding_mask); }
  NestedTensor forward(const NestedTensor& src) const;  // the fastpath on packed tokens
  NestedTensor operator()(const NestedTensor& src) const { return forward(src); }
  // The same over packed rows [rows, d] and their packing on the rows' device: what a CUDA graph of
  // the fastpath records (serving_graph.h).
  Tensor forward_packed(const Tensor& rows, const PackedSequences& packing) const;

  void set_fastpath(bool enabled) { fastpath_enabled_ = enabled; }
  // With a padding mask, the fastpath packs real tokens only (default) or, like PyTorch's
  // enable_nested_tensor=false, runs every padded position and masks keys in attention.
  void set_nested(bool enabled) { nested_enabled_ = enabled; }
  bool takes_fastpath() const;  // eval mode, grad mode off, fastpath enabled
  // The fastpath in f32 (default) or bf16: GEMM operands in bf16, products accumulated in f32.
  // Weights are converted once: on a GPU into bf16 copies the layers keep (made here, and again
  // at the first forward after to(), load() or a change to a weight), on the host into the CPU
  // GEMM's packed bf16 blocks (cached while unchanged). On a GPU the activations between ops are
  // bf16 too (attention, residual adds and layer norms read and write bf16, computing in f32
  // inside) and the fastpath's output is converted to f32 for the caller; on the host attention,
  // norms and the residual stream stay f32. Fast on GPUs and on CPUs with AMX-BF16 or
  // AVX512-BF16 (troupe info). DTypeError for other dtypes. The general path is unaffected.
  void set_fastpath_dtype(DType dtype);
  DType fastpath_dtype() const { return fastpath_dtype_; }

  EncoderLayerOptions options;
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers;
  std::unique_ptr<LayerNorm> norm;  // the optional final norm

 private:
  void check_input(const Tensor& x, const Tensor& key_padding_mask) const;
  bool fastpath_enabled_ = true, nested_enabled_ = true;
  DType fastpath_dtype_ = DType::f32;
};

}  // namespace troupe::models
