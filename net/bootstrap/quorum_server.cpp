#include "net/bootstrap/quorum_server.h"

#include <zmq.h>

#include <algorithm>
#include <cstdint>
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

std::string seconds_text(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000.0).substr(0, 4); }

// The membership: the running epoch (the last whose table went out), the one forming, the ranks
// waiting to join. The server's thread alone touches it.
class Membership {
 public:
  using Send = std::function<void(const std::string& id, const RoundMessage&)>;
  // primary_up: a standby's view of the quorum's server (it answers here); the quorum's own: never.
  Membership(QuorumSettings settings, Send send, QuorumServer::Log log, std::function<bool()> primary_up)
      : settings_(settings),
        send_(std::move(send)),
        log_(std::move(log)),
        primary_up_(std::move(primary_up)),
        waiting_since_(Clock::now()) {}

  std::optional<int> end_code() const { return end_code_; }
  bool serves_the_job() const { return published_ && moved_to_.empty(); }
  // A standby's: the newest epoch the quorum's server says it runs.
  void primary_runs(int epoch) { primary_epoch_ = std::max(primary_epoch_, epoch); }
  bool took_over() const { return resumed_from_ >= 0; }

  void on_message(const std::string& id, const RoundMessage& m, int fd) {
    if (m.kind == "watch" && m.fields.empty()) {  // a standby's question, not a client's: which epoch runs here
      send_(id, {"running", {std::to_string(running_epoch_)}});
      return;
    }
    clients_.insert(id);
    if (end_code_) {  // the job is over: whoever asks is told so
      send_(id, {"end", {std::to_string(*end_code_), end_why_}});
      return;
    }
    if (m.kind == "moved" && m.fields.size() == 1) {
      // A standby holds the job now: a server that formed no epoch of its own (started again on
      // the quorum's host) sends its joiners there.
      if (!running_.empty() || forming_epoch_ >= 0) return;  // it runs a job of its own: the other side of a cut
      if (moved_to_.empty()) log_("the job's quorum is at " + m.fields[0] + " (a standby took it over): joiners go there");
      moved_to_ = m.fields[0];
      for (const auto& waiting : waiting_) send_(waiting, {"moved", {moved_to_}});
      waiting_.clear();
      return;
    }
    if (m.kind == "join" && m.fields.size() >= 1 && m.fields.size() <= 3) {
      names_[id] = m.fields[0];
      if (m.fields.size() >= 2) standbys_[id] = m.fields[1];
      if (m.fields.size() == 3) note_launcher(id, m.fields[1], m.fields[2]);
      fds_[id] = fd;
      if (!moved_to_.empty()) {
        send_(id, {"moved", {moved_to_}});
        return;
      }
      if (!holds(id)) add_waiting(id);  // a join sent again (its answer was on the way): nothing
    } else if (m.kind == "resume" && (m.fields.size() == 5 || m.fields.size() == 6)) {
      // A survivor of the epoch whose server was lost: this standby takes the quorum over (resume()).
      // One that comes after that epoch formed joins as a new rank does. While the quorum's server
      // still answers here, the sender is the one cut off: held for a silence's length, then sent
      // back to it.
      names_[id] = m.fields[3];
      standbys_[id] = m.fields[4];
      if (m.fields.size() == 6) note_launcher(id, m.fields[4], m.fields[5]);
      fds_[id] = fd;
      if (!running_.empty() || forming_epoch_ >= 0) {
        if (!holds(id)) add_waiting(id);
        return;
      }
      if (resumed_from_ < 0 && primary_up_()) {
        held_.emplace(id, std::make_pair(m, Clock::now()));
        return;
      }
      resume(id, m);
    } else if (m.kind == "rejoin" && !m.fields.empty()) {
      fds_[id] = fd;
      const auto epoch = parse_int_field(m.fields[0]);
      const bool member = epoch && *epoch == running_epoch_ && index_of(running_, id) >= 0;
      const bool forming = epoch && forming_epoch_ >= 0 && *epoch == forming_epoch_ && index_of(assigned_, id) >= 0;
      if (!member && !forming) {  // of an older epoch (left out meanwhile): it joins like a new rank
        if (!holds(id)) add_waiting(id);
        return;
      }
      const std::vector<std::string>& numbering = member ? running_ : assigned_;
      std::vector<std::string> lost;
      for (size_t i = 1; i < m.fields.size(); ++i)
        if (auto r = parse_int_field(m.fields[i]); r && *r >= 0 && *r < static_cast<int>(numbering.size()))
          lost.push_back(numbering[static_cast<size_t>(*r)]);
      for (const auto& gone : lost) lose(gone, name(id) + " found " + name(gone) + " lost");
    } else if (m.kind == "address" && m.fields.size() == 2 && forming_epoch_ >= 0) {
      const int r = index_of(assigned_, id);
      if (parse_int_field(m.fields[0]) == forming_epoch_ && r >= 0) addresses_[static_cast<size_t>(r)] = m.fields[1];
    } else if (m.kind == "leave" && m.fields.empty()) {
      left_.insert(id);
      std::erase(waiting_, id);
      log_(name(id) + " left");
    }
  }

