// Actor mesh costs (net/remote/mesh.h) against one remote call: rank 0 calls, the mesh's members
// live on ranks 1..N-1 (one per rank, or 64 over them), each figure a median.
//
//   build/bin/troupe launch --nproc 9 -- build/bin/mesh_bench [--json]
//   {"ranks":9,"rtt_us":..,"mesh_k_us":..,"mesh_k_ratio":..,"direct_k_us":..,"mesh64_us":..,"mesh64_ratio":..,
//    "cpus":..,"rtt_cpu_us":..,"mesh_k_cpu_us":..,"direct_k_cpu_us":..,"mesh64_cpu_us":..,"mesh_k_cpu_floor":..,
//    "call_64MiB_ms":..,"bcast4_64MiB_ms":..,"bcast4_ratio":..,"chunk_bytes":..,"bcast4_tree_64MiB_ms":..,
//    "bcast4_tree_ratio":..,"reduce4_64MiB_ms":..,"reduce4_gbs":..,"reduce4_tree_64MiB_ms":..,"reduce4_tree_gbs":..}
//
// rtt: one request with a 4-byte tensor to an actor on rank 1 (--one), answered with it. meshK: the same
// call to every member of a K-member mesh, until all answers are in (issue 47's goal: <= 3x rtt for
// 8 members on 8 ranks, <= 6x for 64); direct_k: the same K calls as K requests in flight. Each
// *_cpu_us: the machine's busy CPU time per call over those calls (machine_busy.h: every rank's
// process and the kernel's network work, where the ranks share this machine); mesh_k_cpu_floor is
// mesh_k_cpu_us / cpus / rtt_us, the least ratio to rtt that work allows on this machine's cores.
// bcast4: a call carrying 64 MiB to 4 members on ranks 1-4 (--four), the tensor in chunks of --chunk
// bytes down a chain of their ranks, answered with the bytes each got, against one such call to
// one member (goal <= 1.3x); bcast4_tree: the same with the tensor whole down the binomial tree.
// reduce4: call_reduce(sum) of a 64 MiB answer from each of those 4 members, up the chain of their
// ranks in chunks; reduce4_gbs is bytes / time, to hold against all_reduce_bench's busbw at 64 MiB
// on the same ranks (goal >= 0.8x). reduce4_tree: the same with each answer whole up the tree.
#include <cstdio>
#include <map>

#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/machine_busy.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "net/remote/mesh.h"

namespace {

using troupe::Tensor;

class Member {
 public:
  explicit Member(const troupe::net::MeshPoint&) {}
  Tensor echo(const Tensor& x) const { return x; }
  int64_t bytes(const Tensor& x) const { return static_cast<int64_t>(x.nbytes()); }
  // A result of n floats, made once: what a reduction's members answer with.
  Tensor held(int64_t n) {
    auto it = held_.find(n);
    if (it == held_.end()) it = held_.emplace(n, Tensor::ones({n})).first;
    return it->second;
  }

