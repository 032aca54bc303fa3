#pragma once
// The stripe link (link.h): large frames over several TCP connections per peer at once, each
// written and read by a thread of its own (net/stripes.h has the threads and the wire), received
// straight into reused blocks whose views become the frame's parts. A frame takes the stripes from
// TransportOptions::stripe_min bytes up, or whatever its size when it carries a device tensor that
// the direct link did not take: only the stripes' threads wait for its copy's pieces as they write.
//
//   StripeLink stripes(options, sink);               // with the direct links (their listener)
//   stripes.connect(1, table[1].direct, deadline);   // this rank's stripes to rank 1
//   if (stripes.takes(frame)) stripes.send(frame);
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
  // Whether the frame goes on the stripes: they reach the peer, and the frame is large enough or
  // carries a device tensor (whose copy to host the stripes' threads overlap with writing it).
  bool takes(const OutgoingFrame& frame) const;
  // Queues it (staging its device tensors, pieces not waited for); the stripes' threads write it.
  bool send(const OutgoingFrame& frame) override;
  int receive() override;
  void wait_fds(std::vector<int>& fds) const override { fds.push_back(ready_fd_); }
  LinkTraffic& traffic(int r) override { return peer(r).traffic; }

  // Opens this rank's stripes to rank r (none when TransportOptions::stripes is 0; none either
  // when r cannot be reached by them: its large frames take ZeroMQ).
  void connect(int r, const std::string& endpoint, Deadline deadline);
  // A stripe connection rank `peer` opened (introduced as stripe `stripe`, 1..), for its thread.
  void adopt(int fd, int peer, int stripe, const std::optional<SessionKeys>& session) {
    in_->adopt(fd, peer, stripe, session);
  }
  bool broken(int r) const { return peer(r).broken.load(); }  // the peer is suspect
  void flush_until(Deadline deadline);

 private:
  const int rank_, stripes_;
  const size_t min_bytes_;
  const JobKeys keys_;  // the job's, or all zero in an insecure job
  const bool encrypt_;  // chunks sealed (sealed_stream.h)
  FrameSink& sink_;
  int ready_fd_ = -1;  // eventfd: in_ has whole frames
  // A peer's state on this path; its connections are the stripes' threads' (stripes.h), each
  // thread writing or reading one stripe of every peer, as one TCP stream per thread moves bytes
  // at one core's copy rate.
  struct Peer {
    std::atomic<bool> broken{false};  // a connection to it failed
    LinkTraffic traffic;
  };
  Peer& peer(int r) { return *peers_[static_cast<size_t>(r)]; }
  const Peer& peer(int r) const { return *peers_[static_cast<size_t>(r)]; }
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank
  std::unique_ptr<StripeSenders> out_;  // null: no stripes to any peer
  std::unique_ptr<StripeReceivers> in_;
};

}  // namespace troupe::net
