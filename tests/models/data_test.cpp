#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "devices/error.h"
#include "devices/ops.h"
#include "models/data/fashion_mnist.h"
#include "models/data/idx.h"
#include "models/data/loader.h"
#include "models/data/partition.h"
#include "support/two_workers.h"

using namespace troupe;
using namespace troupe::models;
namespace fs = std::filesystem;

namespace {

const Dataset& test_set() {
  static Dataset d = load_fashion_mnist(kFashionMnistDir, "t10k");
  return d;
}

fs::path temp_dir() {
  fs::path dir = fs::temp_directory_path() / ("troupe_data_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("Fashion-MNIST loads from the Debian package", "[data]") {
  const Dataset& test = test_set();
  CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
  CHECK(test.labels.shape() == Shape{10000});
  // The first labels of the t10k set: ankle boot, pullover, trouser, trouser, shirt.
  const int64_t* y = test.labels.data<int64_t>();
  CHECK(std::vector<int64_t>(y, y + 5) == std::vector<int64_t>{9, 2, 1, 1, 6});
  // Normalised pixels: 0 maps to -0.1307/0.3081, 255 to (1-0.1307)/0.3081.
  CHECK(min(test.images).item<float>() == Approx(-0.4242).epsilon(1e-3));
  CHECK(max(test.images).item<float>() == Approx(2.8215).epsilon(1e-3));
  Tensor raw = read_idx(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte.gz");
  CHECK(raw.shape() == Shape{60000});
  CHECK(raw.data<uint8_t>()[0] == 9);  // the first training image is an ankle boot
}

TEST_CASE("Fashion-MNIST's first images alone: the same as the whole set's first", "[data]") {
  const Dataset first = load_fashion_mnist(kFashionMnistDir, "t10k", 100);
  CHECK(first.images.shape() == Shape{100, 1, 28, 28});
  CHECK(first.labels.shape() == Shape{100});
  CHECK(first.images.to_vector<float>() == test_set().images.slice(0, 0, 100).contiguous().to_vector<float>());
  CHECK(first.labels.to_vector<int64_t>() == test_set().labels.slice(0, 0, 100).contiguous().to_vector<int64_t>());
  CHECK(load_fashion_mnist(kFashionMnistDir, "t10k", 20000).size() == 10000);  // a limit past the end: all
  CHECK_THROWS_AS(load_fashion_mnist(kFashionMnistDir, "t10k", -1), ValueError);
}

TEST_CASE("missing and corrupt files are IOErrors naming the path", "[data][errors]") {
  CHECK_THROWS_AS(load_fashion_mnist("/nonexistent/dir"), IOError);
  CHECK_THROWS_WITH(load_fashion_mnist("/nonexistent/dir"), Catch::Contains("/nonexistent/dir/train-images-idx3-ubyte.gz"));
  CHECK_THROWS_AS(load_fashion_mnist(kFashionMnistDir, "validation"), ValueError);
  const fs::path dir = temp_dir();
  const std::string bad_magic = (dir / "bad_magic").string(), short_data = (dir / "short").string();
  std::ofstream(bad_magic, std::ios::binary) << "PK\x03\x04 not an idx file";
  {
    std::ofstream out(short_data, std::ios::binary);  // declares 10 labels, holds 3
    const unsigned char header[] = {0, 0, 8, 1, 0, 0, 0, 10, 1, 2, 3};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
  }
  CHECK_THROWS_WITH(read_idx(bad_magic), Catch::Contains(bad_magic) && Catch::Contains("magic"));
  CHECK_THROWS_WITH(read_idx(short_data), Catch::Contains(short_data) && Catch::Contains("ends early"));
  fs::remove_all(dir);
}

TEST_CASE("partitions are disjoint, cover the set and are seeded", "[data]") {
  DataPartitioner parts(1000, {0.25, 0.25, 0.25, 0.25}, 7);
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    CHECK(parts.partition(r).size() == 250);
    seen.insert(parts.partition(r).begin(), parts.partition(r).end());
  }
  CHECK(seen.size() == 1000);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 999);
  CHECK(DataPartitioner(1000, {0.5, 0.5}, 7).partition(1) == DataPartitioner(1000, {0.5, 0.5}, 7).partition(1));
  CHECK(DataPartitioner(1000, {0.5, 0.5}, 7).partition(1) != DataPartitioner(1000, {0.5, 0.5}, 8).partition(1));
  CHECK_THROWS_AS(DataPartitioner(10, {0.7, 0.7}), ValueError);
  CHECK_THROWS_AS(DataPartitioner(10, {0.5, -0.1}), ValueError);
  CHECK_THROWS_AS(parts.partition(4), IndexError);
}

TEST_CASE("the loader batches a partition once per epoch, prefetching", "[data]") {
  two_workers();
  const Dataset& test = test_set();
  std::vector<int64_t> indices(100);
  for (int64_t i = 0; i < 100; ++i) indices[static_cast<size_t>(i)] = 3 * i;
  BatchLoader loader(test, indices, 32, 5);
  CHECK(loader.batches_per_epoch() == 4);
  std::vector<int64_t> first_epoch_labels;
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.start_epoch(epoch);
    int64_t rows = 0, batches = 0;
    double label_sum = 0;
    std::vector<int64_t> labels;
    while (auto batch = loader.next()) {
      CHECK(batch->images.shape()[0] == batch->labels.shape()[0]);
      CHECK(batch->images.shape()[1] == 1);
      rows += batch->labels.shape()[0];
      ++batches;
      label_sum += sum(batch->labels).item<double>();
      const int64_t* y = batch->labels.data<int64_t>();
      labels.insert(labels.end(), y, y + batch->labels.numel());
    }
    CHECK(rows == 100);
    CHECK(batches == 4);
    double expected = 0;
    for (int64_t i : indices) expected += static_cast<double>(test.labels.data<int64_t>()[i]);
    CHECK(label_sum == expected);  // every chosen example exactly once
    if (epoch == 0) first_epoch_labels = labels;
    else CHECK(labels != first_epoch_labels);  // reshuffled
  }
  CHECK_THROWS_AS(BatchLoader(test, {10000}, 8, 0), IndexError);
  CHECK_THROWS_AS(BatchLoader(test, {1}, 0, 0), ValueError);
}

