// Dims (devices/dims.h): a shape's list of int64 behaves as std::vector<int64_t> does, within its
// inline room and past it.
#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "devices/dims.h"

using namespace troupe;

namespace {
std::vector<int64_t> as_vector(const Dims& d) { return {d.begin(), d.end()}; }
}  // namespace

TEST_CASE("Dims does what std::vector<int64_t> does, inline and past its inline room", "[dims]") {
  for (size_t n : {size_t{0}, size_t{3}, Dims::kInline, Dims::kInline + 1, size_t{20}}) {
    INFO("n " << n);
    Dims d;
    std::vector<int64_t> v;
    for (size_t i = 0; i < n; ++i) {
      d.push_back(static_cast<int64_t>(i * 7 - 3));
      v.push_back(static_cast<int64_t>(i * 7 - 3));
    }
    CHECK(as_vector(d) == v);
    CHECK(d.size() == n);
    CHECK(d.empty() == (n == 0));
    d.insert(d.begin(), 100);
    v.insert(v.begin(), 100);
    d.insert(d.begin() + 1, size_t{2}, -1);
    v.insert(v.begin() + 1, size_t{2}, -1);
    d.insert(d.end(), {5, 6, 7});
    v.insert(v.end(), {5, 6, 7});
    d.insert(d.begin() + 2, d.begin(), d.begin() + 3);  // its own values
    const std::vector<int64_t> first3(v.begin(), v.begin() + 3);
    v.insert(v.begin() + 2, first3.begin(), first3.end());
    CHECK(as_vector(d) == v);
    d.erase(d.begin() + 1);
    v.erase(v.begin() + 1);
    d.erase(d.begin(), d.begin() + 2);
    v.erase(v.begin(), v.begin() + 2);
    CHECK(as_vector(d) == v);
    d.resize(d.size() + 4, 9);
    v.resize(v.size() + 4, 9);
    d.pop_back();
    v.pop_back();
    CHECK(as_vector(d) == v);
    CHECK(d.front() == v.front());
    CHECK(d.back() == v.back());

    const Dims copy = d;
    Dims moved = Dims(d);
    Dims assigned;
    assigned = copy;
    CHECK(copy == d);
    CHECK(moved == d);
    CHECK(assigned == d);
    Dims from_move = std::move(moved);
    CHECK(from_move == d);
    CHECK(moved.empty());  // NOLINT: a moved-from Dims is empty, as a moved-from vector
    moved.push_back(1);    // and usable
    CHECK(moved.size() == 1);
    std::vector<int64_t> back = d;
    CHECK(back == v);
    CHECK(Dims(v) == d);
    CHECK(d == v);
  }
}

TEST_CASE("Dims compares, orders and converts as a vector does", "[dims]") {
  CHECK(Dims{1, 2} < Dims{1, 3});
  CHECK(Dims{1, 2} < Dims{1, 2, 0});
  CHECK_FALSE(Dims{2} < Dims{1, 9});
  CHECK(Dims{} == Dims());
  CHECK(Dims(3, 4) == Dims{4, 4, 4});
  std::map<Dims, int> by_shape{{Dims{2, 3}, 1}, {Dims{2}, 2}};
  CHECK(by_shape.at(Dims{2, 3}) == 1);
  Dims a{1, 2, 3, 4, 5, 6, 7, 8}, b{9};
  swap(a, b);
  CHECK(a == Dims{9});
  CHECK(b.size() == 8);
  CHECK_THROWS_AS(a.at(1), std::out_of_range);
  CHECK(a.at(0) == 9);
}
