// One rank's part of the chaos soak (scripts/chaos_soak.sh kills ranks at random while this runs
// under `troupe launch --max-restarts`): a stream of requests through a graph split over 2 ranks
// (the model's nodes on rank 1, up to --in-flight requests in it) and, beside each request, an
// all_reduce whose sum both ranks check. Every request ends completed with the right answer or
// failed with a typed error; at its end (the --until deadline, or the first error: a lost peer)
// each rank prints one JSON line: what it did, how each request ended, its RSS over time. With
// --tally-dir each rank also keeps that line, as it goes (every 0.2 s, "end": "running" and the
// requests still in flight), in DIR/attempt-A-rank-R.json: a rank killed with SIGKILL prints
// nothing, and its last tally is what the soak counts for it.
//   troupe launch --nproc 2 --max-restarts 100 -- build/bin/chaos_soak --until $(( $(date +%s) + 600 ))
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "devices/ops.h"
#include "net/collectives.h"
#include "net/process_group.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"
#include "examples/split_mlp.h"

using namespace troupe;

namespace {

// model_rank: where the model's nodes run (0 puts everything in one process, for the answers).
Graph split_graph(int model_rank) {
  Graph g("chaos_mlp");
  Port x = g.input("x");
  Port normed = g.op("layer_norm", {x}, {{"normalized_shape", Shape{256}}}, "normalise");
  Port z = split_mlp_logits(g, normed, model_rank, 256, 512);
  g.output("classes", g.op("argmax", {z}, {{"dims", std::vector<int64_t>{-1}}}, "classes"));
  return g;
}

double rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What one rank saw in this attempt.
struct Tally {
  int64_t requests = 0, completed = 0, wrong = 0, untyped = 0, all_reduces = 0;
  int64_t in_flight = 0;                  // requests sent and not yet ended (rank 0)
  std::map<std::string, int64_t> failed;  // by error kind
  std::vector<double> rss;                // MB, one sample every --rss-every seconds
  std::string end = "running";            // then "deadline" or the error that ended the attempt

  void fail(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      ++failed[e.kind()];
    } catch (...) {
      ++untyped;
    }
  }

  nlohmann::ordered_json json(int rank, int attempt, double seconds) const {
    std::vector<double> mb;
    for (double x : rss) mb.push_back(rounded(x, 1));
    return {{"chaos", rank},     {"attempt", attempt},      {"seconds", rounded(seconds, 1)},
            {"requests", requests}, {"completed", completed}, {"failed", failed},
            {"wrong", wrong},       {"untyped", untyped},     {"in_flight", in_flight},
            {"all_reduces", all_reduces}, {"rss_mb", mb},     {"end", end}};
  }
};

// Keeps a rank's tally in a file, replaced whole (written beside it, then renamed) so that a kill
// at any moment leaves the previous version or this one.
class TallyFile {
 public:
  TallyFile(const std::string& dir, int rank, int attempt) {
    if (dir.empty()) return;
    std::filesystem::create_directories(dir);
    path_ = dir + "/attempt-" + std::to_string(attempt) + "-rank-" + std::to_string(rank) + ".json";
  }
  void write(const nlohmann::ordered_json& tally) const {
    if (path_.empty()) return;
    const std::string partial = path_ + ".partial";
    std::ofstream(partial) << tally.dump() << "\n";
    std::filesystem::rename(partial, path_);
  }

 private:
  std::string path_;
};

