// CudaGraph and GraphCapture: capture with CUDA's stream capture, replay with the replay values copied in first.
#include "runtime/memory/cuda_graph.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <sstream>

#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/storage.h"

namespace tandem {

namespace {

constexpr size_t kSlots = 512;  // replay values per graph
thread_local GraphCapture* tl_capture = nullptr;

// What a capture forbids, for the messages of a capture that failed.
const char* kRules =
    "a captured step may not read device values on the host (Tensor::item, to(Device::cpu())), synchronize, copy "
    "from pageable host memory, allocate outside the stream-ordered pool, create library handles, or search "
    "cuDNN algorithms (TANDEM_CUDNN_BENCHMARK); run it once eagerly first, so that parameters, gradients, optimizer "
    "state, handles and algorithm choices exist before the capture";

bool stream_is_capturing(const Stream& s) {
  if (!s.device().is_cuda() || s.cuda() == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s.cuda(), &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

GraphCapture::GraphCapture(const Stream& stream, uint64_t id, double* slots, size_t capacity)
    : stream_(stream), id_(id), slots_(slots), capacity_(capacity) {}

const void* GraphCapture::slot(std::function<uint64_t()> bits) {
  TD_CHECK_T(GraphCaptureError, values_.size() < capacity_, "a captured step asks for more than ", capacity_,
             " values set before each replay");
  values_.push_back(std::move(bits));
  return slots_ + (values_.size() - 1);
}

const double* GraphCapture::replay_double(std::function<double()> value) {
  return static_cast<const double*>(slot([value = std::move(value)] {
    const double v = value();
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return bits;
  }));
}

const uint64_t* GraphCapture::replay_u64(std::function<uint64_t()> value) {
  return static_cast<const uint64_t*>(slot(std::move(value)));
}

void GraphCapture::on_replay(std::function<void()> fn) { replay_hooks_.push_back(std::move(fn)); }
void GraphCapture::on_end(std::function<void()> fn) { end_hooks_.push_back(std::move(fn)); }

const void* GraphCapture::keyed(const void* key, const std::function<const void*()>& make) {
  for (const auto& kv : keyed_)
    if (kv.first == key) return kv.second;
  keyed_.emplace_back(key, make());
  return keyed_.back().second;
}

void GraphCapture::note_allocation(size_t bytes) {
  ++live_allocations_;
  live_bytes_ += static_cast<int64_t>(bytes);
}

void GraphCapture::note_free(size_t bytes) {
  --live_allocations_;
  live_bytes_ -= static_cast<int64_t>(bytes);
}

void GraphCapture::defer_free(const std::string& what, std::function<void()> free) {
  refused_frees_.push_back(what);
  deferred_frees_.push_back(std::move(free));
}

GraphCapture* active_capture() { return tl_capture; }

void check_not_capturing(const Stream& stream, const std::string& what, const std::string& fix) {
  GraphCapture* c = tl_capture;
  if (c == nullptr || !(stream == c->stream() || stream_is_capturing(stream))) return;
  TD_THROW(GraphCaptureError, what, " during the capture of a CUDA graph on ", c->stream().device(),
           ": a capture records device work without running it, so the host cannot read or wait for it; ", fix);
}

struct CudaGraph::Staging {
  Storage slots;    // the replay values on the device
  Storage host[2];  // pinned copies, used in turn
  Event copied[2];  // the copy that last read each
  int next = 0;
};

CudaGraph::CudaGraph() = default;

CudaGraph::~CudaGraph() { reset(); }

void CudaGraph::reset() {
  if (exec_ != nullptr) ignore_cuda_error(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy");
  if (graph_ != nullptr) ignore_cuda_error(cudaGraphDestroy(graph_), "cudaGraphDestroy");
  exec_ = nullptr;
  graph_ = nullptr;
  nodes_ = 0;
  hooks_.reset();
  staging_.reset();
}

void CudaGraph::capture(const Stream& stream, const std::function<void()>& step, CaptureMode mode) {
  TD_CHECK_DEVICE(stream.device().is_cuda(), "a CUDA graph captures the work of a CUDA stream, got a stream of ",
                  stream.device());
  TD_CHECK_T(GraphCaptureError, tl_capture == nullptr, "a CUDA graph capture inside another one");
  reset();
  stream_ = stream;
  DeviceGuard device(stream.device());
  auto staging = std::make_unique<Staging>();
  {
    MemoryCategoryGuard workspace(MemoryCategory::Workspace);
    staging->slots = Storage::allocate(kSlots * sizeof(double), stream.device(), stream);
    for (Storage& h : staging->host) h = Storage::allocate(kSlots * sizeof(double), Device::cpu(), Stream(), true);
  }
  static std::atomic<uint64_t> next_id{1};
  std::unique_ptr<GraphCapture> c(
      new GraphCapture(stream, next_id++, static_cast<double*>(staging->slots.data()), kSlots));

  std::string failure;
  bool capture_error = false;
  cudaGraph_t graph = nullptr;
  {
    StreamGuard current(stream);
    capture_beginning(stream);
    const cudaError_t began = cudaStreamBeginCapture(
        stream.cuda(), mode == CaptureMode::Global ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal);
    if (began != cudaSuccess) capture_ended(stream);
    TD_CUDA_CHECK(began);
    tl_capture = c.get();
    try {
      step();
    } catch (const GraphCaptureError& e) {
      failure = e.message();
      capture_error = true;
    } catch (const std::exception& e) {
      failure = e.what();
    }
    tl_capture = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream.cuda(), &graph);
    capture_ended(stream);
    if (ended != cudaSuccess) {
      cudaGetLastError();
      if (failure.empty()) failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
    }
  }
  for (auto& fn : c->end_hooks_) fn();
  for (auto& free : c->deferred_frees_) free();
  std::ostringstream why;
  if (!failure.empty()) {
    why << failure;
  } else if (!c->refused_frees_.empty()) {
    why << c->refused_frees_.size()
        << " tensor(s) allocated before the capture were freed during it (first: " << c->refused_frees_[0]
        << "); every replay would use that freed memory: keep tensors the step uses alive "
        << "across replays (static inputs, in-place updates, zero_grad without dropping gradients)";
  } else if (c->live_allocations_ > 0) {
    why << c->live_allocations_ << " tensor(s) (" << c->live_bytes_ << " bytes) allocated during the capture "
        << "outlive it: graph memory belongs to the graph, and tensors that outlive a captured step (parameters, "
        << "gradients, optimizer state, outputs) must exist before the capture: run the step once eagerly first, "
        << "zero gradients in place, and copy results into tensors made before the capture";
  }
  if (!why.str().empty()) {
    if (graph != nullptr) ignore_cuda_error(cudaGraphDestroy(graph), "cudaGraphDestroy");
    if (!capture_error) why << " (" << kRules << ")";
    TD_THROW(GraphCaptureError, "capturing a CUDA graph on ", stream.device(), " failed: ", why.str());
  }
  graph_ = graph;
  TD_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  TD_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  hooks_ = std::move(c);
  staging_ = std::move(staging);
}

void CudaGraph::replay() {
  TD_CHECK(captured(), "replay of a CUDA graph that was not captured");
  DeviceGuard device(stream_.device());
  Staging& st = *staging_;
  const int b = st.next;
  st.next ^= 1;
  st.copied[b].synchronize();  // the copy that last read this pinned buffer has run
  for (auto& fn : hooks_->replay_hooks_) fn();
  const size_t n = hooks_->values_.size();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = hooks_->values_[i]();
    std::memcpy(static_cast<double*>(st.host[b].data()) + i, &bits, sizeof(bits));
  }
  if (n > 0) {
    TD_CUDA_CHECK(cudaMemcpyAsync(st.slots.data(), st.host[b].data(), n * sizeof(double), cudaMemcpyHostToDevice,
                                  stream_.cuda()));
    st.copied[b].record(stream_);
  }
  TD_CUDA_CHECK(cudaGraphLaunch(exec_, stream_.cuda()));
}

}  // namespace tandem
