#include "models/train/live_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "devices/error.h"
#include "net/collectives.h"

namespace troupe::models {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

bool StateShare::is_behind(int rank) const { return std::find(behind_.begin(), behind_.end(), rank) != behind_.end(); }

std::pair<int, int> StateShare::contributor(int rank) const {
  const int size = group_ ? group_->size() : 0;
  if (behind_.empty() || is_behind(rank)) return {rank, size};
  const int before = static_cast<int>(std::count_if(behind_.begin(), behind_.end(), [&](int r) { return r < rank; }));
  return {rank - before, size - static_cast<int>(behind_.size())};
}

StateShare start_state_share(net::ProcessGroup& group, int64_t step, const std::function<Checkpoint()>& capture_mine) {
  StateShare share;
  share.group_ = &group;
  share.started_ = now_seconds();
  const int rank = group.rank(), size = group.size();
  // Every rank's step, everywhere: one collective of `size` integers (each adds its own).
  Tensor steps = Tensor::zeros({size}, DType::i64);
  steps.mutable_data<int64_t>()[rank] = step + 1;  // +1: a rank without state (-1) adds 0
  net::all_reduce(group, steps, net::ReduceOp::sum);
  for (int r = 0; r < size; ++r) share.newest = std::max(share.newest, steps.data<int64_t>()[r] - 1);
  if (share.newest < 0) return share;  // nobody has a state yet
  for (int r = 0; r < size; ++r) {
    if (steps.data<int64_t>()[r] - 1 != share.newest) share.behind_.push_back(r);
    else if (share.donor < 0) share.donor = r;
  }
  share.receivers = static_cast<int>(share.behind_.size());
  if (share.behind_.empty()) {
    share.donor = -1;
    return share;
  }
  if (rank != share.donor) return share;
  Checkpoint mine = capture_mine();
  if (mine.step != share.newest)
    throw ValueError("start_state_share: rank " + std::to_string(rank) + " said step " + std::to_string(share.newest) +
                     " but captured step " + std::to_string(mine.step));
  nlohmann::json header = {{"step", mine.step}, {"state", mine.state}, {"names", nlohmann::json::array()}};
  std::vector<Tensor> tensors;
  for (const auto& [name, t] : mine.tensors) {
    header["names"].push_back(name);
    tensors.push_back(t.contiguous());  // held by the sends: a step's writes copy on write, not into them
  }
  const std::string text = header.dump();
  Tensor head = Tensor::empty({static_cast<int64_t>(text.size())}, DType::u8);
  std::memcpy(head.mutable_data<uint8_t>(), text.data(), text.size());
  for (int b : share.behind_) {
    share.sends_.push_back(group.isend(head, b, kStateTag));
    for (const Tensor& t : tensors) share.sends_.push_back(group.isend(t, b, kStateTag));
    share.bytes += head.nbytes();
    for (const Tensor& t : tensors) share.bytes += t.nbytes();
  }
  return share;
}

void StateShare::finish() {
  for (auto& w : sends_) w.wait();
  sends_.clear();
  if (group_ && is_behind(group_->rank()) && !received) {
    net::ProcessGroup& group = *group_;
    Tensor head;
    group.recv(head, donor, kStateTag);
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(head.data<uint8_t>()),
                                                 static_cast<size_t>(head.numel())));
    } catch (const nlohmann::json::exception& e) {
      throw ValueError("share_newest_state: rank " + std::to_string(donor) + " sent a malformed header: " + e.what());
    }
    if (!header.is_object() || !header.contains("names") || !header["names"].is_array() || !header.contains("step"))
      throw ValueError("share_newest_state: rank " + std::to_string(donor) + " sent a header without names or step");
    Checkpoint c;
    c.step = header["step"].get<int64_t>();
    c.state = header.value("state", nlohmann::json::object());
    bytes += head.nbytes();
    for (const auto& name : header["names"]) {
      Tensor t;
      group.recv(t, donor, kStateTag);
      bytes += t.nbytes();
      c.tensors[name.get<std::string>()] = t;
    }
    if (c.step != newest)
      throw ValueError("share_newest_state: rank " + std::to_string(donor) + " sent step " + std::to_string(c.step) +
                       ", expected " + std::to_string(newest));
    received = std::move(c);
  }
  seconds = now_seconds() - started_;
}

StateShare share_newest_state(net::ProcessGroup& group, int64_t step, const std::function<Checkpoint()>& capture_mine) {
  StateShare share = start_state_share(group, step, capture_mine);
  share.finish();
  return share;
}

}  // namespace troupe::models
