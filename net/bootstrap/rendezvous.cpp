#include "net/bootstrap/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <thread>

#include "actors/observe/metrics_server.h"
#include "devices/error.h"
#include "net/bootstrap/rendezvous_messages.h"
#include "net/bootstrap/resolve.h"
#include "net/limits.h"

namespace troupe::net {

namespace {

long ms_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return std::max<long>(0, left);
}

std::string list_missing(const std::vector<bool>& present) {
  std::string out;
  for (size_t r = 0; r < present.size(); ++r)
    if (!present[r]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

void configure(void* socket, const Transport& transport, bool server) {
  int linger = 1000;  // long enough to flush the table to every rank
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
  if (server) {  // what one stranger may hold of rank 0 (net/limits.h)
    const int64_t max_bytes = static_cast<int64_t>(net_limits().max_registration_bytes);
    const int handshake_ms = static_cast<int>(net_limits().handshake_timeout.count());
    zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_bytes, sizeof max_bytes);
    zmq_setsockopt(socket, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof handshake_ms);
    zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, "troupe", 6);  // refuses ZMTP 1.0 peers (links/zmq_link.cpp)
  }
  const auto* keys = transport.keys() ? &transport.keys()->curve : nullptr;
  if (!keys) return;
  if (server) {
    int one = 1;
    zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys->secret_key.data(), keys->secret_key.size());
  } else {
    zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, keys->public_key.data(), keys->public_key.size());
    zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, keys->public_key.data(), keys->public_key.size());
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys->secret_key.data(), keys->secret_key.size());
  }
}

struct SocketCloser {
  void* socket;
  ~SocketCloser() { zmq_close(socket); }
};

