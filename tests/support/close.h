#pragma once
// Comparing computed tensors with references: one vocabulary for every test.
//
//   check_close(got, want);                               // equal: dtype, shape, device, values
//   check_close(got, want, {.rtol = 1e-4, .atol = 1e-6});  // |got - want| <= atol + rtol * |want|
//   check_close(got, want, {.rtol = 1e-5, .scale = s});    // |got - want| <= rtol * s, s per element
//   CHECK(relative_error(out, reference) < 1e-4);          // max |got - want| / max |want|
//   CHECK(max_abs_diff(got, want) < 1e-5);                 // of host vectors
//   check_values(got, {1, 2.5, kNaN});                     // against literal values, any dtype
//
// A NaN on either side makes relative_error and max_abs_diff infinite; relative_error is 0 for equal
// tensors and huge when want is all zeros and got is not (there is no scale to be within).
//
// check_close is numpy.allclose element by element on values read as double, reporting how many
// elements differ and the first of them; integer and bool dtypes compare exactly and NaN matches
// NaN. `scale` serves references that know each element's rounding scale (a sum of |products|).
#include <limits>
#include <vector>

#include "devices/tensor.h"

struct Tolerance {
  double rtol = 0;
  double atol = 0;
  troupe::Tensor scale{};  // when defined (want's shape): rtol applies to it instead of |want|
};

void check_close(const troupe::Tensor& got, const troupe::Tensor& want, const Tolerance& tolerance = {});

double relative_error(const troupe::Tensor& got, const troupe::Tensor& want);

double max_abs_diff(const std::vector<float>& got, const std::vector<float>& want);

inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every element of t (any dtype, read as double) against expected, within rel * |expected| + abs;
// NaN matches NaN and an infinity only itself.
void check_values(const troupe::Tensor& t, const std::vector<double>& expected, double rel = 1e-6, double abs = 1e-7);
