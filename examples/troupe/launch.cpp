// `troupe launch`: start this node's ranks of a distributed program, like torchrun.
//
//   troupe launch --nproc 2 -- build/bin/p2p_blocking
//   troupe launch --nproc 4 --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 --secret job.secret -- prog
//   troupe launch --nproc 2 --max-restarts 3 -- build/bin/dist_sgd --checkpoint-dir ckpt --resume
//   troupe launch --nproc 2 --nnodes 2:3 --max-restarts 10 --rdzv-endpoint 10.0.0.1:29400 --  # every node
//       build/bin/dist_sgd --elastic --checkpoint-dir ckpt --resume
//   troupe launch --nproc 1 --nnodes 2:3 --max-restarts 10 --rdzv-endpoint 10.0.0.1:29400 --in-place --  # every node
//       build/bin/dist_sgd --elastic
//   troupe launch --nproc 2 --metrics-port 9400 -- build/bin/remote_bench   # rank r: GET :9400+r/metrics
//   troupe launch --nproc 2 --trace /tmp/t -- build/bin/remote_bench; troupe trace merge /tmp/t -o job.json
#include <filesystem>
#include <memory>

#include "devices/error.h"
#include "examples/troupe/commands.h"
#include "net/bootstrap/launcher.h"

namespace troupe::cli {

Command add_launch_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand(
      "launch", "Start local ranks of a distributed program with env:// set (RANK, WORLD_SIZE, MASTER_ADDR, ...)");
  auto o = std::make_shared<net::LaunchOptions>();
  auto grace_s = std::make_shared<double>(5.0);
  auto metrics_port = std::make_shared<int>(0);
  auto trace_dir = std::make_shared<std::string>();
  auto nnodes = std::make_shared<std::string>("1");
  auto settle_s = std::make_shared<double>(0.5);
  auto host_wait_s = std::make_shared<double>(2.0);
  auto rdzv_timeout_s = std::make_shared<double>(30.0);
  app->add_option("--nproc", o->nproc, "Ranks to start on this node")->required()->check(CLI::PositiveNumber);
  app->add_option("--nnodes", *nnodes, "Nodes in the job: N, or MIN:MAX for an elastic job (with --rdzv-endpoint)");
  app->add_option("--node-rank", o->node_rank, "This node's index (0..nnodes-1)")->check(CLI::NonNegativeNumber);
  app->add_option("--master", o->master, "HOST:PORT of rank 0's rendezvous (default: 127.0.0.1 and a free port)");
  app->add_option("--grace", *grace_s, "Seconds between SIGTERM and SIGKILL when a rank fails")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-restarts", o->max_restarts,
                  "Start every rank again after a failure, up to K times (several nodes: with --rdzv-endpoint)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--rdzv-endpoint", o->rdzv_endpoint,
                  "HOST:PORT where the launchers of an elastic job meet (served by the launcher on HOST)");
  app->add_flag("--in-place", o->in_place,
                "Elastic, with --rdzv-endpoint: a lost rank or node stops no other; the survivors' group re-forms "
                "and they train on from memory, and a failed rank starts again alone and joins (net/quorum.h)");
  app->add_option("--rdzv-settle", *settle_s, "Elastic: seconds without a new node before a round closes")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--rdzv-host-wait", *host_wait_s,
                  "In place: seconds a joining node's other ranks are waited for, so that it joins in one epoch")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--rdzv-timeout", *rdzv_timeout_s,
                  "Elastic: seconds a silent rendezvous, or fewer than MIN nodes, is waited for before the job fails")
      ->check(CLI::PositiveNumber);
  app->add_option("--secret", o->secret_file,
                  "Job secret file shared by every node (`troupe secret FILE`; default: $TROUPE_JOB_SECRET_FILE, or "
                  "a fresh one for a single-node job)");
  app->add_flag("--insecure", o->insecure, "No job secret: any process that reaches the ranks' ports may join");
  app->add_flag("--encrypt", o->encrypt, "Encrypt every frame (TROUPE_ENCRYPT=1)");
  app->add_flag("!--no-huge-pages", o->huge_pages, "Leave malloc's pages as they are (no glibc.malloc.hugetlb=1)");
  app->add_option("--metrics-port", *metrics_port,
                  "Serve Prometheus metrics: rank r on port P+r (GET /metrics; TROUPE_METRICS_ADDR, default 127.0.0.1)")
      ->check(CLI::Range(1, 65535));
  app->add_option("--trace", *trace_dir, "Every rank records a trace into DIR/rank-N.json (troupe trace merge DIR)");
  app->add_option("command", o->command, "-- PROGRAM ARGS...")->required();
  return {app, [o, grace_s, metrics_port, trace_dir, nnodes, settle_s, host_wait_s, rdzv_timeout_s] {
            o->grace = std::chrono::milliseconds(static_cast<int64_t>(*grace_s * 1000));
            o->rdzv_settle = std::chrono::milliseconds(static_cast<int64_t>(*settle_s * 1000));
            o->rdzv_host_wait = std::chrono::milliseconds(static_cast<int64_t>(*host_wait_s * 1000));
            o->rdzv_timeout = std::chrono::milliseconds(static_cast<int64_t>(*rdzv_timeout_s * 1000));
            const auto colon = nnodes->find(':');
            try {
              o->nnodes = std::stoi(nnodes->substr(colon == std::string::npos ? 0 : colon + 1));
              if (colon != std::string::npos) o->min_nodes = std::stoi(nnodes->substr(0, colon));
            } catch (const std::exception&) {
              throw ValueError("launch: --nnodes takes N or MIN:MAX, got '" + *nnodes + "'");
            }
            if (colon != std::string::npos && o->rdzv_endpoint.empty())
              throw ValueError("launch: --nnodes MIN:MAX is an elastic job: give --rdzv-endpoint HOST:PORT");
            // Each rank adds its RANK to the port (actors/observe/metrics_server.h), as under mpirun or srun.
            if (*metrics_port > 0) o->env.emplace_back("TROUPE_METRICS_PORT", std::to_string(*metrics_port));
            if (!trace_dir->empty()) o->env.emplace_back("TROUPE_TRACE", std::filesystem::absolute(*trace_dir).string());
            return net::launch(*o).exit_code;
          }};
}

}  // namespace troupe::cli
