#pragma once
// Reverse-mode automatic differentiation for troupe's tensors, PyTorch's rules.
//
//   Tensor w = rand_uniform({10, 320}, -0.05, 0.05).set_requires_grad();   // a leaf
//   Tensor loss = nll_loss(log_softmax(linear(x, w), 1), labels);
//   loss.backward();            // w.grad() now holds d loss / d w (added to any earlier grad)
//   w.set_grad(Tensor());       // zero_grad: none
//   {
//     NoGradGuard no_grad;      // inference: no tape at all
//     Tensor y = linear(x, w);  // y.requires_grad() is false
//   }
//
// Handles and the tape. A Tensor is a handle with value semantics (copy-on-write bytes). Its
// autograd state (requires_grad, grad, the op that produced it, a version counter) lives in an
// AutogradMeta that every *copy of the handle* shares, like one PyTorch tensor object seen through
// several references:
//
//   Tensor a = w;               // same meta: a.grad() is w.grad(), a.requires_grad() too
//   Tensor v = w.reshape({-1}); // a new tensor (a view): on the tape, its own meta
//   Tensor d = w.detach();      // the same bytes, no meta: off the tape
//
// Every op goes through the registry's call(); when grad mode is on and an input requires grad,
// the call is recorded (a GradNode per call: op name, attributes, the inputs or outputs its backward
// reads, edges to the inputs' producers). Otherwise recording costs one thread-local check and a
// scan of the inputs for a meta. The Tensor view and copy methods (view, reshape, slice, select,
// transpose, permute, expand, squeeze, unsqueeze, contiguous, clone, to(dtype)) record themselves
// the same way. Integer and bool outputs never require grad.
//
// Writes. mutable_data() never changes bytes another handle sees (copy-on-write), so a saved
// tensor can never be corrupted; but a handle written after the tape saved it would no longer
// match its gradient. Each write through a handle with a meta bumps the shared version counter,
// and backward() refuses a saved tensor whose version moved: a ValueError naming the op.
// Optimizers write parameters under NoGradGuard after backward(), when the graph is gone.
//
// backward() runs the graph once and frees its saved tensors (retain_graph keeps them);
// gradients reaching a tensor along several paths are summed; leaves accumulate into grad().
// Backward functions for each op live in devices/autograd/backward_*.cpp (backward_registry.h).
#include "devices/autograd/grad_mode.h"
#include "devices/autograd/node.h"
#include "devices/ops.h"
