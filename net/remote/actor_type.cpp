#include "net/remote/actor_type.h"

#include <cctype>
#include <map>
#include <mutex>

namespace troupe::net {

namespace {

struct Table {
  std::mutex mutex;
  std::map<std::string, ActorType, std::less<>> types;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

const ActorType::Method* ActorType::method(std::string_view wanted) const {
  for (const Method& m : methods)
    if (m.name == wanted) return &m;
  return nullptr;
}

std::string ActorType::method_names() const {
  std::string out;
  for (const Method& m : methods) out += (out.empty() ? "" : ", ") + m.name;
  return out.empty() ? "no methods" : out;
}

void register_actor_type(ActorType type) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const std::string name = type.name;
  if (name.empty()) throw ValueError("TROUPE_ACTOR: an actor type needs a name");
  if (!t.types.emplace(name, std::move(type)).second)
    throw ValueError("TROUPE_ACTOR: actor type '" + name + "' is registered twice");
}

// Registered types are never removed, so the pointer stays valid.
const ActorType* find_actor_type(std::string_view name) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.types.find(name);
  return it == t.types.end() ? nullptr : &it->second;
}

std::string actor_type_names() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  std::string out;
  for (const auto& [name, type] : t.types) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

namespace detail {

std::vector<std::string> member_names(const char* member_pointers) {
  std::vector<std::string> names;
  const std::string_view all(member_pointers);
  size_t start = 0;
  int depth = 0;  // commas inside <> or () belong to one argument
  for (size_t i = 0; i <= all.size(); ++i) {
    const char c = i < all.size() ? all[i] : ',';
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c != ',' || depth > 0) continue;
    std::string_view item = all.substr(start, i - start);
    start = i + 1;
    if (const size_t colons = item.rfind("::"); colons != std::string_view::npos) item.remove_prefix(colons + 2);
    while (!item.empty() && !(std::isalnum(static_cast<unsigned char>(item.front())) || item.front() == '_'))
      item.remove_prefix(1);
    while (!item.empty() && !(std::isalnum(static_cast<unsigned char>(item.back())) || item.back() == '_'))
      item.remove_suffix(1);
    if (!item.empty()) names.emplace_back(item);
  }
  return names;
}

}  // namespace detail
}  // namespace troupe::net
