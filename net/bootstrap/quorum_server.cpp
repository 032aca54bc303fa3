#include "net/bootstrap/quorum_server.h"

#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "devices/error.h"
#include "devices/threads.h"
#include "net/bootstrap/rendezvous_rounds.h"
#include "net/work.h"
#include "net/zap_handler.h"

namespace troupe::net {

namespace {

std::optional<int> parse_int_field(const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string seconds_text(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000.0).substr(0, 4); }

// The membership and its phase; the server's thread alone touches it.
class Membership {
 public:
  using Send = std::function<void(const std::string& id, const RoundMessage&)>;
  Membership(QuorumSettings settings, Send send, QuorumServer::Log log)
      : settings_(settings), send_(std::move(send)), log_(std::move(log)), phase_since_(Clock::now()) {}

  std::optional<int> end_code() const { return end_code_; }

  void on_message(const std::string& id, const RoundMessage& m, int fd) {
    clients_.insert(id);
    if (end_code_) {  // the job is over: whoever asks is told so
      send_(id, {"end", {std::to_string(*end_code_), end_why_}});
      return;
    }
    if (m.kind == "join" && m.fields.size() == 1) {
      names_[id] = m.fields[0];
      fds_[id] = fd;
      add_waiting(id);
    } else if (m.kind == "rejoin" && !m.fields.empty()) {
      fds_[id] = fd;
      const auto epoch = parse_int_field(m.fields[0]);
      const bool member = epoch && *epoch == epoch_ && rank_of(id) >= 0 && phase_ != Phase::gathering;
      if (!member) {  // of an older epoch (left out meanwhile): it joins like a new rank
        add_waiting(id);
        return;
      }
      if (phase_ == Phase::assigning) {  // it could not take part in forming this epoch: again
        log_("epoch " + std::to_string(epoch_) + ": " + name(id) + " failed while it formed; forming again");
        assign(members_and_waiting(assigned_));
        return;
      }
      start_reform(name(id) + " asked to re-form");
      rejoined_.insert(id);
      for (size_t i = 1; i < m.fields.size(); ++i)
        if (auto r = parse_int_field(m.fields[i]); r && *r >= 0 && *r < static_cast<int>(members_.size()))
          reported_lost_.insert(members_[static_cast<size_t>(*r)]);
    } else if (m.kind == "address" && m.fields.size() == 2 && phase_ == Phase::assigning) {
      const int r = index_of(assigned_, id);
      if (parse_int_field(m.fields[0]) == epoch_ && r >= 0) addresses_[static_cast<size_t>(r)] = m.fields[1];
    } else if (m.kind == "leave" && m.fields.empty()) {
      left_.insert(id);
      std::erase(waiting_, id);
      log_(name(id) + " left");
    }
  }

  // A client's connection closed: a member that did not leave is lost.
  void on_closed(int fd) {
    std::vector<std::string> closed;
    for (const auto& [id, known] : fds_)
      if (known == fd) closed.push_back(id);
    for (const auto& id : closed) {
      fds_.erase(id);  // the descriptor's number goes to the next connection
      if (left_.count(id)) continue;
      std::erase(waiting_, id);
      if (phase_ == Phase::assigning && index_of(assigned_, id) >= 0) {
        std::vector<std::string> others = assigned_;
        std::erase(others, id);
        log_("epoch " + std::to_string(epoch_) + ": " + name(id) + " lost while it formed; forming again");
        assign(members_and_waiting(others));
        continue;
      }
      const int r = rank_of(id);
      if (r < 0 || (phase_ != Phase::running && phase_ != Phase::reforming)) continue;
      if (!reported_lost_.insert(id).second) continue;
      for (const auto& other : members_)
        if (other != id) send_(other, {"lost", {std::to_string(epoch_), std::to_string(r)}});
      start_reform(name(id) + " lost: its connection closed");
    }
  }

