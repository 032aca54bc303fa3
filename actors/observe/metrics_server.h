#pragma once
// The HTTP endpoint Prometheus scrapes: GET /metrics answers metrics::exposition() (metrics.h).
// One thread, plain sockets, one request per connection; anything else is a 404 (405 for other
// methods). Started once per process by the Runtime and the transport when TROUPE_METRICS_PORT is
// set: the port is TROUPE_METRICS_PORT + this process' rank (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK
// or SLURM_PROCID), so `troupe launch --metrics-port 9400` gives rank r port 9400 + r, and so
// does TROUPE_METRICS_PORT=9400 under mpirun or srun. It binds 127.0.0.1 unless TROUPE_METRICS_ADDR
// names another address (0.0.0.0: every interface).
//
// GET /ranks answers every rank's metrics endpoint, host:port a line, rank 0 first, once the
// rendezvous has told this rank where the others are (set_job_hosts): `troupe top --job HOST:PORT`
// asks rank 0 for it and then watches them all.
//
//   TROUPE_METRICS_PORT=9400 build/bin/troupe launch --nproc 2 -- build/bin/remote_bench &
//   curl -s localhost:9401/metrics | grep troupe_transport_sent_bytes_total
#include <string>
#include <vector>

namespace troupe::metrics {

// Starts the server if TROUPE_METRICS_PORT is set and it is not running yet; returns the port it
// listens on (0: not serving). A port already taken is reported on stderr, not thrown: metrics
// never stop a job.
int serve_from_env();

// Starts the server on addr:port (port 0: any free one) unless one runs; returns its port. An
// address it cannot bind is a ValueError naming it and the reason.
int serve(const std::string& addr, int port);

// The port being served, 0 if none.
int serving_port();

// Where each rank of this job runs (hosts[r]: the host its transport answers on, from the
// rendezvous table), this process being rank `rank`. Rank r's metrics endpoint is then
// hosts[r]:TROUPE_METRICS_PORT+r, or this rank's TROUPE_METRICS_ADDR (default 127.0.0.1) for the
// ranks on this rank's host unless that is 0.0.0.0.
void set_job_hosts(int rank, std::vector<std::string> hosts);

}  // namespace troupe::metrics
