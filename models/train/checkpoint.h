#pragma once
// Training checkpoints: what a run needs to go on where it stopped, written so that a crash at any
// moment leaves the previous checkpoint or the new one, never half of one.
//
// A checkpoint directory holds one directory per saved step, step-<N>/, with
//   tensors.safetensors  the model's state under "model.<name>", the optimizer's under "optimizer.<name>"
//   state.json           {"step", "state": what the caller saves (epoch, loader position, RNG...),
//                         "tensors_bytes", "tensors_fnv1a"}
// Both are written into a temporary directory, fsynced, and the directory renamed to step-<N>
// (then the parent fsynced); beyond `keep` checkpoints the oldest are removed. Loading checks the
// size and hash of the tensors and every name and shape against the model and the optimizer before
// anything is copied: a truncated, corrupt or foreign checkpoint is an IOError or ValueError naming
// its path, never a partial load.
//
//   CheckpointDir dir("ckpt/rank-0", /*keep=*/2);
//   dir.save(capture(step, model, optimizer, {{"epoch", epoch}, {"batch", loader.position()}}));
//   ...
//   if (auto latest = dir.latest()) {
//     Checkpoint c = dir.load(*latest);
//     restore(c, model, optimizer);                    // all checked, then all copied
//     loader.start_epoch(c.state["epoch"], c.state["batch"]);
//   }
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/random.h"
#include "devices/tensor.h"
#include "models/nn/module.h"
#include "models/nn/optimizer.h"

namespace troupe::models {

struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, Tensor> tensors;  // "model.<name>", "optimizer.<name>"
  nlohmann::json state = nlohmann::json::object();
};

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string path, int keep = 2);  // created when missing

  void save(const Checkpoint& checkpoint);  // replaces an older save of the same step
  std::vector<int64_t> steps() const;       // the complete checkpoints, ascending
  std::optional<int64_t> latest() const;
  Checkpoint load(int64_t step) const;      // verified against its recorded size and hash
  std::string path_of(int64_t step) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int keep_;
};

// The model's and the optimizer's state at `step`, with the caller's state.
Checkpoint capture(int64_t step, Module& model, const Optimizer& optimizer, nlohmann::json state = nlohmann::json::object());
// Puts a checkpoint's tensors back into the model and the optimizer (in place: the parameters stay
// the same tensors, hooks and optimizer included), after checking that all of them fit.
void restore(const Checkpoint& checkpoint, Module& model, Optimizer& optimizer);

// A generator's state as JSON (four hex strings: JSON numbers lose 64-bit integers in many readers).
nlohmann::json to_json(const Generator::State& state);
Generator::State generator_state_from_json(const nlohmann::json& json);

}  // namespace troupe::models
