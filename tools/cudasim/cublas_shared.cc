// What the simulated cuBLAS and cuDNN share (see cublas_shared.h).
#include "tools/cudasim/cublas_shared.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tools/cudasim/capture.h"

namespace cudasim {

namespace {

// C[i][j] += sum over l < K of A[i][l] * B[j][l] for an MI x NJ tile, in order of l.
// The small loops are unrolled so that the accumulators live in registers.
template <int MI, int NJ>
void tile(int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc) {
  double c[MI][NJ] = {};
  for (int64_t l = 0; l < K; ++l) {
    double a[MI], b[NJ];
#pragma GCC unroll 4
    for (int i = 0; i < MI; ++i) a[i] = A[i * lda + l];
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) b[j] = B[j * ldb + l];
#pragma GCC unroll 4
    for (int i = 0; i < MI; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NJ; ++j) c[i][j] += a[i] * b[j];
  }
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NJ; ++j) C[i * ldc + j] += c[i][j];
}

template <int MI>
void row_tile(int nj, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc) {
  switch (nj) {
    case 4: tile<MI, 4>(K, A, lda, B, ldb, C, ldc); break;
    case 3: tile<MI, 3>(K, A, lda, B, ldb, C, ldc); break;
    case 2: tile<MI, 2>(K, A, lda, B, ldb, C, ldc); break;
    default: tile<MI, 1>(K, A, lda, B, ldb, C, ldc); break;
  }
}

// Two doubles in one SSE register (GCC's vector extension: each lane an IEEE double operation).
typedef double v2d __attribute__((vector_size(16)));

// The full 4 x 4 tile from a packed panel of B (panel[l][0..3] = B[0..3][l]): eight two-lane accumulators.
void tile4x4(int64_t K, const double* A, int64_t lda, const double* panel, double* C, int64_t ldc) {
  v2d c0l = {0, 0}, c0h = c0l, c1l = c0l, c1h = c0l, c2l = c0l, c2h = c0l, c3l = c0l, c3h = c0l;
  const double *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
  for (int64_t l = 0; l < K; ++l) {
    v2d bl, bh;
    std::memcpy(&bl, panel + 4 * l, sizeof(bl));
    std::memcpy(&bh, panel + 4 * l + 2, sizeof(bh));
    const v2d x0 = {a0[l], a0[l]}, x1 = {a1[l], a1[l]}, x2 = {a2[l], a2[l]}, x3 = {a3[l], a3[l]};
    c0l += x0 * bl, c0h += x0 * bh;
    c1l += x1 * bl, c1h += x1 * bh;
    c2l += x2 * bl, c2h += x2 * bh;
    c3l += x3 * bl, c3h += x3 * bh;
  }
  const v2d* rows[4][2] = {{&c0l, &c0h}, {&c1l, &c1h}, {&c2l, &c2h}, {&c3l, &c3h}};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) C[i * ldc + j] += (*rows[i][j / 2])[j % 2];
}

}  // namespace

// In 4 x 4 register tiles (four rows of B packed side by side first), smaller tiles at the edges.
void gemm_nt(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb, double* C,
             int64_t ldc) {
  std::vector<double> panel;
  for (int64_t j = 0; j < N; j += 4) {
    const int nj = static_cast<int>(std::min<int64_t>(4, N - j));
    const double* b = B + j * ldb;
    if (nj == 4 && M >= 4) {
      panel.resize(static_cast<size_t>(4 * K));
      for (int64_t l = 0; l < K; ++l)
        for (int jj = 0; jj < 4; ++jj) panel[4 * l + jj] = b[jj * ldb + l];
    }
    for (int64_t i = 0; i < M; i += 4) {
      const int mi = static_cast<int>(std::min<int64_t>(4, M - i));
      const double* a = A + i * lda;
      double* c = C + i * ldc + j;
      if (mi == 4 && nj == 4) {
        tile4x4(K, a, lda, panel.data(), c, ldc);
        continue;
      }
      switch (mi) {
        case 4: row_tile<4>(nj, K, a, lda, b, ldb, c, ldc); break;
        case 3: row_tile<3>(nj, K, a, lda, b, ldb, c, ldc); break;
        case 2: row_tile<2>(nj, K, a, lda, b, ldb, c, ldc); break;
        default: row_tile<1>(nj, K, a, lda, b, ldb, c, ldc); break;
      }
    }
  }
}

bool tf32_permitted() {
  static const bool on = [] {
    const char* v = std::getenv("NVIDIA_TF32_OVERRIDE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

std::shared_ptr<CUstream_st> library_stream(int device, cudaStream_t stream, cudaError_t* err) {
  // resolve_stream takes nullptr as the current device's legacy stream: make the handle's device current.
  const int saved = current_device();
  set_current_device(device);
  CUstream_st* s = resolve_stream(stream, err);
  set_current_device(saved);
  return s != nullptr ? stream_ref(s) : nullptr;
}

std::string reserve_handle(const char* api, size_t bytes, int* device, bool* unusable) {
  *device = current_device();
  *unusable = false;
  if (cudaError_t e = check_device(*device)) {
    *unusable = true;
    return std::string(api) + ": cuda:" + std::to_string(*device) + " cannot be used: " + cudaGetErrorString(e);
  }
  // Creating a handle allocates device memory (cudaMalloc): potentially unsafe while a capture is under way.
  if (cudaError_t e = unsafe_call(api)) {
    *unusable = true;
    return std::string(api) + " during stream capture: " + cudaGetErrorString(e);
  }
  // The library loads its module into the device's context, which waits for every stream of the device.
  if (!wait_device_idle(*device, api)) {
    *unusable = true;
    return std::string(api) + ": " + cudaGetErrorString(sticky_error(*device));
  }
  if (!reserve(*device, bytes))
    return std::string(api) + ": cuda:" + std::to_string(*device) + " has not " + std::to_string(bytes) +
           " bytes left for the handle";
  return "";
}

std::string check_handle_stream(const char* api, cudaStream_t stream, int device, bool* other_device) {
  *other_device = false;
  if (stream == nullptr || stream == cudaStreamLegacy) return "";
  cudaError_t err;
  CUstream_st* s = resolve_stream(stream, &err);
  if (s == nullptr) return std::string(api) + ": the stream cannot be used: " + cudaGetErrorString(err);
  if (stream_device(s) != device) {
    *other_device = true;
    return std::string(api) + ": the stream belongs to cuda:" + std::to_string(stream_device(s)) +
           " and the handle to cuda:" + std::to_string(device);
  }
  return "";
}

}  // namespace cudasim
