// The stream checker's wrapper of the tensor kernel interface: each call records the storages its pointers
// point into (const pointers are reads, others writes) on its stream, then forwards to the real kernels.
#pragma once

#include <memory>

#include "runtime/tensor/backend.h"

namespace tandem {

std::unique_ptr<Backend> make_checked_backend(Backend& kernels);

}  // namespace tandem
