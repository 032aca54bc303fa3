// troupe_hostile_peer: a process that attacks the listening ports of a running Troupe job, for
// tests/net/hostile_test.cpp. One function per attack, a table of which port kinds each applies
// to; every attack runs against every port of its kinds (at once, except the flood) and passes when
// the job refused or cut it off (or, for frames sent under a stranger's identity on ZeroMQ,
// answered nothing). One line per attack and port, then "hostile: N passed, M failed"; exit 1 when
// any failed.
//
//   troupe_hostile_peer --rendezvous 127.0.0.1:29500 --world 2   # while rank 0 waits for rank 1
//                                                                # (the rendezvous closes after)
//   troupe_hostile_peer --world 2 --ports ports.0 --ports ports.1 --handshake-ms 1000 --progress-ms 2000
//                       --record-secret job.secret
//   troupe_hostile_peer --ports ports --only "1,000 connections at once" --only "one byte a second" --until-gone
//                       # a load, not a test: those attacks again and again until the job is gone
//                       # (scripts/hostile_flood_bench.sh)
//
// A ports file has lines "zmq RANK tcp://HOST:PORT" and "direct RANK HOST:PORT" (hostile_test.cpp
// writes them from each rank's address); --rendezvous adds "rendezvous - HOST:PORT". A direct port
// is attacked twice: as a direct link's (lane 0) and as a stripe's (lane 1, the same listener).
//
// The authentication rows: no secret (a zero key), a wrong secret, a replayed handshake and a
// reflected one. The last two need a genuine rank's transcript, as an eavesdropper on the job's
// network would have it: --record-secret FILE lets this process record one against a handshake
// server of its own (record_transcript), and read the job's CURVE public key (public by design:
// every client is given it). It never uses the secret on the job's ports. Without it those rows
// use a hello of another job, refused before any MAC is checked.
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sodium.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/bootstrap/rendezvous_messages.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/job_secret.h"
#include "net/remote/call_frame.h"
#include "net/wire_bytes.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

enum class Kind { rendezvous, zmq, direct, stripe };
const char* name(Kind k) {
  switch (k) {
    case Kind::rendezvous: return "rendezvous";
    case Kind::zmq: return "zmq";
    case Kind::direct: return "direct";
    case Kind::stripe: return "stripe";
  }
  return "?";
}

struct Target {
  Kind kind;
  std::string rank;  // "-" for the rendezvous
  std::string host;
  int port = 0;
  std::string label() const { return std::string(name(kind)) + " " + rank + " " + host + ":" + std::to_string(port); }
};

// A genuine client's half of a handshake: what a rank sent, as seen on the wire.
struct Transcript {
  std::vector<uint8_t> hello, proof;
};

