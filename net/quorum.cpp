#include "net/quorum.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>

#include "devices/error.h"
#include "devices/threads.h"
#include "net/bootstrap/rendezvous.h"
#include "net/collectives.h"
#include "net/bootstrap/rendezvous_rounds.h"
#include "net/bootstrap/resolve.h"
#include "net/job_secret.h"
#include "net/transport.h"
#include "net/transport_env.h"

namespace troupe::net {

// What the threads share, under one mutex: the listener's queues and the builder's results.
struct Quorum::Shared {
  std::mutex mutex;
  std::condition_variable cv;               // a new epoch message, a group ready, the end, stopping
  std::deque<RoundMessage> forming;         // "epoch" and "table", for the builder
  std::deque<RoundMessage> outgoing;        // to the server, sent by the listener
  std::shared_ptr<Transport> building;      // the transport the builder binds or connects
  int building_epoch = -1;
  bool building_aborted = false;            // broken on purpose (superseded, closing): no loss to report
  std::shared_ptr<ProcessGroup> ready;      // the latest epoch's connected group, not taken yet
  int ready_epoch = -1;
  std::shared_ptr<ProcessGroup> current;    // the rank's group, for the listener's "lost"
  int current_epoch = -1;
  std::optional<std::pair<int, std::string>> ended;  // the server's "end": code, why
  std::optional<Clock::time_point> server_down_since;  // as the listener last saw the connection
  std::optional<CurveKeys> keys;                       // the job's, for a standby's connection
  std::map<int, int> assigned;                         // this rank's number in each epoch it was told of
  std::vector<std::string> standbys;                   // every rank's standby in standbys_epoch
  int standbys_epoch = -1;
  std::optional<RoundMessage> unanswered;  // the listener's: the last join, rejoin or resume no table answered
  Clock::time_point unanswered_sent;       // when the listener last sent it
};

namespace {

std::string quorum_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The ranks `transport` found lost, as "rejoin" lists them.
void add_lost_ranks(const Transport& transport, std::vector<std::string>& fields) {
  for (int r = 0; r < transport.world_size(); ++r)
    if (transport.is_lost(r)) fields.push_back(std::to_string(r));
}

// The server counts as down once silent this long: 2 s, or the transports' peer timeout where it
// is set shorter (TROUPE_PEER_TIMEOUT_MS), so that a cut link to it is found as soon as one to a peer.
std::chrono::milliseconds server_silence() {
  const auto ms = parse_int_field(quorum_env("TROUPE_PEER_TIMEOUT_MS"));
  return std::chrono::milliseconds(ms && *ms > 0 ? std::min(*ms, 2000) : 2000);
}

}  // namespace

bool Quorum::configured() { return !quorum_env("TROUPE_QUORUM").empty(); }

Quorum::Quorum(QuorumOptions options) : options_(std::move(options)), shared_(std::make_unique<Shared>()) {
  if (options_.endpoint.empty()) options_.endpoint = quorum_env("TROUPE_QUORUM");
  if (options_.endpoint.empty())
    throw ValueError("Quorum: no server: pass QuorumOptions::endpoint or set TROUPE_QUORUM (troupe launch --in-place sets it)");
  auto [host, port] = split_host_port(options_.endpoint);
  const Deadline deadline = deadline_after(options_.timeout);
  const std::string numeric = detail::resolve_host(host, "TROUPE_QUORUM", detail::resolve_patience(), deadline);
  options_.endpoint = numeric + ":" + std::to_string(port);  // as the launchers list their standbys
  host_ = !quorum_env("TROUPE_HOST").empty()
              ? quorum_env("TROUPE_HOST")
              : detail::local_address_towards(numeric, port, "TROUPE_QUORUM=" + options_.endpoint);
  if (options_.name.empty()) options_.name = host_ + "/" + std::to_string(::getpid());
  if (const std::string secret = quorum_env("TROUPE_JOB_SECRET_FILE"); !secret.empty())
    shared_->keys = derive_job_keys(load_job_secret_file(secret)).curve;
  standby_ = quorum_env("TROUPE_QUORUM_STANDBY");
  client_ = std::make_unique<RoundClient>(numeric, port, shared_->keys, /*watch=*/true, server_silence());
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw CommError("Quorum: pipe failed");
  listener_ = std::thread([this] { listen(); });
  builder_ = std::thread([this] { build(); });
  send("join", join_fields());
  try {
    wait_for_next();
  } catch (...) {
    shut_down();
    throw;
  }
}

Quorum::~Quorum() { shut_down(); }

void Quorum::shut_down() {
  // Without leave() (an exception on its way out) the server sees the connection close: this rank
  // is lost to the others, not done. What was queued (leave included) goes out before the
  // listener stops, and the DEALER lingers to deliver it.
  {
    std::lock_guard lock(shared_->mutex);
    stop_ = true;
    if (shared_->building) abort_building("Quorum: closing");
  }
  shared_->cv.notify_all();
  const char byte = 0;
  if (::write(wake_[1], &byte, 1) < 0) {
  }
  listener_.join();
  builder_.join();
  {
    std::lock_guard lock(shared_->mutex);
    shared_->current.reset();
    if (shared_->ready) retire(std::move(shared_->ready));
  }
  if (group_) retire(std::move(group_));
  for (auto& t : retiring_) t.join();
  client_.reset();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

// How many ranks this rank's launcher runs (LOCAL_WORLD_SIZE), where a launcher with a standby
// started it: the server waits for a launcher's ranks to join together.
std::string Quorum::launcher_ranks() const { return standby_.empty() ? "" : quorum_env("LOCAL_WORLD_SIZE"); }

// "join NAME [STANDBY [RANKS]]": this rank, and its launcher's standby and ranks where it has one.
std::vector<std::string> Quorum::join_fields() const {
  if (standby_.empty()) return {options_.name};
  if (const std::string ranks = launcher_ranks(); !ranks.empty()) return {options_.name, standby_, ranks};
  return {options_.name, standby_};
}

void Quorum::send(const std::string& kind, std::vector<std::string> fields) {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->outgoing.push_back({kind, std::move(fields)});
  }
  const char byte = 0;
  if (::write(wake_[1], &byte, 1) < 0) {
  }  // a full pipe: the listener is awake already
}

void Quorum::listen() {
  name_this_thread("troupe-quorum");
  while (true) {
    const bool stopping = stop_;  // read first: whatever was queued before it is sent below
    std::deque<RoundMessage> outgoing;
    {
      std::lock_guard lock(shared_->mutex);
      outgoing.swap(shared_->outgoing);
    }
    for (const auto& m : outgoing) {
      if (m.kind == "join" || m.kind == "rejoin") {
        shared_->unanswered = m;  // sent again while no epoch answers it
        send_unanswered();
      } else {
        client_->send(m.kind, m.fields);
      }
    }
    if (stopping) break;
    pollfd wake{wake_[0], POLLIN, 0};
    if (::poll(&wake, 1, 0) > 0) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
      continue;
    }
    // The server's messages, a wake-up from another thread or a change of the connection, whichever
    // comes first; while the connection is down, no later than the moment it counts as lost.
    auto wait = std::chrono::milliseconds(100);
    if (const auto was_down = client_->down_since(); was_down && server_seen_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*was_down + kFailoverAfter - Clock::now());
      if (left.count() > 0) wait = std::min(wait, left);  // past it (no standby to go to): the usual wait
    }
    auto m = client_->receive(wait, wake_[0]);
    const auto down = client_->down_since();
    if (!down) {
      // Back after a drop, or a second without an answer: what asked for an epoch may have died
      // with a connection that dropped between two looks at it (a cut link restored). The server
      // takes a request again as it took it once.
      if (shared_->unanswered && (server_dropped_ || Clock::now() - shared_->unanswered_sent >= kResendAfter))
        send_unanswered();
      server_seen_ = true;
      server_dropped_ = false;
    } else if (server_seen_) {
      server_dropped_ = true;
      if (Clock::now() - *down >= kFailoverAfter) fail_over();
    }
    std::lock_guard lock(shared_->mutex);
    shared_->server_down_since = client_->down_since();
    if (!m) continue;
    if (m->kind == "moved" && m->fields.size() == 1) {
      // The job's quorum is elsewhere: a server started again on the quorum's host sends its
      // joiners to the standby that took the job over, and a standby sends a rank that was cut off
      // (not the quorum's server) back to it. The rank joins there as a new one.
      const std::string to = m->fields[0];
      std::cerr << "quorum: the job's quorum is at " << to << " now; joining there" << std::endl;
      auto [host, port] = split_host_port(to);
      client_->discard_unsent();
      client_ = std::make_unique<RoundClient>(host, port, shared_->keys, /*watch=*/true, server_silence());
      server_seen_ = false;
      options_.endpoint = to;
      shared_->unanswered = RoundMessage{"join", join_fields()};
      send_unanswered();
      server_dropped_ = false;
      continue;
    }
    if (m->kind == "standbys" && !m->fields.empty()) {
      if (const auto epoch = parse_int_field(m->fields[0]); epoch && *epoch >= shared_->standbys_epoch) {
        shared_->standbys.assign(m->fields.begin() + 1, m->fields.end());
        shared_->standbys_epoch = *epoch;
      }
      continue;
    }
    if (m->kind == "table") shared_->unanswered.reset();  // an epoch formed with this rank in it
    if (m->kind == "epoch" && m->fields.size() == 3) {
      const auto epoch = parse_int_field(m->fields[0]), r = parse_int_field(m->fields[1]);
      if (epoch && r) shared_->assigned[*epoch] = *r;
    }
    if (m->kind == "lost" && m->fields.size() == 2) {
      const auto epoch = parse_int_field(m->fields[0]), r = parse_int_field(m->fields[1]);
      if (!epoch || !r) continue;
      const std::string why = "quorum: rank " + std::to_string(*r) + " of epoch " + std::to_string(*epoch) +
                              " was lost (its connection to the quorum server closed)";
      if (shared_->current && *epoch == shared_->current_epoch) shared_->current->transport().declare_lost(*r, why);
      if (shared_->ready && *epoch == shared_->ready_epoch) shared_->ready->transport().declare_lost(*r, why);
      if (shared_->building && *epoch == shared_->building_epoch) shared_->building->declare_lost(*r, why);
    } else if (m->kind == "epoch" || m->kind == "table") {
      // A later epoch supersedes the one being connected: its connect gives up now.
      const auto epoch = m->fields.empty() ? std::nullopt : parse_int_field(m->fields[0]);
      if (m->kind == "epoch" && epoch && shared_->building && *epoch > shared_->building_epoch)
        abort_building("quorum: epoch " + std::to_string(*epoch) + " superseded it");
      shared_->forming.push_back(*m);
      shared_->cv.notify_all();
    } else if (m->kind == "end") {
      const int code = m->fields.empty() ? 1 : parse_int_field(m->fields[0]).value_or(1);
      shared_->ended = {code, m->fields.size() > 1 ? m->fields[1] : ""};
      shared_->cv.notify_all();
    }
  }
}