// One message part; `from`, when given, gets the sender's address (ZeroMQ's Peer-Address).
std::string recv_string(void* socket, int flags, std::string* from = nullptr) {
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  if (zmq_msg_recv(&msg, socket, flags) < 0) {
    zmq_msg_close(&msg);
    throw CommError(std::string("rendezvous: receive failed: ") + zmq_strerror(zmq_errno()));
  }
  std::string s(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
  if (from) {
    const char* address = zmq_msg_gets(&msg, "Peer-Address");
    *from = address ? address : "?";
  }
  zmq_msg_close(&msg);
  return s;
}

void send_reply(void* socket, const std::string& identity, const std::string& body) {
  zmq_send(socket, identity.data(), identity.size(), ZMQ_SNDMORE);
  zmq_send(socket, body.data(), body.size(), 0);
}

// A registration rank 0 does not take: answered (when it parsed) and one line on stderr.
void refuse_registration(void* socket, const std::string& identity, const std::string& from, const std::string& why,
                         bool answer) {
  std::cerr << "rendezvous: refused a registration from " << from << ": " << why << std::endl;
  if (answer) send_reply(socket, identity, format_error_answer("rendezvous: " + why));
}

std::vector<PeerAddress> serve_tcp(const std::string& host, int port, int world, Transport& transport,
                                   Deadline deadline, const std::string& method) {
  void* server = zmq_socket(transport.context(), ZMQ_ROUTER);
  SocketCloser closer{server};
  configure(server, transport, true);
  // Bind the named address only: every interface (a name that is not one of ours: NAT, aliases)
  // when the user says so.
  const char* all = std::getenv("TROUPE_RENDEZVOUS_BIND_ALL");
  const bool bind_all = all && std::string(all) == "1";
  // A name (MASTER_ADDR=node-0) binds the address it resolves to: ZeroMQ binds no names.
  const std::string numeric = bind_all ? "*" : detail::try_resolve_host(host).value_or(host);
  std::string endpoint = "tcp://" + numeric + ":" + std::to_string(port);
  if (zmq_bind(server, endpoint.c_str()) != 0) {
    const int error = zmq_errno();
    throw CommError("rendezvous: rank 0 cannot serve " + endpoint + ": " + zmq_strerror(error) +
                    (error == EADDRNOTAVAIL ? " (not an address of this host: behind NAT, set "
                                              "TROUPE_RENDEZVOUS_BIND_ALL=1 to listen on every interface)"
                                            : ""));
  }
  std::vector<PeerAddress> table(world);
  std::vector<bool> present(world, false);
  std::vector<std::string> identities(world);
  table[0] = transport.address();
  present[0] = true;
  int registered = 1;
  while (registered < world) {
    zmq_pollitem_t item{server, 0, ZMQ_POLLIN, 0};
    const long wait = ms_left(deadline);
    if (wait == 0) break;
    if (zmq_poll(&item, 1, wait) <= 0) continue;
    std::string identity = recv_string(server, 0), from;
    std::string body = recv_string(server, 0, &from);
    int more = 0;
    size_t more_size = sizeof more;
    zmq_getsockopt(server, ZMQ_RCVMORE, &more, &more_size);
    while (more) {
      recv_string(server, 0);
      zmq_getsockopt(server, ZMQ_RCVMORE, &more, &more_size);
    }
    Registration reg;
    try {
      reg = parse_registration(body);
    } catch (const CommError& e) {
      refuse_registration(server, identity, from, e.what(), false);  // not a registration: no answer
      continue;
    }
    const int r = reg.rank;
    if (reg.world != world) {
      refuse_registration(server, identity, from,
                          "rank " + std::to_string(r) + " says world size " + std::to_string(reg.world) +
                              ", rank 0 says " + std::to_string(world), true);
      continue;
    }
    if (r <= 0 || r >= world || present[r]) {
      refuse_registration(server, identity, from,
                          "rank " + std::to_string(r) +
                              (r >= 0 && r < world ? " is taken already" : " is outside a world of " + std::to_string(world)),
                          true);
      continue;
    }
    try {
      table[r] = PeerAddress::parse(reg.address);
    } catch (const CommError& e) {
      refuse_registration(server, identity, from, e.what(), true);
      continue;
    }
    present[r] = true;
    identities[r] = identity;
    ++registered;
  }
  if (registered < world) {
    const std::string message = "rendezvous " + method + ": rank(s) " + list_missing(present) +
                                " did not register within the timeout";
    for (int r = 1; r < world; ++r)
      if (present[r]) send_reply(server, identities[r], format_timeout_answer(message));
    throw TimeoutError(message);
  }
  const std::string reply = format_table(table);
  for (int r = 1; r < world; ++r) send_reply(server, identities[r], reply);
  return table;
}

std::vector<PeerAddress> join_tcp(const std::string& host, int port, int rank, int world, Transport& transport,
                                  Deadline deadline, const std::string& method) {
  void* client = zmq_socket(transport.context(), ZMQ_DEALER);
  SocketCloser closer{client};
  configure(client, transport, false);
  int zero = 0;
  zmq_setsockopt(client, ZMQ_LINGER, &zero, sizeof zero);
  const std::string endpoint = "tcp://" + host + ":" + std::to_string(port);
  if (zmq_connect(client, endpoint.c_str()) != 0)
    throw CommError("rendezvous: cannot connect " + endpoint + ": " + zmq_strerror(zmq_errno()));
  const std::string request = format_registration({rank, world, transport.address().serialize()});
  zmq_send(client, request.data(), request.size(), 0);  // queued until rank 0 is up
  // Rank 0 gives up at its own deadline and then tells everyone which ranks are missing: allow
  // it a moment beyond ours to say so.
  const Deadline verdict = deadline + std::chrono::seconds(1);
  zmq_pollitem_t item{client, 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&item, 1, ms_left(verdict)) <= 0) {
    if (ms_left(verdict) == 0)
      throw TimeoutError("rendezvous " + method + ": rank " + std::to_string(rank) +
                         " got no answer from rank 0 within the timeout (is rank 0 running and serving " +
                         endpoint + "? same job secret?)");
  }
  return parse_table(recv_string(client, 0), world);
}

