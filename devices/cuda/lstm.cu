// lstm on cuda (the op: devices/op_defs/lstm.cpp; one layer, one direction, gate order
// i, f, g, o). The input projection of all T steps is one GEMM; each step is one recurrent GEMM
// accumulating into its slice of that projection and one fused kernel for bias, gates, cell and
// hidden state, or one fused kernel for both; on a stream of the caller's own the T steps go as one
// CUDA graph, recorded once and replayed (devices/lstm_step_loop.h). Like the CPU kernel it saves nothing: lstm_backward recomputes the
// gates.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "devices/cuda/gemm_f32.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/cuda/lstm_steps.h"
#include "devices/cuda/stream.h"
#include "devices/lstm_step_loop.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// One thread per (row b, unit j): it alone reads and writes the unit's four gates and its cell.
__global__ void lstm_cell(float* gates, const float* b_ih, const float* b_hh, const float* c_prev, float* c_next,
                          float* h_next, int64_t batch, int64_t hidden, bool keep_activations) {
  const int64_t n = batch * hidden, g4 = 4 * hidden;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = k / hidden, j = k % hidden;
    float* a = gates + b * g4;
    // The biases summed first, as the CPU kernel does.
    const float i = sigmoid(a[j] + (b_ih[j] + b_hh[j]));
    const float f = sigmoid(a[hidden + j] + (b_ih[hidden + j] + b_hh[hidden + j]));
    const float g = tanhf(a[2 * hidden + j] + (b_ih[2 * hidden + j] + b_hh[2 * hidden + j]));
    const float o = sigmoid(a[3 * hidden + j] + (b_ih[3 * hidden + j] + b_hh[3 * hidden + j]));
    const float c = f * c_prev[k] + i * g;
    c_next[k] = c;
    h_next[k] = tanhf(c) * o;
    if (keep_activations) {
      a[j] = i;
      a[hidden + j] = f;
      a[2 * hidden + j] = g;
      a[3 * hidden + j] = o;
    }
  }
}

// One step in one kernel: the recurrent product, the gates and the cell (LstmStepKernel::fused).
// A block owns kUnits hidden units (their four gate rows of w_hh) and kRows batch rows; thread
// (u, r) accumulates the four gates of unit u for rows r, r + 16, r + 32, r + 48, so the cell
// update needs nothing from another thread and the gates never go through memory. K is walked in
// chunks held in shared memory; each thread reads four k at a time (a float4 of each operand):
// 64 FMAs for 8 shared loads, the gate rows a broadcast within a half warp.
namespace fused {
constexpr int kUnits = 16, kRowLanes = 16, kRowsPerThread = 4, kRows = kRowLanes * kRowsPerThread, kChunk = 32;
constexpr int kThreads = kUnits * kRowLanes;
constexpr int kStride = kChunk + 4;  // float4-aligned rows; 8 consecutive rows land on distinct banks
}  // namespace fused

