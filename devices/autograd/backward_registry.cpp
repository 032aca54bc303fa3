#include "devices/autograd/backward_registry.h"

#include <map>
#include <mutex>
#include <shared_mutex>

#include "devices/error.h"

namespace troupe {

namespace {

struct Table {
  std::shared_mutex mutex;
  std::map<std::string, BackwardDef, std::less<>> defs;  // node-based: pointers stay valid
};

Table& table() {
  static Table* t = new Table;  // never destroyed: tapes may outlive static teardown
  return *t;
}

}  // namespace

void define_backward(BackwardDef def) {
  if (!def.fn) throw ValueError("define_backward: op '" + def.op + "' has no backward function");
  Table& t = table();
  std::unique_lock lock(t.mutex);
  if (t.defs.contains(def.op)) throw ValueError("define_backward: op '" + def.op + "' already has a backward");
  std::string key = def.op;
  t.defs.emplace(std::move(key), std::move(def));
}

const BackwardDef* find_backward(std::string_view op) {
  Table& t = table();
  std::shared_lock lock(t.mutex);
  auto it = t.defs.find(op);
  return it == t.defs.end() ? nullptr : &it->second;
}

std::vector<BackwardDef> backward_defs() {
  Table& t = table();
  std::shared_lock lock(t.mutex);
  std::vector<BackwardDef> defs;
  for (auto& [op, def] : t.defs) defs.push_back(def);
  return defs;
}

}  // namespace troupe
