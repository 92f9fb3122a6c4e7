// WriteCheck: while in scope, every kernel call (Backend and NNBackend, on the CPU and on the GPU) is checked
// against the operands its method's args declare (runtime/tensor/kernel_args.h). A byte changed in an operand
// declared read-only (outside the operands declared written) is a test failure naming the method and the operand;
// so is an operand declared written (not updated) of a float dtype that the kernel left entirely as fresh memory
// (all bytes 0xff: TANDEM_FILL_FRESH on the CPU, always on the simulated GPU), which no computed value is.
#pragma once

#include <memory>

#include "runtime/base/non_copyable.h"

namespace tandem {
namespace testing {

class WriteCheck : NonCopyable {
 public:
  WriteCheck();  // wraps the kernels registered now; the destructor registers them again
  ~WriteCheck();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace testing
}  // namespace tandem