// An all_reduce of [rank + 1] * 1024 and a stop flag (max): both ranks check the sum, 3 * 1024.
bool all_reduce_round(net::ProcessGroup& world, bool stop, Tally& t) {
  Tensor x = Tensor::full({1025}, static_cast<float>(world.rank() + 1));
  x.mutable_data<float>()[1024] = stop ? 1.0f : 0.0f;
  net::all_reduce(world, x, net::ReduceOp::sum);
  const float* v = x.data<float>();
  for (int i = 0; i < 1024; ++i)
    if (v[i] != 3.0f) {
      ++t.wrong;
      break;
    }
  ++t.all_reduces;
  return v[1024] > 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"chaos soak: one rank of a split graph and an all_reduce loop"};
  double until = 0, rss_every = 5;
  int in_flight = 8;
  std::string tally_dir;
  app.add_option("--until", until, "stop at this time (seconds since the epoch): every attempt ends together")->required();
  app.add_option("--in-flight", in_flight, "requests in the graph at once")->check(cli::PositiveNumber);
  app.add_option("--rss-every", rss_every, "seconds between RSS samples")->check(cli::PositiveNumber);
  app.add_option("--tally-dir", tally_dir, "keep this rank's tally in DIR/attempt-A-rank-R.json as it goes");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("chaos_soak", [&] {
    const double started = now_s();
    Runtime runtime;
    auto world = net::init_process_group();
    if (world->size() != 2) throw ValueError("chaos_soak: run it on two ranks, got " + std::to_string(world->size()));
    const int rank = world->rank();
    const char* restarts = std::getenv("TROUPE_RESTART_COUNT");
    const int attempt = restarts ? std::atoi(restarts) : 0;
    Tally t;
    const TallyFile file(tally_dir, rank, attempt);
    file.write(t.json(rank, attempt, now_s() - started));
    double next_rss = started, next_tally = started;
    // Between requests and rounds: an RSS sample every --rss-every s, the tally file every 0.2 s.
    auto sample = [&] {
      const double now = now_s();
      if (now >= next_rss) {
        t.rss.push_back(rss_mb());
        next_rss += rss_every;
      }
      if (now >= next_tally) {
        file.write(t.json(rank, attempt, now - started));
        next_tally = now + 0.2;
      }
    };

    std::vector<Tensor> inputs;
    std::vector<std::vector<int64_t>> answers;
    if (rank == 0) {
      Executor local(split_graph(0));
      for (int i = 0; i < 16; ++i) {
        inputs.push_back(seeded_normal({32, 256}, 100 + i));
        answers.push_back(local({{"x", inputs.back()}}).at("classes").tensor().to_vector<int64_t>());
      }
    }
    Executor exec(split_graph(1), {.max_in_flight = in_flight, .group = world});
    std::exception_ptr error;
    try {
      if (rank == 1) {
        // The model's nodes are served beside the all_reduce loop; serve() ends when rank 0's executor does.
        std::exception_ptr served;
        std::thread server([&] {
          try {
            exec.serve();
          } catch (...) {
            served = std::current_exception();
          }
        });
        try {
          while (!all_reduce_round(*world, false, t)) sample();
        } catch (...) {
          error = std::current_exception();
        }
        server.join();
        if (!error) error = served;
      } else {
        std::deque<std::pair<int, Invocation>> pending;
        auto finish_oldest = [&] {
          auto [i, run] = std::move(pending.front());
          pending.pop_front();
          --t.in_flight;
          try {
            if (run.get("classes").tensor().to_vector<int64_t>() == answers[static_cast<size_t>(i)]) ++t.completed;
            else ++t.wrong;
          } catch (...) {
            t.fail(std::current_exception());
            if (!error) error = std::current_exception();
          }
        };
        try {
          for (int64_t round = 0;; ++round) {
            const bool stop = now_s() >= until;
            if (all_reduce_round(*world, stop, t)) break;
            if (static_cast<int>(pending.size()) == in_flight) finish_oldest();
            if (error) break;
            const int i = static_cast<int>(round % 16);
            ++t.requests;
            try {
              pending.emplace_back(i, exec.run({{"x", inputs[static_cast<size_t>(i)]}}));
              ++t.in_flight;
            } catch (...) {
              t.fail(std::current_exception());  // refused at once: ended, as a failure
              throw;
            }
            sample();
          }
        } catch (...) {
          if (!error) error = std::current_exception();
        }
        while (!pending.empty()) finish_oldest();  // each in-flight request ends one way or the other
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    t.rss.push_back(rss_mb());
    t.end = "deadline";
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        t.end = e.what();
      }
    }
    const nlohmann::ordered_json tally = t.json(rank, attempt, now_s() - started);
    file.write(tally);
    print_json_line(tally);
    if (error) std::rethrow_exception(error);
    return 0;
  });
}
