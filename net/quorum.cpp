#include "net/quorum.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdlib>
#include <numeric>

#include "devices/error.h"
#include "devices/threads.h"
#include "net/bootstrap/rendezvous.h"
#include "net/bootstrap/rendezvous_rounds.h"
#include "net/bootstrap/resolve.h"
#include "net/job_secret.h"
#include "net/transport.h"
#include "net/transport_env.h"

namespace troupe::net {

// What the listener hands the rank's thread: the server's "epoch", "table" and "end", in order.
struct Quorum::Inbox {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<RoundMessage> messages;
  std::deque<RoundMessage> outgoing;  // to the server, sent by the listener
};

namespace {

std::string quorum_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::optional<int> parse_int_field(const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

bool Quorum::configured() { return !quorum_env("TROUPE_QUORUM").empty(); }

Quorum::Quorum(QuorumOptions options) : options_(std::move(options)), inbox_(std::make_unique<Inbox>()) {
  if (options_.endpoint.empty()) options_.endpoint = quorum_env("TROUPE_QUORUM");
  if (options_.endpoint.empty())
    throw ValueError("Quorum: no server: pass QuorumOptions::endpoint or set TROUPE_QUORUM (troupe launch --in-place sets it)");
  auto [host, port] = split_host_port(options_.endpoint);
  const Deadline deadline = deadline_after(options_.timeout);
  const std::string numeric = detail::resolve_host(host, "TROUPE_QUORUM", detail::resolve_patience(), deadline);
  host_ = !quorum_env("TROUPE_HOST").empty() ? quorum_env("TROUPE_HOST")
                                              : detail::local_address_towards(numeric, port, "TROUPE_QUORUM=" + options_.endpoint);
  if (options_.name.empty()) options_.name = host_ + "/" + std::to_string(::getpid());
  std::optional<CurveKeys> keys;
  if (const std::string secret = quorum_env("TROUPE_JOB_SECRET_FILE"); !secret.empty())
    keys = derive_job_keys(load_job_secret_file(secret)).curve;
  client_ = std::make_unique<RoundClient>(numeric, port, keys);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw CommError("Quorum: pipe failed");
  listener_ = std::thread([this] { listen(); });
  send("join", {options_.name});
  try {
    form();
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
  stop_ = true;
  const char byte = 0;
  if (::write(wake_[1], &byte, 1) < 0) {
  }
  listener_.join();
  {
    std::lock_guard lock(group_mutex_);
    if (group_) retire(std::move(group_));
    forming_.reset();
  }
  for (auto& t : retiring_) t.join();
  client_.reset();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void Quorum::send(const std::string& kind, std::vector<std::string> fields) {
  {
    std::lock_guard lock(inbox_->mutex);
    inbox_->outgoing.push_back({kind, std::move(fields)});
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
      std::lock_guard lock(inbox_->mutex);
      outgoing.swap(inbox_->outgoing);
    }
    for (const auto& m : outgoing) client_->send(m.kind, m.fields);
    if (stopping) break;
    pollfd wake{wake_[0], POLLIN, 0};
    if (::poll(&wake, 1, 0) > 0) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
      continue;
    }
    // The server's messages, or a wake-up from the rank's thread, whichever comes first.
    auto m = client_->receive(std::chrono::milliseconds(100), wake_[0]);
    if (!m) continue;
    if (m->kind == "lost" && m->fields.size() == 2) {
      const auto epoch = parse_int_field(m->fields[0]), r = parse_int_field(m->fields[1]);
      if (!epoch || !r) continue;
      const std::string why = "quorum: rank " + std::to_string(*r) + " of epoch " + std::to_string(*epoch) +
                              " was lost (its connection to the quorum server closed)";
      std::lock_guard lock(group_mutex_);
      if (group_ && *epoch == epoch_) group_->transport().declare_lost(*r, why);
      if (forming_ && *epoch == forming_epoch_) forming_->declare_lost(*r, why);
      if (*epoch == epoch_) reform_asked_ = *epoch;
    } else if (m->kind == "reform" && m->fields.size() == 1) {
      if (auto epoch = parse_int_field(m->fields[0])) reform_asked_ = *epoch;
    } else if (m->kind == "epoch" || m->kind == "table" || m->kind == "end") {
      {
        std::lock_guard lock(inbox_->mutex);
        inbox_->messages.push_back(*m);
      }
      inbox_->cv.notify_all();
    }
  }
}

bool Quorum::reform_needed() { return !left_ && (broken_ || reform_asked_.load() >= epoch_.load()); }

void Quorum::lost(const std::exception&) { broken_ = true; }

void Quorum::reform() {
  if (left_) throw CommError("Quorum: reform() after leave()");
  std::vector<std::string> fields = {std::to_string(epoch_.load())};
  {
    std::lock_guard lock(group_mutex_);
    if (group_) {
      Transport& t = group_->transport();
      for (int r = 0; r < group_->size(); ++r)
        if (r != group_->rank() && t.is_lost(r)) fields.push_back(std::to_string(r));
      retire(std::move(group_));
    }
  }
  send("rejoin", std::move(fields));
  form();
}

void Quorum::leave() {
  if (left_) return;
  left_ = true;
  send("leave", {});
}

void Quorum::retire(std::shared_ptr<ProcessGroup> group) {
  // Its transport says goodbye to the peers at once (the ones still waiting on this rank fail now,
  // and come to re-form too), then lingers for what it still sends: not on this rank's time.
  retiring_.emplace_back([g = std::move(group)]() mutable { g.reset(); });
}

void Quorum::form() {
  const Deadline deadline = deadline_after(options_.timeout);
  std::shared_ptr<Transport> transport;
  int forming = -1;
  auto drop_transport = [&] {
    std::lock_guard lock(group_mutex_);
    forming_.reset();
    if (transport) retiring_.emplace_back([t = std::move(transport)]() mutable { t.reset(); });
    transport.reset();
  };
  while (true) {
    RoundMessage m;
    {
      std::unique_lock lock(inbox_->mutex);
      if (!inbox_->cv.wait_until(lock, deadline, [&] { return !inbox_->messages.empty(); }))
        throw TimeoutError("Quorum: no epoch formed within " + std::to_string(options_.timeout.count()) +
                           " ms (the quorum server at " + options_.endpoint + ")");
      m = std::move(inbox_->messages.front());
      inbox_->messages.pop_front();
    }
    if (m.kind == "end") {
      const int code = m.fields.empty() ? 1 : parse_int_field(m.fields[0]).value_or(1);
      left_ = true;
      throw JobEndedError(code, m.fields.size() > 1 ? m.fields[1] : "");
    }
    if (m.kind == "epoch" && m.fields.size() == 3) {
      const auto epoch = parse_int_field(m.fields[0]), rank = parse_int_field(m.fields[1]), world = parse_int_field(m.fields[2]);
      if (!epoch || !rank || !world || *world < 1 || *rank < 0 || *rank >= *world) continue;
      drop_transport();
      InitOptions init;
      init.rank = *rank;
      init.world_size = *world;
      init.timeout = options_.timeout;
      TransportOptions t = transport_options_from_env(init);
      t.tcp_host = host_;
      transport = std::make_shared<Transport>(t);
      forming = *epoch;
      {
        std::lock_guard lock(group_mutex_);
        forming_ = transport;
        forming_epoch_ = forming;
      }
      send("address", {m.fields[0], transport->address().serialize()});
      continue;
    }
    if (m.kind != "table" || m.fields.empty() || parse_int_field(m.fields[0]) != forming || !transport) continue;
    std::vector<PeerAddress> table;
    try {
      for (size_t i = 1; i < m.fields.size(); ++i) table.push_back(PeerAddress::parse(m.fields[i]));
      transport->connect(table, std::min(deadline, deadline_after(std::chrono::seconds(10))));
    } catch (const Error& e) {  // a member lost while it formed: again, without it
      std::vector<std::string> fields = {std::to_string(forming)};
      for (int r = 0; r < transport->world_size(); ++r)
        if (r != transport->rank() && transport->is_lost(r)) fields.push_back(std::to_string(r));
      drop_transport();
      epoch_ = forming;  // the server knows this rank as a member of it
      send("rejoin", std::move(fields));
      continue;
    }
    std::vector<int> ranks(static_cast<size_t>(transport->world_size()));
    std::iota(ranks.begin(), ranks.end(), 0);
    auto group = std::make_shared<ProcessGroup>(transport, 0, std::move(ranks), options_.timeout);
    {
      std::lock_guard lock(group_mutex_);
      group_ = std::move(group);
      forming_.reset();
    }
    epoch_ = forming;
    broken_ = false;
    ++reforms_;
    return;
  }
}

}  // namespace troupe::net
