// The CPU kernels of conv2d, conv2d_backward_input and conv2d_backward_weight (the ops:
// devices/op_defs/conv2d.cpp).
//
// f32 runs oneDNN primitives. Creating one costs far more than running a small one, so each
// thread caches them by geometry (a training loop creates three per layer, once), each on the
// layouts measured faster on this machine (once, then remembered: kernel_choices.h): the tensors'
// plain NCHW/OIHW, or oneDNN's blocked ones with reorders around the call (the plain ones,
// unmeasured, with deterministic kernels: the two round differently). f64 runs direct loops,
// there for gradient checks.
#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <unordered_map>
#include <string>
#include <tuple>

#include "devices/cpu/kernel_choices.h"
#include "devices/determinism.h"
#include "devices/op_defs/conv2d.h"
#include "devices/registry.h"
#include "devices/threads.h"

namespace troupe {
namespace {

// ---- oneDNN (f32) ----

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

using dnnl::memory;

// A primitive and the layouts it runs on. oneDNN's fastest kernels often want blocked layouts
// (nChw16c, ...): then each call reorders the plain NCHW/OIHW arguments into staging buffers
// kept here, and the outputs back.
struct Staged {
  struct Arg {
    int id = 0;
    bool output = false;
    memory::desc plain;
    bool staged = false;
    memory staging;
    dnnl::reorder reorder;  // plain -> staging for inputs, staging -> plain for outputs
  };
  dnnl::primitive primitive;
  std::string impl;
  std::vector<Arg> args;

  void run(const std::unordered_map<int, void*>& data) {
    apply_intra_op_threads();
    dnnl::stream& stream = cpu_stream();
    std::unordered_map<int, memory> exec, user;
    for (Arg& a : args) {
      memory m(a.plain, cpu_engine(), data.at(a.id));
      if (a.staged && !a.output) a.reorder.execute(stream, m, a.staging);
      exec.emplace(a.id, a.staged ? a.staging : m);
      user.emplace(a.id, m);
    }
    primitive.execute(stream, exec);
    for (Arg& a : args)
      if (a.staged && a.output) a.reorder.execute(stream, a.staging, user.at(a.id));
    stream.wait();
  }
};

struct ArgSpec {
  int id;
  bool output;
  memory::desc plain;
};

template <class PrimitiveDesc, class Primitive>
Staged stage(const PrimitiveDesc& pd, const std::vector<ArgSpec>& specs) {
  Staged s;
  s.primitive = Primitive(pd);
  s.impl = pd.impl_info_str();
  for (const ArgSpec& spec : specs) {
    Staged::Arg a;
    a.id = spec.id;
    a.output = spec.output;
    a.plain = spec.plain;
    const memory::desc wanted = pd.query_md(dnnl::query::exec_arg_md, spec.id);
    if (wanted != spec.plain) {
      a.staged = true;
      a.staging = memory(wanted, cpu_engine());
      a.reorder = spec.output ? dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), wanted, cpu_engine(), spec.plain))
                              : dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), spec.plain, cpu_engine(), wanted));
    }
    s.args.push_back(std::move(a));
  }
  return s;
}

// Zeroed plain buffers for every argument of s.
struct Buffers {
  std::vector<std::vector<float>> storage;
  std::unordered_map<int, void*> data;
  explicit Buffers(const Staged& s) {
    for (const Staged::Arg& a : s.args) {
      storage.emplace_back(a.plain.get_size() / sizeof(float), 0.0f);
      data[a.id] = storage.back().data();
    }
  }
};

