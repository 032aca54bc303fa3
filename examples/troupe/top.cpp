// `troupe top`: every rank's actors, actor meshes and links in a running job, refreshed every second,
// from each rank's /metrics (actors/observe/metrics_server.h): per actor its rank, mailbox, calls/s,
// p50/p99 of the time its calls ran, errors; per mesh the rank that spawned it, its shape, calls/s
// and its members per rank; per link the bytes/s each way. Keys: c calls/s, m mailbox, e errors,
// p p99 (sort, largest first), q quits. The ranks: --job HOST:PORT, rank 0's metrics endpoint,
// which lists every rank's (GET /ranks: what the rendezvous told it, actors/observe/metrics_server.h), or
// --endpoints host:port,... (rank = position), or --port P --ranks N as `troupe launch
// --metrics-port P` serves them on this host (rank r on P + r).
//
//   build/bin/troupe launch --nproc 2 --metrics-port 9400 -- build/bin/remote_bench &
//   build/bin/troupe top --job 127.0.0.1:9400          # or --port 9400 --ranks 2
//   build/bin/troupe top --endpoints node0:9400,node1:9400 --once     # one table, no terminal
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "examples/troupe/commands.h"

namespace troupe::cli {

namespace {

using Clock = std::chrono::steady_clock;

// GET http://host:port/path; empty with `error` set when the rank does not answer.
std::string fetch(const std::string& endpoint, const std::string& path, std::string& error) {
  const size_t colon = endpoint.rfind(':');
  const std::string host = endpoint.substr(0, colon), port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) {
    error = "cannot resolve " + host;
    return "";
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  if (!connected) {
    ::close(fd);
    error = "not answering";
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) error = "send failed";
  std::string reply;
  char buffer[65536];
  while (error.empty()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) {
      error = "timed out";
      break;
    }
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t body = reply.find("\r\n\r\n");
  if (error.empty() && (reply.rfind("HTTP/1.1 200", 0) != 0 || body == std::string::npos)) error = "bad reply";
  return error.empty() ? reply.substr(body + 4) : "";
}

// One sample: name, labels, value. The exposition is ours (actors/observe/metrics.cpp): one sample per line,
// labels without commas in their values but for escapes we do not need to undo here.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> parse(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    const size_t brace = line.find('{'), space = line.rfind(' ');
    if (space == std::string::npos) continue;
    s.name = line.substr(0, std::min(brace, space));
    if (brace != std::string::npos && brace < space) {
      const size_t close = line.rfind('}', space);
      std::string labels = line.substr(brace + 1, close - brace - 1);
      size_t at = 0;
      while (at < labels.size()) {
        const size_t eq = labels.find('=', at);
        const size_t end = labels.find('"', eq + 2);
        if (eq == std::string::npos || end == std::string::npos) break;
        s.labels[labels.substr(at, eq - at)] = labels.substr(eq + 2, end - eq - 2);
        at = end + 2;  // past '",'
      }
    }
    s.value = std::strtod(line.c_str() + space + 1, nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

struct ActorRow {
  int rank = 0;
  std::string actor;
  double mailbox = 0, calls = 0, errors = 0;
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
  double calls_per_s = 0, p50 = NAN, p99 = NAN;
};

struct LinkRow {
  int rank = 0, peer = 0;
  double sent = 0, received = 0;
  double sent_per_s = 0, received_per_s = 0;
};

// An actor mesh (net/remote/mesh.h), from the /metrics of the rank that spawned it.
struct MeshRow {
  int rank = 0;
  std::string mesh, shape;
  std::map<int, double> members;  // by the rank that hosts them
  double calls = 0, calls_per_s = 0;
};

struct Snapshot {
  Clock::time_point at;
  std::map<std::pair<int, std::string>, ActorRow> actors;
  std::map<std::pair<int, std::string>, MeshRow> meshes;
  std::map<std::pair<int, int>, LinkRow> links;
  std::vector<std::string> errors;  // per unreachable rank
};

// The q-quantile from cumulative bucket counts (the bucket's upper bound, as Prometheus' own
// histogram_quantile would interpolate within it; the bound is what a terminal needs).
double quantile(const std::vector<std::pair<double, double>>& buckets, double q) {
  if (buckets.empty() || buckets.back().second <= 0) return NAN;
  const double want = q * buckets.back().second;
  for (const auto& [le, count] : buckets)
    if (count >= want) return le;
  return buckets.back().first;
}

Snapshot poll_ranks(const std::vector<std::string>& endpoints) {
  Snapshot s;
  s.at = Clock::now();
  for (int rank = 0; rank < static_cast<int>(endpoints.size()); ++rank) {
    std::string error;
    const std::string text = fetch(endpoints[rank], "/metrics", error);
    if (!error.empty()) {
      s.errors.push_back("rank " + std::to_string(rank) + " (" + endpoints[rank] + "): " + error);
      continue;
    }
    for (const Sample& m : parse(text)) {
      if (m.labels.count("mesh")) {
        MeshRow& row = s.meshes[{rank, m.labels.at("mesh")}];
        row.rank = rank;
        row.mesh = m.labels.at("mesh");
        if (m.name == "troupe_mesh_calls_total") row.calls = m.value;
        else if (m.name == "troupe_mesh_members" && m.value > 0) {
          row.shape = m.labels.count("shape") ? m.labels.at("shape") : "";
          row.members[std::stoi(m.labels.at("rank"))] = m.value;
        }
      } else if (m.labels.count("actor")) {
        ActorRow& row = s.actors[{rank, m.labels.at("actor")}];
        row.rank = rank;
        row.actor = m.labels.at("actor");
        if (m.name == "troupe_actor_calls_total") row.calls = m.value;
        else if (m.name == "troupe_actor_errors_total") row.errors = m.value;
        else if (m.name == "troupe_actor_mailbox_depth") row.mailbox = m.value;
        else if (m.name == "troupe_actor_call_seconds_bucket")
          row.buckets.emplace_back(m.labels.at("le") == "+Inf" ? INFINITY : std::stod(m.labels.at("le")), m.value);
      } else if (m.labels.count("peer") && m.name.rfind("troupe_transport_", 0) == 0) {
        const int peer = std::stoi(m.labels.at("peer"));
        LinkRow& row = s.links[{rank, peer}];
        row.rank = rank;
        row.peer = peer;
        if (m.name == "troupe_transport_sent_bytes_total") row.sent += m.value;
        else if (m.name == "troupe_transport_received_bytes_total") row.received += m.value;
      }
    }
  }
  return s;
}

// Rates against the previous snapshot; percentiles over the calls since then (all calls so far
// when none came meanwhile).
void rates(Snapshot& now, const Snapshot* before) {
  const double dt = before ? std::chrono::duration<double>(now.at - before->at).count() : 0;
  for (auto& [key, row] : now.actors) {
    std::vector<std::pair<double, double>> window = row.buckets;
    if (before && dt > 0 && before->actors.count(key)) {
      const ActorRow& old = before->actors.at(key);
      row.calls_per_s = (row.calls - old.calls) / dt;
      if (old.buckets.size() == window.size() && row.calls > old.calls)
        for (size_t i = 0; i < window.size(); ++i) window[i].second -= old.buckets[i].second;
    }
    row.p50 = quantile(window, 0.5);
    row.p99 = quantile(window, 0.99);
  }
  for (auto& [key, row] : now.meshes)
    if (before && dt > 0 && before->meshes.count(key)) row.calls_per_s = (row.calls - before->meshes.at(key).calls) / dt;
  for (auto& [key, row] : now.links) {
    if (!before || dt <= 0 || !before->links.count(key)) continue;
    row.sent_per_s = (row.sent - before->links.at(key).sent) / dt;
    row.received_per_s = (row.received - before->links.at(key).received) / dt;
  }
}

std::string duration(double s) {
  char b[32];
  if (std::isnan(s)) return "-";
  if (std::isinf(s)) return ">10s";
  if (s < 1e-3) std::snprintf(b, sizeof b, "%.0fus", s * 1e6);
  else if (s < 1) std::snprintf(b, sizeof b, "%.1fms", s * 1e3);
  else std::snprintf(b, sizeof b, "%.2fs", s);
  return b;
}

std::string bytes_rate(double v) {
  char b[32];
  if (v >= 1e9) std::snprintf(b, sizeof b, "%.2f GB/s", v / 1e9);
  else if (v >= 1e6) std::snprintf(b, sizeof b, "%.2f MB/s", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1f kB/s", v / 1e3);
  else std::snprintf(b, sizeof b, "%.0f B/s", v);
  return b;
}

std::string render(const Snapshot& s, char sort, size_t ranks, bool ansi) {
  std::vector<const ActorRow*> rows;
  for (const auto& [key, row] : s.actors) rows.push_back(&row);
  auto key = [sort](const ActorRow* r) {
    switch (sort) {
      case 'm': return r->mailbox;
      case 'e': return r->errors;
      case 'p': return std::isnan(r->p99) ? -1.0 : r->p99;
      default: return r->calls_per_s;
    }
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const ActorRow* a, const ActorRow* b) { return key(a) > key(b); });
  const char* bold = ansi ? "\x1b[1m" : "";
  const char* reverse = ansi ? "\x1b[7m" : "";
  const char* red = ansi ? "\x1b[31m" : "";
  const char* plain = ansi ? "\x1b[0m" : "";
  std::ostringstream out;
  char line[256];
  out << bold << "troupe top" << plain << " - " << ranks << " rank(s), " << rows.size() << " actor(s); sort: "
      << (sort == 'm' ? "mailbox" : sort == 'e' ? "errors" : sort == 'p' ? "p99" : "calls/s")
      << "   keys: c calls/s  m mailbox  e errors  p p99  q quit\n";
  for (const std::string& e : s.errors) out << red << e << plain << "\n";
  std::snprintf(line, sizeof line, "%-5s %-32s %8s %10s %9s %9s %8s", "RANK", "ACTOR", "MAILBOX", "CALLS/S", "P50",
                "P99", "ERRORS");
  out << "\n" << reverse << line << plain << "\n";
  for (const ActorRow* r : rows) {
    std::snprintf(line, sizeof line, "%-5d %-32.32s %8.0f %10.1f %9s %9s %8.0f", r->rank, r->actor.c_str(), r->mailbox,
                  r->calls_per_s, duration(r->p50).c_str(), duration(r->p99).c_str(), r->errors);
    out << (r->errors > 0 ? red : "") << line << plain << "\n";
  }
  // Meshes (stopped ones, whose members are all gone, left out): where each rank's members are.
  bool meshes = false;
  for (const auto& [k, m] : s.meshes) {
    if (m.members.empty()) continue;
    if (!meshes) {
      std::snprintf(line, sizeof line, "%-5s %-32s %-16s %10s %10s  %s", "RANK", "MESH", "SHAPE", "CALLS/S", "CALLS",
                    "MEMBERS (rank:n)");
      out << "\n" << reverse << line << plain << "\n";
      meshes = true;
    }
    std::string where;
    for (const auto& [r, n] : m.members) where += (where.empty() ? "" : " ") + std::to_string(r) + ":" + std::to_string(static_cast<int64_t>(n));
    std::snprintf(line, sizeof line, "%-5d %-32.32s %-16.16s %10.1f %10.0f  %s", m.rank, m.mesh.c_str(), m.shape.c_str(),
                  m.calls_per_s, m.calls, where.c_str());
    out << line << "\n";
  }
  std::snprintf(line, sizeof line, "%-5s %-6s %14s %14s %14s %14s", "RANK", "PEER", "SENT", "RECEIVED", "SENT/S",
                "RECEIVED/S");
  out << "\n" << reverse << line << plain << "\n";
  for (const auto& [k, r] : s.links) {
    std::snprintf(line, sizeof line, "%-5d %-6d %14.0f %14.0f %14s %14s", r.rank, r.peer, r.sent, r.received,
                  bytes_rate(r.sent_per_s).c_str(), bytes_rate(r.received_per_s).c_str());
    out << line << "\n";
  }
  return out.str();
}

// The terminal without line buffering or echo while top runs, restored on the way out.
class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct TopOptions {
  std::string job, endpoints;
  int port = 0, ranks = 0;
  double interval = 1.0;
  bool once = false;
};

// Every rank's endpoint, as rank 0 at `job` lists them (asked for up to 10 s: a job just started
// may not have met at its rendezvous yet).
std::vector<std::string> job_endpoints(const std::string& job) {
  std::string error, text;
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  do {
    error.clear();
    text = fetch(job, "/ranks", error);
    if (error.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (Clock::now() < give_up);
  if (!error.empty()) throw UsageError("--job " + job + ": rank 0's metrics did not list the ranks: " + error);
  std::stringstream listed(text);
  std::vector<std::string> out;
  for (std::string line; std::getline(listed, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

int top(const TopOptions& o) {
  std::vector<std::string> endpoints = o.job.empty() ? split(o.endpoints) : job_endpoints(o.job);
  if (endpoints.empty() && o.port > 0)
    for (int r = 0; r < std::max(1, o.ranks); ++r) endpoints.push_back("127.0.0.1:" + std::to_string(o.port + r));
  if (endpoints.empty()) throw UsageError("give --job HOST:PORT, --endpoints host:port,... or --port P [--ranks N]");
  for (const std::string& e : endpoints)
    if (e.find(':') == std::string::npos) throw UsageError("endpoint '" + e + "' is not host:port");
  if (o.once) {
    Snapshot first = poll_ranks(endpoints);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
    Snapshot second = poll_ranks(endpoints);
    rates(second, &first);
    std::cout << render(second, 'c', endpoints.size(), false);
    return second.errors.size() == endpoints.size() ? 1 : 0;
  }
  RawTerminal terminal;
  char sort = 'c';
  std::unique_ptr<Snapshot> before;
  while (true) {
    auto now = std::make_unique<Snapshot>(poll_ranks(endpoints));
    rates(*now, before.get());
    std::cout << "\x1b[H\x1b[2J" << render(*now, sort, endpoints.size(), true) << std::flush;
    before = std::move(now);
    // Keys until the next refresh: a sort key redraws at once, q quits.
    const auto next = before->at + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.interval));
    while (Clock::now() < next) {
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) <= 0) continue;
      char key = 0;
      if (::read(STDIN_FILENO, &key, 1) != 1) return 0;  // stdin closed
      if (key == 'q') return 0;
      if (key == 'c' || key == 'm' || key == 'e' || key == 'p') {
        sort = key;
        std::cout << "\x1b[H\x1b[2J" << render(*before, sort, endpoints.size(), true) << std::flush;
      }
    }
  }
}

}  // namespace

Command add_top_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("top", "Live view of a job's actors and links from each rank's /metrics");
  auto o = std::make_shared<TopOptions>();
  app->add_option("--job", o->job, "Rank 0's metrics endpoint (host:port): it lists every rank's from the rendezvous");
  app->add_option("--endpoints", o->endpoints, "host:port of each rank's metrics, rank 0 first, comma-separated");
  app->add_option("--port", o->port, "The job's --metrics-port: rank r serves on 127.0.0.1:port+r")
      ->check(CLI::Range(1, 65535));
  app->add_option("--ranks", o->ranks, "Ranks in the job (with --port; default 1)")->check(CLI::PositiveNumber);
  app->add_option("--interval", o->interval, "Seconds between refreshes (default 1)")->check(CLI::PositiveNumber);
  app->add_flag("--once", o->once, "Print one table (rates over one interval) and exit");
  return {app, [o] { return top(*o); }};
}

}  // namespace troupe::cli
