// The stream checker's wrappers of the kernel interfaces: each call records the storages its pointers
// point into (const pointers are reads, others writes) on its stream, then forwards to the real kernels.
#pragma once

#include <memory>

#include "runtime/backend.h"
#include "runtime/nn_backend.h"

namespace tandem {

std::unique_ptr<Backend> make_checked_backend(Backend& kernels);
std::unique_ptr<NNBackend> make_checked_nn_backend(NNBackend& kernels);

}  // namespace tandem
