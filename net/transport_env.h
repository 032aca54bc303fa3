#pragma once
// A rank's TransportOptions from InitOptions and the environment: the transport kind
// (TROUPE_TRANSPORT), TROUPE_DIRECT_MAX, TROUPE_PEER_TIMEOUT_MS, TROUPE_STRIPES, TROUPE_STRIPE_MIN,
// the busy polls and shared memory (TROUPE_SHM); then the job's keys and encryption
// (TROUPE_JOB_SECRET_FILE, TROUPE_INSECURE, TROUPE_ENCRYPT). What init_process_group and a
// quorum's groups (net/quorum.h) build their transports with; the caller picks tcp_host (between
// the two: init_process_group's errors come in that order). A bad value is a ValueError naming its
// variable. Internal to net/.
//
//   TransportOptions t = transport_options_from_env({.rank = 1, .world_size = 3});
//   t.tcp_host = "10.0.0.2";
//   add_job_keys_from_env(t, {.rank = 1, .world_size = 3});
#include "net/process_group.h"
#include "net/transport.h"

namespace troupe::net {

TransportOptions transport_options_from_env(const InitOptions& options);
void add_job_keys_from_env(TransportOptions& t, const InitOptions& options);

}  // namespace troupe::net