struct Settings {
  void* context = nullptr;  // one ZeroMQ context for every attack (libzmq's set-up is not for threads at once)
  int world = 2;
  std::chrono::milliseconds handshake{10'000};  // the job's TROUPE_HANDSHAKE_TIMEOUT_MS
  std::chrono::milliseconds progress{30'000};   // the job's TROUPE_PROGRESS_TIMEOUT_MS
  // Longer than this past the deadline that should cut a connection: it was not cut (a hang).
  std::chrono::milliseconds slack{8'000};
  // From --record-secret: the job's CURVE public key, and each (server rank, lane)'s transcript of
  // the rank before it dialing it.
  std::string job_curve_public;
  std::vector<std::pair<std::pair<int, uint32_t>, Transcript>> transcripts;
  const Transcript* transcript(int server_rank, uint32_t lane) const {
    for (const auto& [key, t] : transcripts)
      if (key == std::pair{server_rank, lane}) return &t;
    return nullptr;
  }
};

struct Outcome {
  bool passed = false;
  std::string what;
};

// ---- sockets ----

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A blocking TCP connection to the target; -1 with errno set when refused.
Fd dial(const Target& t, bool small_receive_buffer = false) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &found) != 0)
    throw std::runtime_error("cannot use address " + t.label());
  Fd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (small_receive_buffer) {  // a peer that never reads: the job's bytes pile up at once
    const int size = 4096;
    ::setsockopt(fd.fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  const bool ok = ::connect(fd.fd, found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  if (!ok) return Fd();
  return fd;
}

bool send_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Waits until the job closes the connection (reading and dropping what it sends, unless `read` is
// false: then only its FIN or reset is seen). How long it took, or -1 ms when it stayed open until `cap`.
std::chrono::milliseconds until_closed(int fd, std::chrono::milliseconds cap, bool read = true) {
  const auto start = Clock::now();
  char scratch[4096];
  while (Clock::now() - start < cap) {
    pollfd p{fd, static_cast<short>((read ? POLLIN : 0) | POLLRDHUP), 0};
    const int n = ::poll(&p, 1, 50);
    if (n <= 0) continue;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
      return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (p.revents & POLLIN) {
      const ssize_t got = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
        return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    }
  }
  return -1ms;
}

Outcome cut_within(int fd, std::chrono::milliseconds deadline, const Settings& s, const std::string& doing,
                   bool read = true) {
  const auto took = until_closed(fd, deadline + s.slack, read);
  if (took < 0ms)
    return {false, doing + ": still open " + std::to_string((deadline + s.slack).count()) + " ms later"};
  return {true, doing + ": cut off after " + std::to_string(took.count()) + " ms"};
}

// ---- ZMTP 3.0 by hand (ZeroMQ's own client would never send what these attacks send) ----

std::vector<uint8_t> zmtp_greeting() {
  std::vector<uint8_t> g(64, 0);
  g[0] = 0xFF;
  g[9] = 0x7F;
  g[10] = 3;  // version 3.0
  std::memcpy(&g[12], "NULL", 4);
  return g;
}

std::vector<uint8_t> zmtp_ready(const std::string& identity) {
  std::vector<uint8_t> body = {5, 'R', 'E', 'A', 'D', 'Y'};
  auto property = [&](const std::string& key, const std::string& value) {
    body.push_back(static_cast<uint8_t>(key.size()));
    body.insert(body.end(), key.begin(), key.end());
    for (int shift = 24; shift >= 0; shift -= 8) body.push_back(static_cast<uint8_t>(value.size() >> shift));
    body.insert(body.end(), value.begin(), value.end());
  };
  property("Socket-Type", "DEALER");
  property("Identity", identity);
  body.insert(body.begin(), {uint8_t{0x04}, static_cast<uint8_t>(body.size())});  // a short command
  return body;
}

// A message frame's ZMTP header announcing `size` bytes (long form).
std::vector<uint8_t> zmtp_long_frame(uint64_t size) {
  std::vector<uint8_t> f = {0x02};
  for (int shift = 56; shift >= 0; shift -= 8) f.push_back(static_cast<uint8_t>(size >> shift));
  return f;
}

// The identity a rank outside the world would present (zmq_socket.h: 'T' then the rank).
std::string stranger_identity(const Settings& s) {
  std::string id(5, 'T');
  const int32_t rank = s.world;
  std::memcpy(id.data() + 1, &rank, 4);
  return id;
}

bool zmtp_handshake(int fd, const Settings& s) {
  const auto greeting = zmtp_greeting();
  const auto ready = zmtp_ready(stranger_identity(s));
  return send_all(fd, greeting.data(), greeting.size()) && send_all(fd, ready.data(), ready.size());
}

// A direct link's introduction (net/direct_link.cpp: "TRPD", version 3, rank, stripe).
std::vector<uint8_t> direct_intro(int rank) {
  std::vector<uint8_t> intro(16);
  troupe::net::wire::put<uint32_t>(intro.data(), 0, 0x44505254);
  troupe::net::wire::put<uint32_t>(intro.data(), 4, 3);
  troupe::net::wire::put<uint32_t>(intro.data(), 8, static_cast<uint32_t>(rank));
  troupe::net::wire::put<uint32_t>(intro.data(), 12, 0);
  return intro;
}

// ---- the attacks ----

Outcome garbage(const Target& t, const Settings& s) {
  Fd fd = dial(t);
  if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
  std::vector<uint8_t> junk(4096);
  uint32_t x = 2463534242u;
  for (auto& b : junk) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  junk[0] = 0x01;  // not ZMTP 3's 0xFF: what a ZMTP 1.0 peer would start with
  send_all(fd.fd, junk.data(), junk.size());
  return cut_within(fd.fd, s.handshake, s, "4 KiB of garbage");
}

Outcome huge_frame(const Target& t, const Settings& s) {
  Fd fd = dial(t);
  if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
  std::vector<uint8_t> wire;
  if (t.kind == Kind::direct) {
    // A record announcing a 2^40-byte part, after an introduction as a rank outside the world.
    wire = direct_intro(s.world);
    std::vector<uint8_t> record(16);
    troupe::net::wire::put<uint32_t>(record.data(), 0, 72);
    troupe::net::wire::put<uint32_t>(record.data(), 4, 1);
    troupe::net::wire::put<uint64_t>(record.data(), 8, uint64_t(1) << 40);
    wire.insert(wire.end(), record.begin(), record.end());
  } else {
    wire = zmtp_greeting();
    const auto ready = zmtp_ready(stranger_identity(s));
    const auto frame = zmtp_long_frame(uint64_t(1) << 40);
    wire.insert(wire.end(), ready.begin(), ready.end());
    wire.insert(wire.end(), frame.begin(), frame.end());
  }
  send_all(fd.fd, wire.data(), wire.size());
  return cut_within(fd.fd, s.handshake, s, "a frame header announcing 2^40 bytes");
}

// An actor frame (a spawn or a call) from a ZeroMQ DEALER presenting a rank outside the world:
// dropped unread (Transport::dropped_frames), never answered. On a direct port: cut at the introduction.
Outcome actor_frame(const Target& t, const Settings& s, const troupe::net::CallFrame& call, const std::string& doing) {
  using namespace troupe::net;
  const troupe::net::EncodedCall encoded = encode_call(call);
  FrameHeader h;
  h.kind = FrameKind::actor;
  h.source = s.world;
  h.dtype = troupe::DType::u8;
  h.shape = {static_cast<int64_t>(encoded.bytes.size())};
  h.payload_bytes = encoded.bytes.size();
  const std::vector<uint8_t> header = encode_header(h);
  if (t.kind == Kind::direct) {
    Fd fd = dial(t);
    if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
    const auto intro = direct_intro(s.world);
    send_all(fd.fd, intro.data(), intro.size());
    return cut_within(fd.fd, s.handshake, s, doing);
  }
  void* dealer = zmq_socket(s.context, ZMQ_DEALER);
  const std::string id = stranger_identity(s);
  zmq_setsockopt(dealer, ZMQ_ROUTING_ID, id.data(), id.size());
  const int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_connect(dealer, ("tcp://" + t.host + ":" + std::to_string(t.port)).c_str());
  zmq_send(dealer, header.data(), header.size(), ZMQ_SNDMORE);
  zmq_send(dealer, encoded.bytes.data(), encoded.bytes.size(), 0);
  zmq_pollitem_t item{dealer, 0, ZMQ_POLLIN, 0};
  const bool answered = zmq_poll(&item, 1, 1000) > 0;
  zmq_close(dealer);
  return {!answered, doing + (answered ? ": answered" : ": dropped, no answer in 1 s")};
}

Outcome spawn_unregistered(const Target& t, const Settings& s) {
  troupe::net::CallFrame call;
  call.kind = troupe::net::CallKind::spawn;
  call.request = 1;
  call.text = "hostile.unregistered";
  call.value = troupe::net::WireValue::list({troupe::net::WireValue(), troupe::net::WireValue::list({})});
  return actor_frame(t, s, call, "a spawn of an unregistered actor type");
}

Outcome unknown_method(const Target& t, const Settings& s) {
  troupe::net::CallFrame call;
  call.kind = troupe::net::CallKind::request;
  call.actor = 1;
  call.request = 2;
  call.text = "no_such_method";
  call.value = troupe::net::WireValue::list({});
  return actor_frame(t, s, call, "a call of an unknown method");
}

// A registration at rank 0's rendezvous: refused with a reason naming the rank, or, in a job with a
// secret this process lacks, never let in (the rendezvous serves CURVE keys from the secret, so the
// registration does not reach it; tests/net/rendezvous_test.cpp checks the reasons an insider gets).
Outcome registration(const Target& t, const Settings& s, int rank, const std::string& expect) {
  void* dealer = zmq_socket(s.context, ZMQ_DEALER);
  const int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_connect(dealer, ("tcp://" + t.host + ":" + std::to_string(t.port)).c_str());
  const std::string body =
      troupe::net::format_registration({rank, s.world, "tcp://127.0.0.1:1|ipc:///nonexistent|hostile"});
  zmq_send(dealer, body.data(), body.size(), 0);
  zmq_pollitem_t item{dealer, 0, ZMQ_POLLIN, 0};
  std::string answer;
  if (zmq_poll(&item, 1, 3'000) > 0) {
    char buffer[4096];
    const int n = zmq_recv(dealer, buffer, sizeof buffer, 0);
    if (n > 0) answer.assign(buffer, std::min<size_t>(static_cast<size_t>(n), sizeof buffer));
  }
  zmq_close(dealer);
  const std::string doing = "a registration as rank " + std::to_string(rank);
  if (answer.rfind("error\n", 0) == 0 && answer.find(expect) != std::string::npos)
    return {true, doing + ": refused: " + answer.substr(6)};
  if (answer.empty()) return {true, doing + ": not let in, no answer in 3 s"};
  return {false, doing + ": answered '" + answer + "'"};
}

Outcome existing_rank(const Target& t, const Settings& s) { return registration(t, s, 0, "is taken already"); }
Outcome rank_beyond_world(const Target& t, const Settings& s) {
  return registration(t, s, s.world + 3, "outside a world of " + std::to_string(s.world));
}

// 1,000 connections at once that say nothing: every one closed by the handshake deadline (on a
// direct port the oldest past the pending cap at once).
Outcome flood(const Target& t, const Settings& s) {
  constexpr int kConnections = 1000;
  std::vector<Fd> fds;
  int refused = 0;
  for (int i = 0; i < kConnections; ++i) {
    Fd fd = dial(t);
    if (fd.fd < 0) ++refused;
    else fds.push_back(std::move(fd));
  }
  const auto start = Clock::now();
  std::vector<pollfd> open;
  for (const Fd& fd : fds) open.push_back({fd.fd, POLLIN | POLLRDHUP, 0});
  char scratch[4096];
  while (!open.empty() && Clock::now() - start < s.handshake + s.slack) {
    ::poll(open.data(), open.size(), 50);
    std::erase_if(open, [&](pollfd& p) {
      if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
      if (p.revents & POLLIN) {
        const ssize_t got = ::recv(p.fd, scratch, sizeof scratch, MSG_DONTWAIT);
        return got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR);
      }
      return false;
    });
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  const std::string what = std::to_string(kConnections) + " connections at once (" + std::to_string(refused) +
                           " refused): " + std::to_string(fds.size() - open.size()) + " cut off within " +
                           std::to_string(took) + " ms, " + std::to_string(open.size()) + " still open";
  return {open.empty(), what};
}

// One byte a second: the greeting (ZeroMQ) or the introduction (direct) never completes.
Outcome drip(const Target& t, const Settings& s) {
  Fd fd = dial(t);
  if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
  const std::vector<uint8_t> wire = t.kind == Kind::direct ? direct_intro(0) : zmtp_greeting();
  const auto start = Clock::now();
  for (size_t i = 0; i < wire.size(); ++i) {
    if (!send_all(fd.fd, &wire[i], 1)) break;
    if (until_closed(fd.fd, 1000ms) >= 0ms)
      return {true, "one byte a second: cut off after " + std::to_string(i + 1) + " byte(s), " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) +
                        " ms"};
    if (Clock::now() - start > s.handshake + s.slack) break;
  }
  return {false, "one byte a second: still open after " + std::to_string(wire.size()) + " bytes"};
}

// One byte a second of a frame after a complete ZeroMQ handshake: no message completes, the job's
// pings go unanswered, the progress deadline cuts it.
Outcome drip_after_handshake(const Target& t, const Settings& s) {
  Fd fd = dial(t);
  if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
  if (!zmtp_handshake(fd.fd, s)) return {true, "cut off during the handshake"};
  const auto start = Clock::now();
  const std::vector<uint8_t> frame = zmtp_long_frame(1 << 20);
  for (int i = 0;; ++i) {
    const uint8_t byte = i < static_cast<int>(frame.size()) ? frame[static_cast<size_t>(i)] : 0;
    if (!send_all(fd.fd, &byte, 1) || until_closed(fd.fd, 1000ms) >= 0ms)
      return {true, "one byte a second of a frame after the handshake: cut off after " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) +
                        " ms"};
    if (Clock::now() - start > s.progress + s.slack)
      return {false, "one byte a second of a frame after the handshake: still open"};
  }
}

// Connects (and on ZeroMQ completes the handshake), then never reads what the job sends.
Outcome never_reads(const Target& t, const Settings& s) {
  Fd fd = dial(t, true);
  if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
  if (t.kind != Kind::direct && !zmtp_handshake(fd.fd, s)) return {true, "cut off during the handshake"};
  const auto deadline = t.kind == Kind::direct ? s.handshake : s.progress;
  return cut_within(fd.fd, deadline, s, "a peer that never reads", false);
}

// ---- the authentication: the handshake (net/handshake.h) on direct and stripe ports, CURVE on ZeroMQ ----

uint32_t lane_of(const Target& t) { return t.kind == Kind::stripe ? 1 : 0; }

// The hello a rank would send to the target: from the rank before it, on the target's lane.
troupe::net::HelloFields hello_to(const Target& t, const Settings& s) {
  const int server = std::stoi(t.rank);
  return {troupe::net::kDirectPath, lane_of(t), (server + s.world - 1) % s.world, server, 0};
}

// The recorded transcript of a rank dialing the target (--record-secret), or none.
const Transcript* transcript_for(const Target& t, const Settings& s) {
  return s.transcript(std::stoi(t.rank), lane_of(t));
}

enum class Got { all, closed, timed_out };

Got receive_exact(int fd, std::span<uint8_t> bytes, std::chrono::milliseconds most) {
  const auto until = Clock::now() + most;
  size_t got = 0;
  while (got < bytes.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left <= 0ms) return Got::timed_out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, bytes.data() + got, bytes.size() - got, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return Got::closed;
    if (n > 0) got += static_cast<size_t>(n);
  }
  return Got::all;
}

// Sends `hello`; when the job challenges it, sends what proof_for makes of the challenge. Passes
// when the job cuts the connection (at the hello, or at the proof if `challenged` says the hello
// was a genuine one that must get past the job's first check).
Outcome handshake_attempt(const Target& t, const Settings& s, std::span<const uint8_t> hello, bool challenged,
                          const std::function<std::vector<uint8_t>(std::span<const uint8_t>)>& proof_for,
                          const std::string& doing) {
  Fd fd = dial(t);
  if (fd.fd < 0) return {true, std::string("refused: ") + std::strerror(errno)};
  send_all(fd.fd, hello.data(), hello.size());
  std::array<uint8_t, troupe::net::kChallengeBytes> challenge{};
  switch (receive_exact(fd.fd, challenge, s.handshake + s.slack)) {
    case Got::closed:
      return {!challenged, doing + ": cut off at the hello" + (challenged ? ", a genuine one (not the check meant)" : "")};
    case Got::timed_out: return {false, doing + ": neither challenged nor cut off"};
    case Got::all: break;
  }
  const std::vector<uint8_t> proof = proof_for(challenge);
  send_all(fd.fd, proof.data(), proof.size());
  return cut_within(fd.fd, s.handshake, s, doing + ", challenged, its proof");
}

std::vector<uint8_t> proof_of(std::span<const uint8_t> mac) {
  std::vector<uint8_t> proof(4 + mac.size());
  troupe::net::wire::put<uint32_t>(proof.data(), 0, 0x50505254);  // "TRPP"
  std::memcpy(proof.data() + 4, mac.data(), mac.size());
  return proof;
}

// The client's MAC as handshake.cpp makes it, under whatever key the attacker has.
std::vector<uint8_t> client_mac(const std::array<uint8_t, 32>& key, std::span<const uint8_t> hello,
                                std::span<const uint8_t> challenge) {
  static const char label[] = "troupe handshake client";
  std::vector<uint8_t> mac(crypto_generichash_BYTES);
  crypto_generichash_state state;
  crypto_generichash_init(&state, key.data(), key.size(), mac.size());
  crypto_generichash_update(&state, reinterpret_cast<const uint8_t*>(label), sizeof label);
  crypto_generichash_update(&state, hello.data(), hello.size());
  crypto_generichash_update(&state, challenge.data() + 4, troupe::net::kNonceBytes);
  crypto_generichash_final(&state, mac.data(), mac.size());
  return mac;
}

// A DEALER presenting the identity of a member rank (the rank before the target's; rank 1 at the
// rendezvous), with CURVE client keys and the server key it believes in (none: ZeroMQ's NULL
// mechanism), that sends a rank's first message (a registration, or a spawn) and watches its own
// handshake. Passes when the handshake fails or the connection drops before it succeeds, and
// nothing comes back.
Outcome zmq_attempt(const Target& t, const Settings& s, const troupe::net::CurveKeys* client,
                    const std::string& server_key, const std::string& doing) {
  using namespace troupe::net;
  static std::atomic<int> monitors{0};
  const int claimed = t.kind == Kind::rendezvous ? 1 : (std::stoi(t.rank) + s.world - 1) % s.world;
  void* dealer = zmq_socket(s.context, ZMQ_DEALER);
  std::string id(5, 'T');
  std::memcpy(id.data() + 1, &claimed, 4);
  zmq_setsockopt(dealer, ZMQ_ROUTING_ID, id.data(), id.size());
  const int linger = 0, never = -1;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(dealer, ZMQ_RECONNECT_IVL, &never, sizeof never);  // one attempt: its fate is the outcome
  if (client) {
    zmq_setsockopt(dealer, ZMQ_CURVE_SERVERKEY, server_key.data(), server_key.size());
    zmq_setsockopt(dealer, ZMQ_CURVE_PUBLICKEY, client->public_key.data(), client->public_key.size());
    zmq_setsockopt(dealer, ZMQ_CURVE_SECRETKEY, client->secret_key.data(), client->secret_key.size());
  }
  const std::string watch = "inproc://hostile-monitor-" + std::to_string(monitors++);
  zmq_socket_monitor(dealer, watch.c_str(),
                     ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_DISCONNECTED);
  void* events = zmq_socket(s.context, ZMQ_PAIR);
  zmq_setsockopt(events, ZMQ_LINGER, &linger, sizeof linger);
  zmq_connect(events, watch.c_str());
  zmq_connect(dealer, ("tcp://" + t.host + ":" + std::to_string(t.port)).c_str());
  if (t.kind == Kind::rendezvous) {
    const std::string body = format_registration({claimed, s.world, "tcp://127.0.0.1:1|ipc:///nonexistent|hostile"});
    zmq_send(dealer, body.data(), body.size(), ZMQ_DONTWAIT);
  } else {
    CallFrame call;
    call.kind = CallKind::spawn;
    call.request = 3;
    call.text = "hostile.echo";
    call.value = WireValue::list({WireValue(), WireValue::list({})});
    const EncodedCall encoded = encode_call(call);
    FrameHeader h;
    h.kind = FrameKind::actor;
    h.source = claimed;
    h.dtype = troupe::DType::u8;
    h.shape = {static_cast<int64_t>(encoded.bytes.size())};
    h.payload_bytes = encoded.bytes.size();
    const std::vector<uint8_t> header = encode_header(h);
    zmq_send(dealer, header.data(), header.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(dealer, encoded.bytes.data(), encoded.bytes.size(), ZMQ_DONTWAIT);
  }
  Outcome o{false, doing + ": neither refused nor cut off"};
  const auto start = Clock::now(), until = start + s.handshake + s.slack;
  for (bool done = false; !done && Clock::now() < until;) {
    zmq_pollitem_t items[] = {{events, 0, ZMQ_POLLIN, 0}, {dealer, 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, 50) <= 0) continue;
    if (items[1].revents & ZMQ_POLLIN) {
      o = {false, doing + ": answered"};
      break;
    }
    zmq_msg_t event, endpoint;
    zmq_msg_init(&event);
    zmq_msg_init(&endpoint);
    if (zmq_msg_recv(&event, events, 0) >= 6 && zmq_msg_recv(&endpoint, events, 0) >= 0) {
      const auto* e = static_cast<const uint8_t*>(zmq_msg_data(&event));
      uint16_t kind;
      uint32_t value;
      std::memcpy(&kind, e, 2);
      std::memcpy(&value, e + 2, 4);
      char code[16];
      std::snprintf(code, sizeof code, "%#x", value);
      done = true;
      if (kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) o = {false, doing + ": its handshake succeeded"};
      else if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) o = {true, doing + ": refused by the job's ZAP handler (status " + std::to_string(value) + ")"};
      else if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) o = {true, doing + ": handshake refused (protocol error " + code + ")"};
      else if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) o = {true, doing + ": handshake failed (no detail)"};
      else o = {true, doing + ": disconnected before its handshake completed"};
    }
    zmq_msg_close(&event);
    zmq_msg_close(&endpoint);
  }
  zmq_socket_monitor(dealer, nullptr, 0);
  zmq_close(events);
  zmq_close(dealer);
  o.what += " after " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) + " ms";
  return o;
}

