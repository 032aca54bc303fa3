#pragma once
// Host memory for tensors. Small blocks (under 64 KiB) come from malloc, 64-byte aligned for
// AVX-512; a thread keeps up to 32 it freed for its next blocks of the same size. Larger blocks
// are mappings of their own, in 64 KiB steps, and from 1 MiB whole 2 MiB-aligned mappings backed by
// transparent huge pages; freed ones are kept for reuse: a fresh buffer costs one page fault per
// 4 KiB (tens of microseconds each on a VM), which made per-step temporaries of the models cost
// more than their GEMMs.
//
//   void* p = host_allocate(64 << 20);   // huge pages, or a cached block of the same size
//   host_deallocate(p, 64 << 20);        // back to the cache (bounded), else unmapped
//
// The cache holds at most TROUPE_HOST_CACHE_MB megabytes (default 2048; 0 disables it).
#include <cstddef>

namespace troupe {

void* host_allocate(size_t nbytes);
void host_deallocate(void* ptr, size_t nbytes);
// Bytes of freed large blocks kept for reuse now (the metrics' troupe_host_allocator_cached_bytes).
size_t host_cached_bytes();

}  // namespace troupe
