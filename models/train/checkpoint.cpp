#include "models/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "devices/error.h"
#include "devices/io/safetensors.h"

namespace troupe::models {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTensorsFile = "tensors.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kFormat = "troupe-checkpoint";
constexpr int kVersion = 1;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw IOError("checkpoint " + path + ": " + why);
}

// Data and metadata on disk before a rename publishes them (a directory's fsync makes its entries durable).
void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("open for fsync: ") + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) fail(path, std::string("fsync: ") + std::strerror(error));
}

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t fnv1a = 1469598103934665603ull;
};

FileDigest digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  FileDigest d;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < n; ++i) d.fnv1a = (d.fnv1a ^ static_cast<unsigned char>(buffer[i])) * 1099511628211ull;
    d.bytes += n;
  }
  return d;
}

std::string hex(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

uint64_t from_hex(const nlohmann::json& j, const std::string& what) {
  const std::string text = j.get<std::string>();
  if (text.empty() || text.size() > 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw ValueError(what + ": expected up to 16 lowercase hex digits, got '" + text + "'");
  return std::stoull(text, nullptr, 16);
}

// step-<digits>, the only names steps() counts.
std::optional<int64_t> step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 || name.size() > 5 + 18) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::map<std::string, Tensor> with_prefix(const std::map<std::string, Tensor>& tensors, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace(name.substr(prefix.size()), t);
  return out;
}

}  // namespace

CheckpointDir::CheckpointDir(std::string path, int keep) : path_(std::move(path)), keep_(keep) {
  if (keep < 1) throw ValueError("CheckpointDir: keep must be at least 1, got " + std::to_string(keep));
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec || !fs::is_directory(path_)) fail(path_, "cannot create the directory: " + ec.message());
}

std::string CheckpointDir::path_of(int64_t step) const { return (fs::path(path_) / ("step-" + std::to_string(step))).string(); }

void CheckpointDir::save(const Checkpoint& c) {
  if (c.step < 0) throw ValueError("CheckpointDir::save: negative step " + std::to_string(c.step));
  const std::string tag = std::to_string(c.step) + "." + std::to_string(::getpid());
  const fs::path tmp = fs::path(path_) / (".step-" + tag + ".tmp");
  const fs::path final_path = path_of(c.step);
  fs::remove_all(tmp);
  fs::create_directory(tmp);

  const std::string tensors_path = (tmp / kTensorsFile).string();
  write_safetensors(tensors_path, c.tensors, {{"format", "pt"}});
  sync_path(tensors_path);
  const FileDigest d = digest(tensors_path);
  const nlohmann::json record = {{"format", kFormat}, {"version", kVersion},  {"step", c.step},
                                 {"state", c.state},  {"tensors_bytes", d.bytes}, {"tensors_fnv1a", hex(d.fnv1a)}};
  const std::string state_path = (tmp / kStateFile).string();
  {
    std::ofstream out(state_path, std::ios::binary | std::ios::trunc);
    out << record.dump(1) << "\n";
    out.close();
    if (!out) fail(state_path, "write failed");
  }
  sync_path(state_path);
  sync_path(tmp.string());

  // A save of a step that already exists (a restarted run going over it again) replaces it; a
  // crash in between leaves the older checkpoints, which are complete.
  const fs::path old = fs::path(path_) / (".step-" + tag + ".old");
  if (fs::exists(final_path)) fs::rename(final_path, old);
  fs::rename(tmp, final_path);
  sync_path(path_);
  fs::remove_all(old);

  std::vector<int64_t> all = steps();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) fs::remove_all(path_of(all[i]));
  for (const auto& entry : fs::directory_iterator(path_)) {  // leftovers of a crash in an earlier save
    const std::string name = entry.path().filename().string();
    if (name.rfind(".step-", 0) == 0 && entry.path() != tmp && entry.path() != old) fs::remove_all(entry.path());
  }
}