__global__ void __launch_bounds__(fused::kThreads) lstm_fused_step(
    const float* __restrict__ gates_x, const float* __restrict__ w_hh, const float* __restrict__ b_ih,
    const float* __restrict__ b_hh, const float* __restrict__ h_prev, const float* c_prev, float* c_next,
    float* __restrict__ h_next, int batch, int hidden) {
  using namespace fused;
  __shared__ __align__(16) float ws[4 * kUnits][kStride];  // row g * kUnits + u: w_hh row g * H + unit
  __shared__ __align__(16) float hs[kRows][kStride];
  const int tid = threadIdx.x, u = tid / kRowLanes, lane_row = tid % kRowLanes;
  const int unit0 = blockIdx.x * kUnits, row0 = blockIdx.y * kRows;
  float acc[4][kRowsPerThread] = {};
  for (int k0 = 0; k0 < hidden; k0 += kChunk) {
    // Both tiles, kChunk columns each, zeros past the edges; consecutive threads read consecutive k.
    for (int e = tid; e < 4 * kUnits * kChunk; e += kThreads) {
      const int r = e / kChunk, k = e % kChunk, unit = unit0 + r % kUnits, g = r / kUnits;
      ws[r][k] = unit < hidden && k0 + k < hidden ? w_hh[(int64_t(g) * hidden + unit) * hidden + k0 + k] : 0.0f;
    }
    for (int e = tid; e < kRows * kChunk; e += kThreads) {
      const int r = e / kChunk, k = e % kChunk, row = row0 + r;
      hs[r][k] = row < batch && k0 + k < hidden ? h_prev[int64_t(row) * hidden + k0 + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kChunk; k += 4) {
      float4 w[4], h[kRowsPerThread];
#pragma unroll
      for (int g = 0; g < 4; ++g) w[g] = *reinterpret_cast<const float4*>(&ws[g * kUnits + u][k]);
#pragma unroll
      for (int m = 0; m < kRowsPerThread; ++m) h[m] = *reinterpret_cast<const float4*>(&hs[lane_row + kRowLanes * m][k]);
#pragma unroll
      for (int g = 0; g < 4; ++g)
#pragma unroll
        for (int m = 0; m < kRowsPerThread; ++m) {  // one FMA per product: no rounding of partial sums
          acc[g][m] = fmaf(w[g].x, h[m].x, acc[g][m]);
          acc[g][m] = fmaf(w[g].y, h[m].y, acc[g][m]);
          acc[g][m] = fmaf(w[g].z, h[m].z, acc[g][m]);
          acc[g][m] = fmaf(w[g].w, h[m].w, acc[g][m]);
        }
    }
    __syncthreads();
  }
  const int unit = unit0 + u;
  if (unit >= hidden) return;
  float bias[4];
#pragma unroll
  for (int g = 0; g < 4; ++g) bias[g] = b_ih[g * hidden + unit] + b_hh[g * hidden + unit];  // summed first, as the CPU
#pragma unroll
  for (int m = 0; m < kRowsPerThread; ++m) {
    const int row = row0 + lane_row + kRowLanes * m;
    if (row >= batch) break;
    const float* a = gates_x + int64_t(row) * 4 * hidden + unit;
    const float i = sigmoid((a[0] + acc[0][m]) + bias[0]);
    const float f = sigmoid((a[hidden] + acc[1][m]) + bias[1]);
    const float g = tanhf((a[2 * hidden] + acc[2][m]) + bias[2]);
    const float o = sigmoid((a[3 * hidden] + acc[3][m]) + bias[3]);
    const int64_t k = int64_t(row) * hidden + unit;
    const float c = f * c_prev[k] + i * g;
    c_next[k] = c;
    h_next[k] = tanhf(c) * o;
  }
}

// The forward's steps with one fused kernel each; c updated in place.
void lstm_fused_steps(int device, LstmSize size, const float* gates, const float* w_hh, const float* b_ih,
                      const float* b_hh, const float* h0, float* h, float* c) {
  const int64_t B = size.batch, H = size.hidden, n = B * H;
  if (n == 0) return;
  const cudaStream_t stream = current_stream(device);
  const dim3 grid(static_cast<unsigned>((H + fused::kUnits - 1) / fused::kUnits),
                  static_cast<unsigned>((B + fused::kRows - 1) / fused::kRows));
  for (int64_t t = 0; t < size.steps; ++t) {
    const float* h_prev = t == 0 ? h0 : h + (t - 1) * n;
    lstm_fused_step<<<grid, fused::kThreads, 0, stream>>>(gates + t * B * 4 * H, w_hh, b_ih, b_hh, h_prev, c, c,
                                                          h + t * n, static_cast<int>(B), static_cast<int>(H));
    check_launch("lstm (fused step)", device);
  }
}

// Zeros without a trip through the host (Tensor::zeros fills on the host, then copies).
Tensor device_zeros(const Shape& shape, Device device) {
  Tensor t = Tensor::empty(shape, DType::f32, device);
  if (t.numel() > 0)
    check(cudaMemsetAsync(t.mutable_raw_data(), 0, t.nbytes(), current_stream(device.index)), "cudaMemsetAsync",
          device.index);
  return t;
}

}  // namespace

