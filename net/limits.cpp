#include "net/limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "devices/error.h"

namespace troupe::net {

namespace {

// A positive integer from the variable, or `fallback` when it is unset or empty.
long long positive(const std::function<const char*(const char*)>& getenv, const char* name, long long fallback) {
  const char* text = getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || value <= 0)
    throw ValueError(std::string("net limits: ") + name + "='" + text + "', expected a positive integer");
  return value;
}

}  // namespace

NetLimits parse_net_limits(const std::function<const char*(const char*)>& getenv) {
  NetLimits l;
  using std::chrono::milliseconds;
  l.max_frame_bytes = static_cast<size_t>(positive(getenv, "TROUPE_MAX_FRAME_BYTES", static_cast<long long>(l.max_frame_bytes)));
  l.handshake_timeout = milliseconds(positive(getenv, "TROUPE_HANDSHAKE_TIMEOUT_MS", l.handshake_timeout.count()));
  l.progress_timeout = milliseconds(positive(getenv, "TROUPE_PROGRESS_TIMEOUT_MS", l.progress_timeout.count()));
  const long long pending = positive(getenv, "TROUPE_MAX_PENDING", l.max_pending);
  if (pending > 1 << 16) throw ValueError("net limits: TROUPE_MAX_PENDING=" + std::to_string(pending) + ", at most 65536");
  l.max_pending = static_cast<int>(pending);
  l.send_stall_timeout = milliseconds(positive(getenv, "TROUPE_SEND_STALL_TIMEOUT_MS", l.send_stall_timeout.count()));
  l.max_registration_bytes =
      static_cast<size_t>(positive(getenv, "TROUPE_MAX_REGISTRATION_BYTES", static_cast<long long>(l.max_registration_bytes)));
  return l;
}

const NetLimits& net_limits() {
  static const NetLimits limits = parse_net_limits([](const char* name) -> const char* { return std::getenv(name); });
  return limits;
}

void raise_descriptor_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
      limit.rlim_cur = limit.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
  });
}

void log_cut_off(const std::string& address, const std::string& why) {
  using Clock = std::chrono::steady_clock;
  constexpr int kLinesPerSecond = 20;
  static std::mutex mutex;
  static Clock::time_point second;
  static int lines = 0;
  static long long unsaid = 0;
  std::lock_guard lock(mutex);
  const auto now = Clock::now();
  if (now - second >= std::chrono::seconds(1)) {
    if (unsaid > 0) std::fprintf(stderr, "troupe: cut off %lld more connection(s) in the last second\n", unsaid);
    second = now;
    lines = 0;
    unsaid = 0;
  }
  if (lines++ < kLinesPerSecond) std::fprintf(stderr, "troupe: cut off %s: %s\n", address.c_str(), why.c_str());
  else ++unsaid;
}

std::string peer_address(int fd) {
  sockaddr_storage peer{};
  socklen_t size = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &size) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (peer.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&peer);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (peer.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    port = ntohs(v6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

}  // namespace troupe::net
