// The `troupe` command as a user runs it: a subprocess on temporary .npy files, checking exit
// codes, stdout, stderr and the files it writes.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "devices/io/npy.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    const std::string name = "troupe_cli_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    path = fs::temp_directory_path() / name;
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Runs `troupe <args>` (args already shell-quoted where needed); stderr goes through a file.
Result troupe_cmd(const TempDir& dir, const std::string& args) {
  const std::string err_path = dir.file("stderr.txt");
  const std::string command = "'" + std::string(TROUPE_BIN_DIR) + "/troupe' " + args + " 2>'" + err_path + "'";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

std::string q(const std::string& path) { return "'" + path + "'"; }

}  // namespace

TEST_CASE("troupe op matmul writes the product", "[cli]") {
  TempDir dir;
  write_npy(dir.file("a.npy"), Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  write_npy(dir.file("b.npy"), Tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}));
  const Result r = troupe_cmd(dir, "op matmul " + q(dir.file("a.npy")) + " " + q(dir.file("b.npy")) + " --out " +
                                       q(dir.file("c.npy")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("f32[2,2]"));
  const Tensor c = read_npy(dir.file("c.npy"));
  CHECK(c.shape() == Shape{2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{4, 5, 10, 11});
  // Attributes parsed by the schema: a^T [3,2] @ b^T [2,3].
  const Result t = troupe_cmd(dir, "op matmul --attr transpose_a=true --attr transpose_b=true " + q(dir.file("a.npy")) +
                                       " " + q(dir.file("b.npy")) + " --out " + q(dir.file("t.npy")));
  INFO(t.err);
  REQUIRE(t.code == 0);
  CHECK(read_npy(dir.file("t.npy")).to_vector<float>() == std::vector<float>{1, 4, 5, 2, 5, 7, 3, 6, 9});
}

TEST_CASE("troupe op gather_nd takes --attr batch_dims=1", "[cli]") {
  TempDir dir;
  write_npy(dir.file("data.npy"), Tensor::arange(24).reshape({2, 3, 4}));
  write_npy(dir.file("idx.npy"), Tensor::from_vector<int64_t>({1, 2, 0, 3}, {2, 1, 2}));
  const Result r = troupe_cmd(dir, "op gather_nd --attr batch_dims=1 " + q(dir.file("data.npy")) + " " +
                                       q(dir.file("idx.npy")) + " --out " + q(dir.file("g.npy")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Tensor g = read_npy(dir.file("g.npy"));
  CHECK(g.shape() == Shape{2, 1});
  CHECK(g.to_vector<float>() == std::vector<float>{6, 15});  // data[0,1,2], data[1,0,3]
}

TEST_CASE("troupe op writes several outputs with --out-prefix or repeated --out", "[cli]") {
  TempDir dir;
  write_npy(dir.file("x.npy"), Tensor::arange(6).reshape({3, 2}));
  const Result r =
      troupe_cmd(dir, "op split --attr size=2 " + q(dir.file("x.npy")) + " --out-prefix " + q(dir.file("p")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(read_npy(dir.file("p0.npy")).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK(read_npy(dir.file("p1.npy")).to_vector<float>() == std::vector<float>{4, 5});
  const Result two = troupe_cmd(dir, "op split --attr sizes=1,2 " + q(dir.file("x.npy")) + " --out " +
                                         q(dir.file("s.npy")) + " --out " + q(dir.file("t.npy")));
  REQUIRE(two.code == 0);
  CHECK(read_npy(dir.file("t.npy")).shape() == Shape{2, 2});
}

TEST_CASE("troupe op reports errors on stderr with exit codes", "[cli][errors]") {
  TempDir dir;
  write_npy(dir.file("a.npy"), Tensor::zeros({2, 3}));
  write_npy(dir.file("b.npy"), Tensor::zeros({3, 2}));
  const std::string ab = q(dir.file("a.npy")) + " " + q(dir.file("b.npy")) + " --out " + q(dir.file("o.npy"));

  const Result unknown = troupe_cmd(dir, "op no_such_op " + ab);
  CHECK(unknown.code == 1);
  CHECK_THAT(unknown.err, Catch::StartsWith("troupe op: ") && Catch::Contains("no_such_op"));
  CHECK(unknown.out.empty());

  const Result bad_value = troupe_cmd(dir, "op gather_nd --attr batch_dims=two " + ab);
  CHECK(bad_value.code == 1);
  CHECK_THAT(bad_value.err, Catch::StartsWith("troupe op: gather_nd") && Catch::Contains("batch_dims") &&
                                Catch::Contains("two"));
  const Result bad_name = troupe_cmd(dir, "op gather_nd --attr depth=1 " + ab);
  CHECK(bad_name.code == 1);
  CHECK_THAT(bad_name.err, Catch::Contains("unknown attribute 'depth'") && Catch::Contains("batch_dims"));

  const Result shapes = troupe_cmd(dir, "op add " + ab);
  CHECK(shapes.code == 1);
  CHECK_THAT(shapes.err, Catch::StartsWith("troupe op: add") && Catch::Contains("[2,3]") && Catch::Contains("[3,2]"));
  CHECK_FALSE(fs::exists(dir.file("o.npy")));

  const Result missing = troupe_cmd(dir, "op add " + q(dir.file("nope.npy")) + " " + ab);
  CHECK(missing.code == 1);
  CHECK_THAT(missing.err, Catch::Contains("nope.npy"));

  // Usage errors: exit code 2.
  CHECK(troupe_cmd(dir, "op add " + q(dir.file("a.npy")) + " " + q(dir.file("a.npy"))).code == 2);  // no --out
  CHECK(troupe_cmd(dir, "op gather_nd --attr batch_dims " + ab).code == 2);                        // no '='
  CHECK(troupe_cmd(dir, "op split --attr size=1 " + q(dir.file("a.npy")) + " --out " + q(dir.file("o.npy"))).code ==
        2);  // two outputs, one --out
  CHECK(troupe_cmd(dir, "op --no-such-flag").code == 2);
  CHECK(troupe_cmd(dir, "").code == 2);
}

TEST_CASE("troupe op lists, describes and checks ops, --help everywhere", "[cli]") {
  TempDir dir;
  const Result list = troupe_cmd(dir, "op --list");
  CHECK(list.code == 0);
  CHECK_THAT(list.out, Catch::Contains("gather_nd") && Catch::Contains("batch_dims:int=0"));
  const Result describe = troupe_cmd(dir, "op --describe gather_nd");
  CHECK(describe.code == 0);
  CHECK_THAT(describe.out, Catch::Contains("--attr batch_dims=<int>") && Catch::Contains("default 0"));
  CHECK(troupe_cmd(dir, "op --describe no_such_op").code == 1);
  CHECK_THAT(troupe_cmd(dir, "op --describe argmax").out, Catch::Contains("not differentiable: integer output"));
  // --json: one object per op, with the device types it has kernels for.
  const Result json = troupe_cmd(dir, "op --list --json");
  REQUIRE(json.code == 0);
  const auto ops = nlohmann::json::parse(json.out);
  auto find_op = [&](const std::string& name) {
    for (const auto& op : ops)
      if (op.at("name") == name) return op;
    return nlohmann::json();
  };
  const auto add = find_op("add");
  REQUIRE(add.is_object());
  const auto devices = add.at("devices").get<std::vector<std::string>>();
  CHECK(std::count(devices.begin(), devices.end(), "cpu") == 1);
#ifdef TROUPE_HAVE_CUDA
  CHECK(std::count(devices.begin(), devices.end(), "cuda") == 1);  // registered when built with nvcc, GPU or not
#endif
  const auto gather = find_op("gather_nd");
  REQUIRE(gather.is_object());
  CHECK(gather.at("min_inputs") == 2);
  CHECK(gather.at("attrs").at(0).at("name") == "batch_dims");
  CHECK(gather.at("attrs").at(0).at("default") == 0);
  CHECK(troupe_cmd(dir, "op --json").code == 2);  // --json only goes with --list
  const Result check = troupe_cmd(dir, "op --check");
  CHECK(check.code == 0);
  CHECK_THAT(check.out, Catch::Contains("every differentiable op has a backward"));
  for (const char* args : {"--help", "op --help", "info --help"}) {
    INFO(args);
    const Result help = troupe_cmd(dir, args);
    CHECK(help.code == 0);
    CHECK_THAT(help.out, Catch::Contains("Usage"));
  }
}

TEST_CASE("troupe info reports the build and machine, as text or JSON", "[cli]") {
  TempDir dir;
  const Result text = troupe_cmd(dir, "info");
  INFO(text.err);
  REQUIRE(text.code == 0);
  CHECK_THAT(text.out, Catch::Contains("oneDNN") && Catch::Contains("OpenBLAS") && Catch::Contains("gemm") &&
                           Catch::StartsWith("troupe ") && Catch::Contains("cuda"));
  const Result json = troupe_cmd(dir, "info --json");
  REQUIRE(json.code == 0);
  const auto info = nlohmann::json::parse(json.out);
  CHECK_FALSE(info.at("version").get<std::string>().empty());
  CHECK(info.at("cores").get<int>() >= 1);
  CHECK_THAT(info.at("cpu_affinity").get<std::string>(), Catch::Matches("[0-9][0-9,-]*"));
  CHECK(info.at("ops").get<int>() > 0);
  CHECK(info.at("onednn").at("version").get<std::string>().find('.') != std::string::npos);
  CHECK((info.at("gemm").at("backend") == "onednn" || info.at("gemm").at("backend") == "openblas"));
  CHECK(info.at("cpu").at("features").contains("avx2"));
  CHECK((info.at("cuda").contains("reason") || info.at("cuda").contains("devices")));
  CHECK(info.at("deterministic_kernels") == (std::getenv("TROUPE_DETERMINISTIC") != nullptr &&
                                             std::string(std::getenv("TROUPE_DETERMINISTIC")) == "1"));

  // Deterministic kernels: the GEMM library is fixed, not measured.
  ::setenv("TROUPE_DETERMINISTIC", "1", 1);
  const Result fixed = troupe_cmd(dir, "info --json");
  ::unsetenv("TROUPE_DETERMINISTIC");
  REQUIRE(fixed.code == 0);
  const auto fixed_info = nlohmann::json::parse(fixed.out);
  CHECK(fixed_info.at("deterministic_kernels") == true);
  CHECK(fixed_info.at("gemm").at("backend") == "onednn");
  CHECK_THAT(fixed_info.at("gemm").at("reason").get<std::string>(), Catch::Contains("deterministic kernels"));
}

TEST_CASE("troupe info: the GEMM library is measured once on a machine and then remembered", "[cli]") {
  if (std::getenv("TROUPE_DETERMINISTIC") || std::getenv("TROUPE_GEMM")) {
    WARN("SKIPPED: TROUPE_DETERMINISTIC or TROUPE_GEMM fixes the GEMM library without measuring");
    return;
  }
  TempDir dir;
  ::setenv("TROUPE_KERNEL_CACHE", dir.file("choices").c_str(), 1);
  const Result first = troupe_cmd(dir, "info --json"), second = troupe_cmd(dir, "info --json");
  ::setenv("TROUPE_KERNEL_CACHE", "off", 1);
  const Result off = troupe_cmd(dir, "info --json");
  ::unsetenv("TROUPE_KERNEL_CACHE");
  INFO(first.err << second.err << off.err);
  REQUIRE((first.code == 0 && second.code == 0 && off.code == 0));
  const auto a = nlohmann::json::parse(first.out), b = nlohmann::json::parse(second.out), c = nlohmann::json::parse(off.out);
  const std::string file = a.at("kernel_choices").at("file").get<std::string>();
  CHECK_THAT(file, Catch::StartsWith(dir.file("choices") + "/kernel-choices-") && Catch::EndsWith(".txt"));
  CHECK_THAT(a.at("gemm").at("reason").get<std::string>(), Catch::Contains("measured here"));
  CHECK_THAT(b.at("gemm").at("reason").get<std::string>(), Catch::Contains("measured before (kept in " + file + ")"));
  CHECK(b.at("gemm").at("backend") == a.at("gemm").at("backend"));
  CHECK(b.at("gemm").at("onednn_gflops").get<double>() == Approx(a.at("gemm").at("onednn_gflops").get<double>()).epsilon(0.01));
  std::ifstream kept(file);
  std::stringstream text;
  text << kept.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("\ngemm/calibration/256x1024x1024 "));
  // Off: measured by every process, and no file.
  CHECK(c.at("kernel_choices").at("file") == "");
  CHECK_THAT(c.at("gemm").at("reason").get<std::string>(), Catch::Contains("measured here"));
}
