// cuBLAS opened on the first call (devices/cuda/cublas_on_demand.cpp): a process that never
// multiplies on a GPU never maps it, and the first call that needs it finds it. Runs without a GPU:
// naming a cuBLAS status needs the library, not a device.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "devices/error.h"
#include "devices/ops.h"
#include "support/skip.h"
#include "support/tensors.h"

#ifdef TROUPE_HAVE_CUDA
#include <cublas_api.h>

#include "devices/cuda/blas.h"
#endif

namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("cuBLAS is opened on the first call that needs it and not with the program", "[cublas_on_demand]") {
#ifndef TROUPE_HAVE_CUDA
  SKIP_TEST("a build without CUDA: no cuBLAS to open");
#else
  // CPU work alone: neither library mapped (each test case runs in a process of its own).
  const troupe::Tensor a = random_tensor({8, 16}, 1), b = random_tensor({16, 4}, 2);
  CHECK(troupe::matmul(a, b).shape() == troupe::Shape{8, 4});
  REQUIRE_FALSE(mapped("libcublasLt.so"));
  REQUIRE_FALSE(mapped("libcublas.so"));
  // The first call: both opened, and the status named by cuBLAS itself.
  CHECK_THROWS_WITH(troupe::cuda::check_blas(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmEx", 0),
                    Catch::Contains("cuda:0: cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED"));
  CHECK_THROWS_AS(troupe::cuda::check_blas(CUBLAS_STATUS_INVALID_VALUE, "cublasSgeam", 0), troupe::DeviceError);
  CHECK(mapped("libcublasLt.so"));
  CHECK(mapped("libcublas.so"));
  CHECK_NOTHROW(troupe::cuda::check_blas(CUBLAS_STATUS_SUCCESS, "cublasCreate", 0));
#endif
}
