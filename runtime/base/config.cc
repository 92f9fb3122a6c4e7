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
std::atomic<bool>& tf32() {
  static std::atomic<bool> f(env_flag("TANDEM_TF32", true));
  return f;
}
std::atomic<bool>& determ() {
  static std::atomic<bool> f(env_flag("TANDEM_DETERMINISTIC", false));
  return f;
}
std::atomic<bool>& onednn() {
  static std::atomic<bool> f(env_flag("TANDEM_ONEDNN", true));
  return f;
}
std::atomic<bool>& fill_fresh() {
  static std::atomic<bool> f(env_flag("TANDEM_FILL_FRESH", false));
  return f;
}
}  // namespace

bool allow_tf32() { return tf32().load(std::memory_order_relaxed); }
void set_allow_tf32(bool on) { tf32().store(on); }
bool deterministic() { return determ().load(std::memory_order_relaxed); }
void set_deterministic(bool on) { determ().store(on); }
bool cpu_onednn() { return onednn().load(std::memory_order_relaxed); }
void set_cpu_onednn(bool on) { onednn().store(on); }
bool fill_fresh_host_memory() { return fill_fresh().load(std::memory_order_relaxed); }
void set_fill_fresh_host_memory(bool on) { fill_fresh().store(on); }

}  // namespace tandem