double seconds(Staged& s, Buffers& b) {
  const auto start = std::chrono::steady_clock::now();
  s.run(b.data);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The faster of the primitive on plain layouts and on the layouts oneDNN prefers (reorders
// included), measured once per geometry on this machine and then remembered under key, for later
// processes too (kernel_choices.h): which wins depends on the channel counts. Runs alternate and
// the best of each counts, so a busy core misleads it less.
template <class PrimitiveDesc, class Primitive, class MakeDesc>
Staged tuned(const std::string& key, MakeDesc make, const std::vector<ArgSpec>& specs) {
  if (deterministic_kernels()) return stage<PrimitiveDesc, Primitive>(make(false), specs);
  const std::optional<std::string> known = remembered_choice(key);
  if (known == "preferred") {
    try {
      return stage<PrimitiveDesc, Primitive>(make(true), specs);
    } catch (const dnnl::error&) {  // not on this oneDNN after all: measure again
    }
  } else if (known == "plain") {
    return stage<PrimitiveDesc, Primitive>(make(false), specs);
  }
  Staged plain = stage<PrimitiveDesc, Primitive>(make(false), specs);
  Staged preferred;
  try {
    preferred = stage<PrimitiveDesc, Primitive>(make(true), specs);
  } catch (const dnnl::error&) {
    remember_choice(key, "plain");
    return plain;
  }
  if (preferred.impl == plain.impl) {
    remember_choice(key, "plain");
    return plain;
  }
  Buffers buffers(plain);
  plain.run(buffers.data);  // warm-up: first-touch pages, JIT code
  preferred.run(buffers.data);
  double best_plain = 1e30, best_preferred = 1e30;
  for (int i = 0; i < 3; ++i) {
    best_plain = std::min(best_plain, seconds(plain, buffers));
    best_preferred = std::min(best_preferred, seconds(preferred, buffers));
  }
  const bool faster = best_preferred < best_plain;
  remember_choice(key, faster ? "preferred" : "plain");
  return faster ? std::move(preferred) : std::move(plain);
}

struct OneDnnConv {
  std::string name;  // geometry and threads, for the remembered choices' keys
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, padding;
  dnnl::convolution_forward::primitive_desc hints[2];  // plain layouts, preferred layouts
  std::optional<Staged> forward, forward_no_bias, backward_data, backward_weights, backward_weights_no_bias;

  memory::desc layout(const memory::desc& plain, bool preferred) const {
    return preferred ? memory::desc(plain.dims(), memory::data_type::f32, memory::format_tag::any) : plain;
  }
};

// oneDNN sizes a primitive's threading when it creates it (and then runs that many threads
// whatever the OpenMP setting), so the thread count is applied first and is part of the key.
OneDnnConv& onednn_conv(const Conv2dGeometry& g) {
  thread_local std::map<std::pair<decltype(g.key()), int>, OneDnnConv> cache;
  apply_intra_op_threads();
  auto [it, fresh] = cache.try_emplace(std::pair(g.key(), intra_op_threads()));
  OneDnnConv& p = it->second;
  if (!fresh) return p;
  const auto [n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups] = g.key();
  for (int64_t v : {n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups}) p.name += std::to_string(v) + ",";
  p.name += "threads=" + std::to_string(intra_op_threads());
  try {
    const auto f32 = memory::data_type::f32;
    p.src = memory::desc({g.n, g.c, g.h, g.w}, f32, memory::format_tag::nchw);
    p.dst = memory::desc({g.n, g.o, g.oh, g.ow}, f32, memory::format_tag::nchw);
    p.weights = g.groups == 1 ? memory::desc({g.o, g.c, g.kh, g.kw}, f32, memory::format_tag::oihw)
                              : memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, f32,
                                             memory::format_tag::goihw);
    p.bias = memory::desc({g.o}, f32, memory::format_tag::x);
    p.strides = {g.sh, g.sw};
    p.dilates = {g.dh - 1, g.dw - 1};
    p.padding = {g.ph, g.pw};
    for (int preferred = 0; preferred < 2; ++preferred)
      p.hints[preferred] = dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                          p.layout(p.src, preferred), p.layout(p.weights, preferred), p.bias,
                                          p.layout(p.dst, preferred), p.strides, p.dilates, p.padding, p.padding),
          cpu_engine());
  } catch (const dnnl::error& e) {
    cache.erase(it);
    throw ValueError(std::string("conv2d: oneDNN could not create the primitive: ") + e.what());
  }
  return p;
}

