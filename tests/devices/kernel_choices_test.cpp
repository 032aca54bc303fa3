// Kernel choices kept across processes (devices/cpu/kernel_choices.h): the file's lines, what a
// damaged file gives, processes appending together, and conv2d taking a remembered layout.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "devices/cpu/kernel_choices.h"
#include "devices/determinism.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "support/skip.h"
#include "support/tensors.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// A scratch file the process's choices go to for the test's length; the usual one afterwards.
struct ScratchChoices {
  std::string before = kernel_choices_file();
  fs::path dir = fs::temp_directory_path() / ("troupe_kernel_choices_" + std::to_string(getpid()));
  std::string path = (dir / "choices.txt").string();
  ScratchChoices() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    set_kernel_choices_file(path);
  }
  ~ScratchChoices() {
    set_kernel_choices_file(before);
    fs::remove_all(dir);
  }
  std::vector<std::string> lines() const {
    std::ifstream in(path);
    std::vector<std::string> all;
    for (std::string line; std::getline(in, line);) all.push_back(line);
    return all;
  }
  // The file is the header line, then exactly these lines.
  void check_holds(const std::vector<std::string>& expected) const {
    const std::vector<std::string> all = lines();
    REQUIRE(all.size() == expected.size() + 1);
    CHECK_THAT(all[0], Catch::StartsWith("# troupe kernel choices measured on: ") && Catch::Contains("onednn="));
    CHECK(std::vector<std::string>(all.begin() + 1, all.end()) == expected);
  }
};

size_t count_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  return static_cast<size_t>(
      std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; }));
}

}  // namespace

TEST_CASE("kernel choices: kept in the file and read back by the next reader with the last line winning", "[kernel_choices]") {
  ScratchChoices scratch;
  CHECK_FALSE(remembered_choice("test/a").has_value());
  remember_choice("test/a", "plain");
  remember_choice("test/b", "1.50,2.25");
  CHECK(remembered_choice("test/a") == "plain");
  scratch.check_holds({"test/a plain", "test/b 1.50,2.25"});

  remember_choice("test/a", "preferred");
  set_kernel_choices_file(scratch.path);  // read afresh, as the next process would
  CHECK(remembered_choice("test/a") == "preferred");
  CHECK(remembered_choice("test/b") == "1.50,2.25");
  CHECK(scratch.lines().size() == 4);  // appended, the header once

  CHECK_THROWS_AS(remember_choice("test/a b", "plain"), ValueError);
  CHECK_THROWS_WITH(remember_choice("test/c", "two words"), Catch::Contains("remember_choice") && Catch::Contains("two words"));
  CHECK_THROWS_AS(remember_choice("", "plain"), ValueError);
  CHECK(scratch.lines().size() == 4);
}

TEST_CASE("kernel choices: a damaged file gives the lines that parse and nothing else", "[kernel_choices]") {
  ScratchChoices scratch;
  {
    std::ofstream out(scratch.path, std::ios::binary);
    out << "# a comment\n"
        << "test/good plain\n"
        << "test/no-value\n"
        << "test/three words here\n"
        << std::string("\x00\xff\x01 junk\n", 9) << "\n"
        << " leading-space\n"
        << "test/last preferred";  // cut short of its newline: still a whole line
  }
  set_kernel_choices_file(scratch.path);
  CHECK(remembered_choice("test/good") == "plain");
  CHECK(remembered_choice("test/last") == "preferred");
  CHECK_FALSE(remembered_choice("test/no-value").has_value());
  CHECK_FALSE(remembered_choice("test/three").has_value());
  CHECK_FALSE(remembered_choice(std::string("\x00\xff\x01", 3)).has_value());  // not printable

  // Not a file of ours (over 1 MiB): none of it is read, and the first choice kept starts it over.
  {
    std::ofstream out(scratch.path, std::ios::binary);
    out << "test/big plain\n" << std::string(2 << 20, '#') << "\n";
  }
  set_kernel_choices_file(scratch.path);
  CHECK_FALSE(remembered_choice("test/big").has_value());
  remember_choice("test/after", "plain");
  remember_choice("test/later", "preferred");
  CHECK(remembered_choice("test/after") == "plain");
  scratch.check_holds({"test/after plain", "test/later preferred"});

  // A file that cannot be written (its directory is a file): kept in this process only.
  set_kernel_choices_file(scratch.path + "/inside-a-file.txt");
  remember_choice("test/unwritable", "plain");
  CHECK(remembered_choice("test/unwritable") == "plain");
}