void Quorum::send_unanswered() {
  client_->send(shared_->unanswered->kind, shared_->unanswered->fields);
  shared_->unanswered_sent = Clock::now();
}

// The quorum's server is lost (its connection closed, or silent): to the standby of the lowest
// rank of the last epoch this rank ran in whose standby is not that server, the same choice on
// every survivor. The ranks whose standby was that server went with its host: lost now.
void Quorum::fail_over() {
  std::vector<std::string> standbys;
  int epoch = -1, rank = -1;
  {
    std::lock_guard lock(shared_->mutex);
    standbys = shared_->standbys;
    epoch = shared_->standbys_epoch;
    if (auto it = shared_->assigned.find(epoch); it != shared_->assigned.end()) rank = it->second;
  }
  const std::string lost = options_.endpoint;
  lost_servers_.insert(lost);
  std::string successor;
  int expected = 0;
  for (const std::string& s : standbys)
    if (!lost_servers_.count(s) && s != "-") {
      if (successor.empty()) successor = s;
      ++expected;
    }
  if (epoch < 0 || rank < 0 || successor.empty()) return;  // no standby known: server_timeout applies
  std::cerr << "quorum: the server at " << lost << " is lost; the standby at " << successor << " takes over from epoch "
            << epoch << std::endl;
  auto [host, port] = split_host_port(successor);
  client_->discard_unsent();  // a rejoin queued for the lost server would hold the resume back for a second
  client_ = std::make_unique<RoundClient>(host, port, shared_->keys, /*watch=*/true, server_silence());
  server_seen_ = server_dropped_ = false;  // no second fail-over before this one answered
  RoundMessage resume{"resume", {std::to_string(epoch), std::to_string(rank), std::to_string(expected), options_.name,
                                 standby_.empty() ? "-" : standby_}};
  if (const std::string ranks = launcher_ranks(); !ranks.empty()) resume.fields.push_back(ranks);
  shared_->unanswered = std::move(resume);
  send_unanswered();
  std::lock_guard lock(shared_->mutex);
  options_.endpoint = successor;  // the rank's thread reads it under the lock
  const std::string why = "quorum: its host's quorum server at " + lost + " was lost";
  for (size_t r = 0; r < standbys.size(); ++r) {
    if (!lost_servers_.count(standbys[r]) || static_cast<int>(r) == rank) continue;
    if (shared_->current && shared_->current_epoch == epoch) shared_->current->transport().declare_lost(static_cast<int>(r), why);
    if (shared_->ready && shared_->ready_epoch == epoch) shared_->ready->transport().declare_lost(static_cast<int>(r), why);
  }
}

