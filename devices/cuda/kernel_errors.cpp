// The per-device kernel error words (kernel_errors.h): mapped pinned host memory, read by the host
// after it has waited for the device.
#include "devices/cuda/kernel_errors.h"

#include <atomic>
#include <mutex>
#include <string>

#include "devices/cuda/cuda_util.h"

namespace troupe::cuda {

namespace {

// Where the host reads each device's word (set once, read by any thread), and where kernels write it.
std::atomic<KernelError*> host_words[kMaxDevices] = {};
KernelError* device_words[kMaxDevices] = {};
std::once_flag made[kMaxDevices];

}  // namespace

KernelError* kernel_error_word(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError("kernel_error_word: no device cuda:" + std::to_string(device));
  std::call_once(made[device], [device] {
    DeviceGuard on(device);
    void* p = nullptr;
    // Portable: any context may map it; never freed, like the default streams.
    check(cudaHostAlloc(&p, sizeof(KernelError), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc",
          device);
    auto* word = static_cast<KernelError*>(p);
    *word = KernelError{};
    void* on_device = nullptr;
    check(cudaHostGetDevicePointer(&on_device, p, 0), "cudaHostGetDevicePointer", device);
    device_words[device] = static_cast<KernelError*>(on_device);
    host_words[device].store(word, std::memory_order_release);
  });
  return device_words[device];
}

void raise_pending_kernel_error(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  KernelError* word = host_words[device].load(std::memory_order_acquire);
  if (!word) return;  // no kernel has asked for it yet
  std::atomic_ref<unsigned int> state(word->state);
  if (state.load(std::memory_order_acquire) != 2u) return;  // clear, or a kernel still running elsewhere
  const KernelError e = *word;
  unsigned int written = 2u;
  if (!state.compare_exchange_strong(written, 0u, std::memory_order_acq_rel)) return;  // another thread took it
  throw IndexError(std::string(e.op) + ": index " + std::to_string(e.index) + " at position " +
                   std::to_string(e.position) + " is out of range for dim " + std::to_string(e.dim) + " of size " +
                   std::to_string(e.size) + " (found on cuda:" + std::to_string(device) +
                   " by a kernel queued earlier; its output holds zeros there)");
}

}  // namespace troupe::cuda
