#pragma once
// Rendezvous: every rank learns every other rank's address before the transport connects.
//
//   std::vector<PeerAddress> table =
//       rendezvous("tcp://10.0.0.1:29500", rank, world, transport, deadline_after(60s));
//
// tcp://host:port  rank 0 serves a small ZeroMQ ROUTER on host:port (CURVE when the transport
//                  has keys); every rank registers its address and gets the whole table back.
// file:///path     ranks append "troupe1 RUN RANK WORLD ADDRESS" lines to a file on a shared file
//                  system under an fcntl write lock, then read it (under a read lock) until every
//                  rank is there. RUN is $TROUPE_RUN_ID (the launcher sets one) so a stale file
//                  from an earlier job with another run id is ignored; use a fresh path otherwise.
// Past the deadline: TimeoutError naming the ranks that never registered.
#include <string>
#include <vector>

#include "net/transport.h"

namespace troupe::net {

std::vector<PeerAddress> rendezvous(const std::string& init_method, int rank, int world_size, Transport& transport,
                                    Deadline deadline);

// "host:port" of a tcp:// or env-derived address, split; CommError when malformed.
std::pair<std::string, int> split_host_port(const std::string& host_port);

}  // namespace troupe::net
