// The connection handshake (net/handshake.h) against its attacks, over a real socket pair: a
// wrong secret either way, a replayed transcript, a reflected MAC, ranks that do not fit, and
// bytes that are no handshake; and the job secret's file (net/job_secret.h).
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <vector>

#include "devices/error.h"
#include "net/handshake.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

JobKeys fresh_keys() { return derive_job_keys(generate_job_secret()); }

// A connected pair of stream sockets, closed at the end.
struct SocketPair {
  int client = -1, server = -1;
  SocketPair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    client = fds[0];
    server = fds[1];
  }
  ~SocketPair() {
    ::close(client);
    if (server >= 0) ::close(server);
  }
};

std::vector<uint8_t> read_exactly(int fd, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(fd, out.data() + got, bytes - got);
    if (n <= 0) throw CommError("test: the other end closed");
    got += static_cast<size_t>(n);
  }
  return out;
}

// Called from the server's thread too: throws rather than asserting (Catch's macros are not thread-safe).
void write_all(int fd, std::span<const uint8_t> bytes) {
  if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    throw CommError("test: a short write");
}

// What a server end saw of one handshake over a socket pair: the hello and the proof (the
// transcript an eavesdropper records), and the server's session keys.
struct ServerSide {
  std::vector<uint8_t> hello, challenge, proof;
  SessionKeys keys;
};

// Runs the server end on `fd`: CommError from the handshake closes the socket, as a listener does.
ServerSide serve(int& fd, const JobKeys& keys, int self, int world_size) {
  ServerSide seen;
  HandshakeServer server(keys, self, world_size);
  try {
    seen.hello = read_exactly(fd, kHelloBytes);
    const auto challenge = server.challenge(seen.hello);
    seen.challenge.assign(challenge.begin(), challenge.end());
    write_all(fd, challenge);
    seen.proof = read_exactly(fd, kProofBytes);
    server.verify(seen.proof);
  } catch (const CommError&) {
    ::close(std::exchange(fd, -1));
    throw;
  }
  seen.keys = server.session();
  return seen;
}

HelloFields from_to(int client, int server, uint32_t lane = 0) {
  HelloFields f;
  f.client_rank = client;
  f.server_rank = server;
  f.lane = lane;
  return f;
}

}  // namespace

TEST_CASE("handshake: both ends prove the secret over a socket pair and agree on mirrored session keys",
          "[net][handshake]") {
  const JobKeys keys = fresh_keys();
  SocketPair s;
  auto server = std::async(std::launch::async, [&] { return serve(s.server, keys, 1, 2); });
  const SessionKeys client = handshake_as_client(s.client, keys, from_to(0, 1, 3), deadline_after(5s));
  const ServerSide seen = server.get();
  CHECK(client.send == seen.keys.receive);
  CHECK(client.receive == seen.keys.send);
  CHECK(client.send != client.receive);
  const HelloFields f = parse_hello(seen.hello);
  CHECK(f.client_rank == 0);
  CHECK(f.server_rank == 1);
  CHECK(f.lane == 3);
  CHECK(f.path == kDirectPath);
}

TEST_CASE("handshake: a wrong secret on either end is refused, and the client is told", "[net][handshake]") {
  const JobKeys job = fresh_keys(), other = fresh_keys();
  {  // Another job's client: its hello names another job; the server closes, the client hears it.
    SocketPair s;
    auto server = std::async(std::launch::async, [&] { return serve(s.server, job, 1, 2); });
    CHECK_THROWS_WITH(handshake_as_client(s.client, other, from_to(0, 1), deadline_after(5s)),
                      Catch::Contains("closed"));
    CHECK_THROWS_WITH(server.get(), Catch::Contains("another job"));
  }
  {  // A client that copied the job id but not the key: its proof is wrong.
    JobKeys forged = other;
    forged.job_id = job.job_id;
    HandshakeServer server(job, 1, 2);
    HandshakeClient client(forged, from_to(0, 1));
    const auto challenge = server.challenge(client.hello());
    CHECK_THROWS_WITH(client.answer(challenge), Catch::Contains("does not hold this job's secret"));
    std::array<uint8_t, kProofBytes> guess{};
    std::copy_n(challenge.begin(), 4, guess.begin());
    guess[0] = 'T', guess[1] = 'R', guess[2] = 'P', guess[3] = 'P';
    CHECK_THROWS_WITH(server.verify(guess), Catch::Contains("proof is wrong"));
  }
  {  // A server without the secret (a stranger listening where a rank was): the client refuses it.
    JobKeys forged = other;
    forged.job_id = job.job_id;
    SocketPair s;
    auto server = std::async(std::launch::async, [&] {
      try {
        serve(s.server, forged, 1, 2);
      } catch (const CommError&) {
      }
    });
    CHECK_THROWS_WITH(handshake_as_client(s.client, job, from_to(0, 1), deadline_after(5s)),
                      Catch::Contains("does not hold this job's secret"));
    ::shutdown(s.client, SHUT_RDWR);
    server.get();
  }
}