// No secret: a zero key (a zero job id and MAC key) on a direct or stripe port; ZeroMQ's NULL
// mechanism, no CURVE keys at all, on the ROUTER and the rendezvous.
Outcome no_secret(const Target& t, const Settings& s) {
  if (t.kind == Kind::zmq || t.kind == Kind::rendezvous)
    return zmq_attempt(t, s, nullptr, {}, "a member rank's identity without CURVE keys");
  troupe::net::HandshakeClient client(troupe::net::JobKeys{}, hello_to(t, s));
  const std::vector<uint8_t> hello(client.hello().begin(), client.hello().end());
  return handshake_attempt(t, s, hello, false, [](std::span<const uint8_t>) { return proof_of(std::vector<uint8_t>(32)); },
                           "a hello under a zero key");
}

// A wrong secret: keys derived from another job's secret. On a direct or stripe port the hello
// carries this job's id as the wire shows it (a transcript's hello), so that the job challenges it
// and the MAC is what refuses it; this end also finds the job's challenge false under its key. On
// ZeroMQ the client's key pair is another job's, the server key the job's own: its ZAP handler refuses.
Outcome wrong_secret(const Target& t, const Settings& s) {
  using namespace troupe::net;
  const JobKeys other = derive_job_keys(generate_job_secret());
  if (t.kind == Kind::zmq || t.kind == Kind::rendezvous)
    return zmq_attempt(t, s, &other.curve, s.job_curve_public.empty() ? other.curve.public_key : s.job_curve_public,
                       "another job's CURVE keys");
  const Transcript* seen = transcript_for(t, s);
  JobKeys posing = other;
  if (seen) std::memcpy(posing.job_id.data(), seen->hello.data() + 8, posing.job_id.size());
  HandshakeClient client(posing, hello_to(t, s));
  const std::vector<uint8_t> hello(client.hello().begin(), client.hello().end());
  bool fooled = false;
  Outcome o = handshake_attempt(t, s, hello, seen != nullptr,
                                [&](std::span<const uint8_t> challenge) {
                                  try {
                                    client.answer(challenge);
                                    fooled = true;  // the job's MAC verified under another secret
                                  } catch (const troupe::CommError&) {
                                  }
                                  return proof_of(client_mac(other.handshake, hello, challenge));
                                },
                                seen ? "a hello with this job's id, MACs under another secret"
                                     : "a hello of another job (no --record-secret)");
  if (fooled) o = {false, o.what + "; and the job's challenge passed under another secret"};
  return o;
}