void Quorum::build() {
  name_this_thread("troupe-quorum-b");
  std::shared_ptr<Transport> transport;
  int epoch = -1;
  while (true) {
    RoundMessage m;
    {
      std::unique_lock lock(shared_->mutex);
      shared_->cv.wait(lock, [&] { return stop_ || !shared_->forming.empty(); });
      if (stop_) break;
      m = std::move(shared_->forming.front());
      shared_->forming.pop_front();
    }
    try {
      if (m.kind == "epoch" && m.fields.size() == 3) {
        const auto e = parse_int_field(m.fields[0]), rank = parse_int_field(m.fields[1]), world = parse_int_field(m.fields[2]);
        if (!e || !rank || !world || *world < 1 || *rank < 0 || *rank >= *world) continue;
        InitOptions init;
        init.rank = *rank;
        init.world_size = *world;
        init.timeout = options_.timeout;
        TransportOptions t = transport_options_from_env(init);
        t.tcp_host = host_;
        add_job_keys_from_env(t, init);
        {
          std::lock_guard lock(shared_->mutex);
          shared_->building.reset();
          if (transport) retire(std::move(transport));
        }
        transport = std::make_shared<Transport>(t);
        epoch = *e;
        {
          std::lock_guard lock(shared_->mutex);
          shared_->building = transport;
          shared_->building_epoch = epoch;
          shared_->building_aborted = false;
        }
        send("address", {m.fields[0], transport->address().serialize()});
        continue;
      }
      if (m.kind != "table" || m.fields.empty() || parse_int_field(m.fields[0]) != epoch || !transport) continue;
      std::vector<PeerAddress> table;
      for (size_t i = 1; i < m.fields.size(); ++i) table.push_back(PeerAddress::parse(m.fields[i]));
      transport->connect(table, deadline_after(std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(10))));
      std::vector<int> ranks(static_cast<size_t>(transport->world_size()));
      std::iota(ranks.begin(), ranks.end(), 0);
      auto group = std::make_shared<ProcessGroup>(transport, 0, std::move(ranks), options_.timeout);
      // One collective among the builders: what a group sets up on its first (shared memory
      // between the ranks of a host: 25-45 ms here) is paid here, not in the ranks' first step.
      Tensor one = Tensor::ones({1}, DType::i32);
      all_reduce(*group, one, ReduceOp::sum);
      if (options_.warm_up) options_.warm_up(*group);
      {
        std::lock_guard lock(shared_->mutex);
        shared_->building.reset();
        if (shared_->ready) retire(std::move(shared_->ready));
        shared_->ready = std::move(group);
        shared_->ready_epoch = epoch;
      }
      shared_->cv.notify_all();
      transport.reset();
    } catch (const Error&) {  // a member lost while it formed (the server forms it again), or superseded
      std::vector<std::string> fields = {std::to_string(epoch)};
      {
        std::lock_guard lock(shared_->mutex);
        if (transport && !shared_->building_aborted) add_lost_ranks(*transport, fields);
        shared_->building_aborted = false;
        shared_->building.reset();
        if (transport) retire(std::move(transport));
      }
      if (fields.size() > 1) send("rejoin", std::move(fields));
    }
  }
  std::lock_guard lock(shared_->mutex);
  shared_->building.reset();
  if (transport) retire(std::move(transport));
}