// The step loops of one stream that run as graphs, one per (T, B, H, step kernel): each keeps the
// buffers its graph was recorded over (the gates, h, c and h0 of one call) and the weights' and
// biases' addresses. A call projects its input into the kept gates, copies h0 and c0 in, replays
// the graph and copies h and c out: nothing is recorded again (a recording of 2T cuBLAS and kernel
// calls costs the host about as much as launching them) until the weights move. Held by the stream
// (stream.h) and freed with it; at most kMaxKeptBytes of buffers and kMaxLoops graphs per stream,
// the least recently used loop dropped first. Calls on one stream are queued under the mutex and run in the stream's
// order, so one set of buffers serves them all.
struct Stream::StepLoops {
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;  // T, B, H, fused
  struct Loop {
    Loop() = default;
    Loop(const Loop&) = delete;
    ~Loop() {
      if (exec) cudaGraphExecDestroy(exec);  // one in flight is freed when it completes
    }
    Tensor gates, h, c, h0;
    const float *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;  // what the graph reads
    cudaGraphExec_t exec = nullptr;
    bool capture_failed = false;
    size_t bytes = 0;
  };
  static constexpr size_t kMaxKeptBytes = size_t(512) << 20;
  static constexpr size_t kMaxLoops = 16;     // graphs kept (sequence lengths that vary make many)
  static constexpr size_t kMaxSeen = 1024;    // shapes remembered as run once

  static void destroy(StepLoops* loops) { delete loops; }

  std::mutex mutex;
  std::set<Key> seen;                                       // shapes that ran once without a graph
  std::list<std::pair<Key, std::unique_ptr<Loop>>> loops;  // most recently used first
  size_t kept_bytes = 0;

  // The shape's loop, its buffers made (other loops dropped to make room); nullptr when its
  // buffers alone are over the bound.
  Loop* loop_for(const Key& key, LstmSize size, Device device) {
    for (auto it = loops.begin(); it != loops.end(); ++it)
      if (it->first == key) {
        loops.splice(loops.begin(), loops, it);
        return it->second.get();
      }
    const int64_t T = size.steps, B = size.batch, H = size.hidden;
    const size_t bytes = sizeof(float) * size_t(T * B * 4 * H + T * B * H + 2 * B * H);
    if (bytes > kMaxKeptBytes) return nullptr;
    while (!loops.empty() && (kept_bytes + bytes > kMaxKeptBytes || loops.size() >= kMaxLoops)) {
      kept_bytes -= loops.back().second->bytes;
      loops.pop_back();
    }
    auto loop = std::make_unique<Loop>();
    loop->gates = Tensor::empty({T * B, 4 * H}, DType::f32, device);
    loop->h = Tensor::empty({T, B, H}, DType::f32, device);
    loop->c = Tensor::empty({B, H}, DType::f32, device);
    loop->h0 = Tensor::empty({B, H}, DType::f32, device);
    loop->bytes = bytes;
    kept_bytes += bytes;
    loops.emplace_front(key, std::move(loop));
    return loops.front().second.get();
  }
};

struct StepLoopsOf {
  using Loops = Stream::StepLoops;
  // The stream's step loops, made on first use.
  static Stream::StepLoops& get(const Stream& stream) {
    std::call_once(stream.step_loops_made_, [&] {
      stream.step_loops_ = new Stream::StepLoops;
      stream.destroy_step_loops_ = &Stream::StepLoops::destroy;
    });
    return *stream.step_loops_;
  }
};

