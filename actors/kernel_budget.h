#pragma once
// KernelBudget: the intra-op threads a graph node's kernels get while it fires. Like the
// runtime's forked tasks (runtime.h, "Thread budget"), node bodies firing at once share the
// cores: each gets cores / (bodies firing now), decided when it starts, or the runtime's fixed
// intra_op_threads when one is set; the process-wide setting (global_intra_op_threads(), e.g.
// TROUPE_INTRA_OP_THREADS) caps the cores shared. So node actors and their kernels do not oversubscribe.
//
//   {
//     KernelBudget budget(Runtime::current().options().intra_op_threads, hardware_cores());
//     auto outs = OpRegistry::global().call(def, tensors, attrs);  // kernels use their share
//   }                                                              // the share is given back
//
// Node bodies count apart from forked tasks: a node that forks tasks (a module call inside a call
// node) leaves their budget to the runtime.
namespace troupe {

class KernelBudget {
 public:
  // fixed > 0: every kernel gets that many threads; 0: a share of `cores`.
  KernelBudget(int fixed, int cores);
  ~KernelBudget();
  KernelBudget(const KernelBudget&) = delete;
  KernelBudget& operator=(const KernelBudget&) = delete;

 private:
  int previous_;  // the thread's own setting before, restored after
};

}  // namespace troupe
