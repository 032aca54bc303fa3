#pragma once
// The stripe link (link.h): large frames over several TCP connections per peer at once, each
// written and read by a thread of its own (net/stripes.h has the threads and the wire), received
// straight into reused blocks whose views become the frame's parts. A frame takes the stripes from
// TransportOptions::stripe_min bytes up, or whatever its size while a device tensor's copy to host
// is still under way: only the stripes' threads wait for its pieces as they write them.
//
//   StripeLink stripes(options, sink);               // with the direct links (their listener)
//   stripes.connect(1, table[1].direct, deadline);   // this rank's stripes to rank 1
//   if (stripes.takes(frame.dst, frame.parts, copies_pending)) stripes.send(frame);
//   stripes.receive();                               // frames whose chunks all came
//
// Internal to net/.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "net/link.h"
#include "net/stripes.h"

namespace troupe::net {

struct TransportOptions;

class StripeLink final : public Link {
 public:
  StripeLink(const TransportOptions& options, FrameSink& sink);
  ~StripeLink() override;

  Path path() const override { return stripes_path; }
  // Whether a frame of these parts goes on the stripes: they reach the peer, and the frame is large
  // enough or has device copies still pending.
  bool takes(int dst, std::span<const std::span<const uint8_t>> parts, bool copies_pending) const;
  bool send(const OutgoingFrame& frame) override;  // queues it; the stripes' threads write it
  int receive() override;
  void wait_fds(std::vector<int>& fds) const override { fds.push_back(ready_fd_); }

  // Opens this rank's stripes to rank r (none when TransportOptions::stripes is 0; none either
  // when r cannot be reached by them: its large frames take ZeroMQ).
  void connect(int r, const std::string& endpoint, Deadline deadline);
  // A stripe connection rank `peer` opened (introduced as stripe `stripe`, 1..), for its thread.
  void adopt(int fd, int peer, int stripe, const std::optional<SessionKeys>& session) {
    in_->adopt(fd, peer, stripe, session);
  }
  bool broken(int r) const { return broken_[static_cast<size_t>(r)].load(); }  // the peer is suspect
  void flush_until(Deadline deadline);

 private:
  const int rank_, stripes_;
  const size_t min_bytes_;
  const JobKeys keys_;  // the job's, or all zero in an insecure job
  const bool encrypt_;  // chunks sealed (sealed_stream.h)
  FrameSink& sink_;
  int ready_fd_ = -1;  // eventfd: in_ has whole frames
  std::unique_ptr<std::atomic<bool>[]> broken_;  // by rank
  std::unique_ptr<StripeSenders> out_;  // null: no stripes to any peer
  std::unique_ptr<StripeReceivers> in_;
};

}  // namespace troupe::net
