// troupe op: runs any registered op on .npy files, its attributes parsed by the op's own schema.
//
//   troupe op matmul --attr transpose_b=true a.npy b.npy --out c.npy
//   troupe op split --attr size=2 x.npy --out-prefix part      # part0.npy, part1.npy, ...
//   troupe op --list
//   troupe op --list --json            # one JSON array: each op's inputs, attributes, devices
//   troupe op --describe gather_nd
//   troupe op --check                  # the op, kernel and backward tables agree (exit 1 if not)
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "devices/io/npy.h"
#include "devices/registry.h"
#include "examples/troupe/commands.h"

namespace troupe::cli {

namespace {

struct OpOptions {
  std::vector<std::string> args;  // NAME INPUT...
  std::vector<std::string> attrs;
  std::vector<std::string> outs;
  std::string out_prefix;
  bool list = false;
  bool json = false;
  std::string describe;
  bool check = false;
};

std::string arity(const OpDef& def) {
  if (def.max_inputs < 0) return std::to_string(def.min_inputs) + "+ inputs";
  if (def.min_inputs == def.max_inputs)
    return std::to_string(def.min_inputs) + (def.min_inputs == 1 ? " input" : " inputs");
  return std::to_string(def.min_inputs) + "-" + std::to_string(def.max_inputs) + " inputs";
}

std::string attr_summary(const AttrSpec& spec) {
  return spec.name + ":" + name(spec.type) + (spec.default_value ? "=" + to_string(*spec.default_value) : "");
}

void list_ops() {
  const OpRegistry& registry = OpRegistry::global();
  for (const std::string& op : registry.names()) {
    const OpDef& def = registry.get(op);
    std::cout << std::left << std::setw(16) << op << std::setw(12) << arity(def);
    for (const AttrSpec& spec : def.attrs) std::cout << " " << attr_summary(spec);
    std::cout << "\n" << std::setw(16) << "" << def.doc << "\n";
  }
}

// The value as JSON, in its own type (a list stays a list).
nlohmann::ordered_json attr_json(const AttrValue& value) {
  return std::visit([](const auto& v) { return nlohmann::ordered_json(v); }, value);
}

// One object per op: what --list prints, plus the device types it has kernels for.
void list_ops_json() {
  const OpRegistry& registry = OpRegistry::global();
  auto ops = nlohmann::ordered_json::array();
  for (const std::string& op : registry.names()) {
    const OpDef& def = registry.get(op);
    auto attrs = nlohmann::ordered_json::array();
    for (const AttrSpec& spec : def.attrs) {
      nlohmann::ordered_json a{{"name", spec.name}, {"type", name(spec.type)}, {"doc", spec.doc}};
      if (spec.default_value) a["default"] = attr_json(*spec.default_value);
      attrs.push_back(std::move(a));
    }
    auto devices = nlohmann::ordered_json::array();
    for (const auto& [device, kernel] : def.kernels) devices.push_back(name(device));
    ops.push_back({{"name", op},
                   {"doc", def.doc},
                   {"min_inputs", def.min_inputs},
                   {"max_inputs", def.max_inputs},  // -1: any number
                   {"attrs", std::move(attrs)},
                   {"devices", std::move(devices)},
                   {"differentiable", def.differentiable()}});
  }
  std::cout << ops.dump(2) << "\n";
}

void describe_op(const std::string& op) {
  const OpDef& def = OpRegistry::global().get(op);
  std::cout << op << ": " << def.doc << "\n" << arity(def) << "\n";
  if (def.attrs.empty()) std::cout << "no attributes\n";
  for (const AttrSpec& spec : def.attrs)
    std::cout << "  --attr " << std::left << std::setw(28)
              << (spec.name + "=<" + name(spec.type) + ">")
              << (spec.default_value ? "default " + to_string(*spec.default_value) : "required") << "  " << spec.doc
              << "\n";
  std::cout << "devices:";
  for (const auto& [device, kernel] : def.kernels) std::cout << " " << name(device);
  std::cout << "\n";
  std::cout << (def.differentiable() ? "differentiable" : "not differentiable: " + def.not_differentiable) << "\n";
}

int check_tables() {
  const std::vector<std::string> problems = check_op_tables();
  for (const std::string& problem : problems) std::cout << problem << "\n";
  if (!problems.empty()) return 1;
  std::cout << OpRegistry::global().names().size() << " ops: every kernel names an op, every differentiable op has a "
            << "backward\n";
  return 0;
}

Attrs parse_attrs(const OpDef& def, const std::vector<std::string>& texts) {
  Attrs attrs;
  for (const std::string& text : texts) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("--attr expects KEY=VALUE, got '" + text + "'");
    const std::string key = text.substr(0, eq);
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : def.attrs)
      if (s.name == key) spec = &s;
    if (!spec) {
      std::string known;
      for (const AttrSpec& s : def.attrs) known += (known.empty() ? "" : ", ") + s.name;
      throw ValueError(def.name + ": unknown attribute '" + key + "' (" +
                       (known.empty() ? "it takes none" : "it takes " + known) + ")");
    }
    attrs.set(key, parse_attr(def.name, key, spec->type, std::string_view(text).substr(eq + 1)));
  }
  return attrs;
}

