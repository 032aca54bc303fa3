// The quorum of an in-place elastic job (net/bootstrap/quorum_server.h), driven by raw clients
// over real sockets: epochs form, a joiner makes the next one form at once, a closed connection is
// told to the others as a loss, a silent (cut) member reported lost is left out and comes back as a
// joiner, a join sent again forms no epoch, nor one that comes as the members leave (done), one lost
// while an epoch forms is left out of it, and the job ends when every member left. Then troupe launch --in-place with dist_sgd
// --elastic on three loopback "nodes": a killed rank and a killed node; the survivors go on from
// memory and the restarted ones take the live state.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "devices/error.h"
#include "net/bootstrap/launcher.h"
#include "net/bootstrap/quorum_server.h"
#include "net/bootstrap/rendezvous_rounds.h"
#include "net/job_secret.h"
#include "net/quorum.h"
#include "support/background_process.h"
#include "support/scoped_env.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::string kBin = TROUPE_BIN_DIR;

// The server's next message to `client` (the test fails after 5 s without one).
RoundMessage next(RoundClient& client) {
  auto m = client.receive(5000ms);
  REQUIRE(m.has_value());
  return *m;
}

std::vector<std::string> fields(std::initializer_list<std::string> f) { return f; }

struct Server {
  std::vector<std::string> log;
  std::mutex mutex;
  std::unique_ptr<QuorumServer> server;
  int port = free_tcp_port();
  explicit Server(QuorumSettings settings) {
    server = QuorumServer::try_serve("127.0.0.1", port, std::nullopt, settings, [this](const std::string& line) {
      std::lock_guard lock(mutex);
      log.push_back(line);
    });
    REQUIRE(server);
  }
  bool logged(const std::string& part) {
    std::lock_guard lock(mutex);
    for (const auto& line : log)
      if (line.find(part) != std::string::npos) return true;
    return false;
  }
  // Waits (5 s at most) until the server logged `part`: ranks go in the order the server heard
  // them, which two sockets' timing alone does not fix.
  void wait_logged(const std::string& part) {
    for (int i = 0; i < 500 && !logged(part); ++i) std::this_thread::sleep_for(10ms);
    REQUIRE(logged(part));
  }
  // Whether the server says it serves the job within 5 s: it notes so after the loop's turn that
  // sent an epoch's tables, which its clients may read first.
  bool serves_soon() const {
    for (int i = 0; i < 500 && !server->serves_the_job(); ++i) std::this_thread::sleep_for(10ms);
    return server->serves_the_job();
  }
};

// Answers an "epoch" with an address and checks the table that follows has `world` entries.
void take_epoch(RoundClient& client, int epoch, int rank, int world, const std::string& address) {
  const RoundMessage e = next(client);
  REQUIRE(e.kind == "epoch");
  CHECK(e.fields == fields({std::to_string(epoch), std::to_string(rank), std::to_string(world)}));
  client.send("address", {std::to_string(epoch), address});
}
// The table comes after the members' standbys ("-": these clients joined without one).
void take_table(RoundClient& client, int epoch, const std::vector<std::string>& addresses,
                std::vector<std::string> standbys = {}) {
  if (standbys.empty()) standbys.assign(addresses.size(), "-");
  const RoundMessage st = next(client);
  REQUIRE(st.kind == "standbys");
  standbys.insert(standbys.begin(), std::to_string(epoch));
  CHECK(st.fields == standbys);
  const RoundMessage t = next(client);
  REQUIRE(t.kind == "table");
  std::vector<std::string> expected = {std::to_string(epoch)};
  expected.insert(expected.end(), addresses.begin(), addresses.end());
  CHECK(t.fields == expected);
}