TEST_CASE("kernel choices: processes appending together lose no line and mix none", "[kernel_choices]") {
  ScratchChoices scratch;
  constexpr int kProcesses = 4, kEach = 200;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // only appends: no Catch, no kernels
      for (int i = 0; i < kEach; ++i)
        remember_choice("test/p" + std::to_string(p) + "/" + std::to_string(i), "value-" + std::to_string(i));
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  set_kernel_choices_file(scratch.path);
  for (int p = 0; p < kProcesses; ++p)
    for (int i = 0; i < kEach; ++i)
      REQUIRE(remembered_choice("test/p" + std::to_string(p) + "/" + std::to_string(i)) == "value-" + std::to_string(i));
  const std::vector<std::string> lines = scratch.lines();
  CHECK(count_starting(lines, "test/") == kProcesses * kEach);
  CHECK(count_starting(lines, "# ") + count_starting(lines, "test/") == lines.size());
}

TEST_CASE("kernel choices: conv2d measures a geometry's layouts once and a later thread takes them from the file", "[kernel_choices]") {
  if (deterministic_kernels()) SKIP_TEST("deterministic kernels (TROUPE_DETERMINISTIC=1) choose conv2d's layouts without measuring");
  ScratchChoices scratch;
  // A geometry no other test uses, so no primitive of it exists yet; each thread caches its own.
  const Tensor x = random_tensor({3, 5, 13, 11}, 71), w = random_tensor({7, 5, 3, 3}, 72), b = random_tensor({7}, 73);
  const Conv2dOptions options{.stride = {1, 2}, .padding = {1, 0}};
  auto run = [&] {
    Tensor y, dx;
    std::vector<Tensor> dw;
    std::thread([&] {
      y = conv2d(x, w, b, options);
      dx = conv2d_backward_input(y, w, x.shape(), options);
      dw = conv2d_backward_weight(y, x, w.shape(), true, options);
    }).join();
    return std::tuple(y, dx, dw);
  };
  const auto [y1, dx1, dw1] = run();
  const std::vector<std::string> measured = scratch.lines();
  CHECK(count_starting(measured, "conv2d/forward/3,5,13,11,7,3,3,1,2,1,0,1,1,1,") == 1);
  CHECK(count_starting(measured, "conv2d/backward_data/3,5,13,11,7,3,3,1,2,1,0,1,1,1,") == 1);
  CHECK(count_starting(measured, "conv2d/backward_weights/3,5,13,11,7,3,3,1,2,1,0,1,1,1,") == 1);
  for (const std::string& line : measured)
    if (line.rfind("conv2d/", 0) == 0) CHECK_THAT(line, Catch::EndsWith(" plain") || Catch::EndsWith(" preferred"));

  set_kernel_choices_file(scratch.path);  // as a process started afterwards reads it
  const auto [y2, dx2, dw2] = run();
  CHECK(scratch.lines() == measured);  // nothing measured again
  // The same layouts, so the same roundings: bit for bit.
  CHECK(y2.to_vector<float>() == y1.to_vector<float>());
  CHECK(dx2.to_vector<float>() == dx1.to_vector<float>());
  CHECK(dw2[0].to_vector<float>() == dw1[0].to_vector<float>());
  CHECK(dw2[1].to_vector<float>() == dw1[1].to_vector<float>());
}
