// SM partitions of a GPU: green contexts made through driver entry points, with a plain-stream fallback.
#include "parallel/green_context.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/memory/storage.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace parallel {

namespace {

// Green contexts need cuGreenCtxStreamCreate, which appeared in CUDA 12.5.
constexpr int kMinDriverVersion = 12050;

// Driver functions, looked up once through the runtime so that libcuda is never linked.
struct DriverApi {
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetDevResource_v12040 device_get_dev_resource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 sm_resource_split_by_count = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 resource_generate_desc = nullptr;
  PFN_cuGreenCtxCreate_v12040 green_ctx_create = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 green_ctx_stream_create = nullptr;
};

template <typename F>
void lookup(const char* symbol, unsigned int version, F* fn) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &ptr, version, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
    cudaGetLastError();
    const char* why = err != cudaSuccess                                  ? cudaGetErrorString(err)
                      : status == cudaDriverEntryPointVersionNotSufficent ? "version not sufficient"
                                                                          : "symbol not found";
    TD_THROW(BackendError, "the CUDA driver does not provide ", symbol, " (", why, ")");
  }
  *fn = reinterpret_cast<F>(ptr);
}

const DriverApi& driver_api() {
  static const DriverApi api = [] {
    int version = 0;
    TD_CUDA_CHECK(cudaDriverGetVersion(&version));
    TD_CHECK_T(BackendError, version >= kMinDriverVersion, "the CUDA driver supports CUDA ", version / 1000, ".",
               version % 1000 / 10, "; green contexts need 12.5 or newer");
    DriverApi a;
    lookup("cuGetErrorString", 6000, &a.get_error_string);
    lookup("cuDeviceGet", 2000, &a.device_get);
    lookup("cuDeviceGetDevResource", 12040, &a.device_get_dev_resource);
    lookup("cuDevSmResourceSplitByCount", 12040, &a.sm_resource_split_by_count);
    lookup("cuDevResourceGenerateDesc", 12040, &a.resource_generate_desc);
    lookup("cuGreenCtxCreate", 12040, &a.green_ctx_create);
    lookup("cuGreenCtxStreamCreate", 12050, &a.green_ctx_stream_create);
    return a;
  }();
  return api;
}

