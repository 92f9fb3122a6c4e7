// What the kernel registries' wrappers show each kernel call to: the stream checker and the profiler, each while
// it runs.
#pragma once

#include "runtime/memory/stream_check.h"
#include "runtime/tensor/kernel_observer.h"
#include "runtime/tensor/profiler.h"

namespace tandem {

// Whether a registry hands out its wrapper: the stream checker or the profiler runs. Two relaxed loads.
inline bool kernels_watched() { return stream_check::enabled() || profiler::active(); }

// The observer of the registries' wrappers: forwards each call to those of the two that run.
KernelObserver& kernel_watchers();

}  // namespace tandem
