#include "net/remote/endpoint.h"

namespace troupe::net {

using detail::error;

void RemoteActors::Impl::enroll(int source, const CallFrame& call) {
  const WireValue::List& items = call.value.as_list();
  if (rank != 0 || items.size() != 3)
    return refuse(source, call.request, error<ValueError>("enroll: rank " + std::to_string(rank) + " keeps no directory"));
  const Entry entry{source, call.actor, items[0].as_string()};
  const int replaces_rank = static_cast<int>(items[1].as_int());
  const auto replaces_id = static_cast<uint64_t>(items[2].as_int());
  std::optional<Entry> holder;
  {
    std::lock_guard lock(mutex);
    auto [it, added] = directory.emplace(call.text, entry);
    // A respawn takes over its predecessor's name even before this rank heard of the loss.
    if (!added && it->second.rank == replaces_rank && it->second.id == replaces_id) {
      it->second = entry;
      added = true;
    }
    if (!added) holder = it->second;
  }
  if (holder)
    return refuse(source, call.request,
                  error<ValueError>("the name '" + call.text + "' is taken (by " +
                                    (holder->type.empty() ? std::string("an object hosted") : "a " + holder->type) +
                                    " on rank " + std::to_string(holder->rank) + ")"));
  respond(source, call.request, WireValue(), "");
}

void RemoteActors::Impl::withdraw(int source, const std::string& name) {
  std::lock_guard lock(mutex);
  auto it = directory.find(name);
  if (it != directory.end() && it->second.rank == source) directory.erase(it);
}

void RemoteActors::Impl::answer_lookup(int source, const CallFrame& call) {
  std::optional<Entry> found;
  std::string known;
  {
    std::lock_guard lock(mutex);
    if (auto it = directory.find(call.text); it != directory.end()) found = it->second;
    int listed = 0;
    for (auto it = directory.begin(); it != directory.end() && listed < 10; ++it, ++listed)
      known += (known.empty() ? "" : ", ") + it->first;
    if (directory.size() > 10) known += ", ...";
  }
  if (rank != 0) return refuse(source, call.request, error<ValueError>("lookup: rank " + std::to_string(rank) + " keeps no directory"));
  if (!found)
    return refuse(source, call.request,
                  error<ValueError>("lookup: no actor named '" + call.text + "' (rank 0's directory holds " +
                                    (known.empty() ? std::string("none") : known) + ")"));
  respond(source, call.request,
          WireValue::list({WireValue::integer(found->rank), WireValue::integer(static_cast<int64_t>(found->id)),
                       WireValue::string(found->type)}),
          "");
}

}  // namespace troupe::net