  // Takes the quorum over for a survivor of a lost server: the survivors keep their order, and the
  // epoch forms once the expected ones are here, numbered on from theirs.
  void resume(const std::string& id, const RoundMessage& m) {
    const auto epoch = parse_int_field(m.fields[0]), rank = parse_int_field(m.fields[1]),
               expected = parse_int_field(m.fields[2]);
    if (!epoch || !rank || !expected) return;
    if (resumed_from_ < 0) log_("taking the quorum over from epoch " + m.fields[0] + ", whose server was lost");
    resumed_from_ = std::max(resumed_from_, *epoch);
    last_epoch_ = std::max(last_epoch_, *epoch);
    expected_resumers_ = std::max(expected_resumers_, *expected);
    old_ranks_[id] = *rank;
    add_waiting(id);
    std::stable_sort(waiting_.begin(), waiting_.end(), [&](const std::string& a, const std::string& b) {
      auto ra = old_ranks_.find(a), rb = old_ranks_.find(b);
      return (ra == old_ranks_.end() ? INT32_MAX : ra->second) < (rb == old_ranks_.end() ? INT32_MAX : rb->second);
    });
  }

  // A client's connection closed: a member that did not leave is lost, and told so to the others.
  void on_closed(int fd) {
    std::vector<std::string> closed;
    for (const auto& [id, known] : fds_)
      if (known == fd) closed.push_back(id);
    for (const auto& id : closed) {
      fds_.erase(id);  // the descriptor's number goes to the next connection
      if (left_.count(id)) continue;
      std::erase(waiting_, id);
      if (const int r = index_of(running_, id); r >= 0)
        for (const auto& other : running_)
          if (other != id) send_(other, {"lost", {std::to_string(running_epoch_), std::to_string(r)}});
      lose(id, name(id) + " lost: its connection closed");
    }
  }

