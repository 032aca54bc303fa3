// libFuzzer target for loading training checkpoints (models/train/checkpoint.h): a step-0
// directory made of the input (state.json, then tensors.safetensors) loads and restores into a
// Net and its SGD, or throws troupe::Error; a failed restore leaves the model as it was.
// Input: byte 0 (bit 0: record the tensors' true size and hash in state.json, so that the
// safetensors reader and the restore are reached), bytes 1-2: state.json's length.
//   build/bin/checkpoint_fuzz -max_total_time=60 tests/fuzz/corpus/checkpoint
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "devices/error.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "models/train/checkpoint.h"

namespace fs = std::filesystem;

namespace {

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool fix_hash = data[0] & 1;
  const size_t json_size = std::min<size_t>(data[1] | (size_t(data[2]) << 8), size - 3);
  const uint8_t* json = data + 3;
  const uint8_t* tensors = json + json_size;
  const size_t tensors_size = size - 3 - json_size;
  static const fs::path dir = fs::path("/dev/shm") / ("troupe-fuzz-ckpt-" + std::to_string(::getpid()));
  fs::create_directories(dir / "step-0");
  std::string state(reinterpret_cast<const char*>(json), json_size);
  if (fix_hash) {
    try {
      nlohmann::json j = nlohmann::json::parse(state);
      if (j.is_object()) {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(tensors, tensors_size)));
        j["tensors_bytes"] = tensors_size;
        j["tensors_fnv1a"] = hex;
        state = j.dump();
      }
    } catch (const nlohmann::json::exception&) {
    }
  }
  std::ofstream(dir / "step-0" / "state.json", std::ios::binary | std::ios::trunc) << state;
  std::ofstream(dir / "step-0" / "tensors.safetensors", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(tensors), static_cast<std::streamsize>(tensors_size));
  static troupe::models::Net net;
  static troupe::models::SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.5});
  try {
    troupe::models::CheckpointDir checkpoints(dir.string());
    troupe::models::Checkpoint c = checkpoints.load(0);
    const auto before = net.state_dict();
    try {
      troupe::models::restore(c, net, sgd);
    } catch (const troupe::Error&) {
      for (const auto& [name, t] : net.state_dict())  // nothing changed
        if (std::memcmp(t.contiguous().raw_data(), before.at(name).contiguous().raw_data(), t.nbytes()) != 0)
          std::abort();
      throw;
    }
  } catch (const troupe::Error&) {
  }
  return 0;
}
