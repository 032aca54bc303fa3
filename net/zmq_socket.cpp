#include "net/zmq_socket.h"

#include <zmq.h>

#include <cerrno>
#include <cstring>

#include "actors/handoff.h"
#include "net/errors.h"

namespace troupe::net {

namespace {

// Sends one message part, retrying when a signal interrupts the call.
bool send_part(zmq_msg_t* msg, void* socket, int flags) {
  while (zmq_msg_send(msg, socket, flags) < 0) {
    if (zmq_errno() != EINTR) return false;
  }
  return true;
}

void send_or_fail(zmq_msg_t* msg, void* socket, int flags, int dst) {
  if (send_part(msg, socket, flags)) return;
  zmq_msg_close(msg);
  zmq_fail("send to rank " + std::to_string(dst));
}

// Keeps a sent tensor's bytes alive until ZeroMQ has written them out.
struct SendHold {
  std::shared_ptr<Storage> storage;
  std::shared_ptr<detail::Completion> done;
};

void release_send_hold(void*, void* hint) {
  auto* hold = static_cast<SendHold*>(hint);
  troupe::detail::take_over(hold);  // on ZeroMQ's I/O thread
  if (hold->done) hold->done->finish();
  delete hold;
}

}  // namespace

void zmq_fail(const std::string& what) { throw CommError("transport: " + what + ": " + zmq_strerror(zmq_errno())); }

void set_int(void* socket, int option, int value) {
  if (zmq_setsockopt(socket, option, &value, sizeof value) != 0) zmq_fail("zmq_setsockopt " + std::to_string(option));
}

void set_string(void* socket, int option, const std::string& value) {
  if (zmq_setsockopt(socket, option, value.data(), value.size()) != 0)
    zmq_fail("zmq_setsockopt " + std::to_string(option));
}

std::string last_endpoint(void* socket) {
  char buffer[512];
  size_t size = sizeof buffer;
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buffer, &size) != 0) zmq_fail("ZMQ_LAST_ENDPOINT");
  return std::string(buffer, strnlen(buffer, size));
}

std::string routing_id(int rank) {
  std::string id(5, 'T');
  std::memcpy(id.data() + 1, &rank, 4);
  return id;
}

int rank_of_routing_id(const zmq_msg_t* msg, int world_size) {
  if (zmq_msg_size(msg) != 5) return -1;
  const auto* data = static_cast<const char*>(zmq_msg_data(const_cast<zmq_msg_t*>(msg)));
  if (data[0] != 'T') return -1;
  int rank;
  std::memcpy(&rank, data + 1, 4);
  return rank >= 0 && rank < world_size ? rank : -1;
}

void send_bytes_part(void* socket, const void* data, size_t size, int flags, int dst) {
  zmq_msg_t msg;
  zmq_msg_init_size(&msg, size);
  if (size > 0) std::memcpy(zmq_msg_data(&msg), data, size);
  send_or_fail(&msg, socket, flags, dst);
}

bool send_tensor_part(void* socket, const Tensor& host, int flags, const std::shared_ptr<detail::Completion>& done,
                      int dst) {
  const size_t bytes = host.nbytes();
  if (bytes <= kCopyBelow) {
    send_bytes_part(socket, host.raw_data(), bytes, flags, dst);
    return false;
  }
  zmq_msg_t body;
  auto* hold = new SendHold{host.storage(), done};
  troupe::detail::hand_over(hold);
  if (zmq_msg_init_data(&body, const_cast<void*>(host.raw_data()), bytes, release_send_hold, hold) != 0) {
    delete hold;
    zmq_fail("zmq_msg_init_data");
  }
  send_or_fail(&body, socket, flags, dst);
  return true;
}

Tensor adopt_part(zmq_msg_t* msg) {
  const size_t size = zmq_msg_size(msg);
  if (size == 0) return Tensor::empty({0}, DType::u8);
  // Move first: a small message keeps its bytes inside the zmq_msg_t itself.
  auto* owned = new zmq_msg_t;
  zmq_msg_init(owned);
  zmq_msg_move(owned, msg);
  auto storage = std::make_shared<Storage>(zmq_msg_data(owned), size, Device::cpu(), [owned](void*) {
    zmq_msg_close(owned);
    delete owned;
  });
  return Tensor(storage, DType::u8, Shape{static_cast<int64_t>(size)}, Strides{1}, 0);
}

}  // namespace troupe::net
