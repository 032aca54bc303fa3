#include "net/bootstrap/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "devices/error.h"
#include "net/job_secret.h"
#include "net/bootstrap/rendezvous.h"
#include "net/bootstrap/quorum_server.h"
#include "net/bootstrap/rendezvous_rounds.h"
#include "net/bootstrap/resolve.h"
#include "net/work.h"

extern char** environ;

namespace troupe::net {

namespace {

std::atomic<int> g_interrupt{0};

void on_interrupt(int sig) { g_interrupt = sig; }

std::string random_hex(int bytes) {
  std::random_device device;
  std::string out;
  static const char* digits = "0123456789abcdef";
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = device() & 0xff;
    out += digits[v >> 4];
    out += digits[v & 15];
  }
  return out;
}

std::string describe_exit(const RankExit& e) {
  const std::string who = "rank " + std::to_string(e.rank) + " (pid " + std::to_string(e.pid) + ")";
  if (e.signal) return who + " was killed by signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")";
  return who + " exited with status " + std::to_string(e.exit_code);
}

// One child's output stream, split into lines.
struct Stream {
  int fd = -1;
  int rank = 0;
  bool is_stderr = false;
  std::string pending;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = true;
};

}  // namespace

namespace {

// Binds a TCP socket to port (0: the kernel picks) on every address; the bound port, or -1.
int try_bind(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw CommError(std::string("launch: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t size = sizeof addr;
  int bound = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) == 0)
    bound = ntohs(addr.sin_port);
  ::close(fd);
  return bound;
}

// The first port the kernel hands out on its own (to connect(), and to bind() to port 0).
int first_ephemeral_port() {
  FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  int low = 0, high = 0;
  if (f) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 0;
    std::fclose(f);
  }
  return low;
}

}  // namespace