namespace {

// Records the steps into the loop's graph (an update of the one it had, or a new one) and notes
// the weights it reads; on failure the loop is marked and keeps no graph (the caller launches).
template <class Steps>
void record(StepLoopsOf::Loops::Loop& loop, cudaStream_t stream, int device, const Steps& steps, const float* w_hh,
            const float* b_ih, const float* b_hh) {
  cudaGraph_t graph = nullptr;
  try {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", device);
    try {
      steps();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);  // ends the capture; the partial graph is dropped
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture", device);
    if (loop.exec) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(loop.exec, graph, &info) != cudaSuccess) {
        (void)cudaGetLastError();  // an update refused (another cuBLAS algorithm): instantiate afresh
        cudaGraphExecDestroy(loop.exec);
        loop.exec = nullptr;
      }
    }
    if (!loop.exec) check(cudaGraphInstantiateWithFlags(&loop.exec, graph, 0), "cudaGraphInstantiate", device);
  } catch (const std::exception&) {
    if (loop.exec) cudaGraphExecDestroy(loop.exec);
    loop.exec = nullptr;
    (void)cudaGetLastError();
    loop.capture_failed = true;
  }
  if (graph) cudaGraphDestroy(graph);
  loop.w_hh = w_hh;
  loop.b_ih = b_ih;
  loop.b_hh = b_hh;
}