// One in-place job on loopback "nodes": each node a troupe launch of `program` (a binary of the
// build and its arguments) with the job's secret and quorum port, its output in DIR/NAME.log.
struct LoopbackJob {
  fs::path dir;
  std::string program, secret, port = std::to_string(free_tcp_port());
  LoopbackJob(const std::string& name, std::string program_)
      : dir(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))), program(std::move(program_)) {
    fs::create_directories(dir);
    secret = (dir / "job.secret").string();
    write_job_secret_file(secret, generate_job_secret());
  }
  ~LoopbackJob() { fs::remove_all(dir); }
  // Every node's log, in the order of their names.
  std::string logs() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".log") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) all += read_all(f);
    return all;
  }
  // The end of every node's log: what a failed check shows.
  std::string logs_tail() const {
    const std::string all = logs();
    return all.substr(all.size() > 4000 ? all.size() - 4000 : 0);
  }
  // Waits (a minute at most) until some node logged `pattern` (a regex) once.
  bool wait_for_any(const std::string& pattern) const {
    for (int i = 0; i < 1200 && count_matches(logs(), pattern) == 0; ++i) std::this_thread::sleep_for(50ms);
    return count_matches(logs(), pattern) >= 1;
  }
  // Nodes n0 (it serves the quorum), n1 and n2, once their epoch 0 formed.
  std::vector<std::unique_ptr<BackgroundProcess>> start_three() const {
    std::vector<std::unique_ptr<BackgroundProcess>> nodes;
    nodes.push_back(node("n0"));
    std::this_thread::sleep_for(300ms);
    nodes.push_back(node("n1"));
    nodes.push_back(node("n2"));
    const bool formed = wait_for(dir / "n0.log", "quorum: epoch 0: world 3", 60s);
    INFO(logs_tail());
    REQUIRE(formed);
    return nodes;
  }
  // The settle time bounds only the first epoch, which forms at once when all three joined: long,
  // so that a node late on a loaded machine (each loads the data and warms its kernels first)
  // still makes epoch 0 of world 3, whose numbering the tests rely on.
  std::unique_ptr<BackgroundProcess> node(const std::string& name) const {
    return std::make_unique<BackgroundProcess>(kBin + "/troupe launch --nproc 1 --nnodes 2:3 --max-restarts 2 --secret " + secret +
                                                   " --rdzv-endpoint 127.0.0.1:" + port + " --rdzv-settle 30 --in-place -- " +
                                                   kBin + "/" + program,
                                               dir / (name + ".log"));
  }
};

// dist_sgd in place: 500 steps, 20 an epoch; --verify checks after every step that all ranks hold
// the same weights.
const std::string kDistSgd500 = "dist_sgd --elastic --subset 2560 --epochs 25 --log-every 1 --verify --json";

// Every step of that job done once and checked on every rank, whatever the epoch.
void check_every_step_once(const std::string& all) {
  CHECK(count_matches(all, "\"steps\":500") == 1);
  CHECK(count_matches(all, "differ across ranks") == 0);
}

// A member's pid, from the quorum server's line in DIR/n0.log for an epoch: "epoch E: world W
// (HOST/PID, ...)", at `index` (its rank in that epoch).
pid_t epoch_member_pid(const fs::path& dir, int epoch, int index) {
  std::smatch m;
  const std::string all = read_all(dir / "n0.log");
  const std::regex line("epoch " + std::to_string(epoch) + ": world [0-9]+ \\(([^)]*)\\)");
  REQUIRE(std::regex_search(all, m, line));
  std::vector<pid_t> pids;
  const std::string names = m[1];
  const std::regex pid("/([0-9]+)");
  for (auto it = std::sregex_iterator(names.begin(), names.end(), pid); it != std::sregex_iterator(); ++it)
    pids.push_back(std::stoi((*it)[1]));
  REQUIRE(index < static_cast<int>(pids.size()));
  return pids[static_cast<size_t>(index)];
}

}  // namespace

