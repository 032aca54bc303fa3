// GPU figures for the notes: cuBLAS GEMM rates (strict fp32, TF32, bf16) at 4096^3 and at the
// LSTM step shape 50x1024x4096, Troupe's own matmul op at the same shapes, and host<->device
// bandwidth through Tensor::to (pageable host memory) and from pinned memory.
//
//   cuda_bench --reps 20
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "devices/backend.h"
#include "devices/cuda/stream.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/tensor.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;

// examples/launch_floor.cu
cudaError_t launch_empty(cudaStream_t stream);
cudaError_t launch_with_layout(cudaStream_t stream, float* out);

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw DeviceError(std::string(what) + ": " + cudaGetErrorString(err));
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw DeviceError(std::string(what) + ": " + cublasGetStatusName(status));
}

// Median milliseconds of fn over reps runs on stream, after warm-up runs, timed with events.
double median_ms(cudaStream_t stream, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Tensor random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  Generator generator(seed);
  return rand_uniform({rows, cols}, -1.0, 1.0, DType::f32, generator);
}

struct Shape3 {
  int64_t m, k, n;
};

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"cuBLAS and Troupe GEMM rates, host<->device bandwidth"};
  int reps = 20;
  bool json = false;
  app.add_option("--reps", reps, "timed repetitions per figure (median reported)");
  app.add_flag("--json", json, "also one JSON line of every figure, last");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("cuda_bench", [&] {
    if (!has_backend(DeviceType::cuda)) {
      std::printf("no GPU: %s\n", cuda_unavailable_reason().c_str());
      return 0;
    }
    std::printf("%s\n", backend(DeviceType::cuda).describe().c_str());
    nlohmann::ordered_json figures{{"device", backend(DeviceType::cuda).describe()}};
    const Device gpu = Device::cuda(0);
    const cudaStream_t stream = cuda::current_stream(0);
    cublasHandle_t handle;
    check(cublasCreate(&handle), "cublasCreate");
    check(cublasSetStream(handle, stream), "cublasSetStream");

    for (Shape3 s : {Shape3{4096, 4096, 4096}, Shape3{50, 1024, 4096}}) {
      const double flop = 2.0 * s.m * s.k * s.n;
      Tensor a = random_matrix(s.m, s.k, 1).to(gpu), b = random_matrix(s.k, s.n, 2).to(gpu);
      Tensor a16 = a.to(DType::bf16), b16 = b.to(DType::bf16);
      Tensor c = Tensor::empty({s.m, s.n}, DType::f32, gpu), c16 = Tensor::empty({s.m, s.n}, DType::bf16, gpu);
      void* cp = c.mutable_raw_data();
      void* c16p = c16.mutable_raw_data();
      const float one = 1, zero = 0;
      // Row-major C = A @ B as column-major C^T = B^T @ A^T.
      auto gemm = [&](const Tensor& x, const Tensor& y, void* out, cudaDataType type, cublasComputeType_t compute) {
        check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one, y.raw_data(), type, s.n, x.raw_data(),
                           type, s.k, &zero, out, type, s.n, compute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      };
      const double fp32 = median_ms(stream, reps, [&] { gemm(a, b, cp, CUDA_R_32F, CUBLAS_COMPUTE_32F); });
      const double tf32 = median_ms(stream, reps, [&] { gemm(a, b, cp, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32); });
      const double bf16 = median_ms(stream, reps, [&] { gemm(a16, b16, c16p, CUDA_R_16BF, CUBLAS_COMPUTE_32F); });
      std::printf("gemm %ldx%ldx%ld  cuBLAS fp32 %.1f TFLOP/s (%.3f ms)  tf32 %.1f (%.3f ms)  bf16 %.1f (%.3f ms)\n",
                  long(s.m), long(s.k), long(s.n), flop / fp32 / 1e9, fp32, flop / tf32 / 1e9, tf32,
                  flop / bf16 / 1e9, bf16);
      Tensor keep;  // the op's output lives until the next call, as in a real step
      const double op32 = median_ms(stream, reps, [&] { keep = matmul(a, b); });
      const double op16 = median_ms(stream, reps, [&] { keep = matmul(a16, b16); });
      std::printf("gemm %ldx%ldx%ld  troupe matmul f32 %.1f TFLOP/s (%.3f ms)  bf16 %.1f (%.3f ms)\n", long(s.m),
                  long(s.k), long(s.n), flop / op32 / 1e9, op32, flop / op16 / 1e9, op16);
      const auto tflops = [&](double ms) { return significant(flop / ms / 1e9, 4); };
      figures["gemm_" + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) + "_tflops"] = {
          {"cublas_fp32", tflops(fp32)}, {"cublas_tf32", tflops(tf32)}, {"cublas_bf16", tflops(bf16)},
          {"troupe_f32", tflops(op32)}, {"troupe_bf16", tflops(op16)}};
    }

    const int64_t bytes = int64_t(256) << 20;
    Tensor host = Tensor::full({bytes / 4}, 1.0, DType::f32);
    Tensor dev = host.to(gpu);
    // Host clocks here: to() returns only once the host side is done, which is what a caller waits.
    auto seconds = [&](const std::function<void()>& fn) {
      fn();
      std::vector<double> t;
      for (int i = 0; i < 5; ++i) {
        cuda::synchronize(0);
        const auto start = std::chrono::steady_clock::now();
        fn();
        cuda::synchronize(0);
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    const double h2d = seconds([&] { dev = host.to(gpu); });
    const double d2h = seconds([&] { host = dev.to(Device::cpu()); });
    void* pinned = nullptr;
    check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
    void* device_buffer = dev.mutable_raw_data();
    const double h2d_pinned =
        seconds([&] { check(cudaMemcpyAsync(device_buffer, pinned, bytes, cudaMemcpyHostToDevice, stream), "copy"); });
    const double d2h_pinned =
        seconds([&] { check(cudaMemcpyAsync(pinned, device_buffer, bytes, cudaMemcpyDeviceToHost, stream), "copy"); });
    cudaFreeHost(pinned);

    // What the runtime's calls on an op's path cost the host here (median of 2,000 single calls on
    // an idle stream, microseconds): the floor under the enqueue cost of any op or actor call.
    auto call_us = [&](const std::function<void()>& fn) {
      std::vector<double> t;
      for (int i = 0; i < 2000; ++i) {
        const auto start = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      return t[t.size() / 2];
    };
    cudaEvent_t event;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    int current = 0;
    const double get_device = call_us([&] { check(cudaGetDevice(&current), "cudaGetDevice"); });
    const double query = call_us([&] { (void)cudaStreamQuery(stream); });
    const double record = call_us([&] { check(cudaEventRecord(event, stream), "cudaEventRecord"); });
    const double memset = call_us([&] { check(cudaMemsetAsync(device_buffer, 0, 1024, stream), "cudaMemsetAsync"); });
    const double malloc_free = call_us([&] {
      void* p = nullptr;
      check(cudaMallocAsync(&p, 1024, stream), "cudaMallocAsync");
      check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    });
    Tensor x = Tensor::ones({256}).to(gpu), factor = Tensor::full({1}, 2.0f).to(gpu);
    const double op = call_us([&] { Tensor y = mul(x, factor); });
    const double empty = call_us([&] { Tensor y = Tensor::empty({256}, DType::f32, gpu); });
    const double launch = call_us([&] { check(launch_empty(stream), "launch_empty"); });
    const double launch_layout = call_us([&] {
      check(launch_with_layout(stream, static_cast<float*>(device_buffer)), "launch_with_layout");
    });
    cudaEventDestroy(event);
    std::printf("runtime calls (us, median)  cudaGetDevice %.2f  cudaStreamQuery %.2f  cudaEventRecord %.2f  "
                "cudaMemsetAsync %.2f  cudaMallocAsync+cudaFreeAsync %.2f  troupe mul f32[256] %.2f  troupe empty+free "
                "f32[256] %.2f  empty kernel %.2f  kernel with a 200-byte argument %.2f\n",
                get_device, query, record, memset, malloc_free, op, empty, launch, launch_layout);
    figures["runtime_call_us"] = {{"cudaGetDevice", significant(get_device, 3)},
                                  {"cudaStreamQuery", significant(query, 3)},
                                  {"cudaEventRecord", significant(record, 3)},
                                  {"cudaMemsetAsync", significant(memset, 3)},
                                  {"cudaMallocAsync_cudaFreeAsync", significant(malloc_free, 3)},
                                  {"troupe_mul", significant(op, 3)},
                                  {"troupe_empty_free", significant(empty, 3)},
                                  {"launch_empty_kernel", significant(launch, 3)},
                                  {"launch_200_byte_argument", significant(launch_layout, 3)}};
    std::printf("copy 256 MiB  Tensor::to (pageable) H2D %.1f GB/s  D2H %.1f GB/s  pinned H2D %.1f GB/s  D2H %.1f GB/s\n",
                bytes / h2d / 1e9, bytes / d2h / 1e9, bytes / h2d_pinned / 1e9, bytes / d2h_pinned / 1e9);
    figures["copy_256mib_gbs"] = {{"h2d_pageable", significant(bytes / h2d / 1e9, 3)},
                                  {"d2h_pageable", significant(bytes / d2h / 1e9, 3)},
                                  {"h2d_pinned", significant(bytes / h2d_pinned / 1e9, 3)},
                                  {"d2h_pinned", significant(bytes / d2h_pinned / 1e9, 3)}};
    if (json) print_json_line(figures);
    cublasDestroy(handle);
    return 0;
  });
}
