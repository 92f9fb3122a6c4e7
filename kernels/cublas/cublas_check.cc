// cuBLAS error reporting.
#include "kernels/cublas/cublas_check.h"

#include <string>

namespace tandem {
namespace detail {
void raise_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  throw BackendError(std::string("cuBLAS error ") + cublasGetStatusName(status) + ": " + cublasGetStatusString(status),
                     expr, file, line);
}
}  // namespace detail
}  // namespace tandem
