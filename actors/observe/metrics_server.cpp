#include "actors/observe/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/observe/metrics.h"
#include "devices/error.h"
#include "devices/threads.h"

namespace troupe::metrics {

namespace {

// This process' rank as the launchers set it: troupe launch (RANK), OpenMPI, MPICH/PMI, Slurm.
int rank_from_env() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return 0;
}

void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away
    sent += static_cast<size_t>(n);
  }
}

// The job's hosts (set_job_hosts), for GET /ranks.
struct JobHosts {
  std::mutex mutex;
  int rank = -1;
  std::vector<std::string> hosts;
};

JobHosts& job_hosts() {
  static JobHosts* j = new JobHosts;  // the server's thread may answer during static destruction
  return *j;
}

// Every rank's metrics endpoint, a line each; empty when this rank does not know them.
std::string rank_endpoints() {
  const char* base = std::getenv("TROUPE_METRICS_PORT");
  if (!base || !*base) return "";
  const char* addr_env = std::getenv("TROUPE_METRICS_ADDR");
  const std::string addr = addr_env && *addr_env ? addr_env : "127.0.0.1";
  std::lock_guard lock(job_hosts().mutex);
  const std::vector<std::string>& hosts = job_hosts().hosts;
  const int me = job_hosts().rank;
  std::string out;
  for (size_t r = 0; r < hosts.size(); ++r) {
    const bool here = me >= 0 && static_cast<size_t>(me) < hosts.size() && hosts[r] == hosts[static_cast<size_t>(me)];
    out += (here && addr != "0.0.0.0" ? addr : hosts[r]) + ":" + std::to_string(std::atoi(base) + static_cast<int>(r)) + "\n";
  }
  return out;
}

std::string response(int status, const char* reason, const char* type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// Reads the request head (up to 8 KiB, 2 s at most) and answers it.
void answer(int fd) {
  std::string head;
  char buffer[2048];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return;
    head.append(buffer, static_cast<size_t>(n));
  }
  const size_t line_end = head.find("\r\n");
  const std::string line = head.substr(0, line_end);
  const size_t space = line.find(' ');
  const std::string method = line.substr(0, space);
  std::string target = space == std::string::npos ? "" : line.substr(space + 1, line.find(' ', space + 1) - space - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    send_all(fd, response(405, "Method Not Allowed", "text/plain", "only GET /metrics and /ranks\n"));
  } else if (target == "/ranks") {
    const std::string ranks = rank_endpoints();
    send_all(fd, ranks.empty() ? response(404, "Not Found", "text/plain", "this rank has no job's rendezvous table\n")
                               : response(200, "OK", "text/plain", ranks));
  } else if (target != "/metrics") {
    send_all(fd, response(404, "Not Found", "text/plain", "troupe serves GET /metrics and /ranks\n"));
  } else {
    std::string reply = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", exposition());
    if (method == "HEAD") reply.resize(reply.find("\r\n\r\n") + 4);
    send_all(fd, reply);
  }
}

class Server {
 public:
  ~Server() {
    stop_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // wakes the poll at once: no wait at exit
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }

  int start(const std::string& addr, int port) {
    std::lock_guard lock(mutex_);
    if (port_ > 0) return port_;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
      throw ValueError("metrics: TROUPE_METRICS_ADDR '" + addr + "' is not an IPv4 address");
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 16) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw ValueError("metrics: cannot serve on " + addr + ":" + std::to_string(port) + ": " + why);
    }
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    fd_ = fd;
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { loop(); });
    return port_;
  }

  int port() {
    std::lock_guard lock(mutex_);
    return port_;
  }

 private:
  // Polls with a timeout as well, so that the stop flag is seen even if shutdown() did not wake it.
  void loop() {
    name_this_thread("troupe-metrics");
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      answer(client);
      ::close(client);
    }
  }

  std::mutex mutex_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Server& server() {
  static Server s;
  return s;
}

}  // namespace

int serve(const std::string& addr, int port) { return server().start(addr, port); }

int serving_port() { return server().port(); }

void set_job_hosts(int rank, std::vector<std::string> hosts) {
  std::lock_guard lock(job_hosts().mutex);
  job_hosts().rank = rank;
  job_hosts().hosts = std::move(hosts);
}

int serve_from_env() {
  const char* base = std::getenv("TROUPE_METRICS_PORT");
  if (!base || !*base) return 0;
  const char* addr = std::getenv("TROUPE_METRICS_ADDR");
  const int port = std::atoi(base) + rank_from_env();
  try {
    return serve(addr && *addr ? addr : "127.0.0.1", port);
  } catch (const ValueError& e) {
    static std::once_flag reported;
    std::call_once(reported, [&] { std::cerr << "troupe: " << e.what() << " (no metrics)\n"; });
    return 0;
  }
}

}  // namespace troupe::metrics
