#pragma once
// What the CUDA allocator does when the device is full, apart from CUDA so that a test without a GPU
// can follow it: what the allocator caches goes back first, then one more try, and only then a
// DeviceError naming the device, the bytes asked and what was released.
//
//   void* p = allocate_or_release_cached(device, nbytes, [&] { return try_malloc(); },
//                                        [&] { return release_cached(); }, [&] { return free_memory(); });
#include <cstddef>
#include <string>

#include "devices/error.h"

namespace troupe::cuda {

// try_allocate(): the block, or nullptr when the device is full (other failures throw).
// release_cached(): the bytes it gave back. free_memory(): what is free now, for the message.
template <class Allocate, class Release, class FreeMemory>
void* allocate_or_release_cached(int device, size_t nbytes, Allocate try_allocate, Release release_cached,
                                 FreeMemory free_memory) {
  if (void* p = try_allocate()) return p;
  const size_t released = release_cached();
  if (void* p = try_allocate()) return p;
  throw DeviceError("cuda:" + std::to_string(device) + ": out of memory allocating " + std::to_string(nbytes) +
                    " bytes, also after releasing " + std::to_string(released) + " cached bytes (" +
                    free_memory() + ")");
}

}  // namespace troupe::cuda
