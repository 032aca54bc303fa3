#pragma once
// What ThreadSanitizer cannot see for itself (internal to actors/, dataflow/ and net/): a message
// handed to an actor through CAF, whose mailboxes synchronise inside libcaf_core, a library built
// without the sanitizer. A sender marks the handoff just before it sends, a handler marks the
// arrival before it reads the message, and the sanitizer then orders what the sender wrote before
// what the handler reads; the handler's turn ends with a mark too, so that the actor's next turn,
// perhaps on another thread, comes after it (CAF runs an actor's turns one at a time). One mark
// for all mailboxes: it may order more than a mailbox does (and so hide a race between two
// senders' later writes), never less. Without -fsanitize=thread send_handoff is a plain anon_send
// and HandlerTurn is nothing.
//
//   send_handoff(worker, TaskRequest{task});
//   ... [](TaskRequest& r) { HandlerTurn turn; r.task->run(); }
//
// The same for an object handed to a library's own thread that calls back with it (ZeroMQ frees a
// zero-copy message on its I/O thread): hand_over(hold) before, take_over(hold) in the callback.
#if defined(__SANITIZE_THREAD__)
#define TROUPE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TROUPE_TSAN 1
#endif
#endif

#ifdef TROUPE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

#include <caf/send.hpp>
#include <utility>

namespace troupe::detail {

#ifdef TROUPE_TSAN
inline char mailboxes;  // the address both marks name

// The message is built before the mark (anon_send would allocate it after), then sent.
template <class Handle, class... Ts>
void send_handoff(const Handle& to, Ts&&... contents) {
  caf::message message = caf::make_message(std::forward<Ts>(contents)...);
  __tsan_release(&mailboxes);
  caf::anon_send(to, std::move(message));
}
struct HandlerTurn {
  HandlerTurn() { __tsan_acquire(&mailboxes); }
  ~HandlerTurn() { __tsan_release(&mailboxes); }
};
inline void hand_over(const void* object) { __tsan_release(const_cast<void*>(object)); }
inline void take_over(const void* object) { __tsan_acquire(const_cast<void*>(object)); }
#else
template <class Handle, class... Ts>
void send_handoff(const Handle& to, Ts&&... contents) {
  caf::anon_send(to, std::forward<Ts>(contents)...);
}
struct HandlerTurn {
  HandlerTurn() {}  // user-provided: a turn is used for its scope, never "unused"
};
inline void hand_over(const void*) {}
inline void take_over(const void*) {}
#endif

}  // namespace troupe::detail
