// Placeholder of the simulated cuBLAS: every call reports CUBLAS_STATUS_NOT_SUPPORTED.
#include <cublas_v2.h>

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  (void)handle;
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  (void)handle;
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  (void)handle; (void)streamId;
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  (void)status;
  return "not simulated yet";
}

const char* cublasGetStatusName(cublasStatus_t status) {
  (void)status;
  return "not simulated yet";
}

cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n, int64_t k, const void* alpha, const void* A, cudaDataType Atype, int64_t lda, long long int strideA, const void* B, cudaDataType Btype, int64_t ldb, long long int strideB, const void* beta, void* C, cudaDataType Ctype, int64_t ldc, long long int strideC, int64_t batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)handle; (void)transa; (void)transb; (void)m; (void)n; (void)k; (void)alpha; (void)A; (void)Atype; (void)lda; (void)strideA; (void)B; (void)Btype; (void)ldb; (void)strideB; (void)beta; (void)C; (void)Ctype; (void)ldc; (void)strideC; (void)batchCount; (void)computeType; (void)algo;
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // extern "C"
