// The registry of Tandem's kernels: every kernel a launch site names (TD_KERNEL, kernel_launch.cuh) is registered
// when the program is loaded, so that a thread's setup (prepare_cuda_thread, runtime/memory/cuda_thread.h) loads
// them all on its device before any stream can wait for the thread: CUDA loads a kernel at its first launch by
// default, and a load waits for every stream of the device. The CUDA backend's setup step does the loading
// (kernels/cuda/launch.cc).
#pragma once

#include <vector>

namespace tandem {
namespace cuda {

void register_kernel(const void* fn);
// Every kernel registered so far (the functions their launches get).
std::vector<const void*> registered_kernels();

// Registers kernel Fn at load time once Fn's `registered` is used (as TD_KERNEL does).
template <auto Fn>
struct KernelRegistration {
  static const bool registered;
};
template <auto Fn>
const bool KernelRegistration<Fn>::registered = (register_kernel(reinterpret_cast<const void*>(Fn)), true);

}  // namespace cuda
}  // namespace tandem
