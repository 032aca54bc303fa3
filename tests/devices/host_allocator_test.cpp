// Host memory for tensors (devices/host_allocator.h): aligned blocks, small ones reused by the
// thread that freed them, large ones kept in the shared cache.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "devices/host_allocator.h"

using namespace troupe;

TEST_CASE("host blocks are 64-byte aligned and whole, small and large", "[allocator]") {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{1000}, size_t{4096}, size_t{65537}, size_t{3} << 20}) {
    INFO("bytes " << bytes);
    auto* p = static_cast<uint8_t*>(host_allocate(bytes));
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, 0xab, bytes);  // every byte writable (a sanitizer or a fault would say otherwise)
    CHECK(p[bytes - 1] == 0xab);
    host_deallocate(p, bytes);
  }
}

TEST_CASE("a block of 64 KiB to 1 MiB is a mapping of its own, kept for the next one of its 64 KiB step",
          "[allocator]") {
  void* first = host_allocate(200 << 10);
  CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  std::memset(first, 1, 200 << 10);  // every byte is there
  const size_t cached = host_cached_bytes();
  host_deallocate(first, 200 << 10);
  CHECK(host_cached_bytes() == cached + (256 << 10));  // kept, rounded up to 64 KiB steps
  void* again = host_allocate(250 << 10);              // the same step: a kept block, no new mapping
  CHECK(host_cached_bytes() == cached);
  host_deallocate(again, 250 << 10);
}

TEST_CASE("a small block freed by a thread serves its next allocation of that size", "[allocator]") {
  void* first = host_allocate(1024);
  host_deallocate(first, 1024);
  void* again = host_allocate(1000);  // the same 64-byte size class
  CHECK(again == first);
  void* other = host_allocate(2048);  // another size: not that block
  CHECK(other != again);
  host_deallocate(other, 2048);
  host_deallocate(again, 1000);
  // Blocks freed on another thread stay with it (and are freed when it exits).
  void* theirs = nullptr;
  std::thread([&] {
    theirs = host_allocate(1024);
    host_deallocate(theirs, 1024);
  }).join();
  void* mine = host_allocate(1024);
  CHECK(mine == first);  // this thread's own block, still kept
  host_deallocate(mine, 1024);
  // Many live blocks of one size: each distinct, all returned.
  std::vector<void*> live;
  for (int i = 0; i < 100; ++i) live.push_back(host_allocate(512));
  for (size_t i = 1; i < live.size(); ++i) CHECK(live[i] != live[i - 1]);
  for (void* p : live) host_deallocate(p, 512);
}
