// Device parsing, printing and CUDA device discovery.
#include "runtime/base/device.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/base/error.h"

namespace tandem {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    std::string num = s.substr(5);
    char* end = nullptr;
    long v = num.empty() ? -1 : std::strtol(num.c_str(), &end, 10);
    if (!num.empty() && end && *end == '\0' && v >= 0 && v < 1024) return cuda(static_cast<int>(v));
  }
  TD_THROW(ValueError, "cannot parse device '", s, "' (expected 'cpu', 'cuda' or 'cuda:N')");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

namespace {
struct CudaProbe {
  int count = 0;
  std::string reason;
  std::string name;        // of device 0
  bool simulated = false;  // the devices are Tandem's simulated GPU
};

const CudaProbe& probe() {
  static CudaProbe p = [] {
    CudaProbe r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      // Without a driver this is "insufficient driver" (35), not "no device" (100): any error means no GPU.
      r.reason =
          std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
      cudaGetLastError();
      return r;
    }
    if (n == 0) r.reason = "cudaGetDeviceCount reports no CUDA device";
    r.count = n;
    cudaDeviceProp prop;
    if (n > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      r.name = prop.name;
      // Tandem's simulated GPU (tools/cudasim) names its devices so.
      r.simulated = r.name.find("simulated") != std::string::npos;
    }
    cudaGetLastError();
    return r;
  }();
  return p;
}
}  // namespace

int cuda_device_count() { return probe().count; }
bool cuda_simulated() { return probe().simulated; }
std::string cuda_unavailable_reason() { return probe().reason; }

void check_device_available(const Device& d) {
  if (d.is_cpu()) return;
  int n = cuda_device_count();
  if (n > 0 && probe().simulated) {
    // Said once, when a program first uses a CUDA device.
    static std::once_flag once;
    std::call_once(once, [n] {
      std::fprintf(stderr,
                   "tandem: the %d CUDA device(s) are simulated (%s): results check the CUDA code paths, not "
                   "NVIDIA's numerics or speed\n",
                   n, probe().name.c_str());
    });
  }
  TD_CHECK_DEVICE(n > 0, "device ", d, " was requested but no CUDA GPU is available here (", cuda_unavailable_reason(),
                  "); use --device cpu");
  TD_CHECK_DEVICE(d.index < n, "device ", d, " was requested but this machine has only ", n,
                  " CUDA device(s) (cuda:0..cuda:", n - 1, ")");
}

Device best_device() { return cuda_available() ? Device::cuda(0) : Device::cpu(); }

}  // namespace tandem
