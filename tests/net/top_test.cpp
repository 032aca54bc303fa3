// `troupe top` in a terminal: tmux runs it against a 2-rank job whose rank 0 keeps calling an
// actor on rank 1 and a mesh over both ranks, finding the ranks from rank 0 (--job: the endpoints its rendezvous gave it);
// capture-pane must show that actor on rank 1 and both links, a sort key must redraw, and q must
// end it.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>

#include "devices/ops.h"
#include "net/bootstrap/launcher.h"
#include "net/remote/mesh.h"
#include "net/remote/remote_actor.h"
#include "support/ranks.h"
#include "support/skip.h"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

struct Worker {
  int64_t work(const Tensor& x) { return x.numel(); }
};

struct MeshWorker {
  explicit MeshWorker(const MeshPoint&) {}
  int64_t work(const Tensor& x) { return x.numel(); }
};
TROUPE_ACTOR(MeshWorker(const MeshPoint&), "top.mesh_worker", &MeshWorker::work);

std::string output_of(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string out;
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof buffer, pipe.get())) out += buffer;
  return out;
}

bool port_pair_free(int port) {
  for (int p : {port, port + 1}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(p));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    ::close(fd);
    if (!free) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("top rank: busy for a while", "[.rank]") {
  InitOptions o;
  o.timeout = 60s;
  auto world = init_process_group(o);
  RemoteActors actors(world);
  if (world->rank() == 1) {
    host("top.worker", std::make_shared<Worker>(), Method{"work", &Worker::work});
    CHECK_NOTHROW(serve());
    return;
  }
  RemoteActor worker = lookup("top.worker", 10s);
  MeshOptions named;
  named.name = "top.mesh";
  Mesh mesh = spawn_mesh(named, "top.mesh_worker", {{"host", 2}, {"gpu", 2}});  // 2 members on each rank
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(std::getenv("TOP_BUSY_S")));
  while (std::chrono::steady_clock::now() < end) {
    CHECK(worker.request<int64_t>("work", Tensor::ones({256})).get() == 256);
    for (Future<int64_t>& f : mesh.call<int64_t>("work", Tensor::ones({2}))) CHECK(f.get() == 2);
    std::this_thread::sleep_for(1ms);
  }
  mesh.stop();
}

TEST_CASE("top: troupe top in tmux shows a running job's actors, sorts on a key and quits on q", "[net][top]") {
  if (std::system("tmux -V >/dev/null 2>&1") != 0) SKIP_TEST("no tmux (apt install tmux)");
  int port = 0;
  for (int attempt = 0; attempt < 50 && !port; ++attempt)
    if (const int p = free_tcp_port(); port_pair_free(p)) port = p;
  REQUIRE(port > 0);
  LaunchOptions o;
  o.env = {{"TROUPE_METRICS_PORT", std::to_string(port)}, {"TOP_BUSY_S", "20"}};
  RankRun run;
  std::thread job([&] { run = run_ranks(2, "top rank: busy for a while", o); });  // no assertions in there

  const std::string session = "troupe-top-" + std::to_string(getpid());
  std::this_thread::sleep_for(2s);
  const std::string start = "tmux new-session -d -s " + session + " -x 150 -y 40 '" TROUPE_BIN_DIR "/troupe top --job 127.0.0.1:" +
                            std::to_string(port) + "'";
  REQUIRE(std::system(start.c_str()) == 0);
  // The screen as soon as it shows every needle, or as it is after 15 s (a sanitizer build starts
  // slowly). A capture may catch a frame half drawn, so the needles include its last part.
  auto screen_with = [&](std::initializer_list<std::string> needles) {
    std::string screen;
    for (int i = 0; i < 75; ++i) {
      screen = output_of("tmux capture-pane -p -t " + session);
      if (std::all_of(needles.begin(), needles.end(), [&](const std::string& n) { return screen.find(n) != std::string::npos; }))
        break;
      std::this_thread::sleep_for(200ms);
    }
    return screen;
  };
  const std::string screen = screen_with({"top.worker", "PEER"});
  INFO(screen);
  CHECK_THAT(screen, Catch::Contains("troupe top - 2 rank(s)"));
  CHECK_THAT(screen, Catch::Contains("top.worker"));
  CHECK_THAT(screen, Catch::Contains("calls/s"));
  CHECK_THAT(screen, Catch::Contains("PEER"));
  const std::string with_mesh = screen_with({"top.mesh ", "0:2 1:2"});  // the mesh's row: its shape, members per rank
  INFO(with_mesh);
  CHECK_THAT(with_mesh, Catch::Contains("MESH") && Catch::Contains("host=2,gpu=2") && Catch::Contains("0:2 1:2"));
  std::system(("tmux send-keys -t " + session + " e").c_str());
  const std::string sorted = screen_with({"sort: errors", "PEER"});
  INFO(sorted);
  CHECK_THAT(sorted, Catch::Contains("sort: errors"));
  std::system(("tmux send-keys -t " + session + " q").c_str());
  bool still_there = true;
  for (int i = 0; i < 50 && still_there; ++i) {
    std::this_thread::sleep_for(100ms);
    still_there = std::system(("tmux has-session -t " + session + " 2>/dev/null").c_str()) == 0;
  }
  CHECK_FALSE(still_there);  // q ended top, and with it the session
  if (still_there) std::system(("tmux kill-session -t " + session).c_str());
  job.join();
  check_all_passed(run, 2);
}
