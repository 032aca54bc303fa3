#pragma once
// ZeroMQ socket helpers of the transport (transport.h): options, sends that retry on EINTR, the
// routing identity a rank's DEALER presents, and message parts as tensors both ways (zero-copy).
// Internal to net/.
//
//   set_int(router, ZMQ_RCVHWM, 0);
//   send_tensor_part(dealer, host_tensor, /*flags=*/0, done, /*dst=*/1);  // by reference when large
//   Tensor bytes = adopt_part(&msg);                                   // u8, owns the message's bytes
//
// Every failure is a CommError naming the call and ZeroMQ's reason.
#include <memory>
#include <string>

#include "devices/tensor.h"
#include "net/work.h"

struct zmq_msg_t;

namespace troupe::net {

// Parts up to this size are copied into the message: cheaper than the free callback.
inline constexpr size_t kCopyBelow = 4096;

[[noreturn]] void zmq_fail(const std::string& what);
void set_int(void* socket, int option, int value);
void set_string(void* socket, int option, const std::string& value);
std::string last_endpoint(void* socket);  // what the socket last bound to

// Identity a rank's DEALER presents to every ROUTER: 'T' then its rank (4 bytes).
std::string routing_id(int rank);
// The rank a ROUTER's identity part names, or -1 when it names no rank of a world this size.
int rank_of_routing_id(const zmq_msg_t* msg, int world_size);

// Sends a header's bytes (copied) as one part; CommError naming dst when ZeroMQ refuses.
void send_bytes_part(void* socket, const void* data, size_t size, int flags, int dst);
// Sends a contiguous host tensor's bytes as one part: by reference above kCopyBelow (the storage
// is held until ZeroMQ lets go, then done finishes), copied below (done is then the caller's).
// True when it went by reference.
bool send_tensor_part(void* socket, const Tensor& host, int flags, const std::shared_ptr<detail::Completion>& done,
                      int dst);
// A received part as a u8 tensor that owns its bytes (the message moves into the storage).
Tensor adopt_part(zmq_msg_t* msg);

}  // namespace troupe::net
