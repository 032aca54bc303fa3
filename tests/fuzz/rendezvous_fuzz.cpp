// libFuzzer target for the rendezvous messages (net/bootstrap/rendezvous_messages.h): a registration, rank
// 0's answer (a table, or its error or timeout verdict) or a file:// line parses to a value whose
// format_* text parses back to an equal value, or throws CommError (an answer carrying rank 0's
// timeout: TimeoutError); never crash or hang. A table's or a parsed address's PeerAddress
// serializes and parses back to the same fields.
// Input: byte 0: the parser (% 3: registration, table, file line), for a table also the world
// size (/ 3); the message's bytes after it.
//   build/bin/rendezvous_fuzz -max_total_time=60 tests/fuzz/corpus/rendezvous
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "devices/error.h"
#include "net/bootstrap/rendezvous_messages.h"

namespace {

using troupe::net::PeerAddress;

bool same(const PeerAddress& a, const PeerAddress& b) {
  return a.tcp == b.tcp && a.ipc == b.ipc && a.host_id == b.host_id && a.direct == b.direct;
}

// An address text that parses must serialize back to the text it came from.
void check_address(const std::string& text) {
  try {
    const PeerAddress a = PeerAddress::parse(text);
    if (a.serialize() != text) std::abort();
  } catch (const troupe::CommError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int kind = data[0] % 3;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace net = troupe::net;
  try {
    if (kind == 0) {
      const net::Registration reg = net::parse_registration(body);
      if (net::parse_registration(net::format_registration(reg)) != reg) std::abort();
      check_address(reg.address);
    } else if (kind == 1) {
      const int world = data[0] / 3;
      const std::vector<PeerAddress> table = net::parse_table(body, world);
      if (static_cast<int>(table.size()) != world) std::abort();
      const std::vector<PeerAddress> again = net::parse_table(net::format_table(table), world);
      if (again.size() != table.size()) std::abort();
      for (size_t r = 0; r < table.size(); ++r)
        if (!same(again[r], table[r])) std::abort();
    } else {
      const net::FileLine line = net::parse_file_line(body);
      if (net::parse_file_line(net::format_file_line(line)) != line) std::abort();
      check_address(line.address);
    }
  } catch (const troupe::CommError&) {
  } catch (const troupe::TimeoutError&) {
    if (kind != 1) std::abort();
  }
  return 0;
}
