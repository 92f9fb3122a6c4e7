// The stream checker's operands for tensors: the bytes a tensor's view spans, as a read or a write.
#pragma once

#include "runtime/memory/stream_check.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace stream_check {

Access reads(const Tensor& t);
Access writes(const Tensor& t);

}  // namespace stream_check
}  // namespace tandem
