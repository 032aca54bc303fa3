#include "net/bootstrap/rendezvous_rounds.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "devices/error.h"
#include "devices/threads.h"
#include "net/limits.h"
#include "net/zap_handler.h"

namespace troupe::net {

namespace {

std::string random_id() {
  std::random_device device;
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) out += digits[device() & 15];
  return out;
}

int to_int(const std::string& text, const char* what) {
  if (auto v = parse_int_field(text)) return *v;
  throw CommError(std::string("rendezvous: ") + what + " '" + text + "' is not an integer");
}

// The most ranks one node's launcher may bring (a join claiming more is refused, not a world of billions).
constexpr int kMaxNodeRanks = 4096;

enum class NodeState { waiting, running, stopping, done };

struct Node {
  int nproc = 1;
  std::string host, name;
  int port = 0;
  int64_t order = 0;  // first join: the earlier, the lower its node rank
  NodeState state = NodeState::waiting;
  Clock::time_point seen;
  int fd = -1;          // of its connection, as last seen
  bool closed = false;  // its connection closed: gone now, not after kBeatTimeout
};

}  // namespace

// Receives one multipart message without waiting; false when none is queued. fd, when given: the
// file descriptor of the connection it came in on.
bool receive_parts(void* socket, std::vector<std::string>& parts, int* fd) {
  parts.clear();
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, parts.empty() ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&msg);
      return false;
    }
    if (const int from = fd ? zmq_msg_get(&msg, ZMQ_SRCFD) : -1; from >= 0) *fd = from;  // not on a ROUTER's id
    parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return true;
}

std::string format_round_message(const RoundMessage& message) {
  std::string out = message.kind;
  for (const auto& f : message.fields) {
    out += '\n';
    for (char c : f) out += c == '\n' ? ' ' : c;  // a field is one line
  }
  return out;
}

RoundMessage parse_round_message(const std::string& body) {
  // Exactly one field after each '\n': the last may be empty (an "end" without a reason).
  const size_t first = body.find('\n');
  RoundMessage m{body.substr(0, first), {}};
  if (m.kind.empty()) throw CommError("rendezvous: a round message without its kind");
  for (size_t start = first; start != std::string::npos;) {
    const size_t end = body.find('\n', start + 1);
    m.fields.push_back(body.substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1));
    start = end;
  }
  return m;
}

Round parse_round(const RoundMessage& m) {
  if (m.kind != "round" || m.fields.size() != 8)
    throw CommError("rendezvous: malformed round message (" + m.kind + ", " + std::to_string(m.fields.size()) +
                    " fields, expected round and 8)");
  Round r;
  r.id = to_int(m.fields[0], "round id");
  r.run = m.fields[1];
  r.node_rank = to_int(m.fields[2], "node rank");
  r.nnodes = to_int(m.fields[3], "node count");
  r.first_rank = to_int(m.fields[4], "first rank");
  r.world = to_int(m.fields[5], "world size");
  r.master_host = m.fields[6];
  r.master_port = to_int(m.fields[7], "master port");
  return r;
}

namespace {

void* bind_server_router(void* context, const std::string& numeric_host, int port,
                         const std::optional<CurveKeys>& keys, const std::string& what) {
  void* socket = zmq_socket(context, ZMQ_ROUTER);
  int one = 1, linger = 1000;
  zmq_setsockopt(socket, ZMQ_ROUTER_HANDOVER, &one, sizeof one);  // a client that reconnects keeps its id
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
  // What a stranger may hold (net/limits.h): small messages, the greeting by its deadline, no
  // ZMTP 1.0 (which skips both).
  const int64_t max_bytes = static_cast<int64_t>(net_limits().max_registration_bytes);
  const int handshake_ms = static_cast<int>(net_limits().handshake_timeout.count());
  zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_bytes, sizeof max_bytes);
  zmq_setsockopt(socket, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof handshake_ms);
  zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, "troupe", 6);
  if (keys) {
    zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys->secret_key.data(), keys->secret_key.size());
  }
  const std::string endpoint = "tcp://" + numeric_host + ":" + std::to_string(port);
  if (zmq_bind(socket, endpoint.c_str()) != 0) {
    const int error = zmq_errno();
    zmq_close(socket);
    if (error == EADDRNOTAVAIL || error == EADDRINUSE) return nullptr;
    throw CommError("launch: cannot serve " + what + " on " + endpoint + ": " + zmq_strerror(error));
  }
  return socket;
}

}  // namespace