// A genuine rank's hello and proof, recorded beforehand, sent again: the job's challenge carries a
// fresh nonce, which the recorded proof does not cover.
Outcome replayed(const Target& t, const Settings& s) {
  const Transcript* seen = transcript_for(t, s);
  if (!seen) return {false, "no transcript to replay (run with --record-secret)"};
  return handshake_attempt(t, s, seen->hello, true, [&](std::span<const uint8_t>) { return seen->proof; },
                           "a recorded hello and proof");
}

// A genuine rank's hello; then the job's own MAC from its challenge sent back as the proof: the
// role is in the MAC, so the server's never passes for the client's.
Outcome reflected(const Target& t, const Settings& s) {
  const Transcript* seen = transcript_for(t, s);
  if (!seen) return {false, "no transcript to reflect (run with --record-secret)"};
  return handshake_attempt(t, s, seen->hello, true,
                           [](std::span<const uint8_t> challenge) {
                             return proof_of(challenge.subspan(4 + troupe::net::kNonceBytes));
                           },
                           "a recorded hello, the job's challenge MAC sent back");
}

// What a rank sends when it dials `hello.server_rank` (its hello, its proof), recorded against a
// handshake server of this process's own over a socketpair: the only use of --record-secret.
Transcript record_transcript(const troupe::net::JobKeys& keys, const troupe::net::HelloFields& hello, int world) {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) throw std::runtime_error("socketpair failed");
  Fd client(ends[0]), server(ends[1]);
  std::exception_ptr failed;
  std::thread dialer([&] {
    try {
      troupe::net::handshake_as_client(client.fd, keys, hello, Clock::now() + 5s);
    } catch (...) {
      failed = std::current_exception();
    }
  });
  Transcript t{std::vector<uint8_t>(troupe::net::kHelloBytes), std::vector<uint8_t>(troupe::net::kProofBytes)};
  try {
    troupe::net::HandshakeServer own(keys, hello.server_rank, world);
    if (receive_exact(server.fd, t.hello, 5s) != Got::all) throw std::runtime_error("no hello to record");
    const auto challenge = own.challenge(t.hello);
    send_all(server.fd, challenge.data(), challenge.size());
    if (receive_exact(server.fd, t.proof, 5s) != Got::all) throw std::runtime_error("no proof to record");
    own.verify(t.proof);
  } catch (...) {
    ::shutdown(server.fd, SHUT_RDWR);  // the dialer fails at once
    dialer.join();
    throw;
  }
  dialer.join();
  if (failed) std::rethrow_exception(failed);
  return t;
}

