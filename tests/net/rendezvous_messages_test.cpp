// The rendezvous messages: registrations, rank 0's answers and file:// lines round-trip, and every
// malformed one is a CommError naming what was wrong (rank 0's timeout verdict a TimeoutError).
#include <catch2/catch.hpp>

#include "devices/error.h"
#include "net/bootstrap/rendezvous_messages.h"

using namespace troupe;
using namespace troupe::net;

namespace {

const std::string a0 = "tcp://10.0.0.1:41234|ipc:///tmp/troupe-1-0-0.sock|boot/2049:7/pid:[1]/net:[2]";
const std::string a1 = "tcp://10.0.0.2:41235|ipc:///tmp/troupe-2-1-0.sock|boot/2049:7/pid:[1]/net:[3]";
const std::string a6 = "tcp://[fe80::1%eth0]:29501||other-host";

// The exception's type, and a fragment of its message (Catch2 v2's Message matcher is exact).
template <class E, class F>
void check_throws(F&& f, const std::string& part) {
  REQUIRE_THROWS_AS(f(), E);
  REQUIRE_THROWS_WITH(f(), Catch::Contains(part));
}

void check_same(const std::vector<PeerAddress>& a, const std::vector<PeerAddress>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t r = 0; r < a.size(); ++r) CHECK(a[r].serialize() == b[r].serialize());
}

}  // namespace

TEST_CASE("rendezvous messages: registrations round-trip", "[net][rendezvous]") {
  for (const Registration& reg : {Registration{1, 2, a1}, Registration{3, 4, a6}, Registration{-1, 0, "x"}}) {
    const std::string body = format_registration(reg);
    CHECK(parse_registration(body) == reg);
  }
  CHECK(format_registration({1, 2, a1}) == "register\n1\n2\n" + a1);
  CHECK(parse_registration("register\n1\n2\n" + a1 + "\n") == Registration{1, 2, a1});  // getline's last '\n'
}

TEST_CASE("rendezvous messages: every malformed registration is a CommError naming the field", "[net][rendezvous]") {
  auto check = [](const std::string& body, const std::string& part) {
    INFO("body: " << body);
    check_throws<CommError>([&] { return parse_registration(body); }, part);
  };
  check("", "not a registration: it begins ''");
  check("hello\n1\n2\n" + a1, "it begins 'hello', not 'register'");
  check("register\n1\n2", "3 lines, expected 4");
  check("register\n1\n2\n" + a1 + "\nmore", "5 lines, expected 4");
  check("register\none\n2\n" + a1, "rank 'one' is not an integer");
  check("register\n 1\n2\n" + a1, "rank ' 1' is not an integer");
  check("register\n1x\n2\n" + a1, "rank '1x' is not an integer");
  check("register\n99999999999\n2\n" + a1, "rank '99999999999' is not an integer");
  check("register\n3\n+4\n" + a1, "from rank 3: world size '+4' is not an integer");
  check("register\n3\n\n" + a1, "from rank 3: world size '' is not an integer");
  check("register\n3\n4\n\n", "from rank 3: no address");
  check("register\n" + std::string(1000, '7') + "\n2\n" + a1, "...' (1000 bytes) is not an integer");
}

TEST_CASE("rendezvous messages: tables round-trip, rank 0's verdicts come back as its errors", "[net][rendezvous]") {
  const std::vector<PeerAddress> table{PeerAddress::parse(a0), PeerAddress::parse(a1), PeerAddress::parse(a6)};
  check_same(parse_table(format_table(table), 3), table);
  check_same(parse_table(format_table(table) + "\n", 3), table);
  CHECK(format_table(table) == "table\n" + a0 + "\n" + a1 + "\n" + a6);
  CHECK(parse_table("table", 0).empty());

  REQUIRE_THROWS_MATCHES(parse_table(format_error_answer("rendezvous: rank 1 says world size 3"), 2), CommError,
                         Catch::Message("rendezvous: rank 1 says world size 3"));
  REQUIRE_THROWS_MATCHES(parse_table(format_timeout_answer("rank(s) 2 did not register"), 3), TimeoutError,
                         Catch::Message("rank(s) 2 did not register"));
}

