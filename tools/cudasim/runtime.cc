// The simulated CUDA runtime's configuration, error state, devices and their properties.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

namespace cudasim {

namespace {

long env_long(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == nullptr || *end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "cudasim: %s=%s is not a number in [%ld, %ld]; using %ld\n", name, v, lo, hi, fallback);
    return fallback;
  }
  return x;
}

Config read_config() {
  Config c;
  c.devices = static_cast<int>(env_long("TANDEM_CUDASIM_DEVICES", c.devices, 0, 64));
  c.sms = static_cast<int>(env_long("TANDEM_CUDASIM_SMS", c.sms, 1, 1024));
  c.memory_bytes = static_cast<size_t>(env_long("TANDEM_CUDASIM_MEMORY_MB", 4096, 1, 1 << 24)) << 20;
  c.host_threads = static_cast<int>(env_long("TANDEM_CUDASIM_THREADS", 2, 1, 256));
  c.watchdog_s = static_cast<double>(env_long("TANDEM_CUDASIM_WATCHDOG_S", 300, 1, 1 << 30));
  c.order_seed = static_cast<uint64_t>(env_long("TANDEM_CUDASIM_SEED", 1, 0, 1L << 62));
  if (const char* o = std::getenv("TANDEM_CUDASIM_ORDER")) {
    std::string s(o);
    if (s == "reverse") {
      c.order = ThreadOrder::Reverse;
    } else if (s == "random") {
      c.order = ThreadOrder::Random;
    } else if (s != "forward" && !s.empty()) {
      std::fprintf(stderr, "cudasim: TANDEM_CUDASIM_ORDER=%s is not forward, reverse or random; using forward\n", o);
    }
  }
  return c;
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

// NVIDIA's names and texts of the codes the simulator returns.
const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorPeerAccessUnsupported, "cudaErrorPeerAccessUnsupported",
     "peer access is not supported between these two devices"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation is not permitted in the current state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorGraphExecUpdateFailure, "cudaErrorGraphExecUpdateFailure",
     "the graph update was not performed because it included changes which violated constraints specific to "
     "instantiated graph update"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* error_text(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

// The text cudaGetErrorString adds to each code: the detail of the latest error of that code. Texts are
// interned (never freed) because callers keep the returned pointer.
std::mutex detail_mu;
std::map<int, const char*>& details() {
  static auto* m = new std::map<int, const char*>();
  return *m;
}
const char* intern(const std::string& s) {
  static auto* pool = new std::set<std::string>();
  return pool->insert(s).first->c_str();
}

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local int tl_device = 0;

}  // namespace

const Config& config() {
  static const Config c = read_config();
  return c;
}

void fault(cudaError_t code, const std::string& message) { throw Fault{code, message}; }

cudaError_t set_error(cudaError_t e, const std::string& detail) {
  if (e == cudaSuccess) return e;
  tl_last_error = e;
  if (!detail.empty()) {
    std::lock_guard<std::mutex> lock(detail_mu);
    details()[static_cast<int>(e)] = intern(detail);
  }
  return e;
}

int device_count() { return config().devices; }
int current_device() { return tl_device; }
void set_current_device(int d) { tl_device = d; }

DeviceState& device_state(int d) {
  static std::vector<DeviceState*>* devices = [] {
    auto* v = new std::vector<DeviceState*>();
    for (int i = 0; i < config().devices; ++i) v->push_back(new DeviceState(i, config().sms));
    return v;
  }();
  return *(*devices)[static_cast<size_t>(d)];
}

cudaError_t sticky_error(int device) {
  if (device < 0 || device >= device_count()) return cudaSuccess;
  return static_cast<cudaError_t>(device_state(device).sticky.load());
}

cudaError_t check_device(int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  return sticky_error(device);
}

void set_sticky(int device, const Fault& f) {
  DeviceState& d = device_state(device);
  const std::string text = "cuda:" + std::to_string(device) + ": " + f.message;
  {
    // The detail is written under the same lock as the sticky code is published: a thread that sees the
    // code (a synchronize woken by the fault) and asks cudaGetErrorString waits for this detail, not an
    // older one of the same code.
    std::lock_guard<std::mutex> lock(detail_mu);
    int expected = cudaSuccess;
    if (!d.sticky.compare_exchange_strong(expected, static_cast<int>(f.code))) return;
    details()[static_cast<int>(f.code)] = intern(text);
  }
  std::fprintf(stderr, "cudasim: %s (the device's context is lost: later calls on it fail)\n", text.c_str());
}

}  // namespace cudasim

