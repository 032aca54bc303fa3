#include "net/handshake.h"

#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <string>

#include "net/errors.h"
#include "net/wire_bytes.h"

namespace troupe::net {

namespace {

constexpr uint32_t kHelloMagic = 0x48505254;      // "TRPH"
constexpr uint32_t kChallengeMagic = 0x43505254;  // "TRPC"
constexpr uint32_t kProofMagic = 0x50505254;      // "TRPP"
constexpr uint32_t kVersion = 1;
// hello: magic, version, job id (16), path, lane, client rank, server rank, flags, nonce (32).
constexpr size_t kJobIdAt = 8, kPathAt = 24, kLaneAt = 28, kClientAt = 32, kServerAt = 36, kFlagsAt = 40,
                 kNonceAt = 44;
static_assert(kNonceAt + kNonceBytes == kHelloBytes);
static_assert(4 + kNonceBytes + crypto_generichash_BYTES == kChallengeBytes);
static_assert(4 + crypto_generichash_BYTES == kProofBytes);

using Mac = std::array<uint8_t, crypto_generichash_BYTES>;

// BLAKE2b keyed with the handshake key over label, hello and the server's nonce.
Mac mac(const JobKeys& keys, const char* label, std::span<const uint8_t> hello, std::span<const uint8_t> nonce) {
  crypto_generichash_state state;
  crypto_generichash_init(&state, keys.handshake.data(), keys.handshake.size(), crypto_generichash_BYTES);
  crypto_generichash_update(&state, reinterpret_cast<const uint8_t*>(label), std::strlen(label) + 1);
  crypto_generichash_update(&state, hello.data(), hello.size());
  crypto_generichash_update(&state, nonce.data(), nonce.size());
  Mac out;
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

SessionKeys session_keys(const JobKeys& keys, std::span<const uint8_t> hello, std::span<const uint8_t> nonce,
                         bool client) {
  const Mac to_server = mac(keys, "troupe session client->server", hello, nonce);
  const Mac to_client = mac(keys, "troupe session server->client", hello, nonce);
  return client ? SessionKeys{to_server, to_client} : SessionKeys{to_client, to_server};
}

void check_size(std::span<const uint8_t> bytes, size_t expected, const char* what) {
  if (bytes.size() != expected)
    throw CommError(std::string("handshake: a ") + what + " of " + std::to_string(bytes.size()) + " bytes, expected " +
                    std::to_string(expected));
}

void start_sodium() {
  if (sodium_init() < 0) throw CommError("handshake: libsodium cannot start (sodium_init failed)");
}

}  // namespace

HelloFields parse_hello(std::span<const uint8_t> hello) {
  check_size(hello, kHelloBytes, "hello");
  const uint8_t* in = hello.data();
  if (wire::get<uint32_t>(in, 0) != kHelloMagic)
    throw CommError("handshake: a connection that is not a Troupe rank's (no hello)");
  if (wire::get<uint32_t>(in, 4) != kVersion)
    throw CommError("handshake: hello version " + std::to_string(wire::get<uint32_t>(in, 4)) + ", this rank speaks " +
                    std::to_string(kVersion));
  HelloFields f;
  f.path = wire::get<uint32_t>(in, kPathAt);
  f.lane = wire::get<uint32_t>(in, kLaneAt);
  f.client_rank = static_cast<int32_t>(wire::get<uint32_t>(in, kClientAt));
  f.server_rank = static_cast<int32_t>(wire::get<uint32_t>(in, kServerAt));
  f.flags = wire::get<uint32_t>(in, kFlagsAt);
  return f;
}

HandshakeClient::HandshakeClient(const JobKeys& keys, const HelloFields& f) : keys_(keys) {
  start_sodium();
  uint8_t* out = hello_.data();
  wire::put<uint32_t>(out, 0, kHelloMagic);
  wire::put<uint32_t>(out, 4, kVersion);
  std::memcpy(out + kJobIdAt, keys.job_id.data(), keys.job_id.size());
  wire::put<uint32_t>(out, kPathAt, f.path);
  wire::put<uint32_t>(out, kLaneAt, f.lane);
  wire::put<uint32_t>(out, kClientAt, static_cast<uint32_t>(f.client_rank));
  wire::put<uint32_t>(out, kServerAt, static_cast<uint32_t>(f.server_rank));
  wire::put<uint32_t>(out, kFlagsAt, f.flags);
  randombytes_buf(out + kNonceAt, kNonceBytes);
}

std::array<uint8_t, kProofBytes> HandshakeClient::answer(std::span<const uint8_t> challenge) {
  check_size(challenge, kChallengeBytes, "challenge");
  if (wire::get<uint32_t>(challenge.data(), 0) != kChallengeMagic)
    throw CommError("handshake: the peer answered with something that is not a challenge");
  std::memcpy(server_nonce_.data(), challenge.data() + 4, kNonceBytes);
  const Mac expected = mac(keys_, "troupe handshake server", hello_, server_nonce_);
  if (sodium_memcmp(expected.data(), challenge.data() + 4 + kNonceBytes, expected.size()) != 0)
    throw CommError("handshake: the peer does not hold this job's secret (another job, or a different "
                    "TROUPE_JOB_SECRET_FILE)");
  std::array<uint8_t, kProofBytes> proof{};
  wire::put<uint32_t>(proof.data(), 0, kProofMagic);
  const Mac ours = mac(keys_, "troupe handshake client", hello_, server_nonce_);
  std::memcpy(proof.data() + 4, ours.data(), ours.size());
  return proof;
}

SessionKeys HandshakeClient::session() const { return session_keys(keys_, hello_, server_nonce_, true); }

HandshakeServer::HandshakeServer(const JobKeys& keys, int self, int world_size)
    : keys_(keys), self_(self), world_size_(world_size) {
  start_sodium();
}

std::array<uint8_t, kChallengeBytes> HandshakeServer::challenge(std::span<const uint8_t> hello) {
  fields_ = parse_hello(hello);
  if (sodium_memcmp(hello.data() + kJobIdAt, keys_.job_id.data(), keys_.job_id.size()) != 0)
    throw CommError("handshake: a connection from another job (it holds a different job secret)");
  if (fields_.server_rank != self_ || fields_.client_rank < 0 || fields_.client_rank >= world_size_ ||
      fields_.client_rank == self_)
    throw CommError("handshake: a hello from rank " + std::to_string(fields_.client_rank) + " to rank " +
                    std::to_string(fields_.server_rank) + " reached rank " + std::to_string(self_) + " of " +
                    std::to_string(world_size_));
  std::memcpy(hello_.data(), hello.data(), kHelloBytes);
  randombytes_buf(nonce_.data(), nonce_.size());
  std::array<uint8_t, kChallengeBytes> out{};
  wire::put<uint32_t>(out.data(), 0, kChallengeMagic);
  std::memcpy(out.data() + 4, nonce_.data(), kNonceBytes);
  const Mac ours = mac(keys_, "troupe handshake server", hello_, nonce_);
  std::memcpy(out.data() + 4 + kNonceBytes, ours.data(), ours.size());
  challenged_ = true;
  return out;
}

void HandshakeServer::verify(std::span<const uint8_t> proof) {
  if (!challenged_) throw CommError("handshake: a proof before any hello");
  check_size(proof, kProofBytes, "proof");
  const Mac expected = mac(keys_, "troupe handshake client", hello_, nonce_);
  if (wire::get<uint32_t>(proof.data(), 0) != kProofMagic ||
      sodium_memcmp(expected.data(), proof.data() + 4, expected.size()) != 0)
    throw CommError("handshake: rank " + std::to_string(fields_.client_rank) +
                    "'s proof is wrong (a process without this job's secret, or a replayed handshake)");
  challenged_ = false;  // one proof per challenge
}

SessionKeys HandshakeServer::session() const { return session_keys(keys_, hello_, nonce_, false); }

namespace {

void wait_for(int fd, short events, Deadline deadline, const char* what) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw CommError(std::string("handshake: timed out ") + what);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long>(left, INT_MAX)));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) throw CommError(std::string("handshake: ") + what + ": " + std::strerror(errno));
  }
}

void send_all(int fd, std::span<const uint8_t> bytes, Deadline deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_for(fd, POLLOUT, deadline, "sending");
    } else if (n < 0 && errno != EINTR) {
      throw CommError(std::string("handshake: cannot send: ") + std::strerror(errno));
    }
  }
}

void receive_all(int fd, std::span<uint8_t> bytes, Deadline deadline) {
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::recv(fd, bytes.data() + got, bytes.size() - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      throw CommError("handshake: the peer closed the connection (it refused this rank: a different job secret, "
                      "or not a Troupe rank)");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_for(fd, POLLIN, deadline, "waiting for the peer's challenge");
    } else if (errno != EINTR) {
      throw CommError(std::string("handshake: cannot receive: ") + std::strerror(errno));
    }
  }
}

}  // namespace

SessionKeys handshake_as_client(int fd, const JobKeys& keys, const HelloFields& hello, Deadline deadline) {
  HandshakeClient client(keys, hello);
  send_all(fd, client.hello(), deadline);
  std::array<uint8_t, kChallengeBytes> challenge{};
  receive_all(fd, challenge, deadline);
  send_all(fd, client.answer(challenge), deadline);
  return client.session();
}

}  // namespace troupe::net
