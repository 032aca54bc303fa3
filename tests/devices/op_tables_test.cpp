// The op table, the per-device kernels and the backward functions agree (check_op_tables, after
// every registrar of the loaded libraries has run), and the checks themselves on a registry of
// their own: kernels for undefined ops, duplicate kernels, missing backwards, backwards without an op.
#include <catch2/catch.hpp>

#include <algorithm>

#include "devices/autograd/backward_registry.h"
#include "devices/registry.h"

using namespace troupe;
using Catch::Contains;

namespace {

std::vector<Tensor> identity(const OpCall& c) { return {c.inputs[0]}; }

OpDef test_op(std::string name, std::string not_differentiable = "") {
  return OpDef{.name = std::move(name),
               .doc = "a test op",
               .attrs = {},
               .infer = [](const OpInfer& c) { return std::vector<TensorMeta>{c.inputs[0]}; },
               .kernels = {{DeviceType::cpu, identity}},
               .not_differentiable = std::move(not_differentiable)};
}

bool has(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

}  // namespace

TEST_CASE("op tables: every kernel names an op, every differentiable op has a backward") {
  CHECK(check_op_tables() == std::vector<std::string>{});
}

TEST_CASE("op tables: a kernel for an undefined op is reported, never a placeholder op") {
  OpRegistry registry;
  registry.add_kernel("scale", DeviceType::cuda, identity);  // before its definition: joins it
  registry.define(test_op("scale"));
  registry.add_kernel("scael", DeviceType::cuda, identity);  // misspelt
  registry.add_kernel("scale", DeviceType::cpu, identity);   // a second cpu kernel
  CHECK(registry.names() == std::vector<std::string>{"scale"});
  CHECK(registry.get("scale").kernels.size() == 2);
  CHECK_FALSE(registry.contains("scael"));
  CHECK_THROWS_WITH(registry.get("scael"), Contains("unknown op 'scael'") && Contains("did you mean scale?"));
  CHECK(registry.registration_problems() ==
        std::vector<std::string>{"op 'scael': a cuda kernel, but no op of that name is defined (did you mean scale?)",
                                 "op 'scale': a second cpu kernel (the first one stays)"});
  CHECK_THROWS_WITH(registry.define(test_op("scale")),
                    "define: op 'scale' is already registered");
}

TEST_CASE("op tables: differentiable ops need a backward, backwards need an op") {
  OpRegistry registry;  // none of the global ops: their backward functions have no op here
  registry.define(test_op("scale"));
  registry.define(test_op("is_scaled", "bool output"));
  registry.define(test_op("mul", "said by mistake"));
  const std::vector<std::string> problems = check_op_tables(registry);
  CHECK(has(problems, "op 'scale': differentiable, but no backward is registered (register one in devices/autograd/, "
                      "or set OpDef::not_differentiable to the reason)"));
  CHECK(has(problems, "op 'mul': a backward is registered, but the op says it is not differentiable (said by mistake)"));
  CHECK(has(problems, "backward for 'add': no op of that name is defined"));
  CHECK_FALSE(has(problems, "backward for 'slice': no op of that name is defined"));  // a Tensor method
  for (const std::string& line : problems) CHECK_THAT(line, !Contains("is_scaled"));
}

TEST_CASE("op tables: a second backward for an op is a ValueError naming the op, and the first stays") {
  const BackwardDef* add = find_backward("add");
  REQUIRE(add != nullptr);
  CHECK_THROWS_WITH(define_backward({"add", add->fn}), "define_backward: op 'add' already has a backward");
  CHECK_THROWS_AS(define_backward({"add", add->fn}), ValueError);
  CHECK(find_backward("add") == add);
  CHECK_THROWS_WITH(define_backward({"scale", nullptr}), "define_backward: op 'scale' has no backward function");
}
