#pragma once
// A group's collective actor (internal to net/collectives/, kept in its GroupState): one thread with a FIFO mailbox that runs the
// group's async collectives in call order. Started on the first post; its destructor finishes the
// queued calls and joins (or, when the group dies on the actor's own thread, lets it wind down).
//
//   CollectiveActor actor;
//   actor.post([] { /* this rank's part of a collective */ });
#include <functional>
#include <memory>
#include <thread>

namespace troupe::net::collectives {

class CollectiveActor {
 public:
  CollectiveActor();
  ~CollectiveActor();
  CollectiveActor(const CollectiveActor&) = delete;
  CollectiveActor& operator=(const CollectiveActor&) = delete;

  void post(std::function<void()> job);

 private:
  struct Mailbox;
  std::shared_ptr<Mailbox> mailbox_;  // shared with the thread, which may outlive this object
  std::thread thread_;
};

}  // namespace troupe::net::collectives
