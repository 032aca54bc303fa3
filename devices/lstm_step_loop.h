#pragma once
// How the CUDA lstm op runs its T recurrent steps. Each step is a cuBLAS GEMM and a kernel for
// the gates and the cell (LstmStepKernel::gemm), or one kernel that does both (fused: the gates
// stay in registers, a block per 16 hidden units and 64 batch rows). The steps are launched one
// by one, or recorded into a CUDA graph and launched as one, which takes the host's launch cost
// and the GPU's gaps between small kernels out of every step. The graph is taken only
// where it can be: on a stream of the caller's own (a GPU actor's lane; the default stream is
// shared with other threads, whose work a capture would take in), not inside another capture
// (a CapturedWork already records the steps), for two steps or more, and once the shape
// (T, B, H) has run on that stream one time without it (the first run makes the cuBLAS handle's
// choices and loads the kernels, which a capture cannot do). Where a capture fails, the steps are
// launched instead, and from then on for that shape and stream (the counts below tell). The graph
// is recorded once per stream and shape, over buffers of its own (the projected gates, h, c and h0
// of one call: at most 512 MiB and 16 shapes a stream, the least recently used shape's dropped first; a shape
// whose buffers alone are larger is launched step by step), and recorded again only when the
// weights move; each call replays it between copies of its h0 and c0 in and of h and c out.
//
//   set_lstm_step_kernel(LstmStepKernel::fused);   // or TROUPE_LSTM_STEP_KERNEL=fused
//   set_lstm_step_loop(LstmStepLoop::launches);   // or TROUPE_LSTM_STEP_LOOP=launches
//   reset_lstm_step_loop_counts();
//   ensemble.fork_members(x);                      // 4 members x 2 directions
//   lstm_step_loop_counts().graph;                 // 0 now; 8 with the default, graph
#include <cstdint>
#include <string>

namespace troupe {

enum class LstmStepKernel { gemm, fused };

const char* name(LstmStepKernel kernel);
// "gemm" or "fused"; ValueError naming the option for anything else.
LstmStepKernel parse_lstm_step_kernel(const std::string& text);
// The setting (default: TROUPE_LSTM_STEP_KERNEL from the environment, else gemm).
LstmStepKernel lstm_step_kernel();
void set_lstm_step_kernel(LstmStepKernel kernel);

enum class LstmStepLoop { launches, graph };

const char* name(LstmStepLoop loop);
// "launches" or "graph"; ValueError naming the option for anything else.
LstmStepLoop parse_lstm_step_loop(const std::string& text);

// The setting (default: TROUPE_LSTM_STEP_LOOP from the environment, else graph).
LstmStepLoop lstm_step_loop();
void set_lstm_step_loop(LstmStepLoop loop);

// What one call runs, given the setting and where it runs (the rules above).
struct LstmStepSite {
  int64_t steps;
  bool own_stream;      // the caller's current stream is a lane's or a StreamGuard's, not the default
  bool capturing;       // that stream is being captured already
  bool shape_seen;      // this (T, B, H) ran on that stream before
  bool capture_failed;  // and a capture of it failed there
};
LstmStepLoop choose_lstm_step_loop(LstmStepLoop setting, const LstmStepSite& site);

// Step loops run each way since the process started or the last reset (the lstm op's forward).
struct LstmStepLoopCounts {
  uint64_t launches = 0, graph = 0;
};
LstmStepLoopCounts lstm_step_loop_counts();
void reset_lstm_step_loop_counts();
void count_lstm_step_loop(LstmStepLoop loop);  // by the kernels

}  // namespace troupe
