#include "net/bootstrap/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "net/errors.h"

namespace troupe::net {

namespace {

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string ipc_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t && std::strlen(t) < 60 ? t : "/tmp";
}

}  // namespace

std::string PeerAddress::serialize() const {
  return tcp + "|" + ipc + "|" + host_id + (direct.empty() ? "" : "|" + direct);
}

PeerAddress PeerAddress::parse(const std::string& text) {
  std::vector<std::string> fields;
  for (size_t at = 0;;) {
    const size_t bar = text.find('|', at);
    fields.push_back(text.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  if (fields.size() != 3 && fields.size() != 4) throw CommError("rendezvous: malformed peer address '" + text + "'");
  if (fields.size() == 4 && fields[3].empty())
    throw CommError("rendezvous: malformed peer address '" + text + "': an empty direct endpoint");
  PeerAddress p{fields[0], fields[1], fields[2], fields.size() == 4 ? fields[3] : ""};
  if (p.tcp.empty() && p.ipc.empty()) throw CommError("rendezvous: peer address without endpoints");
  return p;
}

std::string host_id() {
  // Same boot; the same directory for ipc sockets (device and inode: `ip netns exec` gives each
  // process a mount namespace of its own over the same files); the same pid namespace (shared
  // memory is mapped through /proc/<pid>); the same network namespace (so a netns test really goes
  // over tcp).
  std::error_code ec;
  auto ns = [&](const char* p) { return std::filesystem::read_symlink(p, ec).string(); };
  struct stat dir {};
  const std::string where = ::stat(ipc_dir().c_str(), &dir) == 0
                                ? std::to_string(dir.st_dev) + ":" + std::to_string(dir.st_ino)
                                : ns("/proc/self/ns/mnt");
  return read_line("/proc/sys/kernel/random/boot_id") + "/" + where + "/" + ns("/proc/self/ns/pid") + "/" +
         ns("/proc/self/ns/net");
}

std::string ipc_path(int rank) {
  static std::atomic<int> counter{0};
  return ipc_dir() + "/troupe-" + std::to_string(::getpid()) + "-" + std::to_string(rank) + "-" +
         std::to_string(counter++) + ".sock";
}

namespace {

// "…/troupe-<pid>-<rank>-<n>.sock" -> "<pid>"; "" for any other path.
std::string pid_in(const std::string& ipc) {
  const size_t at = ipc.rfind("/troupe-");
  if (at == std::string::npos) return "";
  const size_t start = at + 8, end = ipc.find('-', start);
  return end == std::string::npos ? "" : ipc.substr(start, end - start);
}

}  // namespace

bool same_process(const PeerAddress& a, const PeerAddress& b) {
  const std::string pa = pid_in(a.ipc), pb = pid_in(b.ipc);
  return a.host_id == b.host_id && (pa.empty() || pb.empty() || pa == pb);  // unknown: assume the worst
}

}  // namespace troupe::net
