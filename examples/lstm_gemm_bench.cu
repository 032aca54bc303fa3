// The CUDA lstm's recurrent product, alone: gates[B, 4H] += h[B, H] @ w_hh[4H, H]^T in strict f32,
// the GEMM that binds the LSTM ensemble on a GPU (50 steps, 8 step loops at once). Times cuBLAS's
// default choice (what devices/cuda/gemm_f32 calls) and every algorithm cuBLASLt's heuristic offers
// for the shape, each alone on one stream and as `--streams` loops side by side (each with its own
// weights, h and gates, as the ensemble's members have), so a choice can be made by measurement.
//
//   lstm_gemm_bench [--B 50 --H 1024 --streams 8 --steps 50 --reps 5] [--json]
//   {"B":50,"H":1024,"default_alone_us":..,"default_side_by_side_us":..,"best_side_by_side_us":..,"algorithms":[..]}
//
// *_side_by_side_us: the wall time of all streams' steps over the number of products (what one
// product costs when the GPU is shared as in the ensemble).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "devices/error.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw DeviceError(std::string(what) + ": " + cudaGetErrorString(err));
}
void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw DeviceError(std::string(what) + ": " + cublasGetStatusName(status));
}

// One loop's buffers: weights, h and gates, random (never zeros: they time differently).
struct Loop {
  float *w = nullptr, *h = nullptr, *gates = nullptr;
  void* workspace = nullptr;
  cudaStream_t stream = nullptr;
};

__global__ void fill(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = (x & 0xffff) / 32768.0f - 1.0f;
  }
}