// The forward of one layer and direction on the calling thread's current stream: `project(gates)`
// writes x @ w_ih^T into gates [T*B, 4H], then the T steps write h [T, B, H] and update c [B, H]
// in place (c0 in). As a replayed graph where the setting and the stream allow
// (devices/lstm_step_loop.h), else launched step by step.
template <class Project>
void run_forward(int device, LstmSize size, const Project& project, const float* w_hh, const float* b_ih,
                 const float* b_hh, const float* h0, float* h, float* c) {
  const cudaStream_t stream = current_stream(device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing", device);
  const Stream* own = current_stream_object(device);
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  // The fused kernel indexes rows and units in 32 bits.
  const bool fused = lstm_step_kernel() == LstmStepKernel::fused && size.batch <= INT32_MAX && size.hidden <= INT32_MAX;
  auto steps = [&](float* gates, const float* h_first, float* h_out, float* c_io) {
    if (fused)
      lstm_fused_steps(device, size, gates, w_hh, b_ih, b_hh, h_first, h_out, c_io);
    else
      lstm_steps(device, size, gates, w_hh, b_ih, b_hh, h_first, h_out, c_io, c_io, 0, false);
  };
  const int64_t T = size.steps, B = size.batch, H = size.hidden;
  StepLoopsOf::Loops* loops = own && !capturing ? &StepLoopsOf::get(*own) : nullptr;
  std::unique_lock<std::mutex> hold = loops ? std::unique_lock<std::mutex>(loops->mutex) : std::unique_lock<std::mutex>();
  const StepLoopsOf::Loops::Key key{T, B, H, fused};
  const bool seen = loops && loops->seen.count(key);
  StepLoopsOf::Loops::Loop* loop = seen ? loops->loop_for(key, size, Device::cuda(device)) : nullptr;
  const LstmStepLoop way = choose_lstm_step_loop(
      lstm_step_loop(), {.steps = T, .own_stream = own != nullptr, .capturing = capturing, .shape_seen = seen,
                         .capture_failed = !loop || loop->capture_failed});
  if (way == LstmStepLoop::graph) {
    float* gates = device_write<float>(loop->gates);
    float* kept_h = device_write<float>(loop->h);
    float* kept_c = device_write<float>(loop->c);
    float* kept_h0 = device_write<float>(loop->h0);
    const size_t state_bytes = sizeof(float) * size_t(B * H);
    project(gates);
    check(cudaMemcpyAsync(kept_h0, h0, state_bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync", device);
    check(cudaMemcpyAsync(kept_c, c, state_bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync", device);
    if (!loop->exec || loop->w_hh != w_hh || loop->b_ih != b_ih || loop->b_hh != b_hh)
      record(*loop, stream, device, [&] { steps(gates, kept_h0, kept_h, kept_c); }, w_hh, b_ih, b_hh);
    if (loop->exec) {
      check(cudaGraphLaunch(loop->exec, stream), "cudaGraphLaunch", device);
      count_lstm_step_loop(LstmStepLoop::graph);
    } else {
      steps(gates, kept_h0, kept_h, kept_c);  // what a failed recording met, if it was no recording's problem, is thrown here
      count_lstm_step_loop(LstmStepLoop::launches);
    }
    check(cudaMemcpyAsync(h, kept_h, state_bytes * T, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync", device);
    check(cudaMemcpyAsync(c, kept_c, state_bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync", device);
    return;
  }
  Tensor gates = Tensor::empty({T * B, 4 * H}, DType::f32, Device::cuda(device));
  project(device_write<float>(gates));
  steps(device_write<float>(gates), h0, h, c);
  count_lstm_step_loop(LstmStepLoop::launches);
  if (loops) {
    if (loops->seen.size() >= StepLoopsOf::Loops::kMaxSeen) loops->seen.clear();
    loops->seen.insert(key);
  }
}

std::vector<Tensor> lstm_cuda(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous(), w_ih = call.inputs[1].contiguous(), w_hh = call.inputs[2].contiguous();
  const Tensor b_ih = call.inputs[3].contiguous(), b_hh = call.inputs[4].contiguous();
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2), H = w_hh.size(1), G = 4 * H;
  const int device = x.device().index;
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  Tensor output = Tensor::empty({T, B, H}, DType::f32, x.device());
  Tensor h_n = Tensor::empty({B, H}, DType::f32, x.device());
  Tensor c_n = call.inputs.size() > 6 ? call.inputs[6].clone() : device_zeros({B, H}, x.device());
  const Tensor h0 = call.inputs.size() > 5 ? call.inputs[5].contiguous() : device_zeros({B, H}, x.device());
  if (B * H == 0) return {output, h_n, c_n};

  const float* px = device_read<float>(x);
  const float* pw_ih = device_read<float>(w_ih);
  auto project = [&](float* gates) { gemm_f32(device, false, true, T * B, G, C, 1.0f, px, C, pw_ih, C, 0.0f, gates, G); };
  float* out = device_write<float>(output);
  float* c = device_write<float>(c_n);
  run_forward(device, {T, B, H}, project, device_read<float>(w_hh), device_read<float>(b_ih), device_read<float>(b_hh),
              device_read<float>(h0), out, c);
  const float* last = T == 0 ? device_read<float>(h0) : out + (T - 1) * B * H;
  check(cudaMemcpyAsync(device_write<float>(h_n), last, sizeof(float) * B * H, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync", device);
  return {output, h_n, c_n};
}

const OpRegistrar lstm_kernel{"lstm", DeviceType::cuda, lstm_cuda};

}  // namespace

void lstm_steps(int device, LstmSize size, float* gates, const float* w_hh, const float* b_ih, const float* b_hh,
                const float* h0, float* h, const float* c0, float* c, int64_t c_step, bool keep_activations) {
  const int64_t B = size.batch, H = size.hidden, G = 4 * H, n = B * H;
  if (n == 0) return;
  const cudaStream_t stream = current_stream(device);
  for (int64_t t = 0; t < size.steps; ++t) {
    float* g = gates + t * B * G;
    const float* h_prev = t == 0 ? h0 : h + (t - 1) * n;
    const float* c_prev = t == 0 ? c0 : c + (t - 1) * c_step;
    gemm_f32(device, false, true, B, G, H, 1.0f, h_prev, H, w_hh, H, 1.0f, g, G);
    lstm_cell<<<blocks_for(n), kThreads, 0, stream>>>(g, b_ih, b_hh, c_prev, c + t * c_step, h + t * n, B, H,
                                                      keep_activations);
    check_launch("lstm", device);
  }
}

}  // namespace troupe::cuda