void check_driver(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (driver_api().get_error_string(result, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  TD_THROW(BackendError, what, " failed: ", text, " (CUresult ", static_cast<int>(result), ")");
}

// One (device, count) split: its SM groups, and the green context of each group, made when that partition is
// first asked for (a process of a multi-process run uses one). Contexts are never destroyed: streams of
// workers made from them may live until exit, and creating contexts is slow.
struct GreenSplit {
  CUdevice dev = 0;
  std::vector<CUdevResource> groups;
  std::vector<CUgreenCtx> contexts;
  bool probed = false;  // the first partition made passed probe_stream
  std::string error;    // why green contexts cannot serve this split (it is not retried)
};

GreenSplit split_device(Device device, int count) {
  const DriverApi& api = driver_api();
  DeviceGuard guard(device);
  TD_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context first, as cuGreenCtxCreate advises
  GreenSplit split;
  check_driver(api.device_get(&split.dev, device.index), "cuDeviceGet");
  CUdevResource whole;
  std::memset(&whole, 0, sizeof(whole));
  check_driver(api.device_get_dev_resource(split.dev, &whole, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource(SM)");
  const unsigned total = whole.sm.smCount;
  std::vector<CUdevResource> groups(count);
  unsigned made = 0;
  // The driver rounds the minimum SM count up to its granularity (a multiple of the co-scheduled alignment,
  // or a finer one when co-scheduling is ignored) and may then make fewer groups than asked: the largest
  // share that yields `count` groups is found by asking for smaller ones. First with the SMs that are
  // co-scheduled kept together; if no share allows `count` groups that way, ignoring co-scheduling.
  for (unsigned flags : {0u, static_cast<unsigned>(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING)}) {
    for (unsigned share = total / count; share >= 1 && made != static_cast<unsigned>(count); --share) {
      std::memset(groups.data(), 0, sizeof(CUdevResource) * groups.size());
      made = static_cast<unsigned>(count);
      if (api.sm_resource_split_by_count(groups.data(), &made, &whole, nullptr, flags, share) != CUDA_SUCCESS) made = 0;
    }
    if (made == static_cast<unsigned>(count)) break;
  }
  TD_CHECK_T(BackendError, made == static_cast<unsigned>(count), "cuDevSmResourceSplitByCount cannot split the ", total,
             " SMs of ", device, " into ", count,
             " equal partitions, even ignoring SM co-scheduling "
             "(minimum partition with co-scheduling: ",
             whole.sm.minSmPartitionSize, " SMs)");
  split.groups = std::move(groups);
  split.contexts.assign(count, nullptr);
  return split;
}

CUgreenCtx green_context(GreenSplit& split, Device device, int index) {
  if (split.contexts[index] != nullptr) return split.contexts[index];
  const DriverApi& api = driver_api();
  DeviceGuard guard(device);
  CUdevResourceDesc desc = nullptr;
  check_driver(api.resource_generate_desc(&desc, &split.groups[index], 1), "cuDevResourceGenerateDesc");
  check_driver(api.green_ctx_create(&split.contexts[index], desc, split.dev, CU_GREEN_CTX_DEFAULT_STREAM),
               "cuGreenCtxCreate");
  return split.contexts[index];
}

Stream green_stream(Device device, CUgreenCtx ctx) {
  CUstream s = nullptr;
  check_driver(driver_api().green_ctx_stream_create(&s, ctx, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
  return Stream::wrap(device, reinterpret_cast<CUstream_st*>(s), /*owned=*/true);
}

// Runs what a worker does on a stream (allocate from the pool, record an event, wait, copy, and a cuDNN
// convolution and a cuBLAS GEMM, whose handles are bound to the stream) so that a driver or library that
// cannot use green-context streams is caught here, not mid-training.
void probe_stream(const Stream& stream) {
  StreamGuard guard(stream);
  autograd::NoGradGuard no_grad;
  const Device dev = stream.device();
  Storage probe = Storage::allocate(256, dev, stream);
  TD_CUDA_CHECK(cudaMemsetAsync(probe.data(), 0, 256, stream.cuda()));
  Event event;
  event.record(stream);
  Stream other = Stream::create(dev);
  other.wait(event);
  other.synchronize();
  // Products of ones: every output is the reduction length, exactly, in any precision the libraries pick.
  const Tensor conv = conv2d(ones({1, 2, 5, 5}, dev), ones({3, 2, 3, 3}, dev), Tensor(), Conv2dOptions());
  const Tensor gemm = matmul(ones({8, 16}, dev), ones({16, 4}, dev));
  for (float v : conv.to_vector<float>())
    TD_CHECK_T(BackendError, v == 18.f, "a cuDNN convolution on a green-context stream of ", dev, " gave ", v,
               " instead of 18");
  for (float v : gemm.to_vector<float>())
    TD_CHECK_T(BackendError, v == 16.f, "a cuBLAS GEMM on a green-context stream of ", dev, " gave ", v,
               " instead of 16");
  stream.synchronize();
}

bool green_contexts_disabled() {
  const char* v = std::getenv("TANDEM_GREEN_CONTEXTS");
  return v != nullptr && std::string(v) == "0";
}

// Partitions `indices` of the (device, count) split as green contexts; the first partition made is probed.
// Throws when green contexts cannot serve the split, and keeps the reason for later calls.
std::vector<SmPartition> green_partitions(Device device, int count, const std::vector<int>& indices) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, GreenSplit> splits;
  std::lock_guard<std::mutex> lock(mu);  // held while probing too: a split is probed once, by one thread
  auto it = splits.find({device.index, count});
  if (it == splits.end()) {
    GreenSplit made;
    try {
      made = split_device(device, count);
    } catch (const Error& e) {
      made.error = e.message();
    }
    it = splits.emplace(std::make_pair(device.index, count), std::move(made)).first;
  }
  GreenSplit& split = it->second;
  TD_CHECK_T(BackendError, split.error.empty(), split.error);
  std::vector<SmPartition> parts;
  try {
    for (int i : indices) {
      CUgreenCtx ctx = green_context(split, device, i);
      SmPartition p;
      p.compute = green_stream(device, ctx);
      p.comm = green_stream(device, ctx);
      p.sm_count = static_cast<int>(split.groups[i].sm.smCount);
      p.green_context = true;
      parts.push_back(std::move(p));
    }
    if (!split.probed) probe_stream(parts[0].compute);
    split.probed = true;
  } catch (const Error& e) {
    split.error = e.message();
    throw;
  }
  return parts;
}

void say_once(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr, "tandem: SM partitions use plain CUDA streams sharing all SMs, not green contexts: %s\n",
                 why.c_str());
  });
}

}  // namespace

int device_sm_count(Device device) {
  check_device_available(device);
  int sms = 0;
  TD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index));
  return sms;
}

namespace {

// Partitions `indices` of `count` partitions of `device`: green contexts, else plain streams.
std::vector<SmPartition> partitions(Device device, int count, const std::vector<int>& indices) {
  TD_CHECK_DEVICE(device.is_cuda(), "SM partitions need a CUDA device, not ", device);
  const int sms = device_sm_count(device);
  TD_CHECK(count >= 1 && count <= sms, "cannot split ", device, " into ", count, " partitions: it has ", sms, " SMs");
  for (int i : indices)
    TD_CHECK(i >= 0 && i < count, "partition ", i, " of ", device, " does not exist: it is split into ", count);
  std::string why = "TANDEM_GREEN_CONTEXTS=0";
  if (!green_contexts_disabled()) {
    try {
      return green_partitions(device, count, indices);
    } catch (const Error& e) {
      cudaGetLastError();  // a failed probe must not leave an error behind for the next CUDA call
      why = e.message();
    }
  }
  say_once(why);
  std::vector<SmPartition> parts(indices.size());
  for (auto& p : parts) {
    p.compute = Stream::create(device);
    p.comm = Stream::create(device);
    p.sm_count = sms;
    p.green_context = false;
  }
  return parts;
}

}  // namespace

std::vector<SmPartition> make_sm_partitions(Device device, int count) {
  std::vector<int> all;
  for (int i = 0; i < count; ++i) all.push_back(i);
  return partitions(device, count, all);
}

SmPartition make_sm_partition(Device device, int count, int index) { return partitions(device, count, {index})[0]; }

}  // namespace parallel
}  // namespace tandem
