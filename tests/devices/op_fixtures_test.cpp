// Every case under tests/fixtures/ops/ (written by make_fixtures.py from NumPy/PyTorch): run the op
// through the registry on in*.npy with the case's attributes and compare with out*.npy within the
// case's rtol/atol. An op that is not registered fails its case. Only non-fatal checks run inside
// the loop (a REQUIRE would end the test case at the first bad fixture).
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "devices/io/npy.h"
#include "devices/registry.h"
#include "support/close.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

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

void check_case(const fs::path& dir) {
  INFO("fixture " << dir.filename().string());
  std::ifstream file(dir / "case.json");
  const nlohmann::json spec = nlohmann::json::parse(file);
  const OpDef& def = OpRegistry::global().get(spec.at("op").get<std::string>());
  std::vector<Tensor> inputs;
  for (int i = 0; i < spec.at("inputs").get<int>(); ++i)
    inputs.push_back(read_npy((dir / ("in" + std::to_string(i) + ".npy")).string()));
  const auto outputs = OpRegistry::global().call(def, inputs, attrs_from_json(def, spec.at("attrs")));
  CHECK(outputs.size() == spec.at("outputs").get<size_t>());
  if (outputs.size() != spec.at("outputs").get<size_t>()) return;
  for (size_t i = 0; i < outputs.size(); ++i) {
    INFO("output " << i);
    const Tensor want = read_npy((dir / ("out" + std::to_string(i) + ".npy")).string());
    check_close(outputs[i], want, {.rtol = spec.at("rtol").get<double>(), .atol = spec.at("atol").get<double>()});
  }
}

}  // namespace

TEST_CASE("ops match the NumPy/PyTorch fixtures", "[ops][fixtures]") {
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(fs::path(TROUPE_FIXTURES) / "ops"))
    if (entry.is_directory()) cases.push_back(entry.path());
  std::sort(cases.begin(), cases.end());
  REQUIRE(cases.size() >= 40);
  for (const fs::path& dir : cases) {
    try {
      check_case(dir);
    } catch (const std::exception& e) {  // one failing case must not hide the others
      FAIL_CHECK(dir.filename().string() << ": " << e.what());
    }
  }
}
