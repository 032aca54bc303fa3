#pragma once
// Where a tensor's bytes live: the host (cpu) or one CUDA device (cuda:N).
//
//   Device d = Device::parse("cuda:1");   // d.type == DeviceType::cuda, d.index == 1
#include <string>
#include <string_view>

namespace troupe {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:N"; DeviceError otherwise

  std::string str() const;
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

const char* name(DeviceType t);

}  // namespace troupe