  void tick(Clock::time_point now) {
    if (end_code_ || !moved_to_.empty()) return;
    // Held survivors: the quorum's server lost after all, or enough of them to run the job without
    // it (every survivor they expect, and min_ranks: the side of a cut that holds a quorum) take
    // over; still answering after a silence's length, they were the ones cut off: back to it.
    int expected = 0;
    for (const auto& [id, held] : held_)
      expected = std::max(expected, parse_int_field(held.first.fields[2]).value_or(INT32_MAX));
    const bool quorate = !held_.empty() && static_cast<int>(held_.size()) >= std::max(expected, settings_.min_ranks);
    for (auto it = held_.begin(); it != held_.end();) {
      const int epoch = parse_int_field(it->second.first.fields[0]).value_or(INT32_MAX);
      if (!primary_up_() || resumed_from_ >= 0 || quorate) {
        resume(it->first, it->second.first);
      } else if (primary_epoch_ > epoch) {
        log_(name(it->first) + " lost the quorum's server, which runs epoch " + std::to_string(primary_epoch_) +
             " without it: sent back to it");
        send_(it->first, {"moved", {settings_.quorum_endpoint}});
      } else if (now - it->second.second >= settings_.hold) {
        log_(name(it->first) + " lost the quorum's server, which answers here: sent back to it");
        send_(it->first, {"moved", {settings_.quorum_endpoint}});
      } else {
        ++it;
        continue;
      }
      it = held_.erase(it);
    }
    // Took over but formed nothing (too few came: this host was the one cut off), and the quorum's
    // server answers again: its ranks go back to it, and this standby stands by again.
    if (resumed_from_ >= 0 && running_.empty() && forming_epoch_ < 0 && primary_up_()) {
      log_("the quorum's server answers again and no epoch formed here: its ranks go back to it");
      for (const auto& id : waiting_) send_(id, {"moved", {settings_.quorum_endpoint}});
      waiting_.clear();
      resumed_from_ = -1;
      expected_resumers_ = 0;
      return;
    }
    if (forming_epoch_ >= 0) {
      if (std::none_of(addresses_.begin(), addresses_.end(), [](const std::string& a) { return a.empty(); })) {
        publish();
      } else if (now - forming_since_ >= settings_.reform_timeout) {
        std::vector<std::string> answered;
        for (size_t r = 0; r < assigned_.size(); ++r)
          if (!addresses_[r].empty()) answered.push_back(assigned_[r]);
        log_("epoch " + std::to_string(forming_epoch_) + ": " + std::to_string(assigned_.size() - answered.size()) +
             " rank(s) sent no address within " + seconds_text(settings_.reform_timeout) + " s; forming again");
        form(answered);
      }
      return;
    }
    // Every member that held the job's state left (done): the job is over, also for a member that
    // joined the last epoch as they finished (nobody is left to give it the state).
    const auto left = [&](const std::string& id) { return left_.count(id) > 0; };
    if (std::any_of(running_.begin(), running_.end(), left) &&
        std::all_of(running_.begin(), running_.end(), [&](auto& id) { return left(id) || fresh_.count(id) > 0; })) {
      end(0, "");
      return;
    }
    const int n = static_cast<int>(waiting_.size());
    if (running_.empty()) {  // the first epoch, or too few ranks left
      const bool resumed = resumed_from_ >= 0 && n >= expected_resumers_;  // every survivor is back
      if (n >= settings_.min_ranks &&
          (n >= settings_.max_ranks || now - last_join_ >= settings_.settle || running_epoch_ >= 0 || resumed))
        form({});
      else if (n < settings_.min_ranks && !clients_.empty() && now - waiting_since_ >= settings_.join_timeout)
        end(1, "only " + std::to_string(n) + " rank(s) of at least " + std::to_string(settings_.min_ranks) +
                   " within " + seconds_text(settings_.join_timeout) + " s");
    } else if (n > 0 && live_running() < settings_.max_ranks && !std::any_of(running_.begin(), running_.end(), left) &&
               launchers_gathered(now)) {
      form(running_);  // joiners: the next epoch forms while the members train on (not while they finish)
    }
  }

