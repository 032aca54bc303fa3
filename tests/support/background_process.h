#pragma once
// A shell command run in the background for a test (a launcher of a job, a script), its output
// into a log file that the test reads as it goes.
//
//   BackgroundProcess node("troupe launch --nproc 1 ... -- dist_sgd ...", dir / "n0.log");
//   REQUIRE(wait_for(node.log, "quorum: epoch 0", std::chrono::seconds(30)));
//   node.kill_group();              // the launcher and its ranks, as a lost host
//   CHECK(node.wait_exit(std::chrono::seconds(5)) == 128 + SIGKILL);
//
// The command runs in a process group of its own; a process still running when the object goes
// is killed with its group.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// How many times `pattern` (a regex) matches in `text`.
inline int count_matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// Waits until the file holds text matching `pattern` at least `count` times; false after `wait`.
inline bool wait_for(const std::filesystem::path& log, const std::string& pattern, std::chrono::seconds wait,
                     int count = 1) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (count_matches(read_all(log), pattern) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

struct BackgroundProcess {
  pid_t pid = -1;
  std::filesystem::path log;

  BackgroundProcess(const std::string& command, std::filesystem::path log_path) : log(std::move(log_path)) {
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", ("exec " + command + " >" + log.string() + " 2>&1").c_str(), nullptr);
      _exit(127);
    }
  }
  // The exit status (128 + signal when killed), or -1 when still running after `wait`.
  int wait_exit(std::chrono::milliseconds wait) {
    const auto until = std::chrono::steady_clock::now() + wait;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void kill_group() { ::kill(-pid, SIGKILL); }
  std::string output() const { return read_all(log); }
  ~BackgroundProcess() {
    if (wait_exit(std::chrono::milliseconds(0)) < 0) {
      kill_group();
      wait_exit(std::chrono::seconds(5));
    }
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
};