Staged& forward_primitive(OneDnnConv& p, bool bias) {
  std::optional<Staged>& slot = bias ? p.forward : p.forward_no_bias;
  if (!slot) {
    std::vector<ArgSpec> args{{DNNL_ARG_SRC, false, p.src}, {DNNL_ARG_WEIGHTS, false, p.weights},
                              {DNNL_ARG_DST, true, p.dst}};
    if (bias) args.push_back({DNNL_ARG_BIAS, false, p.bias});
    slot = tuned<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(
        (bias ? "conv2d/forward/" : "conv2d/forward_no_bias/") + p.name, [&](bool preferred) {
          return dnnl::convolution_forward::primitive_desc(
              dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                              p.layout(p.src, preferred), p.layout(p.weights, preferred),
                                              bias ? p.bias : memory::desc(), p.layout(p.dst, preferred), p.strides,
                                              p.dilates, p.padding, p.padding),
              cpu_engine());
        },
        args);
  }
  return *slot;
}

Staged& backward_data_primitive(OneDnnConv& p) {
  if (!p.backward_data)
    p.backward_data = tuned<dnnl::convolution_backward_data::primitive_desc, dnnl::convolution_backward_data>(
        "conv2d/backward_data/" + p.name, [&](bool preferred) {
          return dnnl::convolution_backward_data::primitive_desc(
              dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, p.layout(p.src, preferred),
                                                    p.layout(p.weights, preferred), p.layout(p.dst, preferred),
                                                    p.strides, p.dilates, p.padding, p.padding),
              cpu_engine(), p.hints[preferred]);
        },
        {{DNNL_ARG_DIFF_DST, false, p.dst}, {DNNL_ARG_WEIGHTS, false, p.weights}, {DNNL_ARG_DIFF_SRC, true, p.src}});
  return *p.backward_data;
}

Staged& backward_weights_primitive(OneDnnConv& p, bool bias) {
  std::optional<Staged>& slot = bias ? p.backward_weights : p.backward_weights_no_bias;
  if (!slot) {
    std::vector<ArgSpec> args{{DNNL_ARG_DIFF_DST, false, p.dst}, {DNNL_ARG_SRC, false, p.src},
                              {DNNL_ARG_DIFF_WEIGHTS, true, p.weights}};
    if (bias) args.push_back({DNNL_ARG_DIFF_BIAS, true, p.bias});
    slot = tuned<dnnl::convolution_backward_weights::primitive_desc, dnnl::convolution_backward_weights>(
        (bias ? "conv2d/backward_weights/" : "conv2d/backward_weights_no_bias/") + p.name, [&](bool preferred) {
          return dnnl::convolution_backward_weights::primitive_desc(
              dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, p.layout(p.src, preferred),
                                                       p.layout(p.weights, preferred), bias ? p.bias : memory::desc(),
                                                       p.layout(p.dst, preferred), p.strides, p.dilates, p.padding,
                                                       p.padding),
              cpu_engine(), p.hints[preferred]);
        },
        args);
  }
  return *slot;
}

void* ptr(const Tensor& t) { return const_cast<void*>(t.raw_data()); }

// ---- direct loops (f64) ----

// Calls f(n, o, y, x_, c, i, j, in_y, in_x) for every tap that lands inside the input.
template <class F>
void for_each_tap(const Conv2dGeometry& g, F f) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t group = o / og;
      for (int64_t y = 0; y < g.oh; ++y)
        for (int64_t x = 0; x < g.ow; ++x)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < g.kh; ++i) {
              const int64_t iy = y * g.sh - g.ph + i * g.dh;
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ix = x * g.sw - g.pw + j * g.dw;
                if (ix < 0 || ix >= g.w) continue;
                f(((n * g.c + group * cg + ci) * g.h + iy) * g.w + ix,   // input element
                  ((o * cg + ci) * g.kh + i) * g.kw + j,                  // weight element
                  ((n * g.o + o) * g.oh + y) * g.ow + x);                 // output element
              }
            }
    }
}

// ---- kernels ----

