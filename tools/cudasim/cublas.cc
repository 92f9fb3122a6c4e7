// The simulated cuBLAS (what Tandem calls): handles bound to a device and a stream, and the strided batched
// GEMM on float and double matrices, queued on the handle's stream and computed on the CPU with double
// accumulation. Arguments cuBLAS refuses are refused with its status (the reason goes to stderr, cuBLAS
// having no error text per call); memory of another device or out of bounds makes the work fault when it
// runs, like a kernel.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/cudasim/counters.h"
#include "tools/cudasim/cublas_shared.h"

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;  // as given to cublasSetStream (nullptr: the device's legacy default stream)
};

namespace {

// Device memory a handle holds: cuBLAS's default workspace on devices of compute capability 9.0.
constexpr size_t kHandleBytes = size_t{32} << 20;

cublasStatus_t fail(cublasStatus_t status, const std::string& why) {
  std::fprintf(stderr, "cudasim: %s (%s)\n", why.c_str(), cublasGetStatusName(status));
  return status;
}

bool alive(const cublasContext* h) { return cudasim::Live<cublasContext>::of().contains(h); }

// A stored matrix of `rows` x `cols` with leading dimension ld, repeated every `stride` elements `batch`
// times: the bytes from its lowest to its highest element (strides may be zero or negative).
struct Span {
  int64_t first = 0;  // element offset of the lowest element
  size_t bytes = 0;
};
Span span(int64_t rows, int64_t cols, int64_t ld, long long stride, int64_t batch, size_t element) {
  Span s;
  if (rows == 0 || cols == 0 || batch == 0) return s;
  const int64_t last_batch = (batch - 1) * static_cast<int64_t>(stride);
  s.first = std::min<int64_t>(0, last_batch);
  const int64_t end = std::max<int64_t>(0, last_batch) + (cols - 1) * ld + rows;
  s.bytes = static_cast<size_t>(end - s.first) * element;
  return s;
}

struct Gemm {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;
  int64_t batch;
  double alpha, beta;
  bool tf32;
};

// C = alpha op(A) op(B) + beta C per batch, column-major. op(A) is copied row by row (a[i][l]) and op(B)
// column by column (b[j][l]) into double buffers, so that their product is gemm_nt's.
template <typename T>
void gemm(const Gemm& g, const T* A, const T* B, T* C) {
  const bool reads_ab = g.k > 0 && g.alpha != 0;
  std::vector<double> a(reads_ab ? static_cast<size_t>(g.m * g.k) : 0),
      b(reads_ab ? static_cast<size_t>(g.n * g.k) : 0), ab(static_cast<size_t>(g.m * g.n));
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    std::fill(ab.begin(), ab.end(), 0.0);
    if (reads_ab) {
      const T* Ab = A + batch * g.stride_a;
      const T* Bb = B + batch * g.stride_b;
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t l = 0; l < g.k; ++l)
          a[i * g.k + l] = cudasim::widen(g.trans_a ? Ab[i * g.lda + l] : Ab[l * g.lda + i], g.tf32);
      for (int64_t j = 0; j < g.n; ++j)
        for (int64_t l = 0; l < g.k; ++l)
          b[j * g.k + l] = cudasim::widen(g.trans_b ? Bb[l * g.ldb + j] : Bb[j * g.ldb + l], g.tf32);
      cudasim::gemm_nt(g.n, g.m, g.k, b.data(), g.k, a.data(), g.k, ab.data(), g.m);  // ab[j][i]
    }
    T* Cb = C + batch * g.stride_c;
    for (int64_t j = 0; j < g.n; ++j) {
      for (int64_t i = 0; i < g.m; ++i) {
        T* c = Cb + j * g.ldc + i;
        double r = g.alpha * ab[j * g.m + i];
        if (g.beta != 0) r += g.beta * cudasim::widen(*c, false);  // beta = 0: C is not read (NaN stays out)
        *c = cudasim::narrow<T>(r);
      }
    }
  }
}

