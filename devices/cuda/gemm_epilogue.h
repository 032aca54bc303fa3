#pragma once
// Internal to the CUDA kernels: how linear_bf16 splits its epilogue (+ bias, then relu or gelu)
// between cuBLASLt's fused epilogues and one elementwise pass over the output. Plain host code,
// so the choice is tested without a GPU (tests/devices/gemm_bf16_test.cpp).
//
//   EpilogueSplit split = split_epilogue(has_bias, activation);
//   if (!lt_has_algorithm(split.fused)) split = unfused(has_bias, activation);
//
// cuBLASLt fuses bias, relu and relu after bias into the GEMM (CUBLASLT_EPILOGUE_BIAS, _RELU,
// _RELU_BIAS). Its GELU epilogues compute the tanh approximation, and troupe's gelu (CPU and
// CUDA alike) is the erf form, so gelu is never given to cuBLASLt: it runs as a separate pass
// (after the fused bias) in the erf form, over the output in its dtype.
#include <string>

namespace troupe::cuda {

enum class Activation { none, relu, gelu };  // gelu: the erf form
enum class LtEpilogue { none, bias, relu, relu_bias };

struct EpilogueSplit {
  LtEpilogue fused = LtEpilogue::none;  // done by cuBLASLt inside the GEMM
  bool pass_bias = false;               // then the pass over the output: + bias,
  Activation pass_activation = Activation::none;  // then this activation
  bool needs_pass() const { return pass_bias || pass_activation != Activation::none; }
  bool operator==(const EpilogueSplit&) const = default;
};

inline Activation activation_named(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  return Activation::none;  // op inference has rejected anything else
}

// As much as cuBLASLt can fuse: bias and relu; gelu (erf) in the pass.
inline EpilogueSplit split_epilogue(bool has_bias, Activation activation) {
  EpilogueSplit split;
  if (activation == Activation::relu) split.fused = has_bias ? LtEpilogue::relu_bias : LtEpilogue::relu;
  else split.fused = has_bias ? LtEpilogue::bias : LtEpilogue::none;
  if (activation == Activation::gelu) split.pass_activation = Activation::gelu;
  return split;
}

// Everything in the pass: for shapes or alignments where cuBLASLt has no algorithm with the
// fused epilogue (and for an empty inner dimension, where there is no GEMM to fuse into).
inline EpilogueSplit unfused(bool has_bias, Activation activation) {
  return EpilogueSplit{LtEpilogue::none, has_bias, activation};
}

}  // namespace troupe::cuda
