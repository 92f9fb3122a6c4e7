/* The simulated GPU's cost counters as a C interface (declared in C++ headers, as the simulator's are): what each
 * kernel launch, library call and copy did (memory traffic, bank conflicts, arithmetic, synchronization, launch shape),
 * recorded while counting is on. Programs find the functions with dlsym (they are absent from NVIDIA's libraries) and
 * read the records as JSON; the cost model (tools/costmodel) turns them into predicted times. */
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

enum TandemCudasimOpKind {
  TANDEM_CUDASIM_KERNEL = 0,  /* a kernel launch: counted from its execution */
  TANDEM_CUDASIM_LIBRARY = 1, /* a cuDNN, cuBLAS or NCCL call: the operation's own bytes and FLOPs */
  TANDEM_CUDASIM_COPY = 2     /* cudaMemcpy*Async / cudaMemsetAsync */
};

enum TandemCudasimCounting {
  TANDEM_CUDASIM_COUNTING_OFF = 0,
  TANDEM_CUDASIM_COUNTING_ON = 1,
  /* Counting, and cuDNN/cuBLAS calls skip their arithmetic (their outputs are left as they were): a run that
   * only measures costs, at the speed of the hand-written kernels. */
  TANDEM_CUDASIM_COUNTING_DRY = 2,
  /* cuDNN/cuBLAS calls skip their arithmetic, nothing is recorded: the warm-up of a dry run. */
  TANDEM_CUDASIM_COUNTING_SKIP = 3
};

#define TANDEM_CUDASIM_REUSE_BUCKETS 24

/* A launch of more than 64 blocks counts evenly spaced blocks only (every k-th) and scales the counts by
 * blocks / counted blocks (distinct sectors too: data that all blocks share is counted as often). */
typedef struct TandemCudasimOp {
  int32_t kind; /* TandemCudasimOpKind */
  int32_t device;
  uint64_t stream; /* the stream's id */
  /* Kernels: the name as launched and "file:line" of the launch. Library calls: the API function and the
   * operand shapes. Copies: "cudaMemcpyAsync" or "cudaMemsetAsync" and the direction. */
  char name[160];
  char detail[160];
  /* Library calls and copies: what kind of operation it is, for the efficiency the cost model gives it
   * ("conv_fwd", "conv_bwd_data", "conv_bwd_filter", "gemm", "add_tensor", "all_reduce", "broadcast",
   * "all_gather", "send", "copy_d2d", "copy_h2d", "copy_d2h", "memset", ...). "" for kernels. */
  char op_class[32];
  /* The arithmetic: "f32", "tf32" (f32 data on tensor cores), "f64", "bf16", "f16"; "" where none. */
  char precision[8];
  uint32_t grid[3];
  uint32_t block[3];
  uint64_t dynamic_shared_bytes;
  uint64_t threads; /* threads launched */
  /* Global memory, kernels. A request is one warp-wide load or store instruction (the k-th execution of one
   * access in the code by the warp's lanes); its sectors are the distinct 32-byte sectors its lanes touch;
   * bytes are what the lanes asked for. Distinct sectors are those the whole launch touched (each once). */
  uint64_t global_load_requests, global_store_requests;
  uint64_t global_load_sectors, global_store_sectors;
  uint64_t global_load_bytes, global_store_bytes;
  uint64_t distinct_load_sectors, distinct_store_sectors;
  /* Loaded sectors the same block had touched before, by the bytes the block touched in between (its reuse
   * distance d): bucket b counts those with d < 1 KiB (b = 0) or 2^(b+9) <= d < 2^(b+10) bytes (the last
   * bucket: longer). Whether a cache still holds them depends on the GPU: the cost model decides. */
  uint64_t reuse_load_sectors[TANDEM_CUDASIM_REUSE_BUCKETS];
  /* Shared memory: requests, and wavefronts (per request, the largest number of distinct 4-byte words that
   * its lanes touch in one of the 32 banks: 1 without bank conflicts, 32 at worst). */
  uint64_t shared_requests, shared_wavefronts;
  uint64_t atomics;          /* atomic operations of single lanes */
  uint64_t atomic_requests;  /* warp-wide atomic instructions */
  uint64_t barriers;         /* __syncthreads completed, summed over the blocks */
  uint64_t warp_collectives; /* shuffles, votes and __syncwarp completed, summed over the warps */
  /* Kernels: the floating-point operations the kernels' math helpers counted (an FMA is two). Library calls:
   * the operation's arithmetic, as defined by the operation (a convolution's 2*N*K*C/g*R*S*P*Q). */
  double flops;
  /* Library calls and copies: the bytes the operation must read and write (its operands, once each). */
  double bytes_read, bytes_written;
  int32_t ranks;  /* NCCL: the communicator's size */
  int32_t groups; /* cuDNN convolutions: the group count */
} TandemCudasimOp;

/* Starts (clearing what was recorded) or stops recording; mode is a TandemCudasimCounting. Work already
 * queued is recorded as the mode was when it was queued. */
void tandem_cudasim_counting(int mode);
/* Moves up to `max` recorded ops, in the order they finished, into `out`; returns how many. */
size_t tandem_cudasim_take_ops(TandemCudasimOp* out, size_t max);
/* Moves every recorded op out as a JSON array of objects, one per op, whose members are TandemCudasimOp's
 * fields by name (grid, block and reuse_load_sectors as arrays, global-memory counts as "global_..."); the text
 * stays valid until the calling thread's next call. */
const char* tandem_cudasim_take_ops_json(void);

}  // extern "C"