// Takes an fcntl lock on the whole file, retrying until the deadline (F_SETLKW could wait forever).
void lock_file(int fd, short type, Deadline deadline, const std::string& path) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  while (fcntl(fd, F_SETLK, &lock) != 0) {
    if (errno != EACCES && errno != EAGAIN && errno != EINTR)
      throw CommError("rendezvous: cannot lock " + path + ": " + std::strerror(errno));
    if (Clock::now() >= deadline) throw TimeoutError("rendezvous file://" + path + ": the file stayed locked");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void unlock_file(int fd) {
  struct flock lock {};
  lock.l_type = F_UNLCK;
  lock.l_whence = SEEK_SET;
  fcntl(fd, F_SETLK, &lock);
}

std::vector<PeerAddress> file_rendezvous(const std::string& path, int rank, int world, Transport& transport,
                                         Deadline deadline) {
  const char* run_env = std::getenv("TROUPE_RUN_ID");
  const std::string run = run_env && *run_env ? run_env : "-";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw CommError("rendezvous: cannot open " + path + ": " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};

  const std::string line = format_file_line({run, rank, world, transport.address().serialize()});
  lock_file(fd, F_WRLCK, deadline, path);
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  unlock_file(fd);
  if (!written) throw CommError("rendezvous: cannot write " + path + ": " + std::strerror(errno));

  std::vector<PeerAddress> table(world);
  std::vector<bool> present(world, false);
  while (true) {
    lock_file(fd, F_RDLCK, deadline, path);
    std::string content;
    char buffer[4096];
    for (off_t offset = 0;;) {
      ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
      if (n <= 0) break;
      content.append(buffer, n);
      offset += n;
    }
    unlock_file(fd);
    for (const std::string_view text : split_lines(content)) {
      FileLine entry;
      try {
        entry = parse_file_line(text);
      } catch (const CommError&) {
        continue;  // not a rendezvous line
      }
      if (entry.run != run) continue;
      const int r = entry.rank, w = entry.world;
      if (w != world)
        throw CommError("rendezvous file://" + path + ": rank " + std::to_string(r) + " says world size " +
                        std::to_string(w) + ", rank " + std::to_string(rank) + " says " + std::to_string(world) +
                        " (a stale file? use a fresh path or set TROUPE_RUN_ID)");
      if (r < 0 || r >= world) continue;
      table[r] = PeerAddress::parse(entry.address);  // a restarted rank's later line wins
      present[r] = true;
    }
    if (std::find(present.begin(), present.end(), false) == present.end()) return table;
    if (Clock::now() >= deadline)
      throw TimeoutError("rendezvous file://" + path + ": rank(s) " + list_missing(present) +
                         " did not register within the timeout");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

std::pair<std::string, int> split_host_port(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size())
    throw CommError("rendezvous: expected HOST:PORT, got '" + host_port + "'");
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    size_t used = 0;
    port = std::stoi(host_port.substr(colon + 1), &used);
    if (used != host_port.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port <= 0 || port > 65535) throw CommError("rendezvous: bad port in '" + host_port + "'");
  return {host, port};
}

namespace {

std::vector<PeerAddress> find_peers(const std::string& init_method, int rank, int world_size, Transport& transport,
                                    Deadline deadline) {
  if (world_size == 1) return {transport.address()};
  if (init_method.rfind("tcp://", 0) == 0) {
    auto [host, port] = split_host_port(init_method.substr(6));
    return rank == 0 ? serve_tcp(host, port, world_size, transport, deadline, init_method)
                     : join_tcp(host, port, rank, world_size, transport, deadline, init_method);
  }
  if (init_method.rfind("file://", 0) == 0) {
    const std::string path = init_method.substr(7);
    if (path.empty() || path[0] != '/') throw ValueError("rendezvous: file:// needs an absolute path, got " + init_method);
    return file_rendezvous(path, rank, world_size, transport, deadline);
  }
  throw ValueError("rendezvous: unknown init method '" + init_method + "' (env://, tcp://HOST:PORT, file:///PATH)");
}

}  // namespace

std::vector<PeerAddress> rendezvous(const std::string& init_method, int rank, int world_size, Transport& transport,
                                    Deadline deadline) {
  std::vector<PeerAddress> table = find_peers(init_method, rank, world_size, transport, deadline);
  // Each rank's host, for the metrics server's GET /ranks (`troupe top --job`); ipc only: this host.
  std::vector<std::string> hosts;
  for (const PeerAddress& peer : table)
    hosts.push_back(peer.tcp.rfind("tcp://", 0) == 0 ? split_host_port(peer.tcp.substr(6)).first : "127.0.0.1");
  metrics::set_job_hosts(rank, std::move(hosts));
  return table;
}

}  // namespace troupe::net
