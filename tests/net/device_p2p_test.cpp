// Device tensors between processes of one host: through pinned shared memory where the ranks
// share it (net/links/staged_link.h), through host bytes where they do not.
#include <catch2/catch.hpp>

#include "devices/backend.h"
#include "net/bootstrap/host_identity.h"
#include "support/ranks.h"
#include "support/skip.h"

using namespace troupe;
using namespace troupe::net;

TEST_CASE("device p2p: ranks of one process never stage through interprocess handles", "[net][p2p]") {
  const PeerAddress a{"tcp://127.0.0.1:1", "ipc:///tmp/troupe-100-0-0.sock", "host-a", ""};
  const PeerAddress b{"tcp://127.0.0.1:2", "ipc:///tmp/troupe-100-1-1.sock", "host-a", ""};
  const PeerAddress c{"tcp://127.0.0.1:3", "ipc:///tmp/troupe-101-1-0.sock", "host-a", ""};
  const PeerAddress elsewhere{"tcp://10.0.0.2:3", "ipc:///tmp/troupe-101-1-0.sock", "host-b", ""};
  const PeerAddress unnamed{"tcp://127.0.0.1:4", "", "host-a", ""};
  CHECK(same_process(a, b));
  CHECK_FALSE(same_process(a, c));
  CHECK_FALSE(same_process(a, elsewhere));
  CHECK(same_process(a, unnamed));  // unknown: treated as one process, so never staged
}

TEST_CASE("device p2p: two ranks sharing a GPU exchange device tensors", "[net][p2p][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  check_all_passed(run_ranks(2, "net rank: device tensors"), 2);
  // The same through host bytes and the network (shared memory off).
  LaunchOptions no_shm;
  no_shm.env = {{"TROUPE_SHM", "0"}};
  check_all_passed(run_ranks(2, "net rank: device tensors", no_shm), 2);
}

TEST_CASE("device p2p: device tensors in collectives and remote calls across two ranks", "[net][p2p][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  LaunchOptions no_shm;
  no_shm.env = {{"TROUPE_SHM", "0"}};  // the network's path, as between hosts
  check_all_passed(run_ranks(2, "net rank: device tensors in collectives and remote calls", no_shm), 2);
}
