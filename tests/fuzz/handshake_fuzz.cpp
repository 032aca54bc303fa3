// libFuzzer target for the connection handshake (net/handshake.h), both ends of it against bytes
// from the wire: a server (rank 1 of 4, a fixed job secret) takes a hello and then a proof; a
// client takes a challenge. Whatever the bytes, each step gives its answer or throws CommError;
// never crash or hang, and no proof or challenge forged without the secret is accepted (their
// MACs cover a nonce drawn fresh for this input).
// Input: byte 0: the end (% 2: server, client); then for the server kHelloBytes of hello and the
// rest as the proof, for the client the challenge.
//   build/bin/handshake_fuzz -max_total_time=60 tests/fuzz/corpus/handshake
#include <cstdint>
#include <cstdlib>
#include <span>

#include "devices/error.h"
#include "net/handshake.h"

namespace {

const troupe::net::JobKeys& job_keys() {
  static const troupe::net::JobKeys keys = [] {
    troupe::net::JobSecret secret;
    for (size_t i = 0; i < secret.bytes.size(); ++i) secret.bytes[i] = static_cast<uint8_t>(i);  // make_corpus.py's
    return troupe::net::derive_job_keys(secret);
  }();
  return keys;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe::net;
  if (size < 1) return 0;
  const std::span<const uint8_t> body(data + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      HandshakeServer server(job_keys(), /*self=*/1, /*world_size=*/4);
      const auto hello = body.first(std::min(body.size(), kHelloBytes));
      const auto challenge = server.challenge(hello);
      const HelloFields& f = server.hello();
      if (f.server_rank != 1 || f.client_rank < 0 || f.client_rank >= 4 || f.client_rank == 1) std::abort();
      if (challenge.size() != kChallengeBytes) std::abort();
      server.verify(body.subspan(hello.size()));
      std::abort();  // a proof of a challenge whose nonce was drawn after the input was made
    } else {
      HandshakeClient client(job_keys(), HelloFields{kDirectPath, 0, 0, 1, 0});
      client.answer(body);
      std::abort();  // a challenge MAC over a client nonce drawn after the input was made
    }
  } catch (const troupe::CommError&) {
  }
  return 0;
}
