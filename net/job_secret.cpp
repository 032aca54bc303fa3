#include "net/job_secret.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "net/errors.h"

namespace troupe::net {

namespace {

// libsodium's KDF: one context for the job's keys, one subkey id per purpose.
constexpr char kKdfContext[crypto_kdf_CONTEXTBYTES + 1] = "troupejb";
enum Subkey : uint64_t { curve_secret = 1, handshake_key = 2, job_id = 3 };

void init_sodium() {
  if (sodium_init() < 0) throw CommError("job secret: libsodium cannot start (sodium_init failed)");
}

}  // namespace

JobSecret generate_job_secret() {
  init_sodium();
  JobSecret secret;
  randombytes_buf(secret.bytes.data(), secret.bytes.size());
  return secret;
}

JobSecret load_job_secret_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    throw CommError("job secret: cannot read " + path + ": " + std::strerror(errno));
  // Like ssh: a secret others can read is no secret.
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw CommError("job secret: " + path + " is readable by group or others (chmod 600 it)");
  std::ifstream in(path);
  std::string hex;
  in >> hex;
  JobSecret secret;
  size_t bytes = 0;
  init_sodium();
  if (hex.size() != 2 * kJobSecretBytes ||
      sodium_hex2bin(secret.bytes.data(), secret.bytes.size(), hex.data(), hex.size(), nullptr, &bytes, nullptr) != 0 ||
      bytes != kJobSecretBytes)
    throw CommError("job secret: " + path + " does not hold 64 hex digits (make one with `troupe secret FILE`)");
  return secret;
}

void write_job_secret_file(const std::string& path, const JobSecret& secret) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw CommError("job secret: cannot create " + path + ": " + std::strerror(errno));
  char hex[2 * kJobSecretBytes + 1];
  sodium_bin2hex(hex, sizeof hex, secret.bytes.data(), secret.bytes.size());
  const std::string line = std::string(hex) + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  const int err = errno;
  ::close(fd);
  if (!ok) throw CommError("job secret: cannot write " + path + ": " + std::strerror(err));
}

JobKeys derive_job_keys(const JobSecret& secret) {
  init_sodium();
  JobKeys keys;
  uint8_t curve[32];
  crypto_kdf_derive_from_key(curve, sizeof curve, curve_secret, kKdfContext, secret.bytes.data());
  crypto_kdf_derive_from_key(keys.handshake.data(), keys.handshake.size(), handshake_key, kKdfContext,
                             secret.bytes.data());
  crypto_kdf_derive_from_key(keys.job_id.data(), keys.job_id.size(), job_id, kKdfContext, secret.bytes.data());
  // Any 32 bytes are a Curve25519 secret key (clamped where used); ZeroMQ takes it in Z85.
  char z85_secret[41] = {}, z85_public[41] = {};
  if (!zmq_z85_encode(z85_secret, curve, sizeof curve) || zmq_curve_public(z85_public, z85_secret) != 0)
    throw CommError("job secret: this libzmq cannot derive CURVE keys (built without CURVE?)");
  sodium_memzero(curve, sizeof curve);
  keys.curve = {z85_public, z85_secret};
  return keys;
}

std::string missing_job_secret_message() {
  return "no job secret: a job of several ranks authenticates every connection with a secret its ranks share. "
         "`troupe launch` makes one; otherwise make one with `troupe secret FILE` (or `openssl rand -hex 32 > FILE; "
         "chmod 600 FILE`), give every rank the same file and set TROUPE_JOB_SECRET_FILE=FILE; "
         "or opt out with TROUPE_INSECURE=1 (any process that reaches the job's ports can then join it)";
}

}  // namespace troupe::net
