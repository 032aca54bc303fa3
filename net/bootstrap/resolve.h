#pragma once
// Rank 0's host name to the address this rank binds towards it, for init_process_group. Internal to
// net/.
//
//   std::string numeric = resolve_host("troupe-dist-sgd-0.troupe-ranks", "MASTER_ADDR", 30s, deadline);
//   std::string mine = local_address_towards(numeric, 29500, "MASTER_ADDR=troupe-dist-sgd-0...");
//
// A name that does not resolve is retried for a bounded time (patience, never past the deadline):
// in Kubernetes the pods of a job start in any order and rank 0's DNS record appears only once its
// pod has an address; the first failure is said on stderr. Then CommError naming the variable, the
// name and the resolver's answer. Never a silent 127.0.0.1: that address leads every rank but
// rank 0 into a rendezvous that cannot happen, and a hang until its timeout.
#include <chrono>
#include <optional>
#include <string>

#include "net/work.h"

namespace troupe::net::detail {

// The IPv4 address of host as text ("10.0.0.7"); host may already be one. `from` names where the
// name came from, for the messages ("MASTER_ADDR", "SLURM_STEP_NODELIST", "init_method").
std::string resolve_host(const std::string& host, const std::string& from, std::chrono::milliseconds patience,
                         Deadline deadline);

// One attempt, no wait: nullopt when host does not resolve now.
std::optional<std::string> try_resolve_host(const std::string& host);

// The local IPv4 address the kernel would use to reach numeric_host (no packet is sent); CommError
// naming `what` when there is no route.
std::string local_address_towards(const std::string& numeric_host, int port, const std::string& what);

// The address of the interface of the default route, or nullopt when there is none (a network
// namespace with only its own subnet, a machine without network).
std::optional<std::string> default_route_address();

// How long a name that does not resolve is retried: TROUPE_RESOLVE_TIMEOUT (seconds) or 30 s.
std::chrono::milliseconds resolve_patience();

}  // namespace troupe::net::detail