TEST_CASE("handshake: a replayed transcript is refused (the server's nonce is fresh)", "[net][handshake]") {
  const JobKeys keys = fresh_keys();
  SocketPair first;
  auto server = std::async(std::launch::async, [&] { return serve(first.server, keys, 1, 2); });
  handshake_as_client(first.client, keys, from_to(0, 1), deadline_after(5s));
  const ServerSide recorded = server.get();

  // An eavesdropper replays the hello and the proof it saw, on a new connection.
  SocketPair replay;
  auto again = std::async(std::launch::async, [&] { return serve(replay.server, keys, 1, 2); });
  write_all(replay.client, recorded.hello);
  const std::vector<uint8_t> challenge = read_exactly(replay.client, kChallengeBytes);
  CHECK(challenge != recorded.challenge);
  write_all(replay.client, recorded.proof);
  CHECK_THROWS_WITH(again.get(), Catch::Contains("proof is wrong") && Catch::Contains("replayed"));

  // The same proof twice on one server object: one proof per challenge.
  HandshakeServer once(keys, 1, 2);
  HandshakeClient client(keys, from_to(0, 1));
  const auto proof = client.answer(once.challenge(client.hello()));
  once.verify(proof);
  CHECK_THROWS_WITH(once.verify(proof), Catch::Contains("before any hello"));
}

TEST_CASE("handshake: a reflected MAC is refused (the roles' MACs differ)", "[net][handshake]") {
  const JobKeys keys = fresh_keys();
  HandshakeServer server(keys, 1, 2);
  HandshakeClient client(keys, from_to(0, 1));
  const auto challenge = server.challenge(client.hello());
  // The server's own MAC sent back to it as the client's proof.
  std::array<uint8_t, kProofBytes> reflected{};
  reflected[0] = 'T', reflected[1] = 'R', reflected[2] = 'P', reflected[3] = 'P';
  std::copy(challenge.begin() + 4 + kNonceBytes, challenge.end(), reflected.begin() + 4);
  CHECK_THROWS_WITH(server.verify(reflected), Catch::Contains("proof is wrong"));

  // A client's proof turned into a challenge for another client with the same hello: refused too.
  HandshakeServer second(keys, 1, 2);
  const auto proof = client.answer(challenge);
  HandshakeClient victim(keys, from_to(0, 1));
  std::array<uint8_t, kChallengeBytes> turned{};
  std::copy_n(challenge.begin(), 4 + kNonceBytes, turned.begin());
  std::copy(proof.begin() + 4, proof.end(), turned.begin() + 4 + kNonceBytes);
  CHECK_THROWS_WITH(victim.answer(turned), Catch::Contains("does not hold this job's secret"));
  CHECK_NOTHROW(second.challenge(victim.hello()));
}

TEST_CASE("handshake: ranks that do not fit and bytes that are no handshake are refused", "[net][handshake]") {
  const JobKeys keys = fresh_keys();
  HandshakeServer server(keys, 1, 4);
  auto hello_of = [&](int client, int server_rank) {
    const HandshakeClient c(keys, from_to(client, server_rank));
    return std::vector<uint8_t>(c.hello().begin(), c.hello().end());
  };
  CHECK_THROWS_WITH(server.challenge(hello_of(0, 2)), Catch::Contains("to rank 2 reached rank 1"));
  CHECK_THROWS_WITH(server.challenge(hello_of(1, 1)), Catch::Contains("from rank 1"));
  CHECK_THROWS_WITH(server.challenge(hello_of(4, 1)), Catch::Contains("from rank 4"));
  CHECK_THROWS_WITH(server.challenge(hello_of(-1, 1)), Catch::Contains("from rank -1"));
  CHECK_NOTHROW(server.challenge(hello_of(3, 1)));

  std::vector<uint8_t> http(kHelloBytes, ' ');
  const std::string get = "GET / HTTP/1.0\r\n";
  std::copy(get.begin(), get.end(), http.begin());
  CHECK_THROWS_WITH(parse_hello(http), Catch::Contains("not a Troupe rank"));
  CHECK_THROWS_WITH(parse_hello(std::vector<uint8_t>(10)), Catch::Contains("10 bytes, expected 76"));
  std::vector<uint8_t> v2 = hello_of(0, 1);
  v2[4] = 2;
  CHECK_THROWS_WITH(parse_hello(v2), Catch::Contains("hello version 2"));
  HandshakeServer fresh(keys, 1, 4);
  CHECK_THROWS_WITH(fresh.verify(std::vector<uint8_t>(kProofBytes)), Catch::Contains("before any hello"));
  HandshakeClient client(keys, from_to(0, 1));
  CHECK_THROWS_WITH(client.answer(std::vector<uint8_t>(3)), Catch::Contains("3 bytes, expected 68"));
}

TEST_CASE("job secret: a file of 64 hex digits, mode 0600; keys derived per purpose", "[net][handshake][secret]") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("troupe-secret-test-" + std::to_string(::getpid()))).string();
  const JobSecret secret = generate_job_secret();
  write_job_secret_file(path, secret);
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(load_job_secret_file(path).bytes == secret.bytes);
  const JobKeys a = derive_job_keys(secret), b = derive_job_keys(secret), c = derive_job_keys(generate_job_secret());
  CHECK(a.handshake == b.handshake);
  CHECK(a.curve.secret_key == b.curve.secret_key);
  CHECK(a.curve.public_key.size() == 40);
  CHECK(a.handshake != c.handshake);
  CHECK(a.job_id != c.job_id);
  CHECK(std::equal(a.job_id.begin(), a.job_id.end(), a.handshake.begin()) == false);

  std::filesystem::permissions(path, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
  CHECK_THROWS_WITH(load_job_secret_file(path), Catch::Contains("readable by group or others"));
  std::filesystem::permissions(path, std::filesystem::perms::group_read, std::filesystem::perm_options::remove);
  std::ofstream(path) << "not hex\n";
  CHECK_THROWS_WITH(load_job_secret_file(path), Catch::Contains("64 hex digits") && Catch::Contains("troupe secret"));
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(load_job_secret_file(path), Catch::Contains("cannot read"));
}