 private:
  std::string name(const std::string& id) const {
    auto it = names_.find(id);
    return it == names_.end() ? "?" : it->second;
  }
  // A member of the running epoch or of the one forming: a request of its to join waits for neither.
  // (One lost stays held until the next epoch forms; it asks again, quorum.h, and joins then.)
  bool holds(const std::string& id) const { return index_of(running_, id) >= 0 || index_of(assigned_, id) >= 0; }
  static int index_of(const std::vector<std::string>& ids, const std::string& id) {
    auto it = std::find(ids.begin(), ids.end(), id);
    return it == ids.end() ? -1 : static_cast<int>(it - ids.begin());
  }
  // Whether the joiners' launchers have all their ranks here (waiting or running), so that a host
  // started again joins in one epoch, not one per rank as each finishes loading. A launcher still
  // short of ranks is waited for up to host_wait from its first joiner; a full world, for nobody.
  bool launchers_gathered(Clock::time_point now) {
    if (live_running() + static_cast<int>(waiting_.size()) >= settings_.max_ranks) return true;
    const auto launcher_of = [&](const std::string& id) {
      auto it = launchers_.find(id);
      return it == launchers_.end() ? std::string() : it->second.endpoint;
    };
    std::set<std::string> launchers;
    for (const auto& id : waiting_)
      if (!launcher_of(id).empty()) launchers.insert(launcher_of(id));
    for (const auto& at : launchers) {
      int here = 0, expected = 0;
      Clock::time_point first = now;
      for (const auto& id : waiting_)
        if (launcher_of(id) == at) {
          ++here;
          expected = std::max(expected, launchers_.at(id).ranks);
          first = std::min(first, joined_at_.at(id));
        }
      for (const auto& id : running_)
        if (launcher_of(id) == at && !lost_.count(id) && !left_.count(id)) ++here;
      if (here >= expected) continue;
      if (now - first < settings_.host_wait) return false;
      if (waited_out_.insert(at).second)
        log_("the launcher at " + at + ": " + std::to_string(here) + " of its " + std::to_string(expected) +
             " rank(s) here after " + seconds_text(settings_.host_wait) + " s; the epoch forms without the rest");
    }
    return true;
  }
  // A rank's launcher (its standby endpoint) and how many ranks it runs, as its join or resume said.
  void note_launcher(const std::string& id, const std::string& endpoint, const std::string& ranks) {
    if (auto n = parse_int_field(ranks); n && *n > 0 && endpoint != "-") launchers_[id] = {endpoint, *n};
  }
  int live_running() const {
    return static_cast<int>(std::count_if(running_.begin(), running_.end(), [&](auto& id) { return !left_.count(id); }));
  }

  void add_waiting(const std::string& id) {
    left_.erase(id);
    lost_.erase(id);  // back (a cut link restored): a new rank
    if (std::find(waiting_.begin(), waiting_.end(), id) != waiting_.end()) return;
    if (waiting_.empty()) waiting_since_ = Clock::now();
    waiting_.push_back(id);
    last_join_ = joined_at_[id] = Clock::now();
    log_(name(id) + " waits to join");
  }

  // `id` is lost: out of the running epoch's next one, and out of the one forming (formed again now).
  void lose(const std::string& id, const std::string& why) {
    const bool in_running = index_of(running_, id) >= 0 && !lost_.count(id);
    const bool in_forming = forming_epoch_ >= 0 && index_of(assigned_, id) >= 0;
    if (!in_running && !in_forming) return;
    lost_.insert(id);
    log_("epoch " + std::to_string(running_epoch_) + ": " + why);
    if (in_forming) {
      std::vector<std::string> others = assigned_;
      std::erase(others, id);
      form(others);
    } else if (forming_epoch_ < 0) {
      form(running_);
    }
  }

