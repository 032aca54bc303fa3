#include "net/bootstrap/rendezvous_messages.h"

#include <charconv>

#include "devices/error.h"

namespace troupe::net {

namespace {

// Outside text in a message: quoted, at most 64 bytes of it.
std::string in_quotes(std::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, kMax)) + "...' (" + std::to_string(text.size()) + " bytes)";
}

// A decimal int as std::to_string writes it ("-" allowed, nothing else around the digits).
bool parse_int(std::string_view text, int& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && stop == end;
}

constexpr std::string_view kBlanks = " \t\r\v\f";

}  // namespace

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string format_registration(const Registration& registration) {
  return "register\n" + std::to_string(registration.rank) + "\n" + std::to_string(registration.world) + "\n" +
         registration.address;
}

Registration parse_registration(std::string_view body) {
  const auto lines = split_lines(body);
  if (lines.empty() || lines[0] != "register")
    throw CommError("rendezvous: not a registration: it begins " +
                    in_quotes(lines.empty() ? std::string_view() : lines[0]) + ", not 'register'");
  if (lines.size() != 4)
    throw CommError("rendezvous: malformed registration: " + std::to_string(lines.size()) +
                    " lines, expected 4 (register, rank, world size, address)");
  Registration r;
  if (!parse_int(lines[1], r.rank))
    throw CommError("rendezvous: malformed registration: rank " + in_quotes(lines[1]) + " is not an integer");
  if (!parse_int(lines[2], r.world))
    throw CommError("rendezvous: malformed registration from rank " + std::to_string(r.rank) + ": world size " +
                    in_quotes(lines[2]) + " is not an integer");
  if (lines[3].empty())
    throw CommError("rendezvous: malformed registration from rank " + std::to_string(r.rank) + ": no address");
  r.address = lines[3];
  return r;
}

std::string format_table(const std::vector<PeerAddress>& table) {
  std::string out = "table";
  for (const auto& a : table) out += "\n" + a.serialize();
  return out;
}

std::string format_error_answer(const std::string& message) { return "error\n" + message; }

std::string format_timeout_answer(const std::string& message) { return "timeout\n" + message; }

std::vector<PeerAddress> parse_table(std::string_view body, int world) {
  const auto lines = split_lines(body);
  if (lines.empty()) throw CommError("rendezvous: empty answer from rank 0");
  const std::string detail = lines.size() > 1 ? std::string(lines[1]) : "";
  if (lines[0] == "timeout") throw TimeoutError(detail);
  if (lines[0] == "error") throw CommError(detail);
  if (lines[0] != "table")
    throw CommError("rendezvous: malformed table from rank 0: it begins " + in_quotes(lines[0]) +
                    ", not 'table', 'error' or 'timeout'");
  if (world < 0 || lines.size() - 1 != static_cast<size_t>(world))
    throw CommError("rendezvous: malformed table from rank 0: " + std::to_string(lines.size() - 1) +
                    " addresses for a world of " + std::to_string(world));
  std::vector<PeerAddress> table;
  table.reserve(world);
  for (int r = 0; r < world; ++r) {
    try {
      table.push_back(PeerAddress::parse(std::string(lines[r + 1])));
    } catch (const CommError& e) {
      throw CommError("rendezvous: malformed table from rank 0: rank " + std::to_string(r) + "'s address: " +
                      e.what());
    }
  }
  return table;
}

std::string format_file_line(const FileLine& line) {
  auto check = [&](const std::string& field, const char* name) {
    if (field.empty() || field.find_first_of(kBlanks) != std::string::npos || field.find('\n') != std::string::npos)
      throw CommError("rendezvous file: rank " + std::to_string(line.rank) + "'s " + name + " " + in_quotes(field) +
                      (field.empty() ? " is empty" : " holds a blank or a line break") +
                      ": a file:// line cannot carry it");
  };
  check(line.run, "run id (TROUPE_RUN_ID)");
  check(line.address, "address");
  return "troupe1 " + line.run + " " + std::to_string(line.rank) + " " + std::to_string(line.world) + " " +
         line.address + "\n";
}

FileLine parse_file_line(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.find('\n') != std::string_view::npos)
    throw CommError("rendezvous file: malformed line: a line break inside it");
  std::vector<std::string_view> fields;
  for (size_t at = line.find_first_not_of(kBlanks); at != std::string_view::npos;
       at = line.find_first_not_of(kBlanks, at)) {
    const size_t end = std::min(line.find_first_of(kBlanks, at), line.size());
    fields.push_back(line.substr(at, end - at));
    at = end;
  }
  if (fields.empty() || fields[0] != "troupe1")
    throw CommError("rendezvous file: not a rendezvous line: it begins " +
                    in_quotes(fields.empty() ? std::string_view() : fields[0]) + ", not 'troupe1'");
  if (fields.size() != 5)
    throw CommError("rendezvous file: malformed line: " + std::to_string(fields.size()) +
                    " fields, expected 5 (troupe1 RUN RANK WORLD ADDRESS)");
  FileLine out;
  out.run = fields[1];
  if (!parse_int(fields[2], out.rank))
    throw CommError("rendezvous file: malformed line: rank " + in_quotes(fields[2]) + " is not an integer");
  if (!parse_int(fields[3], out.world))
    throw CommError("rendezvous file: malformed line of rank " + std::to_string(out.rank) + ": world size " +
                    in_quotes(fields[3]) + " is not an integer");
  out.address = fields[4];
  return out;
}

}  // namespace troupe::net
