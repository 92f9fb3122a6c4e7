// The one way Tandem launches a kernel: `<<<>>>` under nvcc, the simulator's launch in the simulated-GPU
// build (where .cu files are C++ compiled with tools/cudasim/simt.h). Write
//   launch_kernel(TD_KERNEL(name<T, U>), grid, block, shared_bytes, stream, args...);
// then check it with TD_CUDA_CHECK_LAUNCH as after any launch.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/kernel_registry.h"

namespace tandem {
namespace cuda {

// A kernel with its name and where it is launched (fault messages of the simulated GPU name both).
template <typename... P>
struct KernelRef {
  void (*fn)(P...);
  const char* name;
  const char* file;
  int line;
};
// For a kernel chosen at run time; it is not registered (TD_KERNEL registers its kernel).
template <typename... P>
KernelRef<P...> make_kernel_ref(void (*fn)(P...), const char* name, const char* file, int line) {
  return KernelRef<P...>{fn, name, file, line};
}
template <auto Fn>
auto kernel_ref(const char* name, const char* file, int line) {
  (void)KernelRegistration<Fn>::registered;  // instantiates Fn's registration
  return make_kernel_ref(Fn, name, file, line);
}
#define TD_KERNEL(...) ::tandem::cuda::kernel_ref<&__VA_ARGS__>(#__VA_ARGS__, __FILE__, __LINE__)

// Queues k on `stream` with `args` converted to the kernel's parameter types, as <<<>>> does.
template <typename... P, typename... A>
void launch_kernel(KernelRef<P...> k, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, A&&... args) {
#if defined(TANDEM_CUDASIM)
  ::cudasim::launch_kernel(k.name, k.file, k.line, k.fn, grid, block, shared_bytes, stream, std::forward<A>(args)...);
#else
  // clang-format 14 would split the closing >>> of a launch in a .cuh file.
  // clang-format off
  k.fn<<<grid, block, shared_bytes, stream>>>(std::forward<A>(args)...);
  // clang-format on
#endif
}

}  // namespace cuda
}  // namespace tandem