TEST_CASE("quorum: epochs form, grow with a joiner, shrink on a closed connection and on a reported loss",
          "[net][quorum]") {
  Server s({.min_ranks = 2, .max_ranks = 3, .settle = 200ms, .reform_timeout = 3000ms, .join_timeout = 20000ms});
  auto a = std::make_unique<RoundClient>("127.0.0.1", s.port, std::nullopt);
  auto b = std::make_unique<RoundClient>("127.0.0.1", s.port, std::nullopt);
  a->send("join", {"a"});
  s.wait_logged("a waits to join");
  b->send("join", {"b"});
  // Two of at least two, and the settle time: epoch 0 of world 2, in join order.
  take_epoch(*a, 0, 0, 2, "addr-a0");
  take_epoch(*b, 0, 1, 2, "addr-b0");
  take_table(*a, 0, {"addr-a0", "addr-b0"});
  take_table(*b, 0, {"addr-a0", "addr-b0"});

  // c joins: epoch 1 forms at once with all three.
  auto third_joins = [&](RoundClient& c) {
    c.send("join", {"c"});
    take_epoch(*a, 1, 0, 3, "addr-a1");
    take_epoch(*b, 1, 1, 3, "addr-b1");
    take_epoch(c, 1, 2, 3, "addr-c1");
    for (RoundClient* client : {a.get(), b.get(), &c}) take_table(*client, 1, {"addr-a1", "addr-b1", "addr-c1"});
  };

  SECTION("a joiner: the next epoch forms at once, with all three, while the members go on") {
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    third_joins(c);

    // b's process ends without leave: its connection closes, the others are told at once, and the
    // next epoch forms without it, the survivors in their order.
    b.reset();
    for (RoundClient* client : {a.get(), &c}) {
      const RoundMessage lost = next(*client);
      CHECK(lost.kind == "lost");
      CHECK(lost.fields == fields({"1", "1"}));
    }
    take_epoch(*a, 2, 0, 2, "addr-a2");
    take_epoch(c, 2, 1, 2, "addr-c2");
    take_table(*a, 2, {"addr-a2", "addr-c2"});
    take_table(c, 2, {"addr-a2", "addr-c2"});
    CHECK(s.logged("lost: its connection closed"));

    // Every member leaves: the job is over, and a late joiner is told so.
    a->send("leave", {});
    c.send("leave", {});
    CHECK(s.server->wait_finished(5000ms) == 0);
    RoundClient late("127.0.0.1", s.port, std::nullopt);
    late.send("join", {"late"});
    const RoundMessage end = next(late);
    CHECK(end.kind == "end");
    CHECK(end.fields.at(0) == "0");
  }

  SECTION("the members leave (done) just as a joiner's epoch forms: the job is over for the joiner too") {
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    third_joins(c);
    a->send("leave", {});  // they finished the job's last step in epoch 0
    b->send("leave", {});
    CHECK(s.server->wait_finished(5000ms) == 0);
    const RoundMessage end = next(c);  // nobody is left to give c the state: not a wait for more ranks
    CHECK(end.kind == "end");
    CHECK(end.fields.at(0) == "0");
    CHECK(s.logged("the job is over: every rank that held its state left"));
  }

  SECTION("a joiner that comes while the members leave (done) forms no epoch; it is told the job is over") {
    a->send("leave", {});
    s.wait_logged("a left");
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    c.send("join", {"c"});
    s.wait_logged("c waits to join");
    CHECK_FALSE(b->receive(300ms).has_value());  // b finishes in epoch 0: no epoch with c
    b->send("leave", {});
    const RoundMessage end = next(c);
    CHECK(end.kind == "end");
    CHECK(end.fields.at(0) == "0");
    CHECK(s.server->wait_finished(5000ms) == 0);
  }

  SECTION("a cut member reported lost is left out; the survivor waits for min_ranks; the cut one comes back") {
    // b's link is "cut": it stays connected but silent. a reports it lost (rank 1 of epoch 0).
    a->send("rejoin", {"0", "1"});
    std::this_thread::sleep_for(300ms);
    CHECK(s.logged("a found b lost"));
    CHECK(s.logged("fewer than 2 rank(s)"));  // a alone is under min_ranks: it waits
    // The link comes back: b's request of the old epoch makes it a joiner.
    b->send("rejoin", {"0", "0"});
    take_epoch(*a, 1, 0, 2, "addr-a1");
    take_epoch(*b, 1, 1, 2, "addr-b1");
    take_table(*a, 1, {"addr-a1", "addr-b1"});
    take_table(*b, 1, {"addr-a1", "addr-b1"});
  }

  SECTION("a join sent again after its epoch formed (a rank resends what no table answered yet) forms no epoch") {
    a->send("join", {"a"});
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    third_joins(c);  // epoch 1 has three members, not a fourth for a's second join
    c.send("join", {"c"});
    a->send("join", {"a"});
    CHECK_FALSE(a->receive(500ms).has_value());  // no epoch 2
    CHECK_FALSE(c.receive(10ms).has_value());
    std::lock_guard lock(s.mutex);
    CHECK(std::count_if(s.log.begin(), s.log.end(), [](const std::string& l) { return l.find("waits to join") != l.npos; }) == 3);
  }

  SECTION("a rank that sends no address is left out, and the epoch forms again without it") {
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    c.send("join", {"c"});
    take_epoch(*a, 1, 0, 3, "addr-a1");
    take_epoch(*b, 1, 1, 3, "addr-b1");
    CHECK(next(c).kind == "epoch");  // c never answers: after reform_timeout, epoch 2 without it
    take_epoch(*a, 2, 0, 2, "addr-a2");
    take_epoch(*b, 2, 1, 2, "addr-b2");
    take_table(*a, 2, {"addr-a2", "addr-b2"});
    CHECK(s.logged("sent no address"));
  }

  SECTION("a member lost while the next epoch forms: it forms again without it") {
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    c.send("join", {"c"});
    take_epoch(*a, 1, 0, 3, "addr-a1");
    CHECK(next(*b).kind == "epoch");
    CHECK(next(c).kind == "epoch");
    b.reset();  // before its address
    const RoundMessage lost = next(*a);  // b was rank 1 of the running epoch 0
    CHECK(lost.kind == "lost");
    CHECK(lost.fields == fields({"0", "1"}));
    take_epoch(*a, 2, 0, 2, "addr-a2");
    take_epoch(c, 2, 1, 2, "addr-c2");
    take_table(*a, 2, {"addr-a2", "addr-c2"});
  }
}

