// Every case under tests/fixtures/ops/ (written by make_fixtures.py from NumPy/PyTorch): run the op
// through the registry on in*.npy with the case's attributes and compare with out*.npy within the
// case's rtol/atol. An op that is not registered fails its case. Only non-fatal checks run inside
// the loop (a REQUIRE would end the test case at the first bad fixture). And every registered op
// has a case here or a line in kNoOpFixture saying where it is checked instead.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>

#include "devices/registry.h"
#include "support/close.h"
#include "support/op_cases.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// The registered ops without a case under tests/fixtures/ops/, and why. A new op needs a case
// (make_fixtures.py) or a line here.
const std::map<std::string, std::string> kNoOpFixture = {
    {"abs", "elementwise_test.cpp"},
    {"neg", "elementwise_test.cpp"},
    {"sqrt", "elementwise_test.cpp"},
    {"minimum", "elementwise_test.cpp (maximum has a case)"},
    {"eq", "a comparison: exact bool results in elementwise_test.cpp"},
    {"ne", "a comparison: exact bool results in elementwise_test.cpp"},
    {"lt", "a comparison: exact bool results in elementwise_test.cpp"},
    {"le", "a comparison: exact bool results in elementwise_test.cpp"},
    {"gt", "a comparison: exact bool results in elementwise_test.cpp"},
    {"ge", "a comparison: exact bool results in elementwise_test.cpp"},
    {"bmm", "matmul_test.cpp, against a triple loop in double"},
    {"packed_attention", "packed_attention_test.cpp, against matmul and softmax per head; transformer_test.cpp"},
    {"linear_bf16", "gemm_bf16_test.cpp, against linear on operands rounded to bf16"},
    {"add_layer_norm", "add_layer_norm_test.cpp, against add then layer_norm (its definition)"},
    {"chunk", "split with computed sizes (split has cases); join_split_test.cpp"},
    {"cast", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"contiguous", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"permute", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"reshape", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"squeeze", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"transpose", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"unsqueeze", "a Tensor method as an op: tensor_test.cpp, join_split_test.cpp"},
    {"conv2d", "PyTorch values in fixtures/autograd/nn.safetensors (autograd_nn_test.cpp)"},
    {"max_pool2d", "PyTorch values in fixtures/autograd/nn.safetensors (autograd_nn_test.cpp)"},
    {"nll_loss", "PyTorch values in fixtures/autograd/nn.safetensors (autograd_nn_test.cpp)"},
    {"cross_entropy", "PyTorch values in fixtures/autograd/nn.safetensors (autograd_nn_test.cpp)"},
    {"lstm", "PyTorch values in fixtures/autograd/nn.safetensors and fixtures/lstm/ (lstm_test.cpp)"},
    {"dropout", "random: masks from troupe's generator, checked in autograd_nn_test.cpp"},
    {"dropout2d", "random: masks from troupe's generator, checked in autograd_nn_test.cpp"},
    {"conv2d_backward_input", "a gradient kernel: PyTorch gradients in fixtures/autograd/nn.safetensors"},
    {"conv2d_backward_weight", "a gradient kernel: PyTorch gradients in fixtures/autograd/nn.safetensors"},
    {"max_pool2d_backward", "a gradient kernel: PyTorch gradients in fixtures/autograd/nn.safetensors"},
    {"nll_loss_backward", "a gradient kernel: PyTorch gradients in fixtures/autograd/nn.safetensors"},
    {"cross_entropy_backward", "a gradient kernel: PyTorch gradients in fixtures/autograd/nn.safetensors"},
    {"lstm_backward", "a gradient kernel: PyTorch gradients in fixtures/autograd/nn.safetensors"},
    {"dropout_backward", "a gradient kernel: dropout's gradient checks (autograd_nn_test.cpp)"},
    {"relu_backward", "a gradient kernel: relu's gradient checks (autograd_ops_test.cpp)"},
    {"tanh_backward", "a gradient kernel: tanh's gradient checks (autograd_ops_test.cpp)"},
    {"sigmoid_backward", "a gradient kernel: sigmoid's gradient checks (autograd_ops_test.cpp)"},
    {"gelu_backward", "a gradient kernel: gelu's gradient checks (autograd_ops_test.cpp)"},
    {"layer_norm_backward", "a gradient kernel: layer_norm's gradient checks (autograd_ops_test.cpp)"},
    {"sgd_update", "optimizer_update_test.cpp, against SGD's update rule in double; the optimizer tests"},
    {"adam_update", "optimizer_update_test.cpp, against Adam's update rule in double; the optimizer tests"},
};

void check_case(const fs::path& dir) {
  INFO("fixture " << dir.filename().string());
  const OpCase c = read_op_case(dir);
  const auto outputs = call_op(c.op, c.inputs, c.attrs);
  CHECK(outputs.size() == c.outputs.size());
  if (outputs.size() != c.outputs.size()) return;
  for (size_t i = 0; i < outputs.size(); ++i) {
    INFO("output " << i);
    check_close(outputs[i], c.outputs[i], {.rtol = c.rtol, .atol = c.atol});
  }
}

}  // namespace

TEST_CASE("ops match the NumPy/PyTorch fixtures", "[ops][fixtures]") {
  const std::vector<fs::path> cases = op_case_dirs();
  REQUIRE(cases.size() >= 40);
  for (const fs::path& dir : cases) {
    try {
      check_case(dir);
    } catch (const std::exception& e) {  // one failing case must not hide the others
      FAIL_CHECK(dir.filename().string() << ": " << e.what());
    }
  }
}

TEST_CASE("every op has a fixture or a recorded reason", "[ops][fixtures]") {
  std::set<std::string> with_fixture;
  for (const fs::path& dir : op_case_dirs()) with_fixture.insert(op_case_op(dir));
  std::vector<std::string> neither, stale;
  for (const std::string& op : OpRegistry::global().names())
    if (!with_fixture.contains(op) && !kNoOpFixture.contains(op)) neither.push_back(op);
  for (const auto& [op, why] : kNoOpFixture)
    if (with_fixture.contains(op) || !OpRegistry::global().contains(op)) stale.push_back(op);
  CHECK(neither == std::vector<std::string>{});  // add a case to make_fixtures.py, or a reason to kNoOpFixture
  CHECK(stale == std::vector<std::string>{});    // kNoOpFixture lines for ops with a case or no longer defined
}