// Median microseconds of `run` (which queues work on every loop's stream) from the first stream's
// start to the last one's end, after warm-up.
double median_us(std::vector<Loop>& loops, int reps, const std::function<void()>& run) {
  cudaEvent_t start, stop;
  std::vector<cudaEvent_t> done(loops.size());
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (auto& e : done) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  std::vector<double> times;
  for (int i = -2; i < reps; ++i) {
    check(cudaEventRecord(start, loops[0].stream), "cudaEventRecord");
    for (size_t s = 1; s < loops.size(); ++s) check(cudaStreamWaitEvent(loops[s].stream, start, 0), "cudaStreamWaitEvent");
    run();
    for (size_t s = 1; s < loops.size(); ++s) {
      check(cudaEventRecord(done[s], loops[s].stream), "cudaEventRecord");
      check(cudaStreamWaitEvent(loops[0].stream, done[s], 0), "cudaStreamWaitEvent");
    }
    check(cudaEventRecord(stop, loops[0].stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= 0) times.push_back(ms * 1e3);
  }
  for (auto& e : done) cudaEventDestroy(e);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"The CUDA lstm's recurrent GEMM: cuBLAS's choice against cuBLASLt's algorithms, alone and side by side"};
  int64_t B = 50, H = 1024;
  int streams = 8, steps = 50, reps = 5;
  bool json = false;
  app.add_option("--B", B, "batch rows")->check(cli::PositiveNumber);
  app.add_option("--H", H, "hidden units (the product is B x H @ H x 4H)")->check(cli::PositiveNumber);
  app.add_option("--streams", streams, "step loops side by side")->check(cli::PositiveNumber);
  app.add_option("--steps", steps, "products per loop")->check(cli::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions (median)")->check(cli::PositiveNumber);
  app.add_flag("--json", json, "one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("lstm_gemm_bench", [&] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      throw DeviceError("no CUDA device");
    const int64_t G = 4 * H;
    constexpr size_t kWorkspace = size_t(32) << 20;
    std::vector<Loop> loops(static_cast<size_t>(streams));
    uint32_t seed = 1;
    for (Loop& l : loops) {
      check(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check(cudaMalloc(&l.w, sizeof(float) * G * H), "cudaMalloc");
      check(cudaMalloc(&l.h, sizeof(float) * B * H), "cudaMalloc");
      check(cudaMalloc(&l.gates, sizeof(float) * B * G), "cudaMalloc");
      check(cudaMalloc(&l.workspace, kWorkspace), "cudaMalloc");
      fill<<<1024, 256>>>(l.w, size_t(G * H), seed++);
      fill<<<256, 256>>>(l.h, size_t(B * H), seed++);
      fill<<<256, 256>>>(l.gates, size_t(B * G), seed++);
    }
    check(cudaDeviceSynchronize(), "fill");
    // Column-major, as cuBLAS sees the row-major product: gates^T [G, B] += w_hh [G, H] . h^T [H, B],
    // w_hh stored as H x G column-major (its transpose taken), h as H x B.
    const float alpha = 1, beta = 1;
    std::vector<cublasHandle_t> handles(loops.size());
    for (size_t s = 0; s < loops.size(); ++s) {
      check(cublasCreate(&handles[s]), "cublasCreate");
      check(cublasSetStream(handles[s], loops[s].stream), "cublasSetStream");
      check(cublasSetWorkspace(handles[s], loops[s].workspace, kWorkspace), "cublasSetWorkspace");
    }
    auto default_gemm = [&](size_t s) {
      const Loop& l = loops[s];
      check(cublasGemmEx(handles[s], CUBLAS_OP_T, CUBLAS_OP_N, G, B, H, &alpha, l.w, CUDA_R_32F, H, l.h, CUDA_R_32F, H,
                         &beta, l.gates, CUDA_R_32F, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    };
    const double products = double(streams) * steps;
    auto alone = [&](const std::function<void(size_t)>& gemm) {
      std::vector<Loop> one(loops.begin(), loops.begin() + 1);
      return median_us(one, reps, [&] { for (int t = 0; t < steps; ++t) gemm(0); }) / steps;
    };
    auto side_by_side = [&](const std::function<void(size_t)>& gemm) {
      return median_us(loops, reps, [&] {
               for (int t = 0; t < steps; ++t)
                 for (size_t s = 0; s < loops.size(); ++s) gemm(s);
             }) / products;
    };
    const double default_alone = alone(default_gemm), default_side = side_by_side(default_gemm);

    cublasLtHandle_t lt;
    check(cublasLtCreate(&lt), "cublasLtCreate");
    cublasLtMatmulDesc_t desc;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t transposed = CUBLAS_OP_T;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed), "TRANSA");
    cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
    check(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_32F, H, G, H), "layout A");
    check(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_32F, H, B, H), "layout B");
    check(cublasLtMatrixLayoutCreate(&c_layout, CUDA_R_32F, G, B, G), "layout C");
    cublasLtMatmulPreference_t preference;
    check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const size_t workspace = kWorkspace;
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace),
          "preference workspace");
    cublasLtMatmulHeuristicResult_t found[16];
    int returned = 0;
    check(cublasLtMatmulAlgoGetHeuristic(lt, desc, a_layout, b_layout, c_layout, c_layout, preference, 16, found, &returned),
          "cublasLtMatmulAlgoGetHeuristic");

    nlohmann::ordered_json algorithms = nlohmann::ordered_json::array();
    double best_alone = 0, best_side = 0;
    for (int i = 0; i < returned; ++i) {
      if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const cublasLtMatmulAlgo_t algo = found[i].algo;
      auto lt_gemm = [&](size_t s) {
        const Loop& l = loops[s];
        check(cublasLtMatmul(lt, desc, &alpha, l.w, a_layout, l.h, b_layout, &beta, l.gates, c_layout, l.gates, c_layout,
                             &algo, l.workspace, kWorkspace, l.stream),
              "cublasLtMatmul");
      };
      int id = 0, tile = 0, split_k = 0, stages = 0;
      size_t written = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k, sizeof split_k, &written);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &written);
      const double a = alone(lt_gemm), b = side_by_side(lt_gemm);
      if (best_alone == 0 || a < best_alone) best_alone = a;
      if (best_side == 0 || b < best_side) best_side = b;
      algorithms.push_back({{"rank", i}, {"id", id}, {"tile", tile}, {"split_k", split_k}, {"stages", stages},
                            {"workspace", found[i].workspaceSize}, {"alone_us", significant(a, 4)},
                            {"side_by_side_us", significant(b, 4)}});
      if (!json)
        std::printf("cuBLASLt #%d (algo %d, tile %d, split-k %d, stages %d): alone %.2f us, side by side %.2f us\n", i, id,
                    tile, split_k, stages, a, b);
    }
    const double flop = 2.0 * B * H * G;
    if (json) {
      print_json_line(nlohmann::ordered_json{{"B", B},
                       {"H", H},
                       {"streams", streams},
                       {"steps", steps},
                       {"default_alone_us", significant(default_alone, 4)},
                       {"default_side_by_side_us", significant(default_side, 4)},
                       {"default_side_by_side_tflops", significant(flop / default_side / 1e6, 3)},
                       {"best_alone_us", significant(best_alone, 4)},
                       {"best_side_by_side_us", significant(best_side, 4)},
                       {"best_side_by_side_tflops", best_side > 0 ? significant(flop / best_side / 1e6, 3) : 0.0},
                       {"algorithms", algorithms}});
    } else {
      std::printf("cuBLAS's default: alone %.2f us, side by side %.2f us (%.1f TFLOP/s); best cuBLASLt: %.2f, %.2f us\n",
                  default_alone, default_side, flop / default_side / 1e6, best_alone, best_side);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatrixLayoutDestroy(a_layout);
    cublasLtMatrixLayoutDestroy(b_layout);
    cublasLtMatrixLayoutDestroy(c_layout);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
    for (size_t s = 0; s < loops.size(); ++s) {
      cublasDestroy(handles[s]);
      cudaFree(loops[s].w);
      cudaFree(loops[s].h);
      cudaFree(loops[s].gates);
      cudaFree(loops[s].workspace);
      cudaStreamDestroy(loops[s].stream);
    }
    return 0;
  });
}
