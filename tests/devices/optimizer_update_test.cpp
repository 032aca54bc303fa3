// sgd_update and adam_update (the optimizers' fused steps) against the update loops SGD::step and
// Adam::step ran before them, written out here: bit for bit, over several steps, every option.
// Their cuda kernels are checked in cuda_nn_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "devices/random.h"
#include "devices/registry.h"

using namespace troupe;

namespace {

struct SgdCase {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// SGD::step's loop as it was, on host vectors.
template <class T>
void sgd_reference(const SgdCase& o, std::vector<T>& p, const std::vector<T>& g, std::vector<T>& buf, bool first) {
  const T lr = T(o.lr), wd = T(o.weight_decay), mom = T(o.momentum), damp = T(1 - o.dampening);
  for (size_t i = 0; i < p.size(); ++i) {
    if (o.momentum == 0) {
      p[i] -= lr * (g[i] + wd * p[i]);
      continue;
    }
    const T d = g[i] + wd * p[i];
    buf[i] = first ? d : mom * buf[i] + damp * d;
    p[i] -= lr * (o.nesterov ? d + mom * buf[i] : buf[i]);
  }
}

template <class T>
void check_sgd(DType dtype) {
  manual_seed(3);
  for (const SgdCase& o : {SgdCase{0.1, 0, 0, 0, false}, SgdCase{0.05, 0, 0, 0.01, false},
                           SgdCase{0.1, 0.9, 0, 0, false}, SgdCase{0.01, 0.5, 0.25, 0.001, false},
                           SgdCase{0.02, 0.9, 0, 0.01, true}}) {
    INFO("lr " << o.lr << " momentum " << o.momentum << " dampening " << o.dampening << " wd " << o.weight_decay
               << (o.nesterov ? " nesterov" : ""));
    Tensor p = rand_uniform({7, 5}, -1, 1, dtype), buffer;
    std::vector<T> want = p.to_vector<T>(), want_buf(want.size());
    const Attrs attrs{{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening},
                      {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov}};
    for (int step = 0; step < 3; ++step) {
      const Tensor g = rand_uniform({7, 5}, -1, 1, dtype);
      std::vector<Tensor> in{p, g};
      if (buffer.defined()) in.push_back(buffer);
      const std::vector<Tensor> out = call_op("sgd_update", in, attrs);
      REQUIRE(out.size() == (o.momentum == 0 ? 1u : 2u));
      sgd_reference<T>(o, want, g.to_vector<T>(), want_buf, step == 0);
      CHECK(out[0].to_vector<T>() == want);
      if (o.momentum != 0) CHECK(out[1].to_vector<T>() == want_buf);
      p = out[0];
      if (o.momentum != 0) buffer = out[1];
    }
  }
}

struct AdamCase {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad;
};

// Adam::step's loop as it was, on host vectors; t counts from 1.
template <class T>
void adam_reference(const AdamCase& o, int64_t step, std::vector<T>& p, const std::vector<T>& g, std::vector<T>& m,
                    std::vector<T>& v, std::vector<T>& v_max) {
  const double t = static_cast<double>(step);
  const T b1 = T(o.beta1), b2 = T(o.beta2), wd = T(o.weight_decay), eps = T(o.eps);
  const T step_size = T(o.lr / (1 - std::pow(o.beta1, t)));
  const T root_c2 = T(std::sqrt(1 - std::pow(o.beta2, t)));
  for (size_t i = 0; i < p.size(); ++i) {
    const T gi = g[i] + wd * p[i];
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    T vi = v[i];
    if (o.amsgrad) vi = v_max[i] = std::max(v_max[i], vi);
    p[i] -= step_size * m[i] / (std::sqrt(vi) / root_c2 + eps);
  }
}

template <class T>
void check_adam(DType dtype) {
  manual_seed(4);
  for (const AdamCase& o : {AdamCase{1e-3, 0.9, 0.999, 1e-8, 0, false}, AdamCase{0.01, 0.8, 0.99, 1e-6, 0.01, false},
                            AdamCase{0.005, 0.9, 0.999, 1e-8, 0, true}}) {
    INFO("lr " << o.lr << " wd " << o.weight_decay << (o.amsgrad ? " amsgrad" : ""));
    Tensor p = rand_uniform({4, 9}, -1, 1, dtype);
    Tensor m = Tensor::zeros({4, 9}, dtype), v = Tensor::zeros({4, 9}, dtype), v_max = Tensor::zeros({4, 9}, dtype);
    std::vector<T> want = p.to_vector<T>(), wm(want.size()), wv(want.size()), wmax(want.size());
    const Attrs base{{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                     {"weight_decay", o.weight_decay}};
    for (int64_t step = 1; step <= 3; ++step) {
      const Tensor g = rand_uniform({4, 9}, -1, 1, dtype);
      std::vector<Tensor> in{p, g, m, v};
      if (o.amsgrad) in.push_back(v_max);
      Attrs attrs = base;
      attrs.set("step", step);
      const std::vector<Tensor> out = call_op("adam_update", in, attrs);
      REQUIRE(out.size() == (o.amsgrad ? 4u : 3u));
      adam_reference<T>(o, step, want, g.to_vector<T>(), wm, wv, wmax);
      CHECK(out[0].to_vector<T>() == want);
      CHECK(out[1].to_vector<T>() == wm);
      CHECK(out[2].to_vector<T>() == wv);
      if (o.amsgrad) CHECK(out[3].to_vector<T>() == wmax);
      p = out[0], m = out[1], v = out[2];
      if (o.amsgrad) v_max = out[3];
    }
  }
}

}  // namespace

TEST_CASE("sgd_update is SGD's step bit for bit, with and without momentum") {
  check_sgd<float>(DType::f32);
  check_sgd<double>(DType::f64);
}

TEST_CASE("adam_update is Adam's step bit for bit, with and without amsgrad") {
  check_adam<float>(DType::f32);
  check_adam<double>(DType::f64);
}

TEST_CASE("optimizer updates reject mismatched operands, naming the op") {
  const Tensor p = Tensor::zeros({3}), g = Tensor::zeros({4});
  CHECK_THROWS_AS(call_op("sgd_update", {p, g}, {{"lr", 0.1}}), ShapeError);
  CHECK_THROWS_WITH(call_op("sgd_update", {p, g}, {{"lr", 0.1}}), Catch::Contains("sgd_update"));
  CHECK_THROWS_AS(call_op("sgd_update", {p, p, p}, {{"lr", 0.1}}), ShapeError);  // a buffer without momentum
  CHECK_THROWS_AS(call_op("sgd_update", {Tensor::zeros({3}, DType::i32), p}, {{"lr", 0.1}}), DTypeError);
  CHECK_THROWS_AS(call_op("adam_update", {p, p, p, g}, {{"lr", 0.1}, {"step", int64_t{1}}}), ShapeError);
  CHECK_THROWS_AS(call_op("adam_update", {p, p, p, p}, {{"lr", 0.1}, {"step", int64_t{0}}}), ValueError);
}