  // The next epoch: `first` (in order) but the lost and the left, then the waiting ranks, up to
  // max_ranks. Each is told its rank; the members of the running epoch build it while they train.
  void form(std::vector<std::string> first) {
    const auto now = Clock::now();
    std::erase_if(first, [&](const std::string& id) { return left_.count(id) > 0 || lost_.count(id) > 0; });
    for (const auto& id : waiting_)
      if (std::find(first.begin(), first.end(), id) == first.end()) first.push_back(id);
    if (first.size() > static_cast<size_t>(settings_.max_ranks)) first.resize(static_cast<size_t>(settings_.max_ranks));
    if (static_cast<int>(first.size()) < settings_.min_ranks) {  // wait for joiners
      for (const auto& id : first) add_waiting(id);
      running_.clear();
      assigned_.clear();
      forming_epoch_ = -1;
      waiting_since_ = now;
      log_("fewer than " + std::to_string(settings_.min_ranks) + " rank(s): waiting for more");
      return;
    }
    for (const auto& id : first) std::erase(waiting_, id);
    waited_out_.clear();
    forming_epoch_ = ++last_epoch_;
    assigned_ = std::move(first);
    addresses_.assign(assigned_.size(), "");
    const std::string world = std::to_string(assigned_.size());
    for (size_t r = 0; r < assigned_.size(); ++r)
      send_(assigned_[r], {"epoch", {std::to_string(forming_epoch_), std::to_string(r), world}});
    forming_since_ = now;
  }

  void publish() {
    // Each rank's launcher's quorum endpoint (its standby), by rank: where the survivors go when
    // this server is lost (quorum.h). Before the table, so a member has both once it runs.
    RoundMessage standbys{"standbys", {std::to_string(forming_epoch_)}};
    for (const auto& id : assigned_) {
      auto it = standbys_.find(id);
      standbys.fields.push_back(it == standbys_.end() ? "-" : it->second);
    }
    RoundMessage table{"table", {std::to_string(forming_epoch_)}};
    table.fields.insert(table.fields.end(), addresses_.begin(), addresses_.end());
    for (const auto& id : assigned_) {
      send_(id, standbys);
      send_(id, table);
    }
    fresh_.clear();  // joiners of a running job, not survivors carrying its state
    for (const auto& id : assigned_)
      if (running_epoch_ >= 0 && index_of(running_, id) < 0 && !old_ranks_.count(id)) fresh_.insert(id);
    running_ = std::move(assigned_);
    assigned_.clear();
    running_epoch_ = forming_epoch_;
    forming_epoch_ = -1;
    published_ = true;
    lost_.clear();
    std::string names;
    for (const auto& id : running_) names += (names.empty() ? "" : ", ") + name(id);
    log_("epoch " + std::to_string(running_epoch_) + ": world " + std::to_string(running_.size()) + " (" + names + ")");
  }

  void end(int code, const std::string& why) {
    end_code_ = code;
    end_why_ = why;
    for (const auto& id : clients_) send_(id, {"end", {std::to_string(code), why}});
    log_(code == 0 ? "the job is over: every rank that held its state left" : "the job failed: " + why);
  }

  const QuorumSettings settings_;
  const Send send_;
  const QuorumServer::Log log_;
  const std::function<bool()> primary_up_;
  std::map<std::string, std::pair<RoundMessage, Clock::time_point>> held_;  // resumes while the quorum answers
  Clock::time_point waiting_since_, last_join_, forming_since_;
  int last_epoch_ = -1;
  std::set<std::string> clients_;             // every routing id heard from
  std::map<std::string, std::string> names_;  // by routing id
  std::map<std::string, int> fds_;            // each client's connection, as last seen
  std::map<std::string, std::string> standbys_;  // each rank's launcher's quorum endpoint
  struct Launcher {
    std::string endpoint;  // its standby's: one per launcher
    int ranks;             // how many ranks it runs
  };
  std::map<std::string, Launcher> launchers_;  // each rank's, where its join or resume said
  std::map<std::string, Clock::time_point> joined_at_;  // each joiner's last request to join
  std::set<std::string> waited_out_;  // launchers the forming epoch no longer waits for (logged once)
  std::map<std::string, int> old_ranks_;      // a resuming survivor's rank in the lost server's epoch
  int resumed_from_ = -1, expected_resumers_ = 0;  // a standby that took over: that epoch, its survivors
  int primary_epoch_ = -1;                    // a standby's: the quorum's running epoch, as it last said
  std::string moved_to_;                      // a standby's endpoint, once one told this server it took over
  bool published_ = false;                    // an epoch ran here: this server serves the job to its end
  std::vector<std::string> running_;          // the running epoch's ranks, in order
  int running_epoch_ = -1;
  std::vector<std::string> assigned_, addresses_;  // the epoch forming, when forming_epoch_ >= 0
  int forming_epoch_ = -1;
  std::vector<std::string> waiting_;          // joiners, in order
  std::set<std::string> lost_, left_;
  std::set<std::string> fresh_;               // members of the running epoch that joined it with no state
  std::optional<int> end_code_;
  std::string end_why_;
};

}  // namespace

