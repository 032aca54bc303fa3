// Reading the op cases of tests/fixtures/ops/ (op_cases.h).
#include "support/op_cases.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "devices/io/npy.h"
#include "devices/registry.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

nlohmann::json read_spec(const fs::path& dir) {
  std::ifstream file(dir / "case.json");
  return nlohmann::json::parse(file);
}

// The case's JSON attributes, typed by the op's schema.
Attrs attrs_from_json(const OpDef& def, const nlohmann::json& json) {
  Attrs attrs;
  for (const auto& [key, value] : json.items()) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : def.attrs)
      if (s.name == key) spec = &s;
    if (!spec) throw ValueError(def.name + " has no attribute '" + key + "'");
    switch (spec->type) {
      case AttrType::boolean: attrs.set(key, value.get<bool>()); break;
      case AttrType::integer: attrs.set(key, value.get<int64_t>()); break;
      case AttrType::real: attrs.set(key, value.get<double>()); break;
      case AttrType::string: attrs.set(key, value.get<std::string>()); break;
      case AttrType::int_list: attrs.set(key, value.get<std::vector<int64_t>>()); break;
    }
  }
  return attrs;
}

}  // namespace

std::vector<fs::path> op_case_dirs() {
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(fs::path(TROUPE_FIXTURES) / "ops"))
    if (entry.is_directory()) cases.push_back(entry.path());
  std::sort(cases.begin(), cases.end());
  return cases;
}

std::string op_case_op(const fs::path& dir) { return read_spec(dir).at("op").get<std::string>(); }

OpCase read_op_case(const fs::path& dir) {
  const nlohmann::json spec = read_spec(dir);
  OpCase c;
  c.name = dir.filename().string();
  c.op = spec.at("op").get<std::string>();
  c.attrs = attrs_from_json(OpRegistry::global().get(c.op), spec.at("attrs"));
  for (int i = 0; i < spec.at("inputs").get<int>(); ++i)
    c.inputs.push_back(read_npy((dir / ("in" + std::to_string(i) + ".npy")).string()));
  for (int i = 0; i < spec.at("outputs").get<int>(); ++i)
    c.outputs.push_back(read_npy((dir / ("out" + std::to_string(i) + ".npy")).string()));
  c.rtol = spec.at("rtol").get<double>();
  c.atol = spec.at("atol").get<double>();
  return c;
}