// The standby's side of a take-over: survivors of epoch 4 resume there in their old order, the
// epoch forms once the expected ones came (numbered on: 5), and a server on the quorum's address
// that runs no epoch, told by the standby, sends its joiners there.
// A host started again: its ranks finish loading one by one, and each would make an epoch of its
// own. The server waits for the rest of a joiner's launcher (its join names the launcher's standby
// and how many ranks it runs), up to host_wait, so the members change groups once.
TEST_CASE("quorum: troupe launch --in-place tells its ranks the quorum's world sizes in ranks", "[net][quorum]") {
  LoopbackJob job("quorum_world_sizes", "");
  // --nnodes 1:2 with 2 ranks a node: every epoch's world lies between 2 and 4 ranks.
  BackgroundProcess node(kBin + "/troupe launch --nproc 2 --nnodes 1:2 --secret " + job.secret +
                             " --rdzv-endpoint 127.0.0.1:" + job.port +
                             " --rdzv-timeout 10 --in-place -- sh -c 'echo sizes=$TROUPE_WORLD_SIZES'",
                         job.dir / "n0.log");
  INFO(node.output());
  REQUIRE(node.wait_exit(30s) == 0);
  CHECK(count_matches(node.output(), "\\[rank [01]\\] sizes=2:4") == 2);
}

TEST_CASE("quorum: a joiner's launcher's ranks join in one epoch, waited for up to host_wait", "[net][quorum]") {
  Server s({.min_ranks = 1, .max_ranks = 4, .settle = 200ms, .reform_timeout = 3000ms, .join_timeout = 20000ms,
            .host_wait = 1500ms});
  auto a = std::make_unique<RoundClient>("127.0.0.1", s.port, std::nullopt);
  auto b = std::make_unique<RoundClient>("127.0.0.1", s.port, std::nullopt);
  a->send("join", {"a", "host-a:1", "2"});
  s.wait_logged("a waits to join");
  b->send("join", {"b", "host-a:1", "2"});
  take_epoch(*a, 0, 0, 2, "addr-a0");
  take_epoch(*b, 0, 1, 2, "addr-b0");
  take_table(*a, 0, {"addr-a0", "addr-b0"}, {"host-a:1", "host-a:1"});
  take_table(*b, 0, {"addr-a0", "addr-b0"}, {"host-a:1", "host-a:1"});

  SECTION("the second rank of a new host comes: one epoch with both") {
    RoundClient c("127.0.0.1", s.port, std::nullopt), d("127.0.0.1", s.port, std::nullopt);
    c.send("join", {"c", "host-c:1", "2"});
    s.wait_logged("c waits to join");
    CHECK_FALSE(a->receive(500ms).has_value());  // no epoch for c alone
    d.send("join", {"d", "host-c:1", "2"});
    take_epoch(*a, 1, 0, 4, "addr-a1");
    take_epoch(*b, 1, 1, 4, "addr-b1");
    take_epoch(c, 1, 2, 4, "addr-c1");
    take_epoch(d, 1, 3, 4, "addr-d1");
    for (RoundClient* client : {a.get(), b.get(), &c, &d})
      take_table(*client, 1, {"addr-a1", "addr-b1", "addr-c1", "addr-d1"}, {"host-a:1", "host-a:1", "host-c:1", "host-c:1"});
    CHECK_FALSE(s.logged("the epoch forms without the rest"));
  }

  SECTION("the second never comes: the epoch forms without it after host_wait") {
    RoundClient c("127.0.0.1", s.port, std::nullopt);
    const auto asked = std::chrono::steady_clock::now();
    c.send("join", {"c", "host-c:1", "2"});
    take_epoch(*a, 1, 0, 3, "addr-a1");
    CHECK(std::chrono::steady_clock::now() - asked >= 1400ms);
    take_epoch(*b, 1, 1, 3, "addr-b1");
    take_epoch(c, 1, 2, 3, "addr-c1");
    CHECK(s.logged("the launcher at host-c:1: 1 of its 2 rank(s) here after 1.50 s; the epoch forms without the rest"));
  }

  SECTION("one rank of a running launcher started again: its epoch forms at once") {
    b.reset();  // lost: epoch 1 of a alone
    CHECK(next(*a).kind == "lost");
    take_epoch(*a, 1, 0, 1, "addr-a1");
    take_table(*a, 1, {"addr-a1"}, {"host-a:1"});
    RoundClient b2("127.0.0.1", s.port, std::nullopt);
    const auto asked = std::chrono::steady_clock::now();
    b2.send("join", {"b2", "host-a:1", "2"});
    take_epoch(*a, 2, 0, 2, "addr-a2");
    CHECK(std::chrono::steady_clock::now() - asked < 1000ms);
    take_epoch(b2, 2, 1, 2, "addr-b2");
  }
}

