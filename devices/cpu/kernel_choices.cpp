#include "devices/cpu/kernel_choices.h"

#include <cblas.h>
#include <fcntl.h>
#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "devices/cpu/isa.h"
#include "devices/error.h"

namespace troupe {

namespace {

// More is not a file of ours: none of it is read, and the first choice kept starts it over.
constexpr std::streamsize kMaxFileBytes = 1 << 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// What the measured choices depend on, in words (the file's first line says it).
std::string machine_kind() {
  const auto info = cpu_info();
  std::string kind;
  for (const char* field : {"vendor_id", "cpu family", "model", "model name", "stepping", "flags"})
    if (const auto it = info.find(field); it != info.end()) kind += std::string(field) + "=" + it->second + ";";
  std::string isa;
  try {
    isa = cpu_isa_name(cpu_isa());
  } catch (const std::exception&) {
    isa = "invalid TROUPE_CPU_ISA";  // the kernels themselves say so
  }
  const dnnl_version_t* dnnl = dnnl_version();
  kind += "cpus=" + std::to_string(std::thread::hardware_concurrency()) + ";isa=" + isa +
          ";onednn=" + std::to_string(dnnl->major) + "." + std::to_string(dnnl->minor) + "." +
          std::to_string(dnnl->patch) + "+" + (dnnl->hash ? dnnl->hash : "") + ";openblas=" + openblas_get_config() +
          ";OPENBLAS_CORETYPE=" + env("OPENBLAS_CORETYPE");
  return kind;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string default_directory() {
  const std::string chosen = env("TROUPE_KERNEL_CACHE");
  if (chosen == "off") return "";
  if (!chosen.empty()) return chosen;
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/troupe";
  if (!env("HOME").empty()) return env("HOME") + "/.cache/troupe";
  return "";
}

// Printable ASCII, no spaces.
bool well_formed(const std::string& word) {
  if (word.empty()) return false;
  for (unsigned char c : word)
    if (c <= ' ' || c >= 0x7f) return false;
  return true;
}

struct Store {
  std::mutex mutex;
  bool resolved = false;  // path chosen
  bool loaded = false;    // path read
  bool oversized = false;  // over kMaxFileBytes when read
  std::string path;
  std::string header;  // written first into a new file
  std::map<std::string, std::string> choices;

  void resolve() {
    if (resolved) return;
    resolved = true;
    const std::string dir = default_directory();
    if (dir.empty()) return;
    const std::string kind = machine_kind();
    char name[64];
    std::snprintf(name, sizeof(name), "/kernel-choices-%016llx.txt", static_cast<unsigned long long>(fnv1a(kind)));
    path = dir + name;
    header = "# troupe kernel choices measured on: " + kind + "\n";
  }

  void load() {
    resolve();
    if (loaded) return;
    loaded = true;
    if (path.empty()) return;
    std::ifstream in(path, std::ios::binary);
    if (!in) return;
    in.seekg(0, std::ios::end);
    if (in.tellg() > kMaxFileBytes) {
      oversized = true;
      return;
    }
    in.seekg(0);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const auto space = line.find(' ');
      if (space == std::string::npos) continue;
      std::string key = line.substr(0, space), value = line.substr(space + 1);
      if (well_formed(key) && well_formed(value)) choices[key] = value;
    }
  }

  // One write of the whole line, O_APPEND: lines of processes appending together do not mix. Not
  // through a symbolic link: a link planted in a shared directory does not redirect the writes.
  void append(const std::string& line) {
    if (path.empty()) return;
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (oversized ? O_TRUNC : 0),
                          0644);
    if (fd < 0) return;  // not writable here: this process keeps its choices to itself
    std::string text = line;
    if (oversized) {  // started over with what this process holds
      text.clear();
      for (const auto& [key, value] : choices) text += key + " " + value + "\n";
      oversized = false;
    }
    if (::lseek(fd, 0, SEEK_END) == 0) text = header + text;
    [[maybe_unused]] const ssize_t written = ::write(fd, text.data(), text.size());
    ::close(fd);
  }
};

Store& store() {
  static Store s;
  return s;
}

}  // namespace

std::optional<std::string> remembered_choice(const std::string& key) {
  Store& s = store();
  std::lock_guard lock(s.mutex);
  s.load();
  const auto it = s.choices.find(key);
  if (it == s.choices.end()) return std::nullopt;
  return it->second;
}

void remember_choice(const std::string& key, const std::string& value) {
  if (!well_formed(key) || !well_formed(value))
    throw ValueError("remember_choice: key and value are single words of printable ASCII, not '" + key + "' '" + value + "'");
  Store& s = store();
  std::lock_guard lock(s.mutex);
  s.load();
  s.choices[key] = value;
  s.append(key + " " + value + "\n");
}

std::string kernel_choices_file() {
  Store& s = store();
  std::lock_guard lock(s.mutex);
  s.resolve();
  return s.path;
}

void set_kernel_choices_file(const std::string& path) {
  Store& s = store();
  std::lock_guard lock(s.mutex);
  s.resolve();  // the header's machine kind
  s.path = path;
  s.loaded = false;
  s.choices.clear();
}

}  // namespace troupe