std::vector<Tensor> conv2d_cpu(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous(), weight = call.inputs[1].contiguous();
  const bool has_bias = call.inputs.size() > 2;
  const Conv2dGeometry g = conv2d_geometry(call.op, x.meta(), weight.meta(), call.attrs);
  Tensor out = Tensor::empty(call.outputs[0].shape, x.dtype());
  if (x.dtype() == DType::f32) {
    float* dst = out.mutable_data<float>();
    std::unordered_map<int, void*> args{{DNNL_ARG_SRC, ptr(x)}, {DNNL_ARG_WEIGHTS, ptr(weight)}, {DNNL_ARG_DST, dst}};
    const Tensor bias = has_bias ? call.inputs[2].contiguous() : Tensor();
    if (has_bias) args.emplace(DNNL_ARG_BIAS, ptr(bias));
    forward_primitive(onednn_conv(g), has_bias).run(args);
    return {out};
  }
  const double* px = x.data<double>();
  const double* pw = weight.data<double>();
  double* po = out.mutable_data<double>();
  if (has_bias) {
    const std::vector<double> b = call.inputs[2].to_vector<double>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = b[(i / (g.oh * g.ow)) % g.o];
  } else {
    std::fill(po, po + out.numel(), 0.0);
  }
  for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t oi) { po[oi] += px[xi] * pw[wi]; });
  return {out};
}

std::vector<Tensor> conv2d_backward_input_cpu(const OpCall& call) {
  const Tensor grad = call.inputs[0].contiguous(), weight = call.inputs[1].contiguous();
  const TensorMeta input = call.outputs[0];
  const Conv2dGeometry g = conv2d_geometry(call.op, input, weight.meta(), call.attrs);
  Tensor dx = Tensor::empty(input.shape, input.dtype);
  if (input.dtype == DType::f32) {
    float* out = dx.mutable_data<float>();
    backward_data_primitive(onednn_conv(g)).run(
        {{DNNL_ARG_DIFF_DST, ptr(grad)}, {DNNL_ARG_WEIGHTS, ptr(weight)}, {DNNL_ARG_DIFF_SRC, out}});
    return {dx};
  }
  const double* pg = grad.data<double>();
  const double* pw = weight.data<double>();
  double* out = dx.mutable_data<double>();
  std::fill(out, out + dx.numel(), 0.0);
  for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t oi) { out[xi] += pg[oi] * pw[wi]; });
  return {dx};
}

std::vector<Tensor> conv2d_backward_weight_cpu(const OpCall& call) {
  const Tensor grad = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const TensorMeta weight = call.outputs[0];
  const bool bias = call.attrs.get<bool>("bias");
  const Conv2dGeometry g = conv2d_geometry(call.op, x.meta(), weight, call.attrs);
  Tensor dw = Tensor::empty(weight.shape, weight.dtype);
  Tensor db = bias ? Tensor::empty({g.o}, weight.dtype) : Tensor();
  if (weight.dtype == DType::f32) {
    std::unordered_map<int, void*> args{
        {DNNL_ARG_DIFF_DST, ptr(grad)}, {DNNL_ARG_SRC, ptr(x)}, {DNNL_ARG_DIFF_WEIGHTS, dw.mutable_data<float>()}};
    if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, db.mutable_data<float>());
    backward_weights_primitive(onednn_conv(g), bias).run(args);
  } else {
    const double* pg = grad.data<double>();
    const double* px = x.data<double>();
    double* pw = dw.mutable_data<double>();
    std::fill(pw, pw + dw.numel(), 0.0);
    for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t oi) { pw[wi] += pg[oi] * px[xi]; });
    if (bias) {
      double* pb = db.mutable_data<double>();
      std::fill(pb, pb + g.o, 0.0);
      for (int64_t i = 0; i < grad.numel(); ++i) pb[(i / (g.oh * g.ow)) % g.o] += pg[i];
    }
  }
  if (bias) return {dw, db};
  return {dw};
}

const OpRegistrar conv2d_kernel{"conv2d", DeviceType::cpu, conv2d_cpu};
const OpRegistrar conv2d_backward_input_kernel{"conv2d_backward_input", DeviceType::cpu, conv2d_backward_input_cpu};
const OpRegistrar conv2d_backward_weight_kernel{"conv2d_backward_weight", DeviceType::cpu, conv2d_backward_weight_cpu};

}  // namespace
}  // namespace troupe
