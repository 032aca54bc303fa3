#pragma once
// Grad mode: whether ops called on this thread record the tape. On by default; NoGradGuard turns it
// off for a scope (inference, optimizer steps, the backward pass itself).
//
//   {
//     NoGradGuard no_grad;
//     Tensor y = model(x);   // no tape, even when the weights require grad
//   }
namespace troupe {

namespace detail {
inline thread_local bool grad_mode = true;
}

inline bool grad_enabled() { return detail::grad_mode; }
inline void set_grad_enabled(bool enabled) { detail::grad_mode = enabled; }

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace troupe
