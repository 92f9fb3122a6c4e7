// Device: where a tensor lives ("cpu" or "cuda:N"), and what CUDA devices this machine has.
#pragma once

#include <ostream>
#include <string>

namespace tandem {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return Device{DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return Device{DeviceType::CUDA, i}; }
  // Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; throws ValueError otherwise.
  static Device parse(const std::string& s);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// Number of usable CUDA devices; 0 when there is no GPU or no driver (never throws).
int cuda_device_count();
inline bool cuda_available() { return cuda_device_count() > 0; }
// Whether the CUDA devices are Tandem's simulated GPU (tools/cudasim); programs say so on stderr when they
// first use one.
bool cuda_simulated();
// Why no CUDA device is usable ("" when one is).
std::string cuda_unavailable_reason();
// Throws DeviceError unless d is the CPU or an existing CUDA device.
void check_device_available(const Device& d);
// The best device present: cuda:0 when a GPU exists, else the CPU.
Device best_device();

}  // namespace tandem