using cudasim::check_device;
using cudasim::set_error;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return set_error(cudaErrorInvalidValue);
  *count = cudasim::device_count();
  if (*count == 0) return set_error(cudaErrorNoDevice, "TANDEM_CUDASIM_DEVICES=0");
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  cudasim::count_call("cudaGetDevice");
  if (device == nullptr) return set_error(cudaErrorInvalidValue);
  *device = cudasim::current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  cudasim::count_call("cudaSetDevice");
  if (device < 0 || device >= cudasim::device_count())
    return set_error(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ") on a simulator with " +
                                                 std::to_string(cudasim::device_count()) + " devices");
  cudasim::set_current_device(device);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = cudasim::tl_last_error;
  cudasim::tl_last_error = cudaSuccess;
  if (e == cudaSuccess) e = cudasim::sticky_error(cudasim::current_device());
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  cudaError_t e = cudasim::tl_last_error;
  if (e == cudaSuccess) e = cudasim::sticky_error(cudasim::current_device());
  return e;
}

const char* cudaGetErrorName(cudaError_t error) {
  const cudasim::ErrorText* t = cudasim::error_text(error);
  return t != nullptr ? t->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  const cudasim::ErrorText* t = cudasim::error_text(error);
  const char* base = t != nullptr ? t->text : "unknown error";
  std::lock_guard<std::mutex> lock(cudasim::detail_mu);
  auto it = cudasim::details().find(static_cast<int>(error));
  if (it == cudasim::details().end()) return base;
  return cudasim::intern(std::string(base) + " [simulated GPU: " + it->second + "]");
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return set_error(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return set_error(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return set_error(cudaErrorInvalidValue);
  if (device < 0 || device >= cudasim::device_count()) return set_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "%s", cudasim::kDeviceName);
  // A UUID per device (NCCL and Tandem tell GPUs apart by it): "cudasim" and the ordinal.
  std::memcpy(prop->uuid.bytes, "cudasim", 7);
  prop->uuid.bytes[15] = static_cast<char>(device);
  prop->totalGlobalMem = cudasim::config().memory_bytes;
  prop->sharedMemPerBlock = cudasim::kSharedMemPerBlock;
  prop->sharedMemPerBlockOptin = cudasim::kSharedMemPerBlockOptin;
  prop->sharedMemPerMultiprocessor = cudasim::kSharedMemPerBlockOptin + 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = cudasim::kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = cudasim::config().sms;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->streamPrioritiesSupported = 1;
  prop->memoryPoolsSupported = 1;
  prop->pciBusID = device;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr) return set_error(cudaErrorInvalidValue);
  if (device < 0 || device >= cudasim::device_count()) return set_error(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = cudasim::config().sms; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = cudasim::kMaxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: *value = 1024; return cudaSuccess;
    case cudaDevAttrMaxBlockDimZ: *value = 64; return cudaSuccess;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; return cudaSuccess;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *value = 65535; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(cudasim::kSharedMemPerBlock); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(cudasim::kSharedMemPerBlockOptin);
      return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; return cudaSuccess;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrStreamPrioritiesSupported: *value = 1; return cudaSuccess;
    default: break;
  }
  return set_error(cudaErrorInvalidValue,
                   "cudaDeviceGetAttribute: attribute " + std::to_string(attr) + " is not simulated");
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return set_error(cudaErrorInvalidValue);
  if (check_device(device) == cudaErrorInvalidDevice || check_device(peer) == cudaErrorInvalidDevice)
    return set_error(cudaErrorInvalidDevice);
  *can = device != peer ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  const int self = cudasim::current_device();
  if (flags != 0) return set_error(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: flags must be 0");
  if (peer < 0 || peer >= cudasim::device_count()) return set_error(cudaErrorInvalidDevice);
  if (cudaError_t e = check_device(self)) return set_error(e);
  if (peer == self)
    return set_error(cudaErrorInvalidDevice, "cudaDeviceEnablePeerAccess: a device is not its own peer");
  cudasim::DeviceState& d = cudasim::device_state(self);
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.peers.insert(peer).second) return set_error(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  const int self = cudasim::current_device();
  if (peer < 0 || peer >= cudasim::device_count()) return set_error(cudaErrorInvalidDevice);
  cudasim::DeviceState& d = cudasim::device_state(self);
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.peers.erase(peer) == 0) return set_error(cudaErrorPeerAccessNotEnabled);
  return cudaSuccess;
}

// The attributes that need a loaded function (maxThreadsPerBlock among them): the kernel is loaded on the current
// device first, which waits for the device's streams (a program loads its kernels this way before any stream can
// wait for it). `func` is the function a kernel's launch helper gets.
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr || func == nullptr) return set_error(cudaErrorInvalidValue);
  const int device = cudasim::current_device();
  if (cudaError_t e = check_device(device)) return set_error(e);
  if (!cudasim::load_kernel(device, func, "cudaFuncGetAttributes, which loads the kernel,"))
    return set_error(cudasim::sticky_error(device));
  std::memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = cudasim::kMaxThreadsPerBlock;
  attr->maxDynamicSharedSizeBytes = static_cast<int>(cudasim::kSharedMemPerBlock);
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  return cudaSuccess;
}

// Which build this is: programs and tests find it with dlsym (absent from NVIDIA's libraries).
const char* tandem_cudasim_version(void) {
  return "Tandem cudasim 1 (CUDA "
         "13.0"
         " API)";
}

}  // extern "C"
