// A mesh supervised as one (mesh.h, "Supervision"): a lost rank fails exactly the answers its
// members owed, the rest of each call is carried on without it; members restart through their
// own handles (remote_actor.h, "Supervision" and "State").
#include "devices/error_kinds.h"
#include "net/remote/mesh_state.h"

namespace troupe::net {

namespace detail {

void MeshState::rank_lost(int rank, std::exception_ptr why) {
  std::vector<std::function<void()>> after;  // run outside the mutex: they complete futures and send
  {
    std::lock_guard lock(mutex);
    lost.insert(rank);
    relays.erase(rank);
    for (auto it = pending.begin(); it != pending.end();) {
      MeshPendingCall& c = it->second;
      if (std::find(c.routed.begin(), c.routed.end(), rank) == c.routed.end()) {  // not in its tree
        ++it;
        continue;
      }
      if (c.reduce) {  // a reduction without some members' answers is no answer
        size_t p = static_cast<size_t>(std::find(c.routed.begin(), c.routed.end(), rank) - c.routed.begin());
        after.push_back([done = std::move(c.done), why, what = describe(c.members[p], rank, c.method)] {
          done({}, with_context(what, why));
        });
        drop_replies(c);
        it = pending.erase(it);
        continue;
      }
      for (size_t p = 0; p < c.members.size(); ++p) {
        if (c.routed[p] != rank || c.answered[p]) continue;
        c.answered[p] = true;
        --c.left;
        after.push_back([answer = c.answer, p, why, what = describe(c.members[p], rank, c.method)] {
          answer(p, {}, with_context(what, why));
        });
      }
      // The ranks below it in the tree may never have had the call: each gets it again, alone (a
      // relay that had it drops the copy).
      for (const MeshNode& node : c.nodes) {
        if (node.rank == rank) continue;
        bool owed = false;
        for (int64_t m : node.members)
          for (size_t p = 0; p < c.members.size(); ++p)
            if (c.members[p] == static_cast<size_t>(m) && !c.answered[p]) owed = true;
        if (!owed) continue;
        after.push_back([self = shared_from_this(), fan = c.fan, node, why] {
          try {
            self->send_fan(fan, {node});
          } catch (const CommError&) {
            self->rank_lost(static_cast<int>(node.rank), std::current_exception());
          }
        });
      }
      if (c.left == 0) it = pending.erase(it);
      else ++it;
    }
  }
  for (auto& fn : after) fn();
}

void MeshState::reply_failed(int64_t call, int rank, std::exception_ptr why) {
  try {
    std::rethrow_exception(why);
  } catch (const PeerLostError&) {
    return rank_lost(rank, why);
  } catch (...) {
  }
  std::vector<std::function<void()>> after;
  {
    std::lock_guard lock(mutex);
    auto it = pending.find(call);
    if (it == pending.end()) return;
    MeshPendingCall& c = it->second;
    for (size_t p = 0; p < c.members.size(); ++p) {
      if (c.routed[p] != rank || c.answered[p]) continue;
      const std::string what = describe(c.members[p], rank, c.method);
      if (c.reduce) {
        after.push_back([done = std::move(c.done), why, what] { done({}, with_context(what, why)); });
        drop_replies(c);
        pending.erase(it);
        break;
      }
      c.answered[p] = true;
      --c.left;
      after.push_back([answer = c.answer, p, why, what] { answer(p, {}, with_context(what, why)); });
    }
    if (auto again = pending.find(call); again != pending.end() && again->second.left == 0) pending.erase(again);
  }
  for (auto& fn : after) fn();
}

}  // namespace detail

void Mesh::on_down(std::function<void(const MeshPoint& point, std::exception_ptr why)> fn) const {
  if (!state_) throw ValueError("Mesh: the handle is empty");
  for (size_t i : members_) {
    const detail::MeshMember& member = state_->members[i];
    member.actor.on_down([fn, point = member.point](std::exception_ptr why) { fn(point, why); });
  }
}

void Mesh::snapshot() const {
  if (!state_) throw ValueError("Mesh: the handle is empty");
  for (size_t i : members_) state_->members[i].actor.snapshot();
}

void Mesh::stop() const {
  if (!state_) throw ValueError("Mesh: the handle is empty");
  for (const detail::MeshMember& member : state_->members) member.actor.stop();
  std::map<int, RemoteActor> relays;
  {
    std::lock_guard lock(state_->mutex);
    relays.swap(state_->relays);
  }
  for (auto& [rank, relay] : relays) relay.stop();
  for (auto& [rank, members] : state_->members_on) members->set(0);
}

}  // namespace troupe::net