std::vector<int64_t> CheckpointDir::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path_, ec)) {
    const auto step = step_of(entry.path().filename().string());
    if (step && fs::exists(entry.path() / kStateFile) && fs::exists(entry.path() / kTensorsFile)) out.push_back(*step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<int64_t> CheckpointDir::latest() const {
  const auto all = steps();
  if (all.empty()) return std::nullopt;
  return all.back();
}

Checkpoint CheckpointDir::load(int64_t step) const {
  const std::string dir = path_of(step);
  const std::string state_path = (fs::path(dir) / kStateFile).string();
  const std::string tensors_path = (fs::path(dir) / kTensorsFile).string();
  if (!fs::is_directory(dir)) fail(dir, "no such checkpoint (saved steps: " + std::to_string(steps().size()) + ")");
  std::ifstream in(state_path, std::ios::binary);
  if (!in) fail(state_path, "cannot open");
  std::stringstream text;
  text << in.rdbuf();
  Checkpoint c;
  uint64_t bytes = 0, fnv1a = 0;
  try {
    const nlohmann::json record = nlohmann::json::parse(text.str());
    if (record.at("format") != kFormat || record.at("version") != kVersion)
      fail(state_path, "not a troupe checkpoint of version " + std::to_string(kVersion) + " (format " +
                           record.at("format").dump() + ", version " + record.at("version").dump() + ")");
    c.step = record.at("step").get<int64_t>();
    c.state = record.at("state");
    bytes = record.at("tensors_bytes").get<uint64_t>();
    fnv1a = from_hex(record.at("tensors_fnv1a"), "tensors_fnv1a");
  } catch (const nlohmann::json::exception& e) {
    fail(state_path, std::string("unreadable state: ") + e.what());
  } catch (const ValueError& e) {
    fail(state_path, e.what());
  }
  if (c.step != step) fail(state_path, "records step " + std::to_string(c.step) + " in the directory of step " + std::to_string(step));
  const FileDigest d = digest(tensors_path);
  if (d.bytes != bytes)
    fail(tensors_path, std::to_string(d.bytes) + " bytes, state.json recorded " + std::to_string(bytes) + " (truncated?)");
  if (d.fnv1a != fnv1a) fail(tensors_path, "content hash " + hex(d.fnv1a) + " differs from the recorded " + hex(fnv1a));
  c.tensors = read_safetensors(tensors_path);
  return c;
}

Checkpoint capture(int64_t step, Module& model, const Optimizer& optimizer, nlohmann::json state) {
  Checkpoint c;
  c.step = step;
  c.state = std::move(state);
  for (auto& [name, t] : model.state_dict()) c.tensors.emplace("model." + name, t);
  for (auto& [name, t] : optimizer.state_dict()) c.tensors.emplace("optimizer." + name, t);
  return c;
}

void restore(const Checkpoint& c, Module& model, Optimizer& optimizer) {
  for (const auto& [name, t] : c.tensors)
    if (name.rfind("model.", 0) != 0 && name.rfind("optimizer.", 0) != 0)
      throw ValueError("restore: checkpoint of step " + std::to_string(c.step) + " holds '" + name +
                       "', neither model.* nor optimizer.*");
  const auto model_state = with_prefix(c.tensors, "model.");
  const auto optimizer_state = with_prefix(c.tensors, "optimizer.");
  // Each load checks everything before it changes anything; the optimizer's goes first and is put
  // back when the model's then fails, so an error leaves both as they were.
  const std::map<std::string, Tensor> current = optimizer.state_dict();
  optimizer.load_state_dict(optimizer_state);
  try {
    model.load(model_state);
  } catch (...) {
    optimizer.load_state_dict(current);
    throw;
  }
}

nlohmann::json to_json(const Generator::State& state) {
  nlohmann::json out = nlohmann::json::array();
  for (uint64_t word : state) out.push_back(hex(word));
  return out;
}

Generator::State generator_state_from_json(const nlohmann::json& json) {
  if (!json.is_array() || json.size() != 4)
    throw ValueError("generator state: expected an array of 4 hex strings, got " + json.dump());
  Generator::State state{};
  for (size_t i = 0; i < 4; ++i) state[i] = from_hex(json[i], "generator state");
  return state;
}

}  // namespace troupe::models