TEST_CASE("quorum: a standby takes over from the survivors' epoch, and a fresh server sends joiners on", "[net][quorum]") {
  const QuorumSettings settings{.min_ranks = 1, .max_ranks = 3, .settle = 5000ms, .reform_timeout = 3000ms,
                                .join_timeout = 20000ms};
  Server standby(settings);
  const std::string standby_endpoint = "127.0.0.1:" + std::to_string(standby.port);
  RoundClient b("127.0.0.1", standby.port, std::nullopt), a("127.0.0.1", standby.port, std::nullopt);
  b.send("resume", {"4", "2", "2", "b", "127.0.0.1:1"});  // b was rank 2 of epoch 4; 2 survivors expected
  standby.wait_logged("b waits to join");
  a.send("resume", {"4", "1", "2", "a", standby_endpoint});
  take_epoch(a, 5, 0, 2, "addr-a5");  // well inside the 5 s settle: both expected ones came
  take_epoch(b, 5, 1, 2, "addr-b5");
  take_table(a, 5, {"addr-a5", "addr-b5"}, {standby_endpoint, "127.0.0.1:1"});
  take_table(b, 5, {"addr-a5", "addr-b5"}, {standby_endpoint, "127.0.0.1:1"});
  CHECK(standby.logged("taking the quorum over from epoch 4"));
  CHECK(standby.serves_soon());

  Server fresh(settings);  // the quorum's host, started again
  RoundClient joiner("127.0.0.1", fresh.port, std::nullopt), told("127.0.0.1", fresh.port, std::nullopt);
  joiner.send("join", {"c"});
  fresh.wait_logged("c waits to join");
  told.send("moved", {standby_endpoint});
  const RoundMessage moved = next(joiner);
  CHECK(moved.kind == "moved");
  CHECK(moved.fields == fields({standby_endpoint}));
  RoundClient later("127.0.0.1", fresh.port, std::nullopt);
  later.send("join", {"d"});
  CHECK(next(later).fields == fields({standby_endpoint}));
  CHECK_FALSE(fresh.server->serves_the_job());
}

// A survivor that resumes at a standby says how many ranks its launcher runs, as a join does: a
// rank of that launcher started again joins beside it at once.
TEST_CASE("quorum: a survivor resumed at a standby counts for its launcher's ranks", "[net][quorum]") {
  Server standby({.min_ranks = 1, .max_ranks = 4, .settle = 5000ms, .reform_timeout = 3000ms, .join_timeout = 20000ms,
                  .host_wait = 3000ms});
  RoundClient a("127.0.0.1", standby.port, std::nullopt);
  a.send("resume", {"4", "0", "1", "a", "launcher-a", "2"});  // rank 0 of epoch 4, the one survivor expected
  take_epoch(a, 5, 0, 1, "addr-a5");
  take_table(a, 5, {"addr-a5"}, {"launcher-a"});
  RoundClient b("127.0.0.1", standby.port, std::nullopt);
  const auto asked = std::chrono::steady_clock::now();
  b.send("join", {"b", "launcher-a", "2"});
  take_epoch(a, 6, 0, 2, "addr-a6");
  CHECK(std::chrono::steady_clock::now() - asked < 1500ms);  // not the 3 s host_wait
  take_epoch(b, 6, 1, 2, "addr-b6");
}