 private:
  std::map<int64_t, Tensor> held_;
};
TROUPE_ACTOR(Member(const troupe::net::MeshPoint&), "bench.mesh_member", &Member::echo, &Member::bytes, &Member::held);

}  // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  using namespace troupe::net;
  int reps = 200, big_reps = 7, one_rank = 1;
  std::vector<int> four = {1, 2, 3, 4};
  bool json = false;
  size_t chunk = MeshOptions{}.chunk_bytes;
  cli::App app{"actor mesh calls against one remote call"};
  app.add_option("--reps", reps, "timed small calls per figure");
  app.add_option("--big-reps", big_reps, "timed 64 MiB calls per figure");
  app.add_option("--one", one_rank, "the rank of the single remote actor (rtt, one 64 MiB call)");
  app.add_option("--four", four, "the ranks of the 4-member mesh (64 MiB broadcast and reduce)")->delimiter(',');
  app.add_option("--chunk", chunk, "bytes per chunk of the streamed 64 MiB broadcast (MeshOptions::chunk_bytes)");
  app.add_flag("--json", json, "one JSON line");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("mesh_bench", [&] {
    auto world = init_process_group();
    const int n = world->size();
    if (n < 5) throw ValueError("mesh_bench: run it on 5 ranks or more (troupe launch --nproc 9: 8 members' ranks)");
    RemoteActors actors(world);
    if (world->rank() != 0) {
      serve();
      return 0;
    }
    std::vector<int> members;
    for (int r = 1; r < n; ++r) members.push_back(r);
    const Tensor small = Tensor::scalar<float>(1.0f);
    auto all = [](std::vector<Future<WireValue>> futures) { wait_all(futures); };

    // The median wall time of fn over reps calls after warmups, and the machine's busy CPU time per call.
    auto timed = [](auto&& fn, int reps, int warmups, double& cpu_us) {
      const double busy = machine_busy_seconds();
      const double seconds = median_seconds(fn, reps, warmups);
      cpu_us = (machine_busy_seconds() - busy) / (reps + warmups) * 1e6;
      return seconds;
    };
    double rtt_cpu = 0, mesh_k_cpu = 0, direct_k_cpu = 0, mesh_64_cpu = 0;
    RemoteActor one = spawn_on(one_rank, "bench.mesh_member", MeshPoint{});
    const double rtt = timed([&] { one.request<Tensor>("echo", small).get(); }, reps, 50, rtt_cpu);

    Mesh per_rank = spawn_mesh("bench.mesh_member", members);
    const double mesh_k = timed([&] { all(per_rank.call("echo", small)); }, reps, 20, mesh_k_cpu);
    // The same members called one by one, every request in flight at once: N sends, no tree.
    const std::vector<RemoteActor> handles = per_rank.members();
    const double direct_k = timed([&] {
      std::vector<Future<WireValue>> futures;
      for (const RemoteActor& a : handles) futures.push_back(a.request("echo", small));
      all(std::move(futures));
    }, reps, 20, direct_k_cpu);
    MeshOptions spread;
    spread.ranks = members;
    Mesh sixty_four = spawn_mesh(spread, "bench.mesh_member", {{"member", 64}});
    const double mesh_64 = timed([&] { all(sixty_four.call("echo", small)); }, reps / 4 + 1, 5, mesh_64_cpu);

    const Tensor big = Tensor::ones({16 << 20});  // 64 MiB
    const double call_big = median_seconds([&] { one.request<int64_t>("bytes", big).get(); }, big_reps, 1);
    if (four.size() != 4) throw ValueError("mesh_bench: --four takes 4 ranks");
    MeshOptions streamed;
    streamed.ranks = four;
    streamed.chunk_bytes = chunk;
    Mesh four_mesh = spawn_mesh(streamed, "bench.mesh_member", {{"rank", 4}});
    const double bcast_4 = median_seconds([&] { all(four_mesh.call("bytes", big)); }, big_reps, 1);
    MeshOptions whole = streamed;
    whole.chunk_bytes = 0;  // the tensor whole, down the binomial tree
    Mesh four_tree = spawn_mesh(whole, "bench.mesh_member", {{"rank", 4}});
    const double bcast_4_tree = median_seconds([&] { all(four_tree.call("bytes", big)); }, big_reps, 1);
    const int64_t floats = 16 << 20;
    // Up a chain in chunks (the warm-up call goes up the tree whole and tells the size), and whole.
    const double reduce_4 =
        median_seconds([&] { wait(four_mesh.call_reduce(ReduceOp::sum, "held", floats)); }, big_reps, 1);
    const double reduce_4_tree =
        median_seconds([&] { wait(four_tree.call_reduce(ReduceOp::sum, "held", floats)); }, big_reps, 1);

    const double bytes = static_cast<double>(big.nbytes());
    const double k = static_cast<double>(members.size());
    if (json) {
      print_json_line(nlohmann::ordered_json{
          {"ranks", n}, {"members_per_rank_mesh", k}, {"rtt_us", rounded(rtt * 1e6, 1)},
          {"mesh_k_us", rounded(mesh_k * 1e6, 1)}, {"mesh_k_ratio", rounded(mesh_k / rtt, 2)},
          {"direct_k_us", rounded(direct_k * 1e6, 1)},
          {"mesh64_us", rounded(mesh_64 * 1e6, 1)}, {"mesh64_ratio", rounded(mesh_64 / rtt, 2)},
          {"cpus", machine_cpus()}, {"rtt_cpu_us", rounded(rtt_cpu, 1)}, {"mesh_k_cpu_us", rounded(mesh_k_cpu, 1)},
          {"direct_k_cpu_us", rounded(direct_k_cpu, 1)}, {"mesh64_cpu_us", rounded(mesh_64_cpu, 1)},
          {"mesh_k_cpu_floor", rounded(mesh_k_cpu / machine_cpus() / (rtt * 1e6), 2)},
          {"call_64MiB_ms", rounded(call_big * 1e3, 2)}, {"bcast4_64MiB_ms", rounded(bcast_4 * 1e3, 2)},
          {"bcast4_ratio", rounded(bcast_4 / call_big, 2)}, {"chunk_bytes", chunk},
          {"bcast4_tree_64MiB_ms", rounded(bcast_4_tree * 1e3, 2)}, {"bcast4_tree_ratio", rounded(bcast_4_tree / call_big, 2)}, {"reduce4_64MiB_ms", rounded(reduce_4 * 1e3, 2)},
          {"reduce4_gbs", rounded(bytes / reduce_4 / 1e9, 3)}, {"reduce4_tree_64MiB_ms", rounded(reduce_4_tree * 1e3, 2)},
          {"reduce4_tree_gbs", rounded(bytes / reduce_4_tree / 1e9, 3)}});
    } else {
      std::printf("one remote call, 4 B:               %9.1f us\n", rtt * 1e6);
      std::printf("mesh of %2.0f on %2.0f ranks, 4 B:       %9.1f us  (%.2fx)\n", k, k, mesh_k * 1e6, mesh_k / rtt);
      std::printf("the same %2.0f requests, all in flight: %9.1f us  (%.2fx)\n", k, direct_k * 1e6, direct_k / rtt);
      std::printf("mesh of 64 on %2.0f ranks, 4 B:        %9.1f us  (%.2fx)\n", k, mesh_64 * 1e6, mesh_64 / rtt);
      std::printf("machine CPU per call (%d CPUs):       one %.0f us, mesh of %.0f %.0f us, requests %.0f us, "
                  "mesh of 64 %.0f us\n", machine_cpus(), rtt_cpu, k, mesh_k_cpu, direct_k_cpu, mesh_64_cpu);
      std::printf("one call, 64 MiB:                   %9.2f ms\n", call_big * 1e3);
      std::printf("mesh of 4, 64 MiB to each, chunked: %9.2f ms  (%.2fx)\n", bcast_4 * 1e3, bcast_4 / call_big);
      std::printf("the same, whole, down a binomial tree: %6.2f ms  (%.2fx)\n", bcast_4_tree * 1e3, bcast_4_tree / call_big);
      std::printf("call_reduce(sum) of 64 MiB from 4:  %9.2f ms  (%.3f GB/s)\n", reduce_4 * 1e3, bytes / reduce_4 / 1e9);
      std::printf("the same, each answer whole:        %9.2f ms  (%.3f GB/s)\n", reduce_4_tree * 1e3,
                  bytes / reduce_4_tree / 1e9);
    }
    for (Mesh* m : {&per_rank, &sixty_four, &four_mesh, &four_tree}) m->stop();
    one.stop();
    return 0;
  });
}
