// Elementwise ops. Unary: neg, abs and relu keep the dtype (not bool, like PyTorch); exp, log,
// sqrt, tanh, sigmoid and gelu are floating (integer and bool inputs give f32). Binary, with NumPy
// broadcasting and PyTorch type promotion: add, sub, mul, div (true division: integer and bool
// operands give f32), maximum, minimum, and the comparisons eq ne lt le gt ge (bool results,
// compared in the promoted type).
// Kernels: devices/cpu/elementwise_unary.cpp, elementwise_binary.cpp; devices/cuda/elementwise.cu.
#include "devices/op_defs/elementwise.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

DType binary_compute_dtype(DType a, DType b, bool true_division) {
  const DType promoted = promote(a, b);
  return true_division && !is_floating(promoted) ? DType::f32 : promoted;
}

GeluForm gelu_form(std::string_view op, const Attrs& attrs) {
  const std::string& approximate = attrs.get<std::string>("approximate");
  if (approximate == "none") return GeluForm::erf;
  if (approximate == "tanh") return GeluForm::tanh;
  throw ValueError(std::string(op) + ": approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
}

namespace {

// --- unary ---

OpDef same_dtype_op(std::string name, std::string doc) {
  auto infer = [](const OpInfer& c) {
    const TensorMeta& x = c.inputs[0];
    if (x.dtype == DType::boolean)
      throw DTypeError(std::string(c.op) + ": not defined for bool tensors, got " + x.str());
    return std::vector<TensorMeta>{x};
  };
  return OpDef{.name = std::move(name), .doc = std::move(doc), .attrs = {}, .infer = infer};
}

const OpRegistrar neg_op{same_dtype_op("neg", "-x elementwise (integers wrap; not bool)")};
const OpRegistrar abs_op{same_dtype_op("abs", "|x| elementwise (not bool)")};
const OpRegistrar relu_op{same_dtype_op("relu", "max(x, 0) elementwise (not bool)")};

std::vector<TensorMeta> infer_floating(const OpInfer& c) {
  TensorMeta out = c.inputs[0];
  if (!is_floating(out.dtype)) out.dtype = DType::f32;
  return {out};
}

OpDef floating_op(std::string name, std::string doc) {
  return OpDef{.name = std::move(name), .doc = std::move(doc), .attrs = {}, .infer = infer_floating};
}

const OpRegistrar exp_op{floating_op("exp", "e^x elementwise (integers give f32)")};
const OpRegistrar log_op{floating_op("log", "natural log elementwise (integers give f32)")};
const OpRegistrar sqrt_op{floating_op("sqrt", "square root elementwise (integers give f32)")};
const OpRegistrar tanh_op{floating_op("tanh", "tanh elementwise (integers give f32)")};
const OpRegistrar sigmoid_op{floating_op("sigmoid", "1 / (1 + e^-x) elementwise (integers give f32)")};

const OpRegistrar gelu_op{OpDef{
    .name = "gelu",
    .doc = "x * Phi(x) elementwise; approximate=\"tanh\" uses the tanh formula (integers give f32)",
    .attrs = {{"approximate", AttrType::string, std::string("none"), "\"none\" (erf form) or \"tanh\""}},
    .infer =
        [](const OpInfer& c) {
          const std::string& approximate = c.attrs.get<std::string>("approximate");
          if (approximate != "none" && approximate != "tanh")
            throw ValueError("gelu: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\" for " +
                             c.inputs[0].str());
          return infer_floating(c);
        }}};

// --- binary ---

enum class Operands { any, not_bool, true_division, comparison };

OpDef binary_op(std::string name, std::string doc, Operands operands = Operands::any) {
  auto infer = [operands](const OpInfer& c) {
    const std::string op(c.op);
    const TensorMeta& a = c.inputs[0];
    const TensorMeta& b = c.inputs[1];
    const Shape shape = broadcast_shapes(op.c_str(), a.shape, b.shape);
    const DType compute = binary_compute_dtype(a.dtype, b.dtype, operands == Operands::true_division);
    if (operands == Operands::not_bool && compute == DType::boolean)  // like PyTorch
      throw DTypeError(op + ": not defined for " + troupe::name(compute) + " operands (" + a.str() + ", " + b.str() +
                       ")");
    return std::vector<TensorMeta>{{operands == Operands::comparison ? DType::boolean : compute, shape, a.device}};
  };
  return OpDef{.name = std::move(name),
               .doc = std::move(doc),
               .min_inputs = 2,
               .max_inputs = 2,
               .attrs = {},
               .infer = infer,
               .not_differentiable = operands == Operands::comparison ? "comparison: bool output" : ""};
}

const OpRegistrar add_op{binary_op("add", "a + b elementwise (broadcasting, type promotion; bool: or)")};
const OpRegistrar sub_op{
    binary_op("sub", "a - b elementwise (broadcasting, type promotion; not bool)", Operands::not_bool)};
const OpRegistrar mul_op{binary_op("mul", "a * b elementwise (broadcasting, type promotion; bool: and)")};
const OpRegistrar div_op{
    binary_op("div", "a / b elementwise, true division (integers give f32)", Operands::true_division)};
const OpRegistrar maximum_op{binary_op("maximum", "elementwise maximum (NaN wins)")};
const OpRegistrar minimum_op{binary_op("minimum", "elementwise minimum (NaN wins)")};
const OpRegistrar eq_op{binary_op("eq", "a == b elementwise, bool result", Operands::comparison)};
const OpRegistrar ne_op{binary_op("ne", "a != b elementwise, bool result", Operands::comparison)};
const OpRegistrar lt_op{binary_op("lt", "a < b elementwise, bool result", Operands::comparison)};
const OpRegistrar le_op{binary_op("le", "a <= b elementwise, bool result", Operands::comparison)};
const OpRegistrar gt_op{binary_op("gt", "a > b elementwise, bool result", Operands::comparison)};
const OpRegistrar ge_op{binary_op("ge", "a >= b elementwise, bool result", Operands::comparison)};

}  // namespace
}  // namespace troupe