// A survivor that comes to a standby while the quorum's server still answers there was the one
// cut off: sent back to it, after a silence's length, or at once when that server runs a newer
// epoch than the survivor's (it ran on without it).
TEST_CASE("quorum: a standby sends back a rank that lost a quorum server it still reaches", "[net][quorum]") {
  Server quorum({.min_ranks = 2, .max_ranks = 3, .settle = 200ms, .reform_timeout = 3000ms, .join_timeout = 20000ms});
  const std::string quorum_endpoint = "127.0.0.1:" + std::to_string(quorum.port);
  const auto hold = GENERATE(300ms, 20000ms);
  Server standby({.min_ranks = 2, .max_ranks = 3, .settle = 200ms, .reform_timeout = 3000ms, .join_timeout = 20000ms,
                  .quorum_endpoint = quorum_endpoint, .self_endpoint = "", .hold = hold});
  std::this_thread::sleep_for(200ms);  // its watch of the quorum's server connects
  RoundClient a("127.0.0.1", quorum.port, std::nullopt), b("127.0.0.1", quorum.port, std::nullopt);
  if (hold > 10s) {  // the quorum runs epoch 0 (a and b), so a survivor of epoch -1 is out of date
    a.send("join", {"a"});
    quorum.wait_logged("a waits to join");
    b.send("join", {"b"});
    take_epoch(a, 0, 0, 2, "addr-a0");
    take_epoch(b, 0, 1, 2, "addr-b0");
    take_table(a, 0, {"addr-a0", "addr-b0"});
    take_table(b, 0, {"addr-a0", "addr-b0"});
    std::this_thread::sleep_for(500ms);  // the standby hears so
  }
  RoundClient cut_off("127.0.0.1", standby.port, std::nullopt);
  cut_off.send("resume", {"-1", "2", "2", "c", "-"});
  const RoundMessage back = next(cut_off);  // within 5 s: with a hold of 20 s, not held
  CHECK(back.kind == "moved");
  CHECK(back.fields == fields({quorum_endpoint}));
  if (hold > 10s) {
    CHECK(standby.logged("c lost the quorum's server, which runs epoch 0 without it: sent back to it"));
  } else {
    CHECK(standby.logged("c lost the quorum's server, which answers here: sent back to it"));
  }
  CHECK_FALSE(standby.logged("taking the quorum over"));
  CHECK_FALSE(standby.server->serves_the_job());
}

TEST_CASE("quorum: too few ranks within the join timeout end the job; malformed messages are ignored",
          "[net][quorum][errors]") {
  Server s({.min_ranks = 2, .max_ranks = 2, .settle = 100ms, .reform_timeout = 1000ms, .join_timeout = 500ms});
  RoundClient a("127.0.0.1", s.port, std::nullopt);
  a.send("join", {});               // no name: ignored
  a.send("address", {"x", "y"});    // not forming: ignored
  a.send("rejoin", {"zz"});         // not a member: joins
  const RoundMessage end = next(a);
  CHECK(end.kind == "end");
  CHECK(end.fields.at(0) == "1");
  CHECK(end.fields.at(1).find("only 1 rank(s) of at least 2") != std::string::npos);
  CHECK(s.server->wait_finished(1000ms) == 1);
}

TEST_CASE("quorum: a rank's Quorum names what is missing", "[net][quorum][errors]") {
  ScopedEnv none("TROUPE_QUORUM", "");
  ::unsetenv("TROUPE_QUORUM");
  CHECK_FALSE(Quorum::configured());
  CHECK_THROWS_AS(Quorum(), ValueError);
  CHECK_THROWS_WITH(Quorum(), Catch::Contains("TROUPE_QUORUM"));
  // A server that never forms an epoch: TimeoutError naming it.
  Server s({.min_ranks = 2, .max_ranks = 2, .settle = 100ms, .reform_timeout = 1000ms, .join_timeout = 20000ms});
  ScopedEnv insecure("TROUPE_INSECURE", "1");
  QuorumOptions o;
  o.endpoint = "127.0.0.1:" + std::to_string(s.port);
  o.timeout = 300ms;
  CHECK_THROWS_AS(Quorum(o), TimeoutError);
}

