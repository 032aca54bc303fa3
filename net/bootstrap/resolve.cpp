#include "net/bootstrap/resolve.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "devices/error.h"

namespace troupe::net::detail {

namespace {

struct Lookup {
  std::optional<std::string> numeric;
  std::string error;  // the resolver's answer when it failed
};

Lookup lookup(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found) return {std::nullopt, rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc)};
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  return {std::string(text), ""};
}

// The source address of a UDP socket connected to ip:port, or the connect's error.
std::optional<std::string> source_towards(const std::string& ip, int port, std::string* error) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &to.sin_addr) != 1) {
    *error = "not an IPv4 address";
    return std::nullopt;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::strerror(errno);
    return std::nullopt;
  }
  std::optional<std::string> out;
  sockaddr_in local{};
  socklen_t size = sizeof local;
  char text[INET_ADDRSTRLEN];
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) != 0)
    *error = std::strerror(errno);
  else if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
    out = text;
  ::close(fd);
  return out;
}

}  // namespace

std::optional<std::string> try_resolve_host(const std::string& host) { return lookup(host).numeric; }

std::string resolve_host(const std::string& host, const std::string& from, std::chrono::milliseconds patience,
                         Deadline deadline) {
  const Deadline started = Clock::now(), give_up = std::min(deadline, started + patience);
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  auto pause = std::chrono::milliseconds(100);
  for (bool said = false;; said = true) {
    Lookup l = lookup(host);
    if (l.numeric) return *l.numeric;
    const Deadline now = Clock::now();
    if (now >= give_up) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f", seconds(now - started));
      throw CommError("init_process_group: " + from + "='" + host + "' does not resolve (" + l.error + "), retried " +
                      waited + " s: rank 0's host must be a name this host's resolver knows, or an address " +
                      "(TROUPE_RESOLVE_TIMEOUT=seconds waits longer)");
    }
    if (!said)
      std::fprintf(stderr, "init_process_group: %s='%s' does not resolve yet (%s); retrying for up to %.1f s\n",
                   from.c_str(), host.c_str(), l.error.c_str(), seconds(give_up - started));
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, give_up - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

std::string local_address_towards(const std::string& numeric_host, int port, const std::string& what) {
  std::string error;
  if (auto mine = source_towards(numeric_host, port, &error)) return *mine;
  throw CommError("init_process_group: no route from this host to " + what + " (" + numeric_host + "): " + error);
}

std::optional<std::string> default_route_address() {
  std::string error;
  return source_towards("192.0.2.1", 9, &error);  // any off-host address (TEST-NET-1) takes the default route
}

std::chrono::milliseconds resolve_patience() {
  const char* text = std::getenv("TROUPE_RESOLVE_TIMEOUT");
  if (!text || !*text) return std::chrono::seconds(30);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (*end != '\0' || !(seconds >= 0))
    throw ValueError(std::string("init_process_group: TROUPE_RESOLVE_TIMEOUT='") + text +
                     "' is not a number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace troupe::net::detail
