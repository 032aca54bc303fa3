#include "models/train/live_state.h"

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "devices/error.h"
#include "net/collectives.h"

namespace troupe::models {

StateShare share_newest_state(net::ProcessGroup& group, int64_t step, const std::function<Checkpoint()>& capture_mine) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = group.rank(), size = group.size();
  // Every rank's step, everywhere: one collective of `size` integers (each adds its own).
  Tensor steps = Tensor::zeros({size}, DType::i64);
  steps.mutable_data<int64_t>()[rank] = step + 1;  // +1: a rank without state (-1) adds 0
  net::all_reduce(group, steps, net::ReduceOp::sum);
  StateShare share;
  std::vector<int> behind;
  for (int r = 0; r < size; ++r) share.newest = std::max(share.newest, steps.data<int64_t>()[r] - 1);
  for (int r = 0; r < size; ++r) {
    if (steps.data<int64_t>()[r] - 1 != share.newest) behind.push_back(r);
    else if (share.donor < 0) share.donor = r;
  }
  share.receivers = static_cast<int>(behind.size());
  if (behind.empty() || share.newest < 0) {
    share.donor = -1;
    return share;
  }
  if (rank == share.donor) {
    Checkpoint mine = capture_mine();
    if (mine.step != share.newest)
      throw ValueError("share_newest_state: rank " + std::to_string(rank) + " said step " + std::to_string(share.newest) +
                       " but captured step " + std::to_string(mine.step));
    nlohmann::json header = {{"step", mine.step}, {"state", mine.state}, {"names", nlohmann::json::array()}};
    std::vector<Tensor> tensors;
    for (const auto& [name, t] : mine.tensors) {
      header["names"].push_back(name);
      tensors.push_back(t.contiguous());
    }
    const std::string text = header.dump();
    Tensor head = Tensor::empty({static_cast<int64_t>(text.size())}, DType::u8);
    std::memcpy(head.mutable_data<uint8_t>(), text.data(), text.size());
    std::vector<net::Work> sends;
    for (int b : behind) {
      sends.push_back(group.isend(head, b, kStateTag));
      for (const Tensor& t : tensors) sends.push_back(group.isend(t, b, kStateTag));
      share.bytes += head.nbytes();
      for (const Tensor& t : tensors) share.bytes += t.nbytes();
    }
    for (auto& w : sends) w.wait();
  } else if (std::find(behind.begin(), behind.end(), rank) != behind.end()) {
    Tensor head;
    group.recv(head, share.donor, kStateTag);
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(head.data<uint8_t>()),
                                                 static_cast<size_t>(head.numel())));
    } catch (const nlohmann::json::exception& e) {
      throw ValueError("share_newest_state: rank " + std::to_string(share.donor) + " sent a malformed header: " + e.what());
    }
    if (!header.is_object() || !header.contains("names") || !header["names"].is_array() || !header.contains("step"))
      throw ValueError("share_newest_state: rank " + std::to_string(share.donor) + " sent a header without names or step");
    Checkpoint c;
    c.step = header["step"].get<int64_t>();
    c.state = header.value("state", nlohmann::json::object());
    share.bytes += head.nbytes();
    for (const auto& name : header["names"]) {
      Tensor t;
      group.recv(t, share.donor, kStateTag);
      share.bytes += t.nbytes();
      c.tensors[name.get<std::string>()] = t;
    }
    if (c.step != share.newest)
      throw ValueError("share_newest_state: rank " + std::to_string(share.donor) + " sent step " + std::to_string(c.step) +
                       ", expected " + std::to_string(share.newest));
    share.received = std::move(c);
  }
  share.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return share;
}

}  // namespace troupe::models