TEST_CASE("two ranks of dist_sgd lower the loss and stay bit-identical", "[data][dist]") {
  const std::string bin = TROUPE_BIN_DIR;
  const std::string command = "'" + bin + "/troupe' launch --nproc 2 -- '" + bin +
                              "/dist_sgd' --subset 2000 --epochs 3 --verify 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  std::string output;
  char line[512];
  std::vector<double> losses;
  while (std::fgets(line, sizeof line, pipe)) {
    output += line;
    int epoch = 0;
    double loss = 0;
    if (std::sscanf(line, "[rank 0] epoch %d loss %lf", &epoch, &loss) == 2) losses.push_back(loss);
  }
  const int status = pclose(pipe);
  INFO(output);
  CHECK(status == 0);  // --verify: every step compares a hash of all parameters across ranks
  REQUIRE(losses.size() == 3);
  CHECK(losses[2] < losses[0]);
  CHECK(output.find("test_accuracy=") != std::string::npos);
}

TEST_CASE("dist_sgd's errors name it once and exit 1", "[data][dist][errors]") {
  // With a GPU: --sync naive is refused for a device; without: the device is. Either names it once.
  const std::string command = "'" + std::string(TROUPE_BIN_DIR) + "/dist_sgd' --device cuda --sync naive 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  std::string output;
  char line[512];
  while (std::fgets(line, sizeof line, pipe)) output += line;
  const int status = pclose(pipe);
  INFO(output);
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(output.rfind("dist_sgd: --device cuda", 0) == 0);
  CHECK(output.find("dist_sgd: dist_sgd:") == std::string::npos);
}
