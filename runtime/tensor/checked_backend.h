// The stream checker as a KernelObserver: each kernel call records the storages its operands point into (as read or
// written, declared by its method's args) on its stream. The kernel registries wrap their kernels with it.
#pragma once

#include "runtime/tensor/kernel_observer.h"

namespace tandem {

KernelObserver& stream_check_observer();

}  // namespace tandem