  void tick(Clock::time_point now) {
    if (end_code_) return;
    switch (phase_) {
      case Phase::gathering: {
        const int n = static_cast<int>(waiting_.size());
        if (n >= settings_.min_ranks && (n >= settings_.max_ranks || now - last_join_ >= settings_.settle ||
                                         epoch_ >= 0))
          assign(members_and_waiting({}));
        else if (n < settings_.min_ranks && now - phase_since_ >= settings_.join_timeout)
          end(1, "only " + std::to_string(n) + " rank(s) of at least " + std::to_string(settings_.min_ranks) +
                     " within " + seconds_text(settings_.join_timeout) + " s");
        break;
      }
      case Phase::running:
        if (!members_.empty() && std::all_of(members_.begin(), members_.end(), [&](auto& id) { return left_.count(id); }))
          end(0, "");
        break;
      case Phase::reforming: {
        const bool all_in = std::all_of(members_.begin(), members_.end(), [&](const std::string& id) {
          return rejoined_.count(id) || reported_lost_.count(id) || left_.count(id);
        });
        if (all_in || now - phase_since_ >= settings_.reform_timeout) {
          std::vector<std::string> survivors;
          for (const auto& id : members_)
            if (rejoined_.count(id)) survivors.push_back(id);
          assign(members_and_waiting(survivors));
        }
        break;
      }
      case Phase::assigning: {
        if (std::none_of(addresses_.begin(), addresses_.end(), [](const std::string& a) { return a.empty(); })) {
          RoundMessage table{"table", {std::to_string(epoch_)}};
          table.fields.insert(table.fields.end(), addresses_.begin(), addresses_.end());
          for (const auto& id : assigned_) send_(id, table);
          members_ = assigned_;
          phase_ = Phase::running;
          phase_since_ = now;
          rejoined_.clear();
          reported_lost_.clear();
          reform_sent_ = false;
          std::string names;
          for (const auto& id : members_) names += (names.empty() ? "" : ", ") + name(id);
          log_("epoch " + std::to_string(epoch_) + ": world " + std::to_string(members_.size()) + " (" + names + ")");
          if (!waiting_.empty()) ask_reform();
        } else if (now - phase_since_ >= settings_.reform_timeout) {
          std::vector<std::string> answered;
          for (size_t r = 0; r < assigned_.size(); ++r)
            if (!addresses_[r].empty()) answered.push_back(assigned_[r]);
          log_("epoch " + std::to_string(epoch_) + ": " + std::to_string(assigned_.size() - answered.size()) +
               " rank(s) sent no address within " + seconds_text(settings_.reform_timeout) + " s; forming again");
          assign(members_and_waiting(answered));
        }
        break;
      }
    }
  }

 private:
  enum class Phase { gathering, running, reforming, assigning };

  std::string name(const std::string& id) const {
    auto it = names_.find(id);
    return it == names_.end() ? "?" : it->second;
  }
  static int index_of(const std::vector<std::string>& ids, const std::string& id) {
    auto it = std::find(ids.begin(), ids.end(), id);
    return it == ids.end() ? -1 : static_cast<int>(it - ids.begin());
  }
  int rank_of(const std::string& id) const { return index_of(members_, id); }

  void add_waiting(const std::string& id) {
    left_.erase(id);
    if (std::find(waiting_.begin(), waiting_.end(), id) != waiting_.end()) return;
    waiting_.push_back(id);
    last_join_ = Clock::now();
    log_(name(id) + " waits to join");
    if (phase_ == Phase::running) ask_reform();
  }

  // The members of the running epoch leave its group at their next step boundary and rejoin.
  void ask_reform() {
    if (reform_sent_) return;
    reform_sent_ = true;
    for (const auto& id : members_) send_(id, {"reform", {std::to_string(epoch_)}});
  }

  void start_reform(const std::string& why) {
    if (phase_ != Phase::running) return;
    log_("epoch " + std::to_string(epoch_) + " re-forms: " + why);
    phase_ = Phase::reforming;
    phase_since_ = Clock::now();
    ask_reform();
  }

  // `first` (in order), then the waiting ranks not among them, up to max_ranks.
  std::vector<std::string> members_and_waiting(std::vector<std::string> first) {
    std::erase_if(first, [&](const std::string& id) { return left_.count(id) > 0; });
    for (const auto& id : waiting_)
      if (std::find(first.begin(), first.end(), id) == first.end()) first.push_back(id);
    if (first.size() > static_cast<size_t>(settings_.max_ranks)) first.resize(static_cast<size_t>(settings_.max_ranks));
    return first;
  }

  void assign(std::vector<std::string> ranks) {
    const auto now = Clock::now();
    for (const auto& id : ranks) std::erase(waiting_, id);
    if (static_cast<int>(ranks.size()) < settings_.min_ranks) {  // wait for joiners
      for (const auto& id : ranks) waiting_.push_back(id);
      members_.clear();
      phase_ = Phase::gathering;
      phase_since_ = now;
      log_("fewer than " + std::to_string(settings_.min_ranks) + " rank(s): waiting for more");
      return;
    }
    ++epoch_;
    assigned_ = std::move(ranks);
    addresses_.assign(assigned_.size(), "");
    const std::string world = std::to_string(assigned_.size());
    for (size_t r = 0; r < assigned_.size(); ++r)
      send_(assigned_[r], {"epoch", {std::to_string(epoch_), std::to_string(r), world}});
    phase_ = Phase::assigning;
    phase_since_ = now;
  }

