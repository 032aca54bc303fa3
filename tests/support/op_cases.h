#pragma once
// The op cases under tests/fixtures/ops/, written by make_fixtures.py from NumPy/PyTorch: one
// directory per case holding case.json (the op, its attributes, how many inputs and outputs, rtol
// and atol), in0.npy... and out0.npy.... op_fixtures_test runs them on the host, cuda_ops_test on
// cuda:0.
//
//   for (const auto& dir : op_case_dirs()) {
//     const OpCase c = read_op_case(dir);
//     std::vector<Tensor> got = call_op(c.op, c.inputs, c.attrs);   // compare with c.outputs
//   }
#include <filesystem>
#include <string>
#include <vector>

#include "devices/attrs.h"
#include "devices/tensor.h"

struct OpCase {
  std::string name;                    // the directory's name
  std::string op;
  std::vector<troupe::Tensor> inputs;  // on the host
  troupe::Attrs attrs;                 // typed by the op's schema
  std::vector<troupe::Tensor> outputs; // what the op must give
  double rtol = 0, atol = 0;
};

// Every case directory, sorted.
std::vector<std::filesystem::path> op_case_dirs();
// The case's op name alone (no .npy read).
std::string op_case_op(const std::filesystem::path& dir);
// The whole case; ValueError for an attribute the op does not have, IOError for a bad file.
OpCase read_op_case(const std::filesystem::path& dir);
