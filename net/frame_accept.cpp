// Every frame a link received (link.h: FrameSink): decoded and checked once, adopted as tensors,
// counted by path, put back in its sender's order, and handed on: to the posted receives, the actor
// handler, or the liveness bookkeeping.
#include <cstring>

#include "net/errors.h"
#include "net/transport_internal.h"
#include "net/wire_bytes.h"

namespace troupe::net {

FrameHeader Transport::check_frame(int peer, std::span<const uint8_t> header, size_t payload_size, size_t parts) {
  // The payload, then (actor frames only) one part per tensor.
  if (parts > 1 + kMaxActorParts)
    throw CommError("frame: malformed: " + std::to_string(parts) + " parts, at most " + std::to_string(1 + kMaxActorParts));
  FrameHeader h = decode_header(header.data(), header.size(), payload_size, world_size());
  if (h.source != peer) throw CommError("frame: malformed: claims source rank " + std::to_string(h.source));
  if (parts > 1 && h.kind != FrameKind::actor)
    throw CommError("frame: malformed: a " + std::string(name(h.kind)) + " frame of " + std::to_string(parts) + " parts");
  return h;
}

bool Transport::accept(int peer, Path path, std::span<const uint8_t> header,
                       std::span<const std::span<const uint8_t>> parts) {
  try {
    FrameHeader h = check_frame(peer, header, parts.empty() ? 0 : parts.front().size(), parts.size());
    size_t frame_bytes = header.size();
    for (const auto& p : parts) frame_bytes += p.size();
    Message frame{peer, h, Tensor::empty(h.shape, h.dtype), {}};
    if (!parts.empty() && !parts.front().empty())
      std::memcpy(frame.payload.mutable_raw_data(), parts.front().data(), parts.front().size());
    frame.parts.reserve(parts.size() > 1 ? parts.size() - 1 : 0);
    for (size_t i = 1; i < parts.size(); ++i) {
      frame.parts.push_back(Tensor::empty({static_cast<int64_t>(parts[i].size())}, DType::u8));
      if (!parts[i].empty()) std::memcpy(frame.parts.back().mutable_raw_data(), parts[i].data(), parts[i].size());
    }
    admit_frame(peer, path, frame_bytes, std::move(frame));
    return true;
  } catch (const CommError& e) {
    refuse(peer, e);
    return false;
  }
}

bool Transport::accept(int peer, Path path, std::span<const uint8_t> header, std::vector<Tensor> parts) {
  try {
    FrameHeader h = check_frame(peer, header, parts.empty() ? 0 : parts.front().nbytes(), parts.size());
    size_t frame_bytes = header.size();
    for (const Tensor& p : parts) frame_bytes += p.nbytes();
    Message frame{peer, h, parts.empty() ? Tensor::empty(h.shape, h.dtype) : view_bytes_as(parts.front(), h.dtype, h.shape),
                  {}};
    if (parts.size() > 1) {  // the link's parts become the message's: the tensors are not moved into another vector
      parts.erase(parts.begin());
      frame.parts = std::move(parts);
    }
    admit_frame(peer, path, frame_bytes, std::move(frame));
    return true;
  } catch (const CommError& e) {
    refuse(peer, e);
    return false;
  }
}

void Transport::admit_frame(int peer, Path path, size_t frame_bytes, Message frame) {
  link_of(path).traffic(peer).received(frame_bytes);
  if (path == direct_path) ++direct_frames_;
  if (path == stripes_path) ++striped_frames_;
  take_frame(peer, std::move(frame));
}

Link& Transport::link_of(Path path) {
  switch (path) {
    case direct_path: return *direct_;
    case stripes_path: return *stripes_;
    case zmq_path: break;
  }
  return *zmq_;
}

void Transport::refuse(int peer, const std::exception& why) {
  lose_peer(peer, std::make_exception_ptr(
                      CommError("transport: rank " + std::to_string(peer) + " sent a bad frame: " + why.what())));
}

void Transport::take_frame(int r, Message frame) {
  Peer& peer = *peers_[r];
  live_.heard(r);
  if (direct_) direct_->heard_from(r);
  const uint64_t seq = frame.header.seq;
  if (seq != peer.expected_seq) {
    // Came ahead of a frame sent before it on another path: held until that one is here.
    if (seq < peer.expected_seq || peer.held.count(seq) || peer.held.size() >= kMaxHeldFrames)
      throw CommError("frame: sequence number " + std::to_string(seq) + ", expected " +
                      std::to_string(peer.expected_seq) + " (a frame was lost or repeated)");
    peer.held.emplace(seq, std::move(frame));
    return;
  }
  ++peer.expected_seq;
  handle_frame(r, std::move(frame));
  for (auto it = peer.held.begin(); it != peer.held.end() && it->first == peer.expected_seq; it = peer.held.begin()) {
    Message next = std::move(it->second);
    peer.held.erase(it);
    ++peer.expected_seq;
    handle_frame(r, std::move(next));
  }
}

void Transport::handle_frame(int r, Message frame) {
  switch (frame.header.kind) {
    case FrameKind::heartbeat:
      return;
    case FrameKind::hello: {
      std::lock_guard lock(mutex_);
      if (direct_) direct_->set_dialed(r, frame.header.tag == 1);
      live_.hello(r);
      hello_cv_.notify_all();
      return;
    }
    case FrameKind::goodbye:
      peer_departed(r);
      return;
    case FrameKind::actor: {
      if (live_.lost(r)) return;
      std::shared_ptr<ActorHandler> handler;
      {
        std::lock_guard lock(mutex_);
        if (!actor_handler_) {
          // Kept for the next RemoteActors: between one closing and the next opening (executors
          // made one after another), a quicker rank's first calls already come.
          if (actor_backlog_.size() < kActorBacklogMax) actor_backlog_.push_back(std::move(frame));
          else ++dropped_frames_;
          return;
        }
        handler = actor_handler_;
      }
      handler->on_frame(std::move(frame));
      return;
    }
    case FrameKind::data:
    case FrameKind::staged:
    case FrameKind::collective:
    case FrameKind::control: {
      std::lock_guard lock(mutex_);
      deliver(std::move(frame));
      return;
    }
  }
}

}  // namespace troupe::net
