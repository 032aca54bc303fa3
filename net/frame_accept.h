#pragma once
// Received bytes as tensors: how every path of the transport (ZeroMQ, direct links, stripes, see
// transport.h) and the call frames (remote/call_frame.h) turn the u8 bytes that came into a
// tensor of the dtype and shape the frame names. Internal to net/.
//
//   Tensor bytes = adopt_part(&msg);                          // u8, owning what came (zmq_socket.h)
//   Tensor x = view_bytes_as(bytes, DType::f32, {2, 3});      // the same bytes as f32[2,3]
//
// Zero-copy when the bytes are aligned for the dtype; copied otherwise (ZeroMQ may hand small
// messages out of a shared receive buffer at any offset).
#include "devices/tensor.h"

namespace troupe::net {

// bytes: a contiguous u8 tensor holding exactly shape's elements of dtype (the caller checked).
Tensor view_bytes_as(const Tensor& bytes, DType dtype, const Shape& shape);

}  // namespace troupe::net
