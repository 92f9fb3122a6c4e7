// Storage of the process-wide numeric switches.
#include "runtime/base/config.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tandem {
namespace {
bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return fallback;
  return std::strcmp(v, "0") != 0;
}

// The switches, each with its environment variable and the value it has when that is unset or empty.
enum Switch { kTf32, kDeterministic, kCudnnBenchmark, kDepthwise, kOnednn, kNativeBf16, kFillFresh, kSwitches };
struct EnvDefault {
  const char* name;
  bool fallback;
};
constexpr EnvDefault kEnv[kSwitches] = {{"TANDEM_TF32", true},
                                        {"TANDEM_DETERMINISTIC", false},
                                        {"TANDEM_CUDNN_BENCHMARK", false},
                                        {"TANDEM_DEPTHWISE_KERNELS", true},
                                        {"TANDEM_ONEDNN", true},
                                        {"TANDEM_NATIVE_BF16", true},
                                        {"TANDEM_FILL_FRESH", false}};

// Switch S, read from its environment variable on first use.
template <Switch S>
std::atomic<bool>& flag() {
  static std::atomic<bool> f(env_flag(kEnv[S].name, kEnv[S].fallback));
  return f;
}
}  // namespace

bool allow_tf32() { return flag<kTf32>().load(std::memory_order_relaxed); }
void set_allow_tf32(bool on) { flag<kTf32>().store(on); }
bool deterministic() { return flag<kDeterministic>().load(std::memory_order_relaxed); }
void set_deterministic(bool on) { flag<kDeterministic>().store(on); }
bool cudnn_benchmark() { return flag<kCudnnBenchmark>().load(std::memory_order_relaxed); }
void set_cudnn_benchmark(bool on) { flag<kCudnnBenchmark>().store(on); }
bool depthwise_kernels() { return flag<kDepthwise>().load(std::memory_order_relaxed); }
void set_depthwise_kernels(bool on) { flag<kDepthwise>().store(on); }
bool cpu_onednn() { return flag<kOnednn>().load(std::memory_order_relaxed); }
void set_cpu_onednn(bool on) { flag<kOnednn>().store(on); }
bool cpu_native_bf16() {
  static const bool has_bf16 = __builtin_cpu_supports("avx512bf16");
  return has_bf16 && cpu_onednn() && flag<kNativeBf16>().load(std::memory_order_relaxed);
}
void set_cpu_native_bf16(bool on) { flag<kNativeBf16>().store(on); }
bool fill_fresh_host_memory() { return flag<kFillFresh>().load(std::memory_order_relaxed); }
void set_fill_fresh_host_memory(bool on) { flag<kFillFresh>().store(on); }

}  // namespace tandem
