// The stream checker's wrapper of the NN kernel interface (as checked_backend.h for the tensor kernels).
#pragma once

#include <memory>

#include "runtime/nn/nn_backend.h"

namespace tandem {

std::unique_ptr<NNBackend> make_checked_nn_backend(NNBackend& kernels);

}  // namespace tandem