void Quorum::abort_building(const std::string& why) {
  shared_->building_aborted = true;
  shared_->building->declare_lost((shared_->building->rank() + 1) % shared_->building->world_size(), why);
}

bool Quorum::reform_needed() {
  if (left_) return false;
  if (broken_) return true;
  std::lock_guard lock(shared_->mutex);
  return shared_->ready_epoch > epoch_;
}

void Quorum::lost(const std::exception&) { broken_ = true; }

void Quorum::reform() {
  if (left_) throw CommError("Quorum: reform() after leave()");
  if (group_) {
    // A loss this rank found: the server may not know (a cut link), so it is told.
    std::vector<std::string> fields = {std::to_string(epoch_.load())};
    add_lost_ranks(group_->transport(), fields);
    if (fields.size() > 1) send("rejoin", std::move(fields));
    std::lock_guard lock(shared_->mutex);
    shared_->current.reset();
    shared_->current_epoch = -1;
    retire(std::move(group_));  // its peers see this rank go: they change groups too
  }
  wait_for_next();
}

void Quorum::wait_for_next() {
  const Deadline deadline = deadline_after(options_.timeout);
  std::unique_lock lock(shared_->mutex);
  while (!shared_->cv.wait_for(lock, std::chrono::milliseconds(100),
                               [&] { return shared_->ended || shared_->ready_epoch > epoch_; })) {
    const auto now = Clock::now();
    if (shared_->server_down_since && now - *shared_->server_down_since > options_.server_timeout)
      throw CommError("Quorum: the quorum server at " + options_.endpoint + " has been unreachable for " +
                      std::to_string(options_.server_timeout.count() / 1000) +
                      " s, and no standby of the job's launchers was known (TROUPE_QUORUM_STANDBY): no epoch can "
                      "form; checkpoints, if any, remain");
    if (now >= deadline)
      throw TimeoutError("Quorum: no epoch formed within " + std::to_string(options_.timeout.count()) +
                         " ms (the quorum server at " + options_.endpoint + ")");
  }
  if (shared_->ready_epoch <= epoch_) {  // ended
    left_ = true;
    throw JobEndedError(shared_->ended->first, shared_->ended->second);
  }
  group_ = std::move(shared_->ready);
  epoch_ = shared_->ready_epoch;
  shared_->current = group_;
  shared_->current_epoch = epoch_;
  broken_ = false;
}

void Quorum::leave() {
  if (left_) return;
  left_ = true;
  send("leave", {});
}

void Quorum::retire(std::shared_ptr<void> holder) {  // with shared_->mutex held, or no other thread left
  // A transport says goodbye to its peers at once (the ones still waiting on this rank fail now,
  // and change groups too), then lingers for what it still sends: not on this rank's time.
  retiring_.emplace_back([h = std::move(holder)]() mutable { h.reset(); });
}

}  // namespace troupe::net