struct Attack {
  const char* name;
  Outcome (*run)(const Target&, const Settings&);
  std::vector<Kind> kinds;
  bool one_port_at_a_time = false;  // the flood: 1,000 descriptors per port is enough at once
};

const std::vector<Attack>& attacks() {
  static const std::vector<Attack> table = {
      {"no secret", no_secret, {Kind::rendezvous, Kind::zmq, Kind::direct, Kind::stripe}},
      {"a wrong secret", wrong_secret, {Kind::rendezvous, Kind::zmq, Kind::direct, Kind::stripe}},
      {"a replayed handshake", replayed, {Kind::direct, Kind::stripe}},
      {"a reflected handshake", reflected, {Kind::direct, Kind::stripe}},
      {"garbage", garbage, {Kind::rendezvous, Kind::zmq, Kind::direct}},
      {"frame of 2^40 bytes", huge_frame, {Kind::rendezvous, Kind::zmq, Kind::direct}},
      {"spawn of an unregistered type", spawn_unregistered, {Kind::zmq, Kind::direct}},
      {"call of an unknown method", unknown_method, {Kind::zmq, Kind::direct}},
      {"registration as an existing rank", existing_rank, {Kind::rendezvous}},
      {"registration beyond the world", rank_beyond_world, {Kind::rendezvous}},
      {"1,000 connections at once", flood, {Kind::zmq, Kind::direct}, true},
      {"one byte a second", drip, {Kind::zmq, Kind::direct}},
      {"one byte a second after the handshake", drip_after_handshake, {Kind::zmq}},
      {"a peer that never reads", never_reads, {Kind::zmq, Kind::direct}},
  };
  return table;
}