  void end(int code, const std::string& why) {
    end_code_ = code;
    end_why_ = why;
    for (const auto& id : clients_) send_(id, {"end", {std::to_string(code), why}});
    log_(code == 0 ? "the job is over: every rank left" : "the job failed: " + why);
  }

  const QuorumSettings settings_;
  const Send send_;
  const QuorumServer::Log log_;
  Phase phase_ = Phase::gathering;
  Clock::time_point phase_since_, last_join_;
  int epoch_ = -1;
  std::set<std::string> clients_;             // every routing id heard from
  std::map<std::string, std::string> names_;  // by routing id
  std::map<std::string, int> fds_;            // each client's connection, as last seen
  std::vector<std::string> members_;          // of the running (or re-forming) epoch, by rank
  std::vector<std::string> waiting_;          // joiners, in order
  std::set<std::string> rejoined_, reported_lost_, left_;
  bool reform_sent_ = false;
  std::vector<std::string> assigned_, addresses_;  // the epoch being formed
  std::optional<int> end_code_;
  std::string end_why_;
};

}  // namespace

std::unique_ptr<QuorumServer> QuorumServer::try_serve(const std::string& numeric_host, int port,
                                                      const std::optional<CurveKeys>& keys, QuorumSettings settings,
                                                      Log log) {
  void* context = zmq_ctx_new();
  void* zap = keys ? bind_zap_handler(context) : nullptr;  // before the CURVE server binds
  void* socket = nullptr;
  try {
    socket = bind_server_router(context, numeric_host, port, keys, "the quorum");
  } catch (...) {
    if (zap) zmq_close(zap);
    zmq_ctx_term(context);
    throw;
  }
  if (!socket) {
    if (zap) zmq_close(zap);
    zmq_ctx_term(context);
    return nullptr;
  }
  return std::unique_ptr<QuorumServer>(new QuorumServer(context, socket, zap, keys, settings, std::move(log)));
}

QuorumServer::QuorumServer(void* context, void* socket, void* zap, std::optional<CurveKeys> keys,
                           QuorumSettings settings, Log log)
    : context_(context), socket_(socket), zap_(zap), keys_(std::move(keys)), settings_(settings), log_(std::move(log)) {
  thread_ = std::thread([this] { serve(); });
}

QuorumServer::~QuorumServer() {
  stop_ = true;
  thread_.join();
  zmq_close(socket_);
  if (zap_) zmq_close(zap_);
  zmq_ctx_term(context_);
}

std::optional<int> QuorumServer::wait_finished(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  finished_cv_.wait_for(lock, wait, [&] { return end_code_.has_value(); });
  return end_code_;
}

void QuorumServer::finish(int code) {
  {
    std::lock_guard lock(mutex_);
    if (end_code_) return;
    end_code_ = code;
  }
  finished_cv_.notify_all();
}

void QuorumServer::serve() {
  name_this_thread("troupe-quorum");
  Membership membership(
      settings_,
      [&](const std::string& id, const RoundMessage& m) {
        const std::string body = format_round_message(m);
        zmq_send(socket_, id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(socket_, body.data(), body.size(), ZMQ_DONTWAIT);
      },
      log_);
  // A rank whose connection closes (its process killed, its host's kernel closing it) is lost at
  // once, before any peer's heartbeat could tell; one whose link is cut is found by its peers.
  void* monitor = zmq_socket(context_, ZMQ_PAIR);
  const std::string monitor_endpoint = "inproc://troupe-quorum-monitor";
  zmq_socket_monitor(socket_, monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED);
  zmq_connect(monitor, monitor_endpoint.c_str());
  std::vector<std::string> parts;
  while (!stop_) {
    zmq_pollitem_t items[] = {{socket_, 0, ZMQ_POLLIN, 0}, {monitor, 0, ZMQ_POLLIN, 0}, {zap_, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, zap_ ? 3 : 2, 10);
    if (zap_) answer_zap_requests(zap_, *keys_);
    for (int fd = -1; receive_parts(socket_, parts, &fd); fd = -1) {
      if (parts.size() != 2) continue;
      try {
        membership.on_message(parts[0], parse_round_message(parts[1]), fd);
      } catch (const CommError& e) {
        log_("refused a message: " + std::string(e.what()));
      }
    }
    while (receive_parts(monitor, parts)) {
      if (parts.empty() || parts[0].size() < 6) continue;
      int32_t fd = 0;  // the event: 16 bits of kind, 32 of value (here the closed connection's fd)
      std::memcpy(&fd, parts[0].data() + 2, sizeof fd);
      membership.on_closed(fd);
    }
    membership.tick(Clock::now());
    if (auto code = membership.end_code()) finish(*code);
  }
  zmq_socket_monitor(socket_, nullptr, 0);
  zmq_close(monitor);
}

}  // namespace troupe::net