TEST_CASE("quorum: a rank waiting for an epoch after the server is gone gets a CommError naming it, not a hang",
          "[net][quorum][errors]") {
  auto s = std::make_unique<Server>(
      QuorumSettings{.min_ranks = 1, .max_ranks = 1, .settle = 50ms, .reform_timeout = 1000ms, .join_timeout = 20000ms});
  QuorumOptions o;
  o.endpoint = "127.0.0.1:" + std::to_string(s->port);
  o.server_timeout = 500ms;
  Quorum quorum(o);
  CHECK(quorum.epoch() == 0);
  CHECK(quorum.group().size() == 1);
  s.reset();  // its host lost
  quorum.lost(PeerLostError("a peer"));
  CHECK(quorum.reform_needed());
  CHECK_THROWS_WITH(quorum.reform(), Catch::Contains("unreachable") && Catch::Contains(o.endpoint));
}

TEST_CASE("quorum: dist_sgd in place on three loopback nodes: a killed rank and a killed node, no step lost",
          "[net][quorum][elastic]") {
  const LoopbackJob job("troupe_quorum_test", kDistSgd500);
  const fs::path& dir = job.dir;
  auto nodes = job.start_three();
  auto &n0 = nodes[0], &n1 = nodes[1], &n2 = nodes[2];  // n0 serves the quorum
  // The epoch's rank 0 logs the steps: the rank that joined first, on whichever node.
  auto logs = [&] { return job.logs(); };
  REQUIRE(job.wait_for_any("\\] step 40 loss"));

  // A rank killed: its launcher starts it again, and it joins with the live state.
  {
    std::ifstream in("/proc/" + std::to_string(n1->pid) + "/task/" + std::to_string(n1->pid) + "/children");
    pid_t rank = 0;
    in >> rank;
    REQUIRE(rank > 0);
    ::kill(rank, SIGKILL);
  }
  REQUIRE(wait_for(dir / "n0.log", "lost: its connection closed", 30s));
  REQUIRE(wait_for(dir / "n1.log", "took the state of step [0-9]+ from rank", 60s));
  // A node killed (its launcher and rank), then started again.
  std::this_thread::sleep_for(1s);
  n2->kill_group();
  n2->wait_exit(5s);
  REQUIRE(wait_for(dir / "n0.log", "lost: its connection closed", 30s, 2));
  auto n2b = job.node("n2b");
  REQUIRE(wait_for(dir / "n2b.log", "took the state of step [0-9]+ from rank", 60s));

  CHECK(n0->wait_exit(120s) == 0);
  CHECK(n1->wait_exit(30s) == 0);
  CHECK(n2b->wait_exit(30s) == 0);
  const std::string all = logs();
  INFO(job.logs_tail());
  check_every_step_once(all);
  CHECK(count_matches(all, "\"in_place\":true") == 1);
  CHECK(count_matches(all, "quorum epoch [0-9]+: world 3 at step [0-9]+ \\(1 rank\\(s\\) take the state\\)") >= 2);
}

// No host is special: the node serving the quorum (and rank 0) killed, a standby (another node's
// launcher) takes the quorum over, the survivors go on, and the node started again is sent there
// by its own launcher's server and joins with the live state.
TEST_CASE("quorum: dist_sgd in place: the quorum's node killed and started again, no step lost", "[net][quorum][elastic]") {
  const LoopbackJob job("troupe_quorum_failover_test", kDistSgd500);
  const fs::path& dir = job.dir;
  auto nodes = job.start_three();
  auto &n0 = nodes[0], &n1 = nodes[1], &n2 = nodes[2];  // n0 serves the quorum
  auto logs = [&] { return job.logs(); };
  REQUIRE(job.wait_for_any("\\] step 40 loss"));
  n0->kill_group();
  n0->wait_exit(5s);
  // Epoch numbers are not pinned: a rank found lost while a busy machine (a sanitizer's build)
  // starves it forms one more epoch, and the job still loses no step.
  for (int i = 0; i < 1200 && count_matches(logs(), "quorum \\(standby\\): epoch [0-9]+: world 2") == 0; ++i)
    std::this_thread::sleep_for(50ms);
  REQUIRE(count_matches(logs(), "quorum \\(standby\\): taking the quorum over from epoch [0-9]+") == 1);
  REQUIRE(count_matches(logs(), "quorum \\(standby\\): epoch [0-9]+: world 2") >= 1);
  auto n0b = job.node("n0b");  // on the quorum's address again: its server sends its rank to the standby
  REQUIRE(wait_for(dir / "n0b.log", "took the state of step [0-9]+ from rank", 120s));
  CHECK(n1->wait_exit(180s) == 0);
  CHECK(n2->wait_exit(30s) == 0);
  CHECK(n0b->wait_exit(30s) == 0);
  const std::string all = logs();
  INFO(job.logs_tail());
  CHECK(count_matches(read_all(dir / "n0b.log"), "the job's quorum is at 127.0.0.1:[0-9]+ now; joining there") == 1);
  check_every_step_once(all);
  CHECK(count_matches(all, "quorum \\(standby\\): epoch [0-9]+: world 3") >= 1);
}

