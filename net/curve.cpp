#include "net/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "net/errors.h"

namespace troupe::net {

namespace {

constexpr size_t kZ85KeyLength = 40;

std::string public_from_secret(const std::string& secret) {
  char pub[kZ85KeyLength + 1] = {};
  if (secret.size() != kZ85KeyLength || zmq_curve_public(pub, secret.c_str()) != 0)
    throw CommError("curve: not a 40-character Z85 secret key");
  return pub;
}

}  // namespace

CurveKeys generate_curve_keys() {
  if (!zmq_has("curve")) throw CommError("curve: this libzmq was built without CURVE support");
  char pub[kZ85KeyLength + 1] = {}, secret[kZ85KeyLength + 1] = {};
  if (zmq_curve_keypair(pub, secret) != 0)
    throw CommError(std::string("curve: zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  return {pub, secret};
}

CurveKeys load_curve_key_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    throw CommError("curve: cannot read key file " + path + ": " + std::strerror(errno));
  // Like ssh: a secret others can read is no secret.
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw CommError("curve: key file " + path + " is readable by group or others (chmod 600 it)");
  std::ifstream in(path);
  std::string secret;
  if (!(in >> secret)) throw CommError("curve: key file " + path + " is empty");
  try {
    return {public_from_secret(secret), secret};
  } catch (const CommError&) {
    throw CommError("curve: key file " + path + " does not hold a 40-character Z85 secret key");
  }
}

void write_curve_key_file(const std::string& path, const CurveKeys& keys) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw CommError("curve: cannot create key file " + path + ": " + std::strerror(errno));
  const std::string line = keys.secret_key + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  ::close(fd);
  if (!ok) throw CommError("curve: cannot write key file " + path + ": " + std::strerror(errno));
}

}  // namespace troupe::net