std::unique_ptr<QuorumServer> QuorumServer::try_serve(const std::string& numeric_host, int port,
                                                      const std::optional<CurveKeys>& keys, QuorumSettings settings,
                                                      Log log) {
  auto sockets = open_server_sockets(numeric_host, port, keys, "the quorum");
  if (!sockets) return nullptr;
  return std::unique_ptr<QuorumServer>(
      new QuorumServer(sockets->context, sockets->router, sockets->zap, keys, settings, std::move(log)));
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
  // A standby watches the quorum's server: survivors that lost it while it answers here were cut off.
  std::unique_ptr<RoundClient> primary_watch;
  if (!settings_.quorum_endpoint.empty()) {
    auto [host, port] = split_host_port(settings_.quorum_endpoint);
    primary_watch = std::make_unique<RoundClient>(host, port, keys_, /*watch=*/true, settings_.hold);
  }
  Membership membership(
      settings_,
      [&](const std::string& id, const RoundMessage& m) {
        const std::string body = format_round_message(m);
        zmq_send(socket_, id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(socket_, body.data(), body.size(), ZMQ_DONTWAIT);
      },
      log_, [&] { return primary_watch && !primary_watch->down_since(); });
  // A rank whose connection closes (its process killed, its host's kernel closing it) is lost at
  // once, before any peer's heartbeat could tell; one whose link is cut is found by its peers.
  void* monitor = zmq_socket(context_, ZMQ_PAIR);
  const std::string monitor_endpoint = "inproc://troupe-quorum-monitor";
  zmq_socket_monitor(socket_, monitor_endpoint.c_str(), ZMQ_EVENT_DISCONNECTED);
  zmq_connect(monitor, monitor_endpoint.c_str());
  std::vector<std::string> parts;
  std::unique_ptr<RoundClient> announce;  // to the quorum's endpoint, once this standby took over
  Clock::time_point announced{}, asked{};
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
    // A standby asks the quorum's server which epoch it runs, five times a second while it answers:
    // a survivor of an older epoch was cut off, and goes back at once.
    if (primary_watch && !primary_watch->down_since()) {
      if (Clock::now() - asked >= std::chrono::milliseconds(200)) {
        asked = Clock::now();
        primary_watch->send("watch", {});
      }
      while (auto m = primary_watch->receive(std::chrono::milliseconds(0)))
        if (m->kind == "running" && m->fields.size() == 1)
          if (auto epoch = parse_int_field(m->fields[0])) membership.primary_runs(*epoch);
    }
    membership.tick(Clock::now());
    serves_ = membership.serves_the_job();
    // A standby that took over tells the quorum's endpoint so, every 250 ms: a server started
    // again there sends its joiners here.
    if (membership.took_over() && !settings_.quorum_endpoint.empty() &&
        Clock::now() - announced >= std::chrono::milliseconds(250)) {
      announced = Clock::now();
      if (!announce) {
        auto [host, port] = split_host_port(settings_.quorum_endpoint);
        announce = std::make_unique<RoundClient>(host, port, keys_);
      }
      announce->send("moved", {settings_.self_endpoint});
    }
    if (auto code = membership.end_code()) finish(*code);
  }
  zmq_socket_monitor(socket_, nullptr, 0);
  zmq_close(monitor);
}

}  // namespace troupe::net
