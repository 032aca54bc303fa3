#pragma once
// The rendezvous' messages (net/bootstrap/rendezvous.h), as text: what a rank sends rank 0 over tcp://, what
// rank 0 answers, and a file:// rendezvous file's lines. Pure functions; internal to net/.
//
//   Registration reg = parse_registration(body);   // "register\n3\n4\ntcp://...|ipc://...|host"
//   std::vector<PeerAddress> table = parse_table(answer, world);
//   FileLine line = parse_file_line("troupe1 RUN 3 4 tcp://...|ipc://...|host");
//
// Each parse_* takes the bytes as they came and checks them all: anything malformed throws
// CommError naming the field (and the rank, once known); format_* writes what parse_* reads back
// to an equal value. Lines as std::getline splits them (a last '\n' ends the last line).
// Registrations and file lines keep the address as its text: where it is used, rank 0 checks the
// world size and the rank first, and a file's reader skips other runs' lines, before
// PeerAddress::parse (CommError) checks the address.
#include <string>
#include <string_view>
#include <vector>

#include "net/transport.h"

namespace troupe::net {

// A rank's registration with rank 0: "register\n<rank>\n<world>\n<address>".
struct Registration {
  int rank = -1;
  int world = -1;
  std::string address;  // PeerAddress::serialize()
  bool operator==(const Registration&) const = default;
};
std::string format_registration(const Registration& registration);
Registration parse_registration(std::string_view body);

// Rank 0's answer: "table\n<address of rank 0>\n...\n<address of rank world-1>", or its verdict
// "error\n<message>" / "timeout\n<message>". parse_table returns the table (world addresses),
// throws the verdict (CommError / TimeoutError with rank 0's message), or CommError when malformed.
std::string format_table(const std::vector<PeerAddress>& table);
std::string format_error_answer(const std::string& message);
std::string format_timeout_answer(const std::string& message);
std::vector<PeerAddress> parse_table(std::string_view body, int world);

// A file:// rendezvous line: "troupe1 RUN RANK WORLD ADDRESS" (fields between runs of blanks).
// format_file_line ends it with '\n', and throws CommError when the run or the address is empty
// or holds a blank (such a line would not read back).
struct FileLine {
  std::string run;  // $TROUPE_RUN_ID, or "-"
  int rank = -1;
  int world = -1;
  std::string address;  // PeerAddress::serialize()
  bool operator==(const FileLine&) const = default;
};
std::string format_file_line(const FileLine& line);
FileLine parse_file_line(std::string_view line);

// The lines of a message or a file, split as std::getline splits them.
std::vector<std::string_view> split_lines(std::string_view text);

}  // namespace troupe::net