const char* op_name(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : op == CUBLAS_OP_C ? "C" : "?";
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: handle is NULL");
  int device = 0;
  bool unusable = false;
  const std::string why = cudasim::reserve_handle("cublasCreate", kHandleBytes, &device, &unusable);
  if (!why.empty()) return fail(unusable ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_ALLOC_FAILED, why);
  auto* h = new cublasContext();
  h->device = device;
  cudasim::Live<cublasContext>::of().add(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!alive(handle)) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: not a live cuBLAS handle");
  const int device = handle->device;
  // Releasing the handle's resources synchronizes the device, as cuBLAS documents.
  cudasim::synchronize_device(device);
  cudasim::Live<cublasContext>::of().remove(handle);
  delete handle;
  cudasim::unreserve(device, kHandleBytes);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (!alive(handle)) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: not a live cuBLAS handle");
  bool other_device = false;
  const std::string why = cudasim::check_handle_stream("cublasSetStream", streamId, handle->device, &other_device);
  if (!why.empty()) return fail(CUBLAS_STATUS_INVALID_VALUE, why);
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library or the handle is not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resources could not be allocated";
    case CUBLAS_STATUS_INVALID_VALUE: return "an argument has an invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the device lacks a required architectural feature";
    case CUBLAS_STATUS_MAPPING_ERROR: return "access to GPU memory failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to run";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "a license check failed";
  }
  return "unknown status";
}

cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                             int64_t m, int64_t n, int64_t k, const void* alpha, const void* A,
                                             cudaDataType Atype, int64_t lda, long long int strideA, const void* B,
                                             cudaDataType Btype, int64_t ldb, long long int strideB, const void* beta,
                                             void* C, cudaDataType Ctype, int64_t ldc, long long int strideC,
                                             int64_t batchCount, cublasComputeType_t computeType,
                                             cublasGemmAlgo_t algo) {
  const std::string api = "cublasGemmStridedBatchedEx_64";
  if (!alive(handle)) return fail(CUBLAS_STATUS_NOT_INITIALIZED, api + ": not a live cuBLAS handle");
  auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!valid_op(transa) || !valid_op(transb))
    return fail(CUBLAS_STATUS_INVALID_VALUE, api + ": transa and transb must be CUBLAS_OP_N, _T or _C");
  if (m < 0 || n < 0 || k < 0 || batchCount < 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, api + ": negative m, n, k or batchCount (" + std::to_string(m) + ", " +
                                                 std::to_string(n) + ", " + std::to_string(k) + ", " +
                                                 std::to_string(batchCount) + ")");
  // For real data, the conjugate transpose is the transpose.
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int64_t rows_a = ta ? k : m, cols_a = ta ? m : k, rows_b = tb ? n : k, cols_b = tb ? k : n;
  if (lda < std::max<int64_t>(1, rows_a))
    return fail(CUBLAS_STATUS_INVALID_VALUE, api + ": lda " + std::to_string(lda) + " < max(1, " +
                                                 std::to_string(rows_a) + ") for op(A) = " + op_name(transa));
  if (ldb < std::max<int64_t>(1, rows_b))
    return fail(CUBLAS_STATUS_INVALID_VALUE, api + ": ldb " + std::to_string(ldb) + " < max(1, " +
                                                 std::to_string(rows_b) + ") for op(B) = " + op_name(transb));
  if (ldc < std::max<int64_t>(1, m))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                api + ": ldc " + std::to_string(ldc) + " < max(1, m = " + std::to_string(m) + ")");
  // The documented combinations with real float, double or bfloat16 matrices (others are not simulated).
  bool f64 = false, bf16 = false;
  bool tf32 = false;
  if (Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F &&
      (computeType == CUBLAS_COMPUTE_32F || computeType == CUBLAS_COMPUTE_32F_PEDANTIC ||
       computeType == CUBLAS_COMPUTE_32F_FAST_TF32 || computeType == CUBLAS_COMPUTE_32F_FAST_16F ||
       computeType == CUBLAS_COMPUTE_32F_FAST_16BF)) {
    f64 = false;
    // The fast types permit down-converting inputs; TF32 is what all three may use.
    tf32 = computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC && cudasim::tf32_permitted();
  } else if (Atype == CUDA_R_64F && Btype == CUDA_R_64F && Ctype == CUDA_R_64F &&
             (computeType == CUBLAS_COMPUTE_64F || computeType == CUBLAS_COMPUTE_64F_PEDANTIC)) {
    f64 = true;
  } else if (Atype == CUDA_R_16BF && Btype == CUDA_R_16BF && Ctype == CUDA_R_16BF &&
             (computeType == CUBLAS_COMPUTE_32F || computeType == CUBLAS_COMPUTE_32F_PEDANTIC)) {
    bf16 = true;  // f32 accumulation, the result rounded to bf16
  } else {
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, api + ": Atype " + std::to_string(Atype) + ", Btype " +
                                                 std::to_string(Btype) + ", Ctype " + std::to_string(Ctype) +
                                                 " with compute type " + std::to_string(computeType) +
                                                 " is not a simulated combination (R_32F with COMPUTE_32F*, "
                                                 "R_64F with COMPUTE_64F*, R_16BF with COMPUTE_32F)");
  }
  if (!(algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) &&
      !(algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP))
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, api + ": algo " + std::to_string(algo) + " is not a cublasGemmAlgo_t");
  if (alpha == nullptr || beta == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, api + ": alpha or beta is NULL");
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to compute

  Gemm g;
  g.trans_a = ta, g.trans_b = tb;
  g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.stride_a = strideA, g.stride_b = strideB, g.stride_c = strideC;
  g.batch = batchCount;
  // Host scalars (pointer mode host), of the compute type's scale type.
  g.alpha = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  g.beta = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  g.tf32 = tf32;
  const size_t element = f64 ? 8 : (bf16 ? 2 : 4);
  const bool reads_ab = k > 0 && g.alpha != 0;
  const Span sa = reads_ab ? span(rows_a, cols_a, lda, strideA, batchCount, element) : Span();
  const Span sb = reads_ab ? span(rows_b, cols_b, ldb, strideB, batchCount, element) : Span();
  const Span sc = span(m, n, ldc, strideC, batchCount, element);

  cudaError_t err;
  std::shared_ptr<CUstream_st> stream = cudasim::library_stream(handle->device, handle->stream, &err);
  if (stream == nullptr)
    return fail(CUBLAS_STATUS_EXECUTION_FAILED,
                api + ": the handle's stream cannot take work: " + cudaGetErrorString(err));
  const int64_t e = static_cast<int64_t>(element);
  const std::vector<cudasim::Access> accesses = {{static_cast<const char*>(A) + sa.first * e, sa.bytes, api + " A"},
                                                 {static_cast<const char*>(B) + sb.first * e, sb.bytes, api + " B"},
                                                 {static_cast<const char*>(C) + sc.first * e, sc.bytes, api + " C"}};
  // Its cost record: 2mnk per matrix, A and B read once, C written (and read unless beta is 0).
  const int counting = cudasim::counters::mode();
  const double mn = static_cast<double>(m) * n * batchCount, ab = (static_cast<double>(m) + n) * k * batchCount;
  const TandemCudasimOp op = cudasim::counters::library_op(
      TANDEM_CUDASIM_LIBRARY, handle->device, stream->id, api,
      "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " batch " +
          std::to_string(batchCount),
      "gemm",
      f64    ? "f64"
      : bf16 ? "bf16"
      : tf32 ? "tf32"
             : "f32",
      2.0 * mn * k, static_cast<double>(e) * (ab + (g.beta != 0 ? mn : 0.0)), static_cast<double>(e) * mn);
  cudasim::enqueue_checked(stream.get(), handle->device, api, accesses, [=] {
    if (!cudasim::counters::skips_arithmetic(counting)) {
      if (f64)
        gemm(g, static_cast<const double*>(A), static_cast<const double*>(B), static_cast<double*>(C));
      else if (bf16)
        gemm(g, static_cast<const cudasim::Bf16*>(A), static_cast<const cudasim::Bf16*>(B),
             static_cast<cudasim::Bf16*>(C));
      else
        gemm(g, static_cast<const float*>(A), static_cast<const float*>(B), static_cast<float*>(C));
    }
    if (cudasim::counters::records(counting)) cudasim::counters::record(op);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