TEST_CASE("rendezvous messages: every malformed table is a CommError naming what was wrong", "[net][rendezvous]") {
  auto check = [](const std::string& body, int world, const std::string& part) {
    INFO("body: " << body);
    check_throws<CommError>([&] { return parse_table(body, world); }, part);
  };
  check("", 2, "empty answer from rank 0");
  check("tables\n" + a0 + "\n" + a1, 2, "it begins 'tables', not 'table', 'error' or 'timeout'");
  check("table\n" + a0, 2, "malformed table from rank 0: 1 addresses for a world of 2");
  check("table\n" + a0 + "\n" + a1 + "\n" + a1, 2, "3 addresses for a world of 2");
  check("table\n" + a0 + "\n" + a1, -1, "for a world of -1");
  check("table\n" + a0 + "\ntcp://10.0.0.2:1|ipc", 2, "rank 1's address: rendezvous: malformed peer address");
  check("table\n" + a0 + "\n||host", 2, "rank 1's address: rendezvous: peer address without endpoints");
  check("table\n\n" + a1, 2, "rank 0's address");
}

TEST_CASE("rendezvous messages: file lines round-trip", "[net][rendezvous]") {
  for (const FileLine& line : {FileLine{"run-7", 1, 2, a1}, FileLine{"-", 0, 3, a6}, FileLine{"r", -5, 0, "x"}}) {
    const std::string text = format_file_line(line);
    CHECK(text.back() == '\n');
    CHECK(parse_file_line(text) == line);
  }
  CHECK(format_file_line({"run-7", 1, 2, a1}) == "troupe1 run-7 1 2 " + a1 + "\n");
  CHECK(parse_file_line("  troupe1\trun-7   1 2 " + a1 + " \r") == FileLine{"run-7", 1, 2, a1});
}

TEST_CASE("rendezvous messages: every malformed file line is a CommError naming the field", "[net][rendezvous]") {
  auto check = [](const std::string& text, const std::string& part) {
    INFO("line: " << text);
    check_throws<CommError>([&] { return parse_file_line(text); }, part);
  };
  check("", "not a rendezvous line: it begins ''");
  check("troupe2 run 1 2 " + a1, "it begins 'troupe2', not 'troupe1'");
  check("troupe1 run 1 2", "4 fields, expected 5");
  check("troupe1 run 1 2 " + a1 + " extra", "6 fields, expected 5");
  check("troupe1 run one 2 " + a1, "rank 'one' is not an integer");
  check("troupe1 run 1 2x " + a1, "line of rank 1: world size '2x' is not an integer");
  check("troupe1 run 1 2 " + a1 + "\ntroupe1 run 2 2 " + a1, "a line break inside it");

  // What would not read back is not written.
  check_throws<CommError>([] { return format_file_line({"my run", 1, 2, a1}); },
                          "rank 1's run id (TROUPE_RUN_ID) 'my run' holds a blank");
  check_throws<CommError>([] { return format_file_line({"run", 1, 2, "tcp://h:1|ipc:///tmp/my dir/s.sock|h"}); },
                          "rank 1's address 'tcp://h:1|ipc:///tmp/my dir/s.sock|h' holds a blank");
  check_throws<CommError>([] { return format_file_line({"", 1, 2, a1}); }, "run id (TROUPE_RUN_ID) '' is empty");
}

TEST_CASE("rendezvous messages: lines split as std::getline splits them", "[net][rendezvous]") {
  using Lines = std::vector<std::string_view>;
  CHECK(split_lines("") == Lines{});
  CHECK(split_lines("\n") == Lines{""});
  CHECK(split_lines("a") == Lines{"a"});
  CHECK(split_lines("a\n") == Lines{"a"});
  CHECK(split_lines("a\n\nb") == Lines{"a", "", "b"});
  CHECK(split_lines("a\nb\n\n") == Lines{"a", "b", ""});
}