std::optional<int> parse_int_field(const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<ServerSockets> open_server_sockets(const std::string& numeric_host, int port,
                                                 const std::optional<CurveKeys>& keys, const std::string& what) {
  ServerSockets s;
  s.context = zmq_ctx_new();
  // The ZAP handler first: a CURVE server bound before it admits everyone.
  s.zap = keys ? bind_zap_handler(s.context) : nullptr;
  auto close_all = [&] {
    if (s.zap) zmq_close(s.zap);
    zmq_ctx_term(s.context);
  };
  try {
    s.router = bind_server_router(s.context, numeric_host, port, keys, what);
  } catch (...) {
    close_all();
    throw;
  }
  if (!s.router) {
    close_all();
    return std::nullopt;
  }
  return s;
}

std::unique_ptr<RoundServer> RoundServer::try_serve(const std::string& numeric_host, int port,
                                                    const std::optional<CurveKeys>& keys, RoundSettings settings,
                                                    Log log) {
  auto sockets = open_server_sockets(numeric_host, port, keys, "the rendezvous");
  if (!sockets) return nullptr;
  return std::unique_ptr<RoundServer>(
      new RoundServer(sockets->context, sockets->router, sockets->zap, keys, settings, std::move(log)));
}

RoundServer::RoundServer(void* context, void* socket, void* zap, std::optional<CurveKeys> keys, RoundSettings settings,
                         Log log)
    : context_(context), socket_(socket), zap_(zap), keys_(std::move(keys)), settings_(settings), log_(std::move(log)) {
  thread_ = std::thread([this] { serve(); });
}

RoundServer::~RoundServer() {
  stop_ = true;
  thread_.join();
  zmq_close(socket_);
  if (zap_) zmq_close(zap_);
  zmq_ctx_term(context_);
}

void RoundServer::serve() {
  name_this_thread("troupe-rdzv");
  std::map<std::string, Node> nodes;  // by the launcher's ZeroMQ routing id
  std::vector<std::string> members;   // of the running round, node rank order
  const std::string run = random_id().substr(0, 8);
  int round = -1, next_round = 0, failures = 0, end_code = -1;
  std::string end_why;
  int64_t joins = 0;
  Clock::time_point last_join = Clock::now(), short_since = Clock::now();

  auto send = [&](const std::string& id, const RoundMessage& m) {
    const std::string body = format_round_message(m);
    zmq_send(socket_, id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(socket_, body.data(), body.size(), ZMQ_DONTWAIT);
  };
  auto stop_round = [&](const std::string& why) {
    for (const auto& id : members) {
      auto it = nodes.find(id);
      if (it == nodes.end() || it->second.state == NodeState::waiting) continue;
      it->second.state = NodeState::stopping;
      send(id, {"stop", {std::to_string(round), why}});
    }
    log_("round " + std::to_string(round) + " stopped: " + why);
    members.clear();
    round = -1;
    short_since = Clock::now();
  };
  auto end_job = [&](int code, const std::string& why) {
    end_code = code;
    end_why = why;
    for (const auto& [id, node] : nodes) send(id, {"end", {std::to_string(code), why}});
    log_(code == 0 ? "the job succeeded" : "the job failed: " + why);
  };
  auto fail_round = [&](const std::string& why) {
    if (failures++ == settings_.max_restarts) {
      for (const auto& id : members)
        if (nodes.count(id)) nodes[id].state = NodeState::stopping;
      end_job(1, why + " (the " + std::to_string(settings_.max_restarts) + " restart(s) of --max-restarts used up)");
    } else {
      stop_round(why);
    }
  };
  auto start_round = [&](std::vector<std::pair<const std::string, Node>*> waiting) {
    std::sort(waiting.begin(), waiting.end(), [](auto* a, auto* b) { return a->second.order < b->second.order; });
    waiting.resize(std::min<size_t>(waiting.size(), static_cast<size_t>(settings_.max_nodes)));
    round = next_round++;
    int world = 0;
    for (auto* n : waiting) world += n->second.nproc;
    const Node& master = waiting[0]->second;
    std::string names;
    int first = 0;
    for (size_t i = 0; i < waiting.size(); ++i) {
      auto& [id, node] = *waiting[i];
      node.state = NodeState::running;
      members.push_back(id);
      names += (i ? ", " : "") + node.name;
      send(id, {"round",
                {std::to_string(round), run, std::to_string(i), std::to_string(waiting.size()), std::to_string(first),
                 std::to_string(world), master.host, std::to_string(master.port)}});
      first += node.nproc;
    }
    log_("round " + std::to_string(round) + ": " + std::to_string(waiting.size()) + " node(s) (" + names +
         "), world " + std::to_string(world));
  };

  // A launcher whose connection closes (its process killed, its host's kernel closing it) is gone
  // at once; one whose link is cut keeps its connection and is noticed by its silence.
  void* monitor = zmq_socket(context_, ZMQ_PAIR);
  const std::string monitor_endpoint = "inproc://troupe-rounds-monitor";
  zmq_socket_monitor(socket_, monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED);
  zmq_connect(monitor, monitor_endpoint.c_str());

  std::vector<std::string> parts;
  while (!stop_) {
    zmq_pollitem_t items[] = {{socket_, 0, ZMQ_POLLIN, 0}, {monitor, 0, ZMQ_POLLIN, 0}, {zap_, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, zap_ ? 3 : 2, 50);
    if (zap_) answer_zap_requests(zap_, *keys_);
    const auto now = Clock::now();
    while (receive_parts(monitor, parts)) {
      if (parts.empty() || parts[0].size() < 6) continue;
      int32_t fd = 0;  // the event: 16 bits of kind, 32 of value (here the closed connection's fd)
      std::memcpy(&fd, parts[0].data() + 2, sizeof fd);
      for (auto& [id, node] : nodes)
        if (node.fd == fd) node.closed = true;
    }
    for (int fd = -1; receive_parts(socket_, parts, &fd); fd = -1) {
      if (parts.size() != 2) continue;
      const std::string& id = parts[0];
      if (auto known = nodes.find(id); known != nodes.end()) known->second.fd = fd;
      RoundMessage m;
      try {
        m = parse_round_message(parts[1]);
      } catch (const CommError& e) {
        log_("refused a message: " + std::string(e.what()));
        continue;
      }
      if (end_code >= 0) {  // the job is over: whoever asks is told so
        send(id, {"end", {std::to_string(end_code), end_why}});
        continue;
      }
      auto it = nodes.find(id);
      if (m.kind == "join" && m.fields.size() == 4) {
        Node joined;
        try {
          joined.nproc = to_int(m.fields[0], "nproc");
          joined.port = to_int(m.fields[2], "port");
          if (joined.nproc < 1 || joined.nproc > kMaxNodeRanks)
            throw CommError("nproc " + m.fields[0] + ", expected 1.." + std::to_string(kMaxNodeRanks));
          if (joined.port < 1 || joined.port > 65535) throw CommError("port " + m.fields[2]);
        } catch (const CommError& e) {
          log_("refused a join: " + std::string(e.what()));
          continue;
        }
        joined.host = m.fields[1];
        joined.name = m.fields[3];
        joined.seen = now;
        joined.fd = fd;
        if (it != nodes.end() && it->second.state == NodeState::waiting) {
          it->second.seen = now;  // said again while waiting
        } else {
          const bool member = std::find(members.begin(), members.end(), id) != members.end();
          const bool was_running = it != nodes.end() && it->second.state == NodeState::running;
          joined.order = it != nodes.end() ? it->second.order : joins++;
          nodes[id] = joined;
          last_join = now;
          // A member that joins again has lost its ranks of this round: a failure. A new node
          // makes the job grow, when there is room.
          if (round >= 0 && member && was_running)
            fail_round("node " + joined.name + " left round " + std::to_string(round));
          else if (round >= 0 && !member && members.size() < static_cast<size_t>(settings_.max_nodes))
            stop_round("node " + joined.name + " joined: the job grows to " + std::to_string(members.size() + 1) +
                       " node(s)");
        }
        send(id, {"ack", {}});
      } else if (m.kind == "beat" && m.fields.size() == 1) {
        // A launcher this server forgot (silent too long), or one running a round that is over,
        // is told to stop and join again.
        const bool current = it != nodes.end() && (it->second.state != NodeState::running ||
                                                   m.fields[0] == std::to_string(round));
        if (current) {
          it->second.seen = now;
          send(id, {"ack", {}});
        } else {
          send(id, {"stop", {m.fields[0], "this node is not in the running round"}});
        }
      } else if (m.kind == "exit" && m.fields.size() == 3 && it != nodes.end()) {
        it->second.seen = now;
        if (m.fields[0] != std::to_string(round) || it->second.state != NodeState::running) continue;
        if (m.fields[1] == "0") {
          it->second.state = NodeState::done;
          if (std::all_of(members.begin(), members.end(),
                          [&](const std::string& mid) { return nodes.count(mid) && nodes[mid].state == NodeState::done; }))
            end_job(0, "");
        } else {
          it->second.state = NodeState::stopping;
          fail_round("node " + it->second.name + ": " + m.fields[2]);
        }
      }
    }
    if (end_code >= 0) continue;

    for (auto it = nodes.begin(); it != nodes.end();) {
      if (now - it->second.seen <= kBeatTimeout && !it->second.closed) {
        ++it;
        continue;
      }
      const Node gone = it->second;
      const bool member = std::find(members.begin(), members.end(), it->first) != members.end();
      it = nodes.erase(it);
      const std::string why = "node " + gone.name + " lost: " +
                              (gone.closed ? "its connection closed"
                                           : "silent for " + std::to_string(kBeatTimeout.count()) + " ms");
      if (member && (gone.state == NodeState::running || gone.state == NodeState::done))
        fail_round(why);
      else
        log_(why);
      if (end_code >= 0) break;
    }
    if (round >= 0 || end_code >= 0) continue;

    std::vector<std::pair<const std::string, Node>*> waiting;
    bool stopping = false;
    for (auto& entry : nodes) {
      if (entry.second.state == NodeState::waiting) waiting.push_back(&entry);
      stopping = stopping || entry.second.state == NodeState::stopping;
    }
    const auto count = static_cast<int>(waiting.size());
    // After a round, the nodes still there are known: no need to wait for others (they make the
    // job grow when they come).
    if (count >= settings_.min_nodes &&
        (count >= settings_.max_nodes || (!stopping && (next_round > 0 || now - last_join >= settings_.settle))))
      start_round(std::move(waiting));
    else if (count < settings_.min_nodes && now - short_since >= settings_.join_timeout)
      end_job(1, "only " + std::to_string(count) + " node(s) of at least " + std::to_string(settings_.min_nodes) +
                     " joined within " + std::to_string(settings_.join_timeout.count() / 1000) + " s");
  }
  zmq_socket_monitor(socket_, nullptr, 0);
  zmq_close(monitor);
}

RoundClient::RoundClient(const std::string& numeric_host, int port, const std::optional<CurveKeys>& keys, bool watch,
                         std::chrono::milliseconds silent_after)
    : last_heard_(Clock::now()), down_since_(Clock::now()) {
  context_ = zmq_ctx_new();
  socket_ = zmq_socket(context_, ZMQ_DEALER);
  const std::string id = random_id();
  int linger = 1000;
  zmq_setsockopt(socket_, ZMQ_ROUTING_ID, id.data(), id.size());
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
  // A connection attempt whose SYN was lost (a link cut, a server not up yet) is given up after
  // kConnectTimeout and made again, instead of waiting for the kernel's retransmission (1 s, then
  // 3, 7...): a standby's word to a cut quorum host came 0.9-1.0 s after the link was back.
  const int connect_timeout = static_cast<int>(kConnectTimeout.count());
  zmq_setsockopt(socket_, ZMQ_CONNECT_TIMEOUT, &connect_timeout, sizeof connect_timeout);
  if (keys) {
    zmq_setsockopt(socket_, ZMQ_CURVE_SERVERKEY, keys->public_key.data(), keys->public_key.size());
    zmq_setsockopt(socket_, ZMQ_CURVE_PUBLICKEY, keys->public_key.data(), keys->public_key.size());
    zmq_setsockopt(socket_, ZMQ_CURVE_SECRETKEY, keys->secret_key.data(), keys->secret_key.size());
  }
  if (watch) {
    const int timeout = static_cast<int>(std::max<int64_t>(silent_after.count(), 100)), interval = timeout / 4;
    zmq_setsockopt(socket_, ZMQ_HEARTBEAT_IVL, &interval, sizeof interval);
    zmq_setsockopt(socket_, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
    const std::string monitor_endpoint = "inproc://troupe-round-client-" + id;
    zmq_socket_monitor(socket_, monitor_endpoint.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
    monitor_ = zmq_socket(context_, ZMQ_PAIR);
    zmq_connect(monitor_, monitor_endpoint.c_str());
  }
  const std::string endpoint = "tcp://" + numeric_host + ":" + std::to_string(port);
  if (zmq_connect(socket_, endpoint.c_str()) != 0) {
    const std::string why = zmq_strerror(zmq_errno());
    if (monitor_) zmq_close(monitor_);
    zmq_close(socket_);
    zmq_ctx_term(context_);
    throw CommError("launch: cannot connect the rendezvous " + endpoint + ": " + why);
  }
}

RoundClient::~RoundClient() {
  if (monitor_) {
    zmq_socket_monitor(socket_, nullptr, 0);
    zmq_close(monitor_);
  }
  zmq_close(socket_);
  zmq_ctx_term(context_);
}

std::optional<Clock::time_point> RoundClient::down_since() {
  std::vector<std::string> parts;
  while (monitor_ && receive_parts(monitor_, parts)) {
    if (parts.empty() || parts[0].size() < 2) continue;
    uint16_t event = 0;  // the event: 16 bits of kind, then 32 of value
    std::memcpy(&event, parts[0].data(), sizeof event);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) down_since_.reset();
    else if (event == ZMQ_EVENT_DISCONNECTED && !down_since_) down_since_ = Clock::now();
  }
  return down_since_;
}

void RoundClient::discard_unsent() {
  const int linger = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
}

void RoundClient::send(const std::string& kind, const std::vector<std::string>& fields) {
  const std::string body = format_round_message({kind, fields});
  zmq_send(socket_, body.data(), body.size(), ZMQ_DONTWAIT);  // a full queue (link cut): dropped
}

std::optional<RoundMessage> RoundClient::receive(std::chrono::milliseconds wait, int wake_fd) {
  // The monitor too: a dropped connection ends the wait, and down_since() then dates it to the drop.
  zmq_pollitem_t items[3] = {{socket_, 0, ZMQ_POLLIN, 0}};
  int count = 1;
  if (monitor_) items[count++] = {monitor_, 0, ZMQ_POLLIN, 0};
  if (wake_fd >= 0) items[count++] = {nullptr, wake_fd, ZMQ_POLLIN, 0};
  if (zmq_poll(items, count, static_cast<long>(wait.count())) <= 0 || !(items[0].revents & ZMQ_POLLIN))
    return std::nullopt;
  std::vector<std::string> parts;
  if (!receive_parts(socket_, parts) || parts.size() != 1) return std::nullopt;
  last_heard_ = Clock::now();
  try {
    return parse_round_message(parts[0]);
  } catch (const CommError&) {
    return std::nullopt;
  }
}

}  // namespace troupe::net