namespace {

// A job of `program` (quorum_actors or quorum_graph: 600 steps, the epoch's rank 0 driving) on
// three loopback nodes: its driver killed past step 100, then (once `successor` is logged, and past
// step 300) a worker of epoch 2; every node exits 0, one driver ends the job at step 600, and the
// loss is at the noise floor. Returns every node's log.
std::string driver_then_worker_killed(const std::string& name, const std::string& program, const std::string& successor) {
  const LoopbackJob job(name, program + " --steps 600 --pause-ms 20 --log-every 20 --json");
  const fs::path& dir = job.dir;
  auto nodes = job.start_three();
  auto &n0 = nodes[0], &n1 = nodes[1], &n2 = nodes[2];  // n0 serves the quorum
  REQUIRE(job.wait_for_any("\\] step 100 loss"));
  ::kill(epoch_member_pid(dir, 0, 0), SIGKILL);  // the driver
  REQUIRE(wait_for(dir / "n0.log", "quorum: epoch 2: world 3", 60s));  // epoch 1 without it, 2 with it back
  REQUIRE(job.wait_for_any(successor));
  REQUIRE(job.wait_for_any("\\] step 300 loss"));
  ::kill(epoch_member_pid(dir, 2, 1), SIGKILL);  // a worker
  REQUIRE(wait_for(dir / "n0.log", "quorum: epoch 4: world 3", 60s));

  CHECK(n0->wait_exit(120s) == 0);
  CHECK(n1->wait_exit(30s) == 0);
  CHECK(n2->wait_exit(30s) == 0);
  const std::string all = job.logs();
  INFO(job.logs_tail());
  CHECK(count_matches(all, "\"steps\":600") == 1);  // one driver ends the job, at the last step
  std::smatch loss;
  REQUIRE(std::regex_search(all, loss, std::regex("done: 600 steps, loss ([0-9.e-]+)")));
  CHECK(std::stod(loss[1]) < 5e-5);  // converged to the noise floor (3.3e-5)
  return all;
}

}  // namespace

// The same quorum under a training loop written with remote actors (examples/quorum_actors.cpp):
// the epoch's rank 0 drives, every rank hosts a worker. The driver killed: the next epoch's rank 0
// takes the newest state a worker holds and goes on, and the restarted rank joins as a worker. A
// worker killed: the driver's call fails, and the step is redone over the survivors.
TEST_CASE("quorum: remote actors in place: a killed driver and a killed worker, no step lost", "[net][quorum][elastic]") {
  const std::string taken = "driven by this rank from step [0-9]+ \\(state from rank";  // a successor took it
  const std::string all = driver_then_worker_killed("troupe_quorum_actors_test", "quorum_actors", taken);
  CHECK(count_matches(all, taken) >= 1);
}

// And under a dataflow graph over ranks (examples/quorum_graph.cpp): a gradient node per rank, the
// epoch's rank 0 drives. The driver killed: every rank holds the state of the step in flight, the
// next epoch's rank 0 goes on from it; the restarted rank joins and takes it. A worker killed: its
// node moves to a survivor or the step is redone in the next epoch.
TEST_CASE("quorum: a dataflow graph in place: a killed driver and a killed worker, no step lost", "[net][quorum][elastic]") {
  // The first driver, then its successor after the kill, from a step past 100: none lost.
  const std::string all = driver_then_worker_killed("troupe_quorum_graph_test", "quorum_graph",
                                                    "driven by this rank from step [1-9][0-9][0-9]+");
  CHECK(count_matches(all, "driven by this rank from step 0\\n") == 1);
  CHECK(count_matches(all, "driven by this rank from step [1-9][0-9][0-9]+") >= 2);
}
