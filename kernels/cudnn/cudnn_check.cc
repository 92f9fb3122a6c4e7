// cuDNN error reporting: the status name plus cuDNN's own last-error message when it has one.
#include "kernels/cudnn/cudnn_check.h"

#include <string>

namespace tandem {
namespace detail {
void raise_cudnn(cudnnStatus_t status, const char* expr, const char* file, int line) {
  std::string message = std::string("cuDNN error: ") + cudnnGetErrorString(status);
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') message += std::string(" (") + detail + ")";
  throw BackendError(message, expr, file, line);
}
}  // namespace detail
}  // namespace tandem