std::vector<Target> read_ports(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<Target> targets;
  std::string kind, rank, endpoint;
  while (in >> kind >> rank >> endpoint) {
    if (endpoint.rfind("tcp://", 0) == 0) endpoint = endpoint.substr(6);
    const auto colon = endpoint.rfind(':');
    if (colon == std::string::npos) throw std::runtime_error("bad endpoint in " + path + ": " + endpoint);
    Target t{kind == "zmq" ? Kind::zmq : kind == "direct" ? Kind::direct : Kind::rendezvous, rank,
             endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1))};
    targets.push_back(t);
    if (t.kind == Kind::direct) targets.push_back({Kind::stripe, t.rank, t.host, t.port});
  }
  return targets;
}

// Each attack's descriptors: up to 1,000 at once, more than a default soft limit of 1,024 allows
// with the rest of the process.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  std::vector<Target> targets;
  std::string record_secret;
  std::vector<std::string> only;  // attack names; empty: all
  bool until_gone = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--world") settings.world = std::stoi(value());
      else if (arg == "--handshake-ms") settings.handshake = std::chrono::milliseconds(std::stoi(value()));
      else if (arg == "--progress-ms") settings.progress = std::chrono::milliseconds(std::stoi(value()));
      else if (arg == "--record-secret") record_secret = value();
      else if (arg == "--only") only.push_back(value());
      else if (arg == "--until-gone") until_gone = true;
      else if (arg == "--ports") {
        for (Target& t : read_ports(value())) targets.push_back(t);
      } else if (arg == "--rendezvous") {
        const std::string endpoint = value();
        const auto colon = endpoint.rfind(':');
        targets.push_back({Kind::rendezvous, "-", endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1))});
      } else {
        throw std::runtime_error("unknown argument " + arg);
      }
    }
    if (!record_secret.empty()) {
      const troupe::net::JobKeys keys = troupe::net::derive_job_keys(troupe::net::load_job_secret_file(record_secret));
      settings.job_curve_public = keys.curve.public_key;
      for (const Target& t : targets)
        if (t.kind == Kind::direct || t.kind == Kind::stripe)
          settings.transcripts.push_back(
              {{std::stoi(t.rank), lane_of(t)}, record_transcript(keys, hello_to(t, settings), settings.world)});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe_hostile_peer: %s\n", e.what());
    return 2;
  }
  raise_descriptor_limit();
  settings.context = zmq_ctx_new();
  // The rendezvous is rank 0's until the others registered: wait until it listens.
  for (const Target& t : targets)
    if (t.kind == Kind::rendezvous) {
      const auto until = Clock::now() + 30s;
      while (dial(t).fd < 0 && Clock::now() < until) std::this_thread::sleep_for(20ms);
    }
  std::atomic<int> passed{0}, failed{0};
  std::mutex print;
  auto report = [&](const Attack& a, const Target& t, const Outcome& o) {
    std::lock_guard lock(print);
    std::printf("hostile: %s: %s: %s: %s\n", o.passed ? "PASSED" : "FAILED", a.name, t.label().c_str(), o.what.c_str());
    std::fflush(stdout);
    (o.passed ? passed : failed)++;
  };
  auto run_attack = [&](const Attack& attack) {
    std::vector<std::thread> running;
    for (const Target& target : targets) {
      if (std::find(attack.kinds.begin(), attack.kinds.end(), target.kind) == attack.kinds.end()) continue;
      auto run = [&, target] {
        Outcome o;
        try {
          o = attack.run(target, settings);
        } catch (const std::exception& e) {
          o = {false, std::string("the attacker failed: ") + e.what()};
        }
        report(attack, target, o);
      };
      if (attack.one_port_at_a_time) run();
      else running.emplace_back(run);
    }
    for (auto& t : running) t.join();
  };
  auto job_gone = [&] {
    return std::none_of(targets.begin(), targets.end(), [](const Target& t) { return dial(t).fd >= 0; });
  };
  do {
    for (const Attack& attack : attacks()) {
      if (!only.empty() && std::find(only.begin(), only.end(), attack.name) == only.end()) continue;
      run_attack(attack);
    }
  } while (until_gone && !job_gone());
  zmq_ctx_term(settings.context);
  std::printf("hostile: %d passed, %d failed\n", passed.load(), failed.load());
  return failed.load() == 0 && passed.load() > 0 ? 0 : 1;
}
