// The driver entry points of the simulated GPU that programs reach through cudaGetDriverEntryPoint: device
// handles, SM resources and green contexts, whose streams run kernels on their own SMs only.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

// A resource descriptor and a green context: a device and the SMs they hold.
struct CUdevResourceDesc_st {
  int device = 0;
  std::vector<int> sms;
};
struct CUgreenCtx_st {
  int device = 0;
  std::vector<int> sms;
};

namespace cudasim {
namespace {

// cc 9.0 partitions: 8 SMs at least, in steps of 8 (2 and 2 when co-scheduling is ignored).
constexpr unsigned kMinPartition = 8;
constexpr unsigned kAlignment = 8;
constexpr unsigned kMinPartitionIgnoringClusters = 2;

// What the simulator keeps in a CUdevResource's internal bytes: which device and SMs it describes.
struct ResourceTag {
  uint32_t magic;
  int32_t device;
  uint32_t first_sm;
};
constexpr uint32_t kMagic = 0x5e1e5a11u;
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource::_internal_padding), "tag fits the padding");

void set_sm_resource(CUdevResource* r, int device, unsigned first, unsigned count) {
  std::memset(r, 0, sizeof(*r));
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = count;
  r->sm.minSmPartitionSize = kMinPartition;
  r->sm.smCoscheduledAlignment = kAlignment;
  ResourceTag tag{kMagic, device, first};
  std::memcpy(r->_internal_padding, &tag, sizeof(tag));
}

bool get_tag(const CUdevResource* r, ResourceTag* tag) {
  if (r == nullptr || r->type != CU_DEV_RESOURCE_TYPE_SM) return false;
  std::memcpy(tag, r->_internal_padding, sizeof(*tag));
  return tag->magic == kMagic && tag->device >= 0 && tag->device < device_count();
}

CUresult get_error_string(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_RESOURCE_TYPE: *text = "invalid resource type"; break;
    case CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION: *text = "invalid resource configuration"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    default: *text = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult device_get(CUdevice* dev, int ordinal) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult device_get_dev_resource(CUdevice dev, CUdevResource* result, CUdevResourceType type) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  set_sm_resource(result, dev, 0, static_cast<unsigned>(config().sms));
  return CUDA_SUCCESS;
}

CUresult sm_resource_split_by_count(CUdevResource* result, unsigned* nb_groups, const CUdevResource* input,
                                    CUdevResource* remaining, unsigned use_flags, unsigned min_count) {
  ResourceTag tag;
  if (nb_groups == nullptr || !get_tag(input, &tag)) return CUDA_ERROR_INVALID_VALUE;
  if ((use_flags & ~static_cast<unsigned>(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  const unsigned total = input->sm.smCount;
  if (min_count > total) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  const bool fine = (use_flags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) != 0;
  const unsigned step = fine ? kMinPartitionIgnoringClusters : kAlignment;
  const unsigned least = fine ? kMinPartitionIgnoringClusters : kMinPartition;
  unsigned size = std::max(least, (min_count + step - 1) / step * step);
  unsigned groups = size > 0 ? total / size : 0;
  if (result != nullptr) groups = std::min(groups, *nb_groups);
  *nb_groups = groups;
  if (result == nullptr) return CUDA_SUCCESS;
  for (unsigned g = 0; g < groups; ++g) set_sm_resource(&result[g], tag.device, tag.first_sm + g * size, size);
  if (remaining != nullptr) set_sm_resource(remaining, tag.device, tag.first_sm + groups * size, total - groups * size);
  return CUDA_SUCCESS;
}

CUresult resource_generate_desc(CUdevResourceDesc* desc, CUdevResource* resources, unsigned count) {
  if (desc == nullptr || resources == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* d = new CUdevResourceDesc_st();
  for (unsigned i = 0; i < count; ++i) {
    ResourceTag tag;
    if (!get_tag(&resources[i], &tag) || (i > 0 && tag.device != d->device)) {
      delete d;
      return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    }
    d->device = tag.device;
    for (unsigned s = 0; s < resources[i].sm.smCount; ++s) d->sms.push_back(static_cast<int>(tag.first_sm + s));
  }
  *desc = d;
  return CUDA_SUCCESS;
}

CUresult green_ctx_create(CUgreenCtx* ctx, CUdevResourceDesc desc, CUdevice dev, unsigned flags) {
  if (ctx == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_GREEN_CTX_DEFAULT_STREAM) == 0) return CUDA_ERROR_INVALID_VALUE;  // required by the API
  if (dev != desc->device) return CUDA_ERROR_INVALID_DEVICE;
  auto* g = new CUgreenCtx_st();
  g->device = dev;
  g->sms = desc->sms;
  *ctx = g;
  return CUDA_SUCCESS;
}

CUresult green_ctx_stream_create(CUstream* stream, CUgreenCtx ctx, unsigned flags, int priority) {
  if (stream == nullptr || ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;  // the only flag allowed
  if (sticky_error(ctx->device) != cudaSuccess) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = create_stream(ctx->device, cudaStreamNonBlocking, priority, ctx->sms).get();
  return CUDA_SUCCESS;
}

struct EntryPoint {
  const char* symbol;
  int since;  // the CUDA version that introduced this form
  void* fn;
};

const EntryPoint kEntryPoints[] = {
    {"cuGetErrorString", 6000, reinterpret_cast<void*>(&get_error_string)},
    {"cuDeviceGet", 2000, reinterpret_cast<void*>(&device_get)},
    {"cuDeviceGetDevResource", 12040, reinterpret_cast<void*>(&device_get_dev_resource)},
    {"cuDevSmResourceSplitByCount", 12040, reinterpret_cast<void*>(&sm_resource_split_by_count)},
    {"cuDevResourceGenerateDesc", 12040, reinterpret_cast<void*>(&resource_generate_desc)},
    {"cuGreenCtxCreate", 12040, reinterpret_cast<void*>(&green_ctx_create)},
    {"cuGreenCtxStreamCreate", 12050, reinterpret_cast<void*>(&green_ctx_stream_create)},
};

cudaError_t entry_point(const char* symbol, void** fn, unsigned version, cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || fn == nullptr) return set_error(cudaErrorInvalidValue);
  *fn = nullptr;
  cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
  for (const EntryPoint& e : kEntryPoints) {
    if (std::strcmp(e.symbol, symbol) != 0) continue;
    if (static_cast<int>(version) < e.since) {
      result = cudaDriverEntryPointVersionNotSufficent;
    } else {
      *fn = e.fn;
      result = cudaDriverEntryPointSuccess;
    }
    break;
  }
  if (status != nullptr) *status = result;
  return cudaSuccess;
}

}  // namespace
}  // namespace cudasim

extern "C" {

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  (void)flags;
  return cudasim::entry_point(symbol, fn, version, status);
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* status) {
  (void)flags;
  return cudasim::entry_point(symbol, fn, CUDART_VERSION, status);
}

}  // extern "C"
