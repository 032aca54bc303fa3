#pragma once
// What a connection to one of a rank's listening ports (the rendezvous, the ZeroMQ ROUTER, the
// direct links and stripes) may hold, and for how long, before it is cut off. Every limit has a
// default chosen to stay far from what a real job does, and an environment variable to change it
// (read once per process):
//
//   TROUPE_MAX_FRAME_BYTES        4 GiB  the largest message part a ZeroMQ peer may announce
//                                        (ZMQ_MAXMSGSIZE): a larger one is cut before any of it is
//                                        allocated. A direct-link record is capped at 1 MiB
//                                        (kDirectRecordMax) and a striped frame at 64 GiB
//                                        (kStripedFrameMax), where jobs without CURVE send their
//                                        large tensors; a CURVE job's tensors must fit this limit.
//   TROUPE_HANDSHAKE_TIMEOUT_MS   10 s   from accept to the ZeroMQ greeting, or to a direct link's
//                                        introduction: a connection that sends nothing is closed.
//   TROUPE_PROGRESS_TIMEOUT_MS    30 s   a ZeroMQ connection that completes no message for this long
//                                        (ZMTP heartbeats: ping every second, unanswered -> closed),
//                                        a direct-link record half-received for this long.
//   TROUPE_MAX_PENDING            64     connections per direct-link port that have not introduced
//                                        themselves yet: past it the oldest silent one is closed
//                                        (twice as many once they have sent bytes; libzmq has no
//                                        such cap: a ZeroMQ port's silent connections each live until
//                                        the handshake deadline).
//   TROUPE_SEND_STALL_TIMEOUT_MS  60 s   a direct link whose peer takes none of the bytes kept for it
//                                        for this long: that peer fails with a CommError naming its
//                                        rank and address.
//   TROUPE_MAX_REGISTRATION_BYTES 64 KiB a rendezvous message (ZMQ_MAXMSGSIZE on its ROUTER).
//
// Stripes (connections a rank introduced, stripes.h) time out each blocked write after 10 s and
// each blocked read after the transport's peer timeout (3 s, TROUPE_PEER_TIMEOUT_MS), which fails
// that peer.
//
// What a stranger holds at most: per pending direct connection its handshake's 112 bytes and a
// descriptor (2 x TROUPE_MAX_PENDING of them per port at most); per ZeroMQ connection libzmq's buffers (tens
// of KiB) until the handshake deadline, then of a part it announced (allocated whole: pages it did
// not fill cost nothing) the bytes it sent, until the progress deadline. Whole messages under an
// identity that names no rank are dropped one by one, the connection kept (libzmq cannot close one
// peer of a ROUTER): the job secret's handshake keeps such a process out. Each cut-off is one line
// on stderr naming the address (log_cut_off; past 20 in a second they are counted, then summed up).
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace troupe::net {

struct NetLimits {
  size_t max_frame_bytes = size_t{4} << 30;
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds progress_timeout{30'000};
  int max_pending = 64;
  std::chrono::milliseconds send_stall_timeout{60'000};
  size_t max_registration_bytes = 64 << 10;
};

// The limits in force: the defaults above, each replaced by its variable when set. A malformed or
// non-positive value is a ValueError naming the variable (thrown by the first call).
const NetLimits& net_limits();
// The same parse, of any environment (tests).
NetLimits parse_net_limits(const std::function<const char*(const char*)>& getenv);

// Raises this process' soft limit of open descriptors to its hard limit, once: a flood of
// connections is cut off by the deadlines above, and until then must not take the descriptors the
// job's own connections, files and pipes need (a default soft limit of 1,024 would).
void raise_descriptor_limit();

// One line on stderr: "troupe: cut off ADDRESS: WHY". Rate-limited (20 a second, then a count).
void log_cut_off(const std::string& address, const std::string& why);

// "host:port" of a connected socket's peer ("?" when it cannot be told).
std::string peer_address(int fd);

}  // namespace troupe::net