// Between this call and the server's bind, the kernel may hand the same port to any process
// that connects or binds port 0 (two cores running tests side by side did). So take it from
// below the ephemeral range, where only a process that names the port can take it.
int free_tcp_port() {
  constexpr int kLowest = 20000;
  const int ephemeral = first_ephemeral_port();
  if (ephemeral > kLowest + 1000) {
    thread_local std::mt19937 pick(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> port(kLowest, ephemeral - 1);
    for (int attempt = 0; attempt < 64; ++attempt)
      if (const int p = try_bind(port(pick)); p > 0) return p;
  }
  const int p = try_bind(0);
  if (p < 0) throw CommError(std::string("launch: cannot find a free port: ") + std::strerror(errno));
  return p;
}

namespace {

using Print = std::function<void(int, bool, const std::string&)>;

// One run of this node's ranks (global ranks first_rank...): starts them, forwards their output,
// and when one fails stops the others; returns when all have exited. keep_running, when given, is
// asked every 50 ms with the result so far; false stops every rank (an elastic round that ended).
// in_place (an in-place elastic job): the ranks get no RANK (their quorum numbers them), a failed
// rank is started again on its own, up to max_restarts times each, and the others never stop.
LaunchResult run_ranks(const LaunchOptions& o, const std::map<std::string, std::string>& base_env, const Print& print,
                       int first_rank, const std::function<bool(const LaunchResult&)>& keep_running = {},
                       bool in_place = false) {
  LaunchResult result;
  std::vector<Child> children;
  std::vector<Stream> streams;
  std::vector<int> restarts(static_cast<size_t>(o.nproc), 0);
  auto stop_all = [&](int sig) {
    for (auto& c : children)
      if (c.running) ::kill(c.pid, sig);
  };

  const auto start_rank = [&](int local) {
    const int rank = first_rank + local;
    auto env = base_env;
    if (!in_place) env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local);
    if (in_place) env["TROUPE_RESTART_COUNT"] = std::to_string(restarts[static_cast<size_t>(local)]);
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o.command;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string exec_error = "troupe launch: cannot run " + o.command[0] + "\n";

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      stop_all(SIGKILL);
      throw CommError(std::string("launch: pipe: ") + std::strerror(errno));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      stop_all(SIGKILL);
      throw CommError(std::string("launch: fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher died: so do its ranks
      if (::getppid() != parent) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      ::execvpe(argv[0], argv.data(), envp.data());
      ssize_t ignored = ::write(STDERR_FILENO, exec_error.data(), exec_error.size());
      (void)ignored;
      _exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    if (static_cast<size_t>(local) < children.size()) {  // started again (in_place)
      children[static_cast<size_t>(local)] = {rank, pid, true};
      result.ranks[static_cast<size_t>(local)] = {rank, pid, -1, 0};
    } else {
      children.push_back({rank, pid, true});
      result.ranks.push_back({rank, pid, -1, 0});
    }
    streams.push_back({out[0], rank, false, {}});
    streams.push_back({err[0], rank, true, {}});
  };
  for (int local = 0; local < o.nproc; ++local) start_rank(local);

  auto emit_lines = [&](Stream& s, bool flush) {
    size_t start = 0;
    for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1)
      print(s.rank, s.is_stderr, s.pending.substr(start, nl - start));
    s.pending.erase(0, start);
    if (flush && !s.pending.empty()) {
      print(s.rank, s.is_stderr, s.pending);
      s.pending.clear();
    }
  };

  bool failed = false, stopping = false;
  Clock::time_point term_at = Clock::time_point::max(), kill_at = Clock::time_point::max();
  Clock::time_point all_exited_at = Clock::time_point::max();
  const auto fail = [&](const std::string& why, int code, Clock::duration wait_before_term) {
    failed = true;
    result.failure = why;
    result.exit_code = code;
    print(-1, true, why + (o.stop_on_failure ? "; stopping the other ranks" : ""));
    if (o.stop_on_failure) {
      term_at = Clock::now() + wait_before_term;
      kill_at = term_at + o.grace;
    }
  };

  while (true) {
    std::vector<pollfd> fds;
    std::vector<Stream*> polled;
    for (auto& s : streams)
      if (s.fd >= 0) {
        fds.push_back({s.fd, POLLIN, 0});
        polled.push_back(&s);
      }
    const bool any_running = std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
    // Output still open after every rank exited belongs to their own children: give it a moment.
    if (!any_running && (fds.empty() || Clock::now() - all_exited_at > std::chrono::milliseconds(200))) break;
    ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = *polled[i];
      char buffer[65536];
      const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
      if (n > 0) {
        s.pending.append(buffer, n);
        emit_lines(s, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit_lines(s, true);
        ::close(s.fd);
        s.fd = -1;
      }
    }
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      if (!c.running) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.running = false;
      RankExit& e = result.ranks[i];
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      else e.exit_code = WEXITSTATUS(status);
      // The others usually fail on their own within moments (PeerLostError), and their messages
      // say why: a second to say it before SIGTERM.
      const bool failure = e.signal || e.exit_code != 0;
      if (in_place && failure && !g_interrupt && !stopping) {
        if (restarts[i] < o.max_restarts) {
          ++restarts[i];
          print(-1, true, describe_exit(e) + "; starting it again (restart " + std::to_string(restarts[i]) + " of " +
                              std::to_string(o.max_restarts) + "): it joins the job's next epoch");
          start_rank(static_cast<int>(i));
        } else if (!failed) {  // the others go on without it
          failed = true;
          result.failure = describe_exit(e);
          result.exit_code = e.signal ? 128 + e.signal : e.exit_code;
          print(-1, true, describe_exit(e) + " (its " + std::to_string(o.max_restarts) +
                              " restart(s) of --max-restarts used up); the other ranks go on");
        }
        continue;
      }
      if (!failed && !stopping && failure)
        fail(describe_exit(e), e.signal ? 128 + e.signal : e.exit_code, std::chrono::seconds(1));
    }
    if (!failed && g_interrupt) fail("interrupted by signal " + std::to_string(g_interrupt.load()), 128 + g_interrupt, {});
    if (keep_running && !keep_running(result) && !stopping) {
      stopping = true;
      term_at = std::min(term_at, Clock::now());
      kill_at = std::min(kill_at, Clock::now() + o.grace);
    }
    if (Clock::now() >= term_at) {
      stop_all(SIGTERM);
      term_at = Clock::time_point::max();
    }
    if (Clock::now() >= kill_at) {
      stop_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (all_exited_at == Clock::time_point::max() &&
        std::none_of(children.begin(), children.end(), [](const Child& c) { return c.running; }))
      all_exited_at = Clock::now();
  }
  for (auto& s : streams)
    if (s.fd >= 0) {
      emit_lines(s, true);
      ::close(s.fd);
    }
  return result;
}

// An elastic job (LaunchOptions::rdzv_endpoint): round after round, this launcher joins the
// launchers' rendezvous (serving it when the endpoint is this host's and nobody serves it yet),
// runs its ranks with the round's ranks and world, and beats every kBeatEvery. The round ends
// when the server says stop (a failure elsewhere, a lost node, a node joining) or when the
// server falls silent for kBeatTimeout; this node then joins again. The server's "end" ends it.
LaunchResult run_elastic(const LaunchOptions& o, const std::map<std::string, std::string>& base_env,
                         const Print& print) {
  auto [host, port] = split_host_port(o.rdzv_endpoint);
  const std::string what = "--rdzv-endpoint " + o.rdzv_endpoint;
  const std::string numeric = detail::resolve_host(host, "--rdzv-endpoint", detail::resolve_patience(),
                                                   deadline_after(o.rdzv_timeout));
  RoundSettings settings;
  settings.min_nodes = o.min_nodes > 0 ? o.min_nodes : o.nnodes;
  settings.max_nodes = o.nnodes;
  settings.max_restarts = o.max_restarts;
  settings.settle = o.rdzv_settle;
  settings.join_timeout = o.rdzv_timeout;
  // The launchers prove the job secret to each other as the ranks do (CURVE keys from it).
  std::optional<CurveKeys> keys;
  if (auto secret = base_env.find("TROUPE_JOB_SECRET_FILE"); secret != base_env.end())
    keys = derive_job_keys(load_job_secret_file(secret->second)).curve;
  auto server = RoundServer::try_serve(numeric, port, keys, settings, [&](const std::string& line) {
    print(-1, true, "rendezvous: " + line);
  });
  const std::string mine = detail::local_address_towards(numeric, port, what);
  const std::string name = mine + "/" + std::to_string(::getpid());
  RoundClient client(numeric, port, keys);
  const auto seconds = [](Clock::duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 1000.0).substr(0, 4);
  };
  LaunchResult result;
  const auto give_up = [&](int code, const std::string& why) {
    result.exit_code = code;
    result.failure = why;
    print(-1, true, why);
    return result;
  };
  for (int rounds = 0;; ++rounds) {
    // Waiting for a round: join (said again every second), beat, and hear the server.
    std::optional<Round> round;
    Clock::time_point joined = Clock::now() - std::chrono::hours(1), beat = Clock::now();
    while (!round) {
      if (g_interrupt) return give_up(128 + g_interrupt, "interrupted by signal " + std::to_string(g_interrupt.load()));
      const auto now = Clock::now();
      if (now - joined >= std::chrono::seconds(1)) {
        client.send("join", {std::to_string(o.nproc), mine, std::to_string(free_tcp_port()), name});
        joined = now;
      }
      if (now - beat >= kBeatEvery) {
        client.send("beat", {"-1"});
        beat = now;
      }
      if (now - client.last_heard() > o.rdzv_timeout)
        return give_up(1, "the rendezvous at " + o.rdzv_endpoint + " has not answered for " +
                              seconds(now - client.last_heard()) + " s: its host is down or unreachable" +
                              (keys ? std::string(", or holds another job secret") : std::string()));
      auto m = client.receive(std::chrono::milliseconds(50));
      if (!m) continue;
      if (m->kind == "round") round = parse_round(*m);
      if (m->kind == "end" && m->fields.size() == 2) {
        const int code = std::atoi(m->fields[0].c_str());
        if (code == 0) return result;  // the job ended without this node
        return give_up(code, m->fields[1]);
      }
    }
    const std::string id = std::to_string(round->id);
    print(-1, true, "round " + id + ": node " + std::to_string(round->node_rank) + " of " +
                        std::to_string(round->nnodes) + ", ranks " + std::to_string(round->first_rank) + ".." +
                        std::to_string(round->first_rank + o.nproc - 1) + " of " + std::to_string(round->world) +
                        ", rank 0 at " + round->master_host + ":" + std::to_string(round->master_port));
    auto env = base_env;
    env["MASTER_ADDR"] = round->master_host;
    env["MASTER_PORT"] = std::to_string(round->master_port);
    env["WORLD_SIZE"] = std::to_string(round->world);
    env["NODE_RANK"] = std::to_string(round->node_rank);
    env["TROUPE_RESTART_COUNT"] = id;
    env["TROUPE_RUN_ID"] = round->run + "." + id;

    std::string stopped;               // why the server (or its silence) ended the round
    std::optional<RoundMessage> end;  // the job is over
    bool reported = false;
    const auto hear = [&]() -> bool {  // false: stop the ranks
      while (auto m = client.receive(std::chrono::milliseconds(0))) {
        if (m->kind == "stop" && m->fields.size() == 2 && m->fields[0] == id) stopped = m->fields[1];
        if (m->kind == "end" && m->fields.size() == 2) end = m;
      }
      const auto now = Clock::now();
      if (now - beat >= kBeatEvery) {
        client.send("beat", {id});
        beat = now;
      }
      if (stopped.empty() && now - client.last_heard() > kBeatTimeout)
        stopped = "the rendezvous at " + o.rdzv_endpoint + " was silent for " + seconds(now - client.last_heard()) + " s";
      return stopped.empty() && !end;
    };
    result = run_ranks(o, env, print, round->first_rank, [&](const LaunchResult& so_far) {
      if (!reported && so_far.exit_code != 0) {  // say it at once: the other nodes' ranks wait on ours
        client.send("exit", {id, std::to_string(so_far.exit_code), so_far.failure});
        reported = true;
      }
      return hear();
    });
    result.restarts = rounds;
    if (g_interrupt) {
      if (!reported) client.send("exit", {id, std::to_string(128 + g_interrupt), "interrupted"});
      return result;
    }
    if (result.exit_code == 0 && stopped.empty() && !end) {
      client.send("exit", {id, "0", ""});
      while (hear()) {  // until every node is done (end), or a late failure elsewhere (stop)
        if (Clock::now() - client.last_heard() > o.rdzv_timeout) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    if (end) {
      const int code = std::atoi(end->fields[0].c_str());
      if (code == 0) {
        result.exit_code = 0;
        result.failure.clear();
        return result;
      }
      return give_up(code, end->fields[1]);
    }
    if (!stopped.empty()) print(-1, true, "round " + id + " ended: " + stopped);
  }
}

// An in-place elastic job (LaunchOptions::in_place): this node's ranks meet the others' at the
// quorum at rdzv_endpoint (served here when the endpoint is this host's and nobody serves it yet:
// net/bootstrap/quorum_server.h; else a standby is served here), and the job goes on through
// losses without stopping them. A rank
// that fails is started again on its own and joins as a new rank; the launcher serving the quorum
// serves it until every rank of the job has left.
LaunchResult run_in_place(const LaunchOptions& o, std::map<std::string, std::string> env, const Print& print) {
  auto [host, port] = split_host_port(o.rdzv_endpoint);
  const std::string numeric = detail::resolve_host(host, "--rdzv-endpoint", detail::resolve_patience(),
                                                   deadline_after(o.rdzv_timeout));
  QuorumSettings settings;
  settings.min_ranks = (o.min_nodes > 0 ? o.min_nodes : o.nnodes) * o.nproc;
  settings.max_ranks = o.nnodes * o.nproc;
  settings.settle = o.rdzv_settle;
  settings.join_timeout = o.rdzv_timeout;
  settings.host_wait = o.rdzv_host_wait;
  // The ranks' heartbeat timeout, where set: a rank that sends no address for an epoch within it
  // (1-3 s) is left out, as a silent link would be. A host cut off is found rank by rank, and an
  // epoch may form with one of its ranks not yet found: that one never answers.
  std::optional<std::chrono::milliseconds> peer_timeout;
  if (const char* v = std::getenv("TROUPE_PEER_TIMEOUT_MS"); v && std::atoi(v) > 0) {
    peer_timeout = std::chrono::milliseconds(std::atoi(v));
    settings.reform_timeout = std::clamp<std::chrono::milliseconds>(*peer_timeout, std::chrono::seconds(1), settings.reform_timeout);
  }
  std::optional<CurveKeys> keys;
  if (auto secret = env.find("TROUPE_JOB_SECRET_FILE"); secret != env.end())
    keys = derive_job_keys(load_job_secret_file(secret->second)).curve;
  auto server = QuorumServer::try_serve(numeric, port, keys, settings, [&](const std::string& line) {
    print(-1, true, "quorum: " + line);
  });
  std::string standby = numeric + ":" + std::to_string(port);
  if (!server) {
    // Every other launcher serves a standby at its host's address (the first free port after
    // PORT: launchers may share a host), which takes the quorum over if HOST's is lost.
    const std::string local = detail::local_address_towards(numeric, port, "--rdzv-endpoint " + o.rdzv_endpoint);
    QuorumSettings standby_settings = settings;
    standby_settings.quorum_endpoint = numeric + ":" + std::to_string(port);
    // The quorum's server counts as lost after the ranks' own silence: TROUPE_PEER_TIMEOUT_MS where shorter than 2 s.
    if (peer_timeout) standby_settings.hold = std::min<std::chrono::milliseconds>(*peer_timeout, std::chrono::seconds(2));
    for (int p = port + 1; p <= port + 64 && !server; ++p) {
      standby_settings.self_endpoint = local + ":" + std::to_string(p);
      server = QuorumServer::try_serve(local, p, keys, standby_settings, [&](const std::string& line) {
        print(-1, true, "quorum (standby): " + line);
      });
      if (server) standby = standby_settings.self_endpoint;
    }
  }
  for (const char* fixed : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}) env.erase(fixed);
  env["TROUPE_QUORUM"] = numeric + ":" + std::to_string(port);
  env["TROUPE_WORLD_SIZES"] = std::to_string(settings.min_ranks) + ":" + std::to_string(settings.max_ranks);
  if (server) env["TROUPE_QUORUM_STANDBY"] = standby;
  LaunchResult result = run_ranks(o, env, print, 0, {}, /*in_place=*/true);
  // A standby that took the quorum over serves it to the end, as the quorum's launcher does.
  if (server && server->serves_the_job() && !g_interrupt) {
    print(-1, true, "this node's ranks are done; serving the quorum until every rank of the job has left");
    std::optional<int> end;
    while (!(end = server->wait_finished(std::chrono::milliseconds(100))) && !g_interrupt && server->serves_the_job()) {
    }
    if (end && *end != 0 && result.exit_code == 0) {
      result.exit_code = *end;
      result.failure = "the job failed (the quorum's log says why)";
    }
  }
  return result;
}

}  // namespace

LaunchResult launch(const LaunchOptions& o) {
  if (o.nproc < 1) throw ValueError("launch: --nproc must be at least 1, got " + std::to_string(o.nproc));
  if (o.nnodes < 1) throw ValueError("launch: --nnodes must be at least 1, got " + std::to_string(o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw ValueError("launch: --node-rank " + std::to_string(o.node_rank) + " outside " + std::to_string(o.nnodes) +
                     " nodes");
  if (o.command.empty()) throw ValueError("launch: no program given (troupe launch --nproc N -- PROGRAM ARGS...)");
  const bool elastic = !o.rdzv_endpoint.empty();
  if (elastic && !o.master.empty())
    throw ValueError("launch: --rdzv-endpoint picks rank 0's host in every round: leave out --master");
  if (elastic && (o.min_nodes < 0 || o.min_nodes > o.nnodes))
    throw ValueError("launch: --nnodes MIN:MAX needs 1 <= MIN <= MAX, got " + std::to_string(o.min_nodes) + ":" +
                     std::to_string(o.nnodes));
  if (!elastic && o.nnodes > 1 && o.master.empty())
    throw ValueError("launch: --nnodes > 1 needs --master HOST:PORT (or --rdzv-endpoint HOST:PORT for an elastic job)");
  if (o.max_restarts < 0) throw ValueError("launch: --max-restarts must be >= 0, got " + std::to_string(o.max_restarts));
  if (!elastic && o.max_restarts > 0 && o.nnodes > 1)
    throw ValueError("launch: --max-restarts with --nnodes " + std::to_string(o.nnodes) +
                     " needs --rdzv-endpoint HOST:PORT, where the nodes' launchers meet to restart together");
  if (o.in_place && !elastic)
    throw ValueError("launch: --in-place is an elastic job: give --rdzv-endpoint HOST:PORT (and --nnodes MIN:MAX)");
  if (o.insecure && o.encrypt) throw ValueError("launch: --encrypt needs the job secret: leave out --insecure");

  auto print = o.on_line ? o.on_line : [](int rank, bool is_stderr, const std::string& line) {
    const std::string text = (rank < 0 ? "[launch] " : "[rank " + std::to_string(rank) + "] ") + line + "\n";
    std::FILE* out = is_stderr ? stderr : stdout;
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  };

  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  if (!o.master.empty()) std::tie(master_addr, master_port) = split_host_port(o.master);

  // The secret the ranks read: given, from the environment, or made for this job.
  if (const char* old = std::getenv("TROUPE_CURVE_SECRET_FILE"); old && *old)
    throw ValueError("launch: TROUPE_CURVE_SECRET_FILE is gone: the job secret (TROUPE_JOB_SECRET_FILE, --secret "
                     "FILE, made by `troupe secret FILE`) now keys CURVE and every other connection");
  std::string key_file = o.secret_file;
  if (const char* env = std::getenv("TROUPE_JOB_SECRET_FILE"); key_file.empty() && env && *env) key_file = env;
  bool remove_key_file = false;
  if (o.insecure) {
    key_file.clear();
  } else if (!key_file.empty()) {
    load_job_secret_file(key_file);  // validates before any rank starts
  } else if (o.nnodes > 1 || elastic) {
    throw ValueError("launch: a job of several nodes needs the same secret on every node: make one with `troupe "
                     "secret FILE`, copy it to every node and pass --secret FILE (or set TROUPE_JOB_SECRET_FILE); "
                     "or --insecure");
  } else {
    const char* tmp = std::getenv("TMPDIR");
    key_file = std::string(tmp && *tmp ? tmp : "/tmp") + "/troupe-secret-" + random_hex(8);
    write_job_secret_file(key_file, generate_job_secret());
    remove_key_file = true;
  }

  const int world = o.nproc * o.nnodes;
  const char* run_env = std::getenv("TROUPE_RUN_ID");
  const std::string run_id = run_env && *run_env ? run_env : random_hex(8);
  std::map<std::string, std::string> base_env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) base_env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  base_env["MASTER_ADDR"] = master_addr;
  base_env["WORLD_SIZE"] = std::to_string(world);
  base_env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
  base_env["NODE_RANK"] = std::to_string(o.node_rank);
  base_env["TROUPE_RUN_ID"] = run_id;
  if (!key_file.empty()) base_env["TROUPE_JOB_SECRET_FILE"] = std::filesystem::absolute(key_file).string();
  if (o.insecure) {  // as asked, whatever this launcher's environment holds
    base_env.erase("TROUPE_JOB_SECRET_FILE");
    base_env["TROUPE_INSECURE"] = "1";
  }
  if (o.encrypt) base_env["TROUPE_ENCRYPT"] = "1";
  if (o.huge_pages) {
    std::string& tunables = base_env["GLIBC_TUNABLES"];
    if (tunables.find("glibc.malloc.hugetlb") == std::string::npos)
      tunables += (tunables.empty() ? "" : ":") + std::string("glibc.malloc.hugetlb=1");
  }
  for (const auto& [k, v] : o.env) base_env[k] = v;

  struct Restore {  // the signal handlers and the generated key file, however launch() ends
    struct sigaction old_int {}, old_term {};
    std::string remove;
    ~Restore() {
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      if (!remove.empty()) std::filesystem::remove(remove);
    }
  } restore;
  if (remove_key_file) restore.remove = key_file;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  g_interrupt = 0;
  sigaction(SIGINT, &action, &restore.old_int);
  sigaction(SIGTERM, &action, &restore.old_term);

  if (elastic && o.in_place) return run_in_place(o, base_env, print);
  if (elastic) return run_elastic(o, base_env, print);
  LaunchResult result;
  for (int restart = 0;; ++restart) {
    auto env = base_env;
    // A port of its own for every attempt: the last one's sockets may linger.
    env["MASTER_PORT"] = std::to_string(o.master.empty() ? free_tcp_port() : master_port);
    env["TROUPE_RESTART_COUNT"] = std::to_string(restart);
    env["TROUPE_RUN_ID"] = run_id + (restart ? "." + std::to_string(restart) : "");
    result = run_ranks(o, env, print, o.node_rank * o.nproc);
    result.restarts = restart;
    if (result.exit_code == 0 || g_interrupt || restart == o.max_restarts) break;
    print(-1, true, "restarting every rank (restart " + std::to_string(restart + 1) + " of " +
                        std::to_string(o.max_restarts) + ")");
  }
  return result;
}

}  // namespace troupe::net
