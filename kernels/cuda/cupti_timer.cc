// CUPTI through dlopen: its entry points, the activity buffers it fills on its own thread, and the DeviceTimer
// that enables kernel and external-correlation records for one profile.
#include "kernels/cuda/cupti_timer.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/cupti_records.h"
#include "runtime/base/device.h"

namespace tandem {
namespace cuda {

namespace {

struct CuptiApi {
  CUptiResult (*activity_enable)(CUpti_ActivityKind);
  CUptiResult (*activity_disable)(CUpti_ActivityKind);
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*push_external)(CUpti_ExternalCorrelationKind, uint64_t);
  CUptiResult (*pop_external)(CUpti_ExternalCorrelationKind, uint64_t*);
  CUptiResult (*timestamp)(uint64_t*);
  CUptiResult (*result_string)(CUptiResult, const char**);
};

// The entry points of `library`, or false with why not.
bool open_library(const std::string& library, CuptiApi* api, std::string* why_not) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why_not = error ? error : library + ": cannot be opened";
    return false;
  }
  bool found = true;
  auto entry = [&](auto*& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && found) {
      *why_not = library + " has no " + name;
      found = false;
    }
  };
  entry(api->activity_enable, "cuptiActivityEnable");
  entry(api->activity_disable, "cuptiActivityDisable");
  entry(api->register_callbacks, "cuptiActivityRegisterCallbacks");
  entry(api->flush_all, "cuptiActivityFlushAll");
  entry(api->next_record, "cuptiActivityGetNextRecord");
  entry(api->push_external, "cuptiActivityPushExternalCorrelationId");
  entry(api->pop_external, "cuptiActivityPopExternalCorrelationId");
  entry(api->timestamp, "cuptiGetTimestamp");
  entry(api->result_string, "cuptiGetResultString");
  return found;
}

struct Loaded {
  std::once_flag once;
  bool ok = false;
  std::string why_not;
  CuptiApi api{};
};
Loaded& loaded() {
  static auto* l = new Loaded();  // never destroyed: CUPTI's thread may call back during exit
  return *l;
}

// The records of the running profile, filled from CUPTI's buffer-completed callback.
struct Collected {
  std::mutex mu;
  CuptiRecords records;
};
Collected& collected() {
  static auto* c = new Collected();
  return *c;
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mu);
  CUpti_Activity* record = nullptr;
  while (loaded().api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) c.records.add(*record);
  std::free(buffer);
}

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  loaded().api.result_string(r, &text);
  return text ? text : "error " + std::to_string(static_cast<int>(r));
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

class CuptiTimer final : public profiler::DeviceTimer {
 public:
  // Enables the records; false with why not (nothing left enabled).
  bool start(std::string* why_not) {
    const CuptiApi& api = loaded().api;
    CUptiResult r = api.register_callbacks(buffer_requested, buffer_completed);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < 2; ++i) r = api.activity_enable(kKinds[i]);
    uint64_t cupti_now = 0;
    if (r == CUPTI_SUCCESS) r = api.timestamp(&cupti_now);
    if (r != CUPTI_SUCCESS) {
      for (CUpti_ActivityKind k : kKinds) api.activity_disable(k);
      *why_not = "CUPTI could not start recording kernels (" + result_text(r) + ")";
      return false;
    }
    offset_ns_ = steady_ns() - static_cast<int64_t>(cupti_now);
    std::lock_guard<std::mutex> lock(collected().mu);
    collected().records = CuptiRecords();
    return true;
  }

  const char* name() const override { return "CUPTI"; }
  void begin_call(uint64_t call) override { loaded().api.push_external(kProfilerCorrelation, call); }
  void end_call() override {
    uint64_t last = 0;
    loaded().api.pop_external(kProfilerCorrelation, &last);
  }

  std::vector<profiler::DeviceKernel> finish() override {
    const CuptiApi& api = loaded().api;
    api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (CUpti_ActivityKind k : kKinds) api.activity_disable(k);
    std::lock_guard<std::mutex> lock(collected().mu);
    return collected().records.device_kernels(offset_ns_);
  }

 private:
  int64_t offset_ns_ = 0;
};

}  // namespace

std::vector<std::string> cupti_libraries() {
  const char* chosen = std::getenv("TANDEM_CUPTI_LIBRARY");
  if (chosen != nullptr && *chosen != '\0') return {chosen};
  // CUDA 13's, whose record layouts cupti_records.cc reads (PyTorch's packages ship only the versioned name).
  return {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
          "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"};
}

bool load_cupti(const std::vector<std::string>& libraries, std::string* why_not) {
  Loaded& l = loaded();
  std::call_once(l.once, [&] {
    l.why_not = "CUPTI is not available:";
    for (const std::string& library : libraries) {
      std::string why;
      if (open_library(library, &l.api, &why)) {
        l.ok = true;
        return;
      }
      l.why_not += " " + why + ";";
    }
    l.why_not.pop_back();
  });
  if (!l.ok) *why_not = l.why_not;
  return l.ok;
}

std::unique_ptr<profiler::DeviceTimer> make_cupti_timer(Device, std::string* why_not) {
  if (cuda_simulated()) return nullptr;  // the simulated GPU runs no CUPTI: host timers time its kernels
  if (!load_cupti(cupti_libraries(), why_not)) return nullptr;
  auto timer = std::make_unique<CuptiTimer>();
  if (!timer->start(why_not)) return nullptr;
  return timer;
}

namespace {
const bool registered = [] {
  profiler::register_device_timer(DeviceType::CUDA, make_cupti_timer);
  return true;
}();
}  // namespace

}  // namespace cuda
}  // namespace tandem