int run_op(const OpOptions& o) {
  if (o.json && !o.list) throw UsageError("--json goes with --list");
  if (o.list) {
    o.json ? list_ops_json() : list_ops();
    return 0;
  }
  if (!o.describe.empty()) {
    describe_op(o.describe);
    return 0;
  }
  if (o.check) return check_tables();
  if (o.args.empty()) throw UsageError("missing the op NAME (troupe op --list shows them)");
  if (!o.outs.empty() && !o.out_prefix.empty()) throw UsageError("give either --out or --out-prefix, not both");
  if (o.outs.empty() && o.out_prefix.empty()) throw UsageError("missing --out FILE.npy (or --out-prefix P)");

  const OpRegistry& registry = OpRegistry::global();
  const OpDef& def = registry.get(o.args[0]);
  const Attrs attrs = parse_attrs(def, o.attrs);
  std::vector<Tensor> inputs;
  std::vector<TensorMeta> metas;
  for (size_t i = 1; i < o.args.size(); ++i) {
    inputs.push_back(read_npy(o.args[i]));
    metas.push_back(inputs.back().meta());
  }
  // Inference first: a shape error or an --out count mismatch costs no kernel run.
  const size_t produced = registry.infer(def, metas, attrs).size();
  if (!o.outs.empty() && o.outs.size() != produced)
    throw UsageError(def.name + " gives " + std::to_string(produced) + " output(s) but " +
                     std::to_string(o.outs.size()) + " --out were given (or use --out-prefix)");
  const std::vector<Tensor> outputs = registry.call(def, inputs, attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string path = o.outs.empty() ? o.out_prefix + std::to_string(i) + ".npy" : o.outs[i];
    write_npy(path, outputs[i]);
    std::cout << path << " " << outputs[i].meta().str() << "\n";
  }
  return 0;
}

}  // namespace

Command add_op_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("op", "Run one registered op on .npy files");
  auto o = std::make_shared<OpOptions>();
  app->add_option("args", o->args, "The op NAME, then its input .npy files in order");
  // One value per occurrence: otherwise a vector option would swallow the input files after it.
  app->add_option("--attr", o->attrs, "Attribute KEY=VALUE, parsed by the op's schema (repeatable)")
      ->allow_extra_args(false);
  app->add_option("--out", o->outs, "Output .npy file, once per output in order")->allow_extra_args(false);
  app->add_option("--out-prefix", o->out_prefix, "Write outputs to PREFIX0.npy, PREFIX1.npy, ...");
  app->add_flag("--list", o->list, "List the registered ops with their inputs, attributes and docs");
  app->add_flag("--json", o->json, "With --list: one JSON array, each op with the devices it has kernels for");
  app->add_option("--describe", o->describe, "Describe one op: inputs, attributes with types and defaults");
  app->add_flag("--check", o->check, "Check that the op, kernel and backward tables agree (exit 1 if not)");
  return {app, [o] { return run_op(*o); }};
}

}  // namespace troupe::cli
