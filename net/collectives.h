#pragma once
// Collectives over a ProcessGroup, like torch.distributed: every rank of the group makes the same
// calls in the same order; tensors are updated in place (a Tensor is a copy-on-write value, so the
// result *replaces* the caller's tensor; other tensors sharing its old bytes keep their values).
//
//   auto world = troupe::net::init_process_group();
//   Tensor grad = ...;
//   all_reduce(*world, grad, ReduceOp::avg);                  // every rank gets the mean
//   Work w = all_reduce_async(*world, grad, ReduceOp::sum);   // runs on the group's collective actor
//   ... compute ...
//   w.wait();                                                 // grad holds the sum; rethrows errors
//   broadcast(*world, weights, /*root=*/0);
//   std::vector<Tensor> parts;
//   all_gather(*world, parts, mine);                          // parts[r] is rank r's `mine`
//   barrier(*world, std::chrono::seconds(10));                // per-call timeout
//
// Collectives are actor topologies. Each rank is an actor with one mailbox (its transport's
// ROUTER, see transport.h); a collective is a fixed message pattern between those actors (a ring,
// a hypercube for recursive doubling, a binomial tree, a star), one algorithm per file under
// net/collectives/. Messages of the n-th collective of a group are keyed by that sequence number, so
// concurrent collectives (an async one next to a blocking one, a sub-group next to the world) never
// see each other's traffic. Blocking calls run the rank's part on the caller's thread (no hand-off:
// latency); async calls queue it to the group's collective actor, a thread with a FIFO mailbox that
// runs them in call order, and return a Work. The collectives' state of a group (the numbering,
// the actor, shared memory, and one all_reduce object per count, dtype and reduce op, set up on
// the first such call and reused, Gloo-style, by the later ones) lives in
// net/collectives/group_state.h and is freed with the group.
//
// Algorithms (net/collectives/): all_reduce over ZeroMQ is recursive doubling up to a size measured
// per world size, then a chunked, pipelined ring; when every rank of the group runs on this host it
// goes through shared memory instead (shm_all_reduce.h; TROUPE_SHM=0 turns that off). broadcast and
// reduce use binomial trees; all_gather and reduce_scatter rings; scatter, gather and all_to_all
// direct sends; barrier a dissemination pattern.
//
// Errors. Arguments are checked on every rank before anything is sent: IndexError (root out of
// range), ValueError (list length != group size, undefined tensor), ShapeError / DTypeError
// (inconsistent shapes or dtypes, a reduction the dtype does not support), each naming the
// collective, the rank, shapes and dtypes. Every message carries the call's descriptor (op, reduce
// op, dtype, element count, root); ranks whose calls differ fail with CommError naming both ranks
// and both calls, and abort the collective on every other rank, so nobody hangs. A rank that dies
// gives PeerLostError naming it (within 5 s), a silent one TimeoutError after the timeout (the
// group's, or the per-call one).
//
// Dtypes: f32, f64, f16, bf16 (reduced in f32), i32, i64, u8; bool for max and min (and for the
// moving collectives, which carry any dtype). avg needs a floating dtype.
#include <chrono>
#include <optional>
#include <vector>

#include "devices/tensor.h"
#include "net/frame.h"
#include "net/process_group.h"
#include "net/work.h"

namespace troupe::net {

using Timeout = std::optional<std::chrono::milliseconds>;  // nullopt: the group's timeout

// Every rank's tensor becomes root's.
void broadcast(ProcessGroup& group, Tensor& tensor, int root, Timeout timeout = std::nullopt);
// root's tensor becomes the reduction of every rank's; the others' tensors are left as they were.
void reduce(ProcessGroup& group, Tensor& tensor, int root, ReduceOp op = ReduceOp::sum,
            Timeout timeout = std::nullopt);
// Every rank's tensor becomes the reduction of every rank's (the same bits on every rank).
void all_reduce(ProcessGroup& group, Tensor& tensor, ReduceOp op = ReduceOp::sum, Timeout timeout = std::nullopt);
// Rank r's output becomes root's inputs[r]; inputs is read on root only (size() tensors, same meta).
void scatter(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs, int root,
             Timeout timeout = std::nullopt);
// On root, outputs becomes every rank's input (outputs[r] from rank r); untouched elsewhere.
void gather(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input, int root,
            Timeout timeout = std::nullopt);
// On every rank, outputs becomes every rank's input (outputs[r] from rank r).
void all_gather(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input,
                Timeout timeout = std::nullopt);
// output becomes the reduction over ranks of their inputs[this rank] (size() tensors, same meta).
void reduce_scatter(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs,
                    ReduceOp op = ReduceOp::sum, Timeout timeout = std::nullopt);
// outputs[s] becomes rank s's inputs[this rank]; inputs may differ in shape per destination.
void all_to_all(ProcessGroup& group, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                Timeout timeout = std::nullopt);
// Returns once every rank of the group has called it.
void barrier(ProcessGroup& group, Timeout timeout = std::nullopt);

// Async variants: the arguments are validated now and the call takes its place in the group's
// order now; the output tensors must outlive the Work and hold the result once wait() returns
// (wait rethrows the collective's error). Inputs are copied by value (no bytes are copied).
Work broadcast_async(ProcessGroup& group, Tensor& tensor, int root, Timeout timeout = std::nullopt);
Work reduce_async(ProcessGroup& group, Tensor& tensor, int root, ReduceOp op = ReduceOp::sum,
                  Timeout timeout = std::nullopt);
Work all_reduce_async(ProcessGroup& group, Tensor& tensor, ReduceOp op = ReduceOp::sum,
                      Timeout timeout = std::nullopt);
Work scatter_async(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs, int root,
                   Timeout timeout = std::nullopt);
Work gather_async(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input, int root,
                  Timeout timeout = std::nullopt);
Work all_gather_async(ProcessGroup& group, std::vector<Tensor>& outputs, const Tensor& input,
                      Timeout timeout = std::nullopt);
Work reduce_scatter_async(ProcessGroup& group, Tensor& output, const std::vector<Tensor>& inputs,
                          ReduceOp op = ReduceOp::sum, Timeout timeout = std::nullopt);
Work all_to_all_async(ProcessGroup& group, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                      Timeout timeout = std::nullopt);
Work barrier_async(ProcessGroup& group, Timeout timeout = std::nullopt);

}  // namespace troupe::net
