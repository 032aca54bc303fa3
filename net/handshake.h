#pragma once
// The handshake that opens every TCP connection of a job outside ZeroMQ (direct links and stripes,
// net/direct_link.h): a mutual challenge-response that proves both ends hold the job's secret
// (job_secret.h) before a single frame is read, and gives the connection its session keys. Three
// messages, fixed sizes:
//
//   hello      client -> server  magic, version, job id, path, lane, client rank, server rank,
//                                flags (encrypt), the client's fresh nonce          (kHelloBytes)
//   challenge  server -> client  magic, the server's fresh nonce, the server's MAC  (kChallengeBytes)
//   proof      client -> server  magic, the client's MAC                            (kProofBytes)
//
// Each MAC is BLAKE2b keyed with the job's handshake key over a role label, the whole hello and the
// server's nonce: both nonces, the job, both ranks, the path and the direction. A recorded
// transcript replayed meets a fresh server nonce (no replay); a server's MAC is never a valid
// client's (no reflection); a client with another secret cannot answer, and a server with another
// secret cannot prove itself. Frames then go at full speed: nothing per frame unless the job asked
// for encryption, which uses the session keys (one per direction).
//
//   // client (the dialing end):
//   HandshakeClient client(keys, {.path = kDirectPath, .lane = 0, .client_rank = 0, .server_rank = 1});
//   write(fd, client.hello());  ... read challenge ...
//   write(fd, client.answer(challenge));          // CommError: the server does not hold the secret
//   // server (the accepting end), the same bytes in the other direction:
//   HandshakeServer server(keys, /*self=*/1, /*world_size=*/2);
//   write(fd, server.challenge(hello));           // CommError: malformed, another job, wrong ranks
//   server.verify(proof);                         // CommError: the client does not hold the secret
//   SessionKeys k = server.session();             // client.session() is the mirror image
//
// Or, blocking, on a connected socket: handshake_as_client(fd, keys, hello, deadline).
#include <array>
#include <cstdint>
#include <span>

#include "net/job_secret.h"
#include "net/work.h"

namespace troupe::net {

inline constexpr size_t kHelloBytes = 76;
inline constexpr size_t kChallengeBytes = 68;
inline constexpr size_t kProofBytes = 36;
inline constexpr size_t kNonceBytes = 32;
inline constexpr uint32_t kDirectPath = 1;  // the direct-link listener (lane 0: the link, 1..: stripes)
inline constexpr uint32_t kHandshakeEncrypt = 1;  // flags: the connection's records are sealed

// What a client says in its hello (authenticated by both MACs).
struct HelloFields {
  uint32_t path = kDirectPath;
  uint32_t lane = 0;
  int32_t client_rank = 0;
  int32_t server_rank = 0;
  uint32_t flags = 0;
};

// Per-direction keys of one connection (for the AEAD of encrypted jobs).
struct SessionKeys {
  std::array<uint8_t, 32> send{};
  std::array<uint8_t, 32> receive{};
};

// Parses a hello's fixed fields: CommError when the magic or version is wrong.
HelloFields parse_hello(std::span<const uint8_t> hello);

class HandshakeClient {
 public:
  HandshakeClient(const JobKeys& keys, const HelloFields& hello);  // draws the client's nonce
  std::span<const uint8_t> hello() const { return hello_; }
  // The proof for the server's challenge. CommError when the challenge is malformed or its MAC
  // is not the job's (a server with another secret, or not a Troupe rank).
  std::array<uint8_t, kProofBytes> answer(std::span<const uint8_t> challenge);
  SessionKeys session() const;  // after answer()

 private:
  const JobKeys keys_;
  std::array<uint8_t, kHelloBytes> hello_{};
  std::array<uint8_t, kNonceBytes> server_nonce_{};
};

class HandshakeServer {
 public:
  HandshakeServer(const JobKeys& keys, int self, int world_size);
  // The challenge for a client's hello. CommError when the hello is malformed, from another job
  // (a different secret), or names ranks that do not fit (this rank as server, another as client).
  std::array<uint8_t, kChallengeBytes> challenge(std::span<const uint8_t> hello);
  // CommError unless proof is the client's MAC over this connection's hello and challenge.
  void verify(std::span<const uint8_t> proof);
  const HelloFields& hello() const { return fields_; }
  SessionKeys session() const;  // after verify()

 private:
  const JobKeys keys_;
  const int self_, world_size_;
  HelloFields fields_;
  std::array<uint8_t, kHelloBytes> hello_{};
  std::array<uint8_t, kNonceBytes> nonce_{};
  bool challenged_ = false;
};

// The client side on a connected socket (blocking or not): hello, challenge, proof, by the
// deadline. For dialers, and for tests that play a client (a right or a wrong secret).
SessionKeys handshake_as_client(int fd, const JobKeys& keys, const HelloFields& hello, Deadline deadline);

}  // namespace troupe::net
