#pragma once
// Where a rank can be reached, and which host it runs on: the address each rank publishes in the
// rendezvous (transport.h), and the host id that tells whether a peer's ipc:// socket and shared
// memory are reachable from here.
//
//   PeerAddress a{"tcp://10.0.0.2:5555", "ipc:///tmp/troupe-1-0-0.sock", host_id(), "10.0.0.2:5600"};
//   PeerAddress b = PeerAddress::parse(a.serialize());  // CommError when malformed
//   bool same_host = b.host_id == host_id();
#include <string>

namespace troupe::net {

// Where a rank can be reached: its tcp:// endpoint, its ipc:// endpoint, and a host id (boot id
// plus mount and network namespaces) telling whether an ipc:// path is reachable from a peer.
struct PeerAddress {
  std::string tcp;
  std::string ipc;
  std::string host_id;
  std::string direct;                                 // host:port of its direct links; empty: none
  std::string serialize() const;                      // "tcp|ipc|host_id[|direct]"
  static PeerAddress parse(const std::string& text);  // CommError when malformed; direct is optional
};

// This process's host: the same boot, ipc directory, pid namespace and network namespace give the
// same id.
std::string host_id();
// A fresh path for a rank's ipc:// socket (under $TMPDIR when short enough, else /tmp).
std::string ipc_path(int rank);
// Whether two addresses belong to one process (their ipc:// paths name its pid): ranks of one
// process share its CUDA context, where interprocess handles do not open.
bool same_process(const PeerAddress& a, const PeerAddress& b);

}  // namespace troupe::net
