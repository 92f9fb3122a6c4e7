// prepare_cuda_thread: what a thread does on a CUDA device before any stream of the device can wait for it.
//
// Creating a cuBLAS or cuDNN handle loads the library's module into the device's context, and so does a kernel's
// first launch (CUDA loads modules lazily by default): the driver then waits until every stream of the context is
// idle. A thread that does either while another stream waits for something this thread does later (a host
// function, an NCCL receive from a peer it feeds) hangs. So each thread that queues CUDA work prepares itself on
// each device it uses when it starts, before any of its streams can be blocked: run_on_workers does it for every
// worker thread; a program's own threads (and its main thread) call prepare_cuda_thread.
#pragma once

#include "runtime/base/device.h"

namespace tandem {

// Makes the calling thread's library handles for `device` and loads Tandem's kernels there (each step once per
// thread or per device; later calls return at once). Waits for the device's streams while it does. A no-op for
// the CPU; DeviceError for a device that is absent.
void prepare_cuda_thread(Device device);

// One step of prepare_cuda_thread, on CUDA device `device` (its CUDA device current): the CUDA libraries' wrappers
// register theirs when they are loaded (kernels/cublas, kernels/cudnn, kernels/cuda).
using CudaThreadSetup = void (*)(int device);
void register_cuda_thread_setup(CudaThreadSetup setup);

}  // namespace tandem
