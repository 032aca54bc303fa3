#pragma once
// The launcher behind `troupe launch`: starts this node's ranks with the env:// variables set
// (like torchrun), forwards their output line by line prefixed "[rank R]", and when one rank
// fails stops the others (SIGTERM, SIGKILL after a grace period) and reports which and how.
//
//   LaunchOptions o;
//   o.nproc = 2;
//   o.command = {"build/bin/p2p_blocking"};
//   LaunchResult r = launch(o);        // r.exit_code: 0, or the failed rank's status (128+signal)
//
// With max_restarts K (torchrun's --max-restarts), a failed job is started again, every rank, up to
// K times; the program finds its last checkpoint (models/train/checkpoint.h) and goes on from there.
//
// Elastic (torchrun's --nnodes MIN:MAX --rdzv-backend c10d): with rdzv_endpoint, every node's
// launcher meets the others at HOST:PORT (net/bootstrap/rendezvous_rounds.h; served by the launcher whose
// host owns HOST) and the job runs in rounds of min_nodes..nnodes nodes. When a rank fails or a
// node is lost (killed, or its link cut: silent for 1.5 s), every launcher stops its ranks and a
// new round starts with the nodes still there; a node that starts later joins at the next round
// (a running round of fewer than nnodes nodes is stopped for it). Ranks and world size are the
// round's; TROUPE_RESTART_COUNT is the round's id.
//
//   o.rdzv_endpoint = "10.0.0.1:29400"; o.min_nodes = 2; o.nnodes = 3; o.max_restarts = 5;
//
// In place (o.in_place, `--in-place`): nothing stops on a loss; the ranks re-form their group
// among themselves (net/quorum.h) and keep their state in memory.
//
// Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
// MASTER_PORT, TROUPE_RUN_ID, TROUPE_RESTART_COUNT (0, then 1, 2... on restarts) and TROUPE_JOB_SECRET_FILE
// (the job secret, net/job_secret.h: secret_file, $TROUPE_JOB_SECRET_FILE, or one made for a
// single-node job, 0600 in $TMPDIR, removed at the end; none with insecure); with huge_pages,
// glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES. Without a master,
// the job is single-node on loopback and a free port is picked.
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace troupe::net {

struct LaunchOptions {
  int nproc = 1;       // ranks on this node
  int nnodes = 1;      // nodes in the job
  int node_rank = 0;   // this node's index
  std::string master;  // HOST:PORT of rank 0's rendezvous; empty: 127.0.0.1 and a free port
  std::vector<std::string> command;
  std::chrono::milliseconds grace{5000};  // SIGTERM to SIGKILL
  bool stop_on_failure = true;            // false: let the others run to their end (tests use it)
  // Restarts of the whole job after a rank fails (not after an interrupt); several nodes only with
  // rdzv_endpoint, where their launchers meet to restart together.
  int max_restarts = 0;
  // The job secret every rank gets (job_secret.h): this file (the same on every node), else
  // $TROUPE_JOB_SECRET_FILE, else a fresh one (a single-node job only).
  std::string secret_file;
  bool insecure = false;  // no secret: the ranks get TROUPE_INSECURE=1 (anyone reaching a port may join)
  bool encrypt = false;   // the ranks get TROUPE_ENCRYPT=1: every frame encrypted (CURVE, AES-GCM)
  // malloc backs its large blocks with transparent huge pages (glibc.malloc.hugetlb=1): ZeroMQ
  // receives every large message into a block of its own, and with 4 KiB pages faulting it in
  // costs more than the copy (a 64 MB message over loopback: ~0.9 GB/s, ~2.5 GB/s with them).
  bool huge_pages = true;
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every rank
  // Elastic: HOST:PORT where the launchers meet (node_rank and master are then per round).
  std::string rdzv_endpoint;
  int min_nodes = 0;                              // fewest nodes a round runs with (0: nnodes)
  std::chrono::milliseconds rdzv_settle{500};     // no new node for this long: the round closes
  std::chrono::milliseconds rdzv_timeout{30000};  // a silent rendezvous, or fewer than min_nodes: error
  std::chrono::milliseconds rdzv_host_wait{2000};  // in place: a joining node's other ranks, waited for
  // In place (with rdzv_endpoint): the ranks, not the launchers, meet at rdzv_endpoint (a quorum,
  // net/quorum.h, served by the launcher whose host owns HOST), and a lost rank or node stops no
  // other rank: the survivors' group re-forms and they go on from memory. A failed rank is started
  // again on its own (max_restarts times each) and joins as a new rank. The ranks get
  // TROUPE_QUORUM=HOST:PORT, TROUPE_WORLD_SIZES=MIN:MAX (min_nodes and nnodes times nproc: every
  // epoch's world lies between) and LOCAL_RANK, no RANK or WORLD_SIZE (their quorum numbers them).
  bool in_place = false;
  // Receives every output line: rank R (or -1 for the launcher's own notices), whether it came
  // from stderr, and the line without its newline. Default: "[rank R] line" to stdout/stderr.
  std::function<void(int rank, bool is_stderr, const std::string& line)> on_line;
};

struct RankExit {
  int rank = -1;
  int pid = -1;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal killed it
};

struct LaunchResult {
  int exit_code = 0;    // 0 when every rank succeeded, else the first failed rank's code (128 + signal)
  std::string failure;  // "rank 1 (pid 4242) was killed by signal 9 (Killed)"; empty on success
  std::vector<RankExit> ranks;  // of the last attempt
  int restarts = 0;             // attempts after the first (elastic: rounds this node ran after its first)
};

LaunchResult launch(const LaunchOptions& options);

// A TCP port that was free on every address a moment ago, from below the kernel's ephemeral range
// when it can, so that no process given a port by the kernel takes it before its server binds it.
int free_tcp_port();

}  // namespace troupe::net
