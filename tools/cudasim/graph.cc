// Simulated CUDA graphs: stream capture (modes, fork and join through events, the calls a capture forbids and the
// invalidation they cause), instantiation, launch, update and destruction. A captured node keeps the work its API
// call would have queued; a launch queues the nodes on the launch stream in capture order (a topological order), so
// a replay runs the same kernels, copies and library calls on whatever device memory holds at that time.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tools/cudasim/capture.h"
#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

// A node of a graph (cudaGraphNode_t points to one).
struct CUgraphNode_st {
  size_t index = 0;
  cudaGraphNodeType type = cudaGraphNodeTypeKernel;
  std::string what;  // the API call or kernel; what cudaGraphExecUpdate compares for memory nodes
  std::function<void()> fn, then;
  std::vector<size_t> deps;  // indices of earlier nodes
};

// A graph (cudaGraph_t points to one). Owns the memory of its allocation nodes.
struct CUgraph_st {
  int device = 0;
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  std::vector<std::shared_ptr<CUstream_st>> streams;  // captured work refers to the streams it was captured on
  std::vector<const void*> allocations;               // bases of its allocation nodes' blocks
  std::vector<const void*> unfreed;                   // those it does not free itself
  int execs = 0;                                      // live executable graphs made from it
  ~CUgraph_st() {
    for (const void* base : allocations) cudasim::release_graph_memory(base);
  }
};

// An executable graph (cudaGraphExec_t points to one).
struct CUgraphExec_st {
  std::shared_ptr<CUgraph_st> graph;  // the nodes it runs (replaced by cudaGraphExecUpdate)
  std::shared_ptr<CUgraph_st> owner;  // the graph it was instantiated from
  unsigned long long flags = 0;
  bool launched = false;
  // Launches of one executable graph run one after another, whatever their streams.
  std::shared_ptr<std::atomic<uint64_t>> done = std::make_shared<std::atomic<uint64_t>>(0);
  uint64_t launches = 0;
};

namespace cudasim {

namespace {

struct Capture {
  uint64_t id = 0;
  std::shared_ptr<CUgraph_st> graph;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  const CUstream_st* origin = nullptr;
  cudaError_t invalid = cudaSuccess;  // the error that invalidated it
  std::string why;
};

struct StreamCapture {
  std::shared_ptr<Capture> capture;
  std::vector<size_t> deps;  // what the stream's next node depends on
  bool blocking = false;     // not created with cudaStreamNonBlocking
  int device = 0;
};

struct EventCapture {
  std::weak_ptr<Capture> capture;
  std::vector<size_t> deps;
};

std::mutex g_mu;  // guards everything below; never held while memory.cc's lock is taken
std::map<const CUstream_st*, StreamCapture>& streams() {
  static auto* m = new std::map<const CUstream_st*, StreamCapture>();
  return *m;
}
std::map<const CUevent_st*, EventCapture>& events() {
  static auto* m = new std::map<const CUevent_st*, EventCapture>();
  return *m;
}
std::map<const CUgraph_st*, std::shared_ptr<CUgraph_st>>& graphs() {
  static auto* m = new std::map<const CUgraph_st*, std::shared_ptr<CUgraph_st>>();
  return *m;
}
std::map<const CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>& execs() {
  static auto* m = new std::map<const CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>();
  return *m;
}
std::atomic<int> g_capturing{0};  // streams in captures: the fast path of capture_work
std::atomic<uint64_t> g_next_capture{1};
thread_local cudaStreamCaptureMode tl_mode = cudaStreamCaptureModeGlobal;

cudaGraphNodeType node_type(const std::string& what) {
  auto starts = [&](const char* p) { return what.rfind(p, 0) == 0; };
  if (starts("cudaMemcpy")) return cudaGraphNodeTypeMemcpy;
  if (starts("cudaMemset")) return cudaGraphNodeTypeMemset;
  if (starts("cudaLaunchHostFunc")) return cudaGraphNodeTypeHost;
  if (starts("cudaMallocAsync")) return cudaGraphNodeTypeMemAlloc;
  if (starts("cudaFreeAsync")) return cudaGraphNodeTypeMemFree;
  return cudaGraphNodeTypeKernel;  // kernels, and the kernels of cuBLAS and cuDNN calls
}

// Caller holds g_mu.
void invalidate(Capture& c, cudaError_t code, const std::string& why) {
  if (c.invalid != cudaSuccess) return;
  c.invalid = code;
  c.why = why;
}

StreamCapture* find(const CUstream_st* s) {
  auto it = streams().find(s);
  return it == streams().end() ? nullptr : &it->second;
}

// Every node that `from` depends on, directly or not, and `from` itself.
std::set<size_t> ancestors(const CUgraph_st& g, const std::vector<size_t>& from) {
  std::set<size_t> seen(from.begin(), from.end());
  std::vector<size_t> todo(from.begin(), from.end());
  while (!todo.empty()) {
    size_t n = todo.back();
    todo.pop_back();
    for (size_t d : g.nodes[n]->deps)
      if (seen.insert(d).second) todo.push_back(d);
  }
  return seen;
}

std::vector<size_t> merged(std::vector<size_t> a, const std::vector<size_t>& b) {
  for (size_t x : b)
    if (std::find(a.begin(), a.end(), x) == a.end()) a.push_back(x);
  return a;
}

// Ends capture on every stream of `c`. Caller holds g_mu.
void leave(const Capture& c) {
  for (auto it = streams().begin(); it != streams().end();) {
    if (it->second.capture.get() == &c) {
      it = streams().erase(it);
      g_capturing--;
    } else {
      ++it;
    }
  }
}

std::string stream_name(const CUstream_st* s) { return "stream " + std::to_string(s->id); }

}  // namespace

bool capturing(const StreamImpl* s) {
  if (g_capturing.load() == 0) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  return find(s) != nullptr;
}

bool capture_work(StreamImpl* s, const std::string& what, std::function<void()> task, std::function<void()> then) {
  if (g_capturing.load() == 0) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  StreamCapture* sc = find(s);
  if (sc == nullptr) return false;
  Capture& c = *sc->capture;
  if (c.invalid != cudaSuccess) return true;
  auto node = std::make_unique<CUgraphNode_st>();
  node->index = c.graph->nodes.size();
  node->type = node_type(what);
  node->what = what;
  node->fn = std::move(task);
  node->then = std::move(then);
  node->deps = sc->deps;
  sc->deps = {node->index};
  c.graph->nodes.push_back(std::move(node));
  return true;
}

const void* capture_graph(const StreamImpl* s) {
  if (g_capturing.load() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  StreamCapture* sc = find(s);
  return sc == nullptr ? nullptr : sc->capture->graph.get();
}

cudaError_t capture_state_error(const StreamImpl* s) {
  if (g_capturing.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  StreamCapture* sc = find(s);
  if (sc == nullptr || sc->capture->invalid == cudaSuccess) return cudaSuccess;
  return set_error(cudaErrorStreamCaptureInvalidated, stream_name(s) + " belongs to a capture invalidated earlier by " +
                                                          sc->capture->why +
                                                          " (end it with cudaStreamEndCapture on its origin stream)");
}

cudaError_t fail_capture(const StreamImpl* s, cudaError_t code, const std::string& why) {
  if (g_capturing.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  StreamCapture* sc = find(s);
  if (sc == nullptr) return cudaSuccess;
  invalidate(*sc->capture, code, why);
  return set_error(code, why);
}

void note_graph_allocation(const void* graph, const void* base) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& [s, sc] : streams()) {
    CUgraph_st& g = *sc.capture->graph;
    if (&g != graph) continue;
    if (std::find(g.allocations.begin(), g.allocations.end(), base) == g.allocations.end())
      g.allocations.push_back(base);
    g.unfreed.push_back(base);
    return;
  }
}

void note_graph_free(const void* graph, const void* base) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& [s, sc] : streams()) {
    CUgraph_st& g = *sc.capture->graph;
    if (&g != graph) continue;
    auto it = std::find(g.unfreed.begin(), g.unfreed.end(), base);
    if (it != g.unfreed.end()) g.unfreed.erase(it);
    return;
  }
}

cudaError_t forbid_while_capturing(const StreamImpl* s, const std::string& what) {
  if (g_capturing.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  StreamCapture* sc = find(s);
  if (sc == nullptr) return cudaSuccess;
  const std::string why = what + " of " + stream_name(s) + ", which is capturing (its work is recorded, not run)";
  invalidate(*sc->capture, cudaErrorStreamCaptureUnsupported, why);
  return set_error(cudaErrorStreamCaptureUnsupported, why);
}

cudaError_t forbid_device_sync(int device, const std::string& what) {
  if (g_capturing.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  std::string why;
  for (auto& [s, sc] : streams()) {
    if (sc.device != device) continue;
    if (why.empty()) why = what + " of cuda:" + std::to_string(device) + " while " + stream_name(s) + " is capturing";
    invalidate(*sc.capture, cudaErrorStreamCaptureUnsupported, why);
  }
  return why.empty() ? cudaSuccess : set_error(cudaErrorStreamCaptureUnsupported, why);
}

cudaError_t legacy_stream_error(int device, const std::string& what) {
  if (g_capturing.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  std::string why;
  for (auto& [s, sc] : streams()) {
    if (sc.device != device || !sc.blocking) continue;
    if (why.empty())
      why = what + " on the legacy default stream of cuda:" + std::to_string(device) + " while blocking " +
            stream_name(s) + " is capturing (an implicit dependency on the capture)";
    invalidate(*sc.capture, cudaErrorStreamCaptureImplicit, why);
  }
  return why.empty() ? cudaSuccess : set_error(cudaErrorStreamCaptureImplicit, why);
}

cudaError_t unsafe_call(const std::string& what) {
  if (g_capturing.load() == 0 || tl_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::thread::id self = std::this_thread::get_id();
  std::string why;
  std::set<Capture*> seen;
  for (auto& [s, sc] : streams()) {
    Capture& c = *sc.capture;
    if (!seen.insert(&c).second || c.mode == cudaStreamCaptureModeRelaxed) continue;
    const bool own = c.thread == self;
    const bool global = tl_mode == cudaStreamCaptureModeGlobal && c.mode == cudaStreamCaptureModeGlobal;
    if (!own && !global) continue;
    if (why.empty())
      why = what + " (potentially unsafe during stream capture) while " + stream_name(c.origin) + " captures in " +
            (c.mode == cudaStreamCaptureModeGlobal ? "global" : "thread-local") + " mode" +
            (own ? " on this thread" : " on another thread");
    invalidate(c, cudaErrorStreamCaptureUnsupported, why);
  }
  return why.empty() ? cudaSuccess : set_error(cudaErrorStreamCaptureUnsupported, why);
}

bool record_in_capture(const CUevent_st* e, StreamImpl* s) {
  if (g_capturing.load() == 0) {
    forget_captured_event(e);
    return false;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  StreamCapture* sc = find(s);
  if (sc == nullptr) {
    events().erase(e);
    return false;
  }
  events()[e] = EventCapture{sc->capture, sc->deps};
  return true;
}

void forget_captured_event(const CUevent_st* e) {
  std::lock_guard<std::mutex> lock(g_mu);
  events().erase(e);
}

cudaError_t wait_in_capture(StreamImpl* s, const CUevent_st* e, bool* handled) {
  *handled = false;
  std::lock_guard<std::mutex> lock(g_mu);
  auto ev = events().find(e);
  std::shared_ptr<Capture> from = ev == events().end() ? nullptr : ev->second.capture.lock();
  StreamCapture* sc = find(s);
  if (sc == nullptr && from == nullptr) return cudaSuccess;  // an ordinary wait
  *handled = true;
  if (sc == nullptr) {
    // Fork: the stream joins the event's capture, its next node depending on what the event stands for.
    if (from->invalid != cudaSuccess)
      return set_error(cudaErrorStreamCaptureInvalidated, "cudaStreamWaitEvent on an event of an invalidated capture");
    if (from->graph->device != s->device) {
      invalidate(*from, cudaErrorStreamCaptureIsolation, "a fork onto a stream of another device");
      return set_error(cudaErrorStreamCaptureIsolation, "cudaStreamWaitEvent: the simulator captures one device");
    }
    streams()[s] = StreamCapture{from, ev->second.deps, (s->flags & cudaStreamNonBlocking) == 0, s->device};
    g_capturing++;
    from->graph->streams.push_back(stream_ref(s));
    return cudaSuccess;
  }
  Capture& c = *sc->capture;
  if (c.invalid != cudaSuccess)
    return set_error(cudaErrorStreamCaptureInvalidated, stream_name(s) + " belongs to an invalidated capture");
  if (from == nullptr) {
    // A capturing stream waiting on work outside the capture: the graph could not express that dependency.
    const std::string why = "cudaStreamWaitEvent of capturing " + stream_name(s) +
                            " on an event recorded outside the capture (only cudaEventWaitExternal may cross it)";
    invalidate(c, cudaErrorStreamCaptureIsolation, why);
    return set_error(cudaErrorStreamCaptureIsolation, why);
  }
  if (from.get() != &c) {
    const std::string why = "cudaStreamWaitEvent of capturing " + stream_name(s) + " on an event of another capture";
    invalidate(c, cudaErrorStreamCaptureMerge, why);
    invalidate(*from, cudaErrorStreamCaptureMerge, why);
    return set_error(cudaErrorStreamCaptureMerge, why);
  }
  sc->deps = merged(sc->deps, ev->second.deps);  // join
  return cudaSuccess;
}

cudaError_t captured_event_error(const CUevent_st* e, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto ev = events().find(e);
  if (ev == events().end()) return cudaSuccess;
  std::shared_ptr<Capture> c = ev->second.capture.lock();
  const std::string why = what + " of an event last recorded in a capture (it marks no work that runs)";
  if (c) invalidate(*c, cudaErrorCapturedEvent, why);
  return set_error(cudaErrorCapturedEvent, why);
}

}  // namespace cudasim

using cudasim::set_error;

namespace {

// The graph or executable graph behind a handle (nullptr when it is not live).
std::shared_ptr<CUgraph_st> graph_of(cudaGraph_t g) {
  auto it = cudasim::graphs().find(g);
  return it == cudasim::graphs().end() ? nullptr : it->second;
}

CUgraphExec_st* exec_of(cudaGraphExec_t e) {
  auto it = cudasim::execs().find(e);
  return it == cudasim::execs().end() ? nullptr : it->second.get();
}

// Takes a live handle's object out of its registry (under g_mu): a destroyed handle is no longer live. Empty when
// the handle was not live.
template <typename Registry, typename Handle>
typename Registry::mapped_type take_live(Registry& live, Handle h) {
  auto it = live.find(h);
  if (it == live.end()) return nullptr;
  typename Registry::mapped_type o = std::move(it->second);
  live.erase(it);
  return o;
}

bool legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

// Whether a blocking stream of the current device is capturing (the legacy stream's capture queries then fail).
bool blocking_capture_on_current_device() {
  const int device = cudasim::current_device();
  for (auto& [s, sc] : cudasim::streams())
    if (sc.device == device && sc.blocking) return true;
  return false;
}

cudaError_t instantiate(cudaGraphExec_t* out, cudaGraph_t graph, unsigned long long flags) {
  if (out == nullptr) return set_error(cudaErrorInvalidValue, "cudaGraphInstantiate: pGraphExec is NULL");
  const unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                   cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if ((flags & ~known) != 0) return set_error(cudaErrorInvalidValue, "cudaGraphInstantiate: unknown flags");
  if ((flags & cudaGraphInstantiateFlagDeviceLaunch) != 0)
    return set_error(cudaErrorNotSupported, "cudaGraphInstantiate: device launch is not simulated");
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  std::shared_ptr<CUgraph_st> g = graph_of(graph);
  if (!g) return set_error(cudaErrorInvalidValue, "cudaGraphInstantiate of a graph that is not live");
  if (!g->allocations.empty() && g->execs > 0)
    return set_error(cudaErrorInvalidValue,
                     "cudaGraphInstantiate: a graph with memory nodes may have one executable graph at a time");
  auto e = std::make_unique<CUgraphExec_st>();
  e->graph = g;
  e->owner = g;
  e->flags = flags;
  g->execs++;
  *out = e.get();
  cudasim::execs()[e.get()] = std::move(e);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  if (legacy(stream))
    return set_error(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy default stream");
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return set_error(cudaErrorInvalidValue, "cudaStreamBeginCapture: unknown capture mode");
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  if (cudasim::find(s) != nullptr)
    return set_error(cudaErrorIllegalState, "cudaStreamBeginCapture on a stream that is already capturing");
  auto c = std::make_shared<cudasim::Capture>();
  c->id = cudasim::g_next_capture++;
  c->graph = std::make_shared<CUgraph_st>();
  c->graph->device = s->device;
  c->graph->streams.push_back(cudasim::stream_ref(s));
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  cudasim::streams()[s] = cudasim::StreamCapture{c, {}, (s->flags & cudaStreamNonBlocking) == 0, s->device};
  cudasim::g_capturing++;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (pGraph == nullptr) return set_error(cudaErrorInvalidValue, "cudaStreamEndCapture: pGraph is NULL");
  auto ref = legacy(stream) ? nullptr : cudasim::stream_ref(stream);
  if (!ref) return set_error(cudaErrorIllegalState, "cudaStreamEndCapture on a stream that is not capturing");
  std::shared_ptr<CUgraph_st> discarded;  // destroyed after g_mu is released (it frees graph memory)
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  cudasim::StreamCapture* sc = cudasim::find(ref.get());
  if (sc == nullptr) return set_error(cudaErrorIllegalState, "cudaStreamEndCapture on a stream that is not capturing");
  std::shared_ptr<cudasim::Capture> c = sc->capture;
  if (c->origin != ref.get()) {
    return set_error(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture on " + cudasim::stream_name(ref.get()) +
                                                          ", which joined a capture begun on " +
                                                          cudasim::stream_name(c->origin));
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return set_error(cudaErrorStreamCaptureWrongThread,
                     "cudaStreamEndCapture on another thread than cudaStreamBeginCapture (not in relaxed mode)");
  *pGraph = nullptr;
  // Every stream that joined must have rejoined the origin: its last work must precede the origin's.
  const std::set<size_t> joined = cudasim::ancestors(*c->graph, sc->deps);
  std::string unjoined;
  for (auto& [s, other] : cudasim::streams()) {
    if (other.capture != c || s == ref.get()) continue;
    for (size_t d : other.deps)
      if (joined.count(d) == 0 && unjoined.empty())
        unjoined = cudasim::stream_name(s) + " (its last captured work, " + c->graph->nodes[d]->what +
                   ", is not followed by a wait of the origin stream on an event recorded after it)";
  }
  cudasim::leave(*c);
  for (auto it = cudasim::events().begin(); it != cudasim::events().end();)
    it = it->second.capture.lock() == c ? cudasim::events().erase(it) : std::next(it);
  discarded = c->graph;
  if (c->invalid != cudaSuccess)
    return set_error(cudaErrorStreamCaptureInvalidated, "the capture was invalidated by " + c->why);
  if (!unjoined.empty())
    return set_error(cudaErrorStreamCaptureUnjoined,
                     "cudaStreamEndCapture: a stream forked from the capture did "
                     "not join its origin: " +
                         unjoined);
  cudasim::graphs()[c->graph.get()] = c->graph;
  *pGraph = c->graph.get();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  if (status == nullptr) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  if (legacy(stream)) {
    if (blocking_capture_on_current_device())
      return set_error(cudaErrorStreamCaptureImplicit,
                       "cudaStreamIsCapturing on the legacy stream while a blocking stream captures");
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  cudasim::StreamCapture* sc = cudasim::find(stream);
  *status = sc == nullptr                         ? cudaStreamCaptureStatusNone
            : sc->capture->invalid != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* count) {
  thread_local std::vector<cudaGraphNode_t> dep_array;
  thread_local std::vector<cudaGraphEdgeData> edge_array;
  if (status == nullptr || (edges != nullptr && deps == nullptr)) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  if (legacy(stream) && blocking_capture_on_current_device())
    return set_error(cudaErrorStreamCaptureImplicit,
                     "cudaStreamGetCaptureInfo on the legacy stream while a blocking stream captures");
  cudasim::StreamCapture* sc = legacy(stream) ? nullptr : cudasim::find(stream);
  *status = sc == nullptr                         ? cudaStreamCaptureStatusNone
            : sc->capture->invalid != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                  : cudaStreamCaptureStatusActive;
  if (*status != cudaStreamCaptureStatusActive) return cudaSuccess;
  if (id != nullptr) *id = sc->capture->id;
  if (graph != nullptr) *graph = sc->capture->graph.get();
  dep_array.clear();
  for (size_t d : sc->deps) dep_array.push_back(sc->capture->graph->nodes[d].get());
  edge_array.assign(dep_array.size(), cudaGraphEdgeData{});
  if (deps != nullptr) *deps = dep_array.data();
  if (edges != nullptr) *edges = edge_array.data();
  if (count != nullptr) *count = dep_array.size();
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (mode == nullptr || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                          *mode != cudaStreamCaptureModeRelaxed))
    return set_error(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: not a capture mode");
  std::swap(*mode, cudasim::tl_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return instantiate(pGraphExec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return instantiate(pGraphExec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  std::shared_ptr<CUgraph_st> g;
  std::shared_ptr<std::atomic<uint64_t>> done;
  uint64_t number = 0;
  bool relaunch = false, auto_free = false;
  {
    std::lock_guard<std::mutex> lock(cudasim::g_mu);
    CUgraphExec_st* e = exec_of(graphExec);
    if (e == nullptr)
      return set_error(cudaErrorInvalidValue, "cudaGraphLaunch of an executable graph that is not live");
    g = e->graph;
    done = e->done;
    relaunch = e->launched;
    auto_free = (e->flags & cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0;
  }
  if (g->device != s->device)
    return set_error(cudaErrorInvalidValue, "cudaGraphLaunch on a stream of cuda:" + std::to_string(s->device) +
                                                " of a graph captured on cuda:" + std::to_string(g->device));
  // Allocations a previous launch made and nothing freed since.
  if (relaunch) {
    for (const void* base : g->unfreed) {
      if (!cudasim::graph_allocation_live(base)) continue;
      if (!auto_free)
        return set_error(cudaErrorInvalidValue,
                         "cudaGraphLaunch: an allocation the previous launch made is not freed (free it, or "
                         "instantiate with cudaGraphInstantiateFlagAutoFreeOnLaunch)");
      cudasim::free_graph_allocation(base, s);
    }
  }
  for (const void* base : g->unfreed) cudasim::graph_allocation_relaunched(base);
  {
    std::lock_guard<std::mutex> lock(cudasim::g_mu);
    CUgraphExec_st* e = exec_of(graphExec);
    if (e == nullptr)
      return set_error(cudaErrorInvalidValue, "cudaGraphLaunch of an executable graph destroyed meanwhile");
    number = ++e->launches;
    e->launched = true;
  }
  // Ordered after the previous launch of this executable graph, on whatever stream that ran.
  cudasim::enqueue(s, "cudaGraphLaunch", [done, number] {
    cudasim::wait_until([&] { return done->load() >= number - 1; }, "cudaGraphLaunch (after the previous launch)");
  });
  for (const auto& n : g->nodes) {
    if (n->then)
      cudasim::enqueue_marked(s, n->what, n->fn, n->then);
    else
      cudasim::enqueue(s, n->what, n->fn);
  }
  // The graph (its memory) lives until the launch has run, even if its handles are destroyed at once.
  cudasim::enqueue(s, "cudaGraphLaunch (end)", [done, number, g] {
    done->store(number);
    cudasim::notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph, cudaGraphExecUpdateResultInfo* info) {
  cudaGraphExecUpdateResultInfo local{};
  if (info == nullptr) info = &local;
  *info = cudaGraphExecUpdateResultInfo{cudaGraphExecUpdateError, nullptr, nullptr};
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  CUgraphExec_st* e = exec_of(hGraphExec);
  std::shared_ptr<CUgraph_st> g = graph_of(hGraph);
  if (e == nullptr || !g) return set_error(cudaErrorInvalidValue, "cudaGraphExecUpdate of a handle that is not live");
  auto fail = [&](cudaGraphExecUpdateResult r, CUgraphNode_st* node, const std::string& why) {
    info->result = r;
    info->errorNode = node;
    return set_error(cudaErrorGraphExecUpdateFailure, "cudaGraphExecUpdate: " + why);
  };
  const CUgraph_st& old = *e->graph;
  if (old.nodes.size() != g->nodes.size())
    return fail(
        cudaGraphExecUpdateErrorTopologyChanged, nullptr,
        std::to_string(g->nodes.size()) + " nodes where the executable graph has " + std::to_string(old.nodes.size()));
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    CUgraphNode_st& n = *g->nodes[i];
    const CUgraphNode_st& o = *old.nodes[i];
    if (n.deps != o.deps)
      return fail(cudaGraphExecUpdateErrorTopologyChanged, &n, "node " + n.what + "'s dependencies");
    if (n.type != o.type) return fail(cudaGraphExecUpdateErrorNodeTypeChanged, &n, "node " + n.what + "'s type");
    // Memory nodes keep their graph's addresses and sizes: they cannot take another graph's.
    const bool memory = n.type == cudaGraphNodeTypeMemAlloc || n.type == cudaGraphNodeTypeMemFree;
    if (memory && n.what != o.what)
      return fail(cudaGraphExecUpdateErrorParametersChanged, &n, n.what + " where the executable graph has " + o.what);
  }
  e->graph = g;
  info->result = cudaGraphExecUpdateSuccess;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  std::unique_ptr<CUgraphExec_st> e;
  {
    std::lock_guard<std::mutex> lock(cudasim::g_mu);
    e = take_live(cudasim::execs(), graphExec);
    if (!e) return set_error(cudaErrorInvalidValue, "cudaGraphExecDestroy: not live");
    e->owner->execs--;
  }
  return cudaSuccess;  // the graphs it held go (and their memory) once queued launches no longer hold them
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::shared_ptr<CUgraph_st> g;
  {
    std::lock_guard<std::mutex> lock(cudasim::g_mu);
    g = take_live(cudasim::graphs(), graph);
  }
  return g ? cudaSuccess : set_error(cudaErrorInvalidValue, "cudaGraphDestroy: not live");
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (numNodes == nullptr) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  std::shared_ptr<CUgraph_st> g = graph_of(graph);
  if (!g) return set_error(cudaErrorInvalidValue, "cudaGraphGetNodes of a graph that is not live");
  if (nodes == nullptr) {
    *numNodes = g->nodes.size();
    return cudaSuccess;
  }
  const size_t n = std::min(*numNodes, g->nodes.size());
  for (size_t i = 0; i < n; ++i) nodes[i] = g->nodes[i].get();
  for (size_t i = n; i < *numNodes; ++i) nodes[i] = nullptr;
  *numNodes = n;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType* pType) {
  if (node == nullptr || pType == nullptr) return set_error(cudaErrorInvalidValue);
  *pType = node->type;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* deps, cudaGraphEdgeData* edgeData,
                                         size_t* count) {
  if (node == nullptr || count == nullptr) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::g_mu);
  for (auto& [handle, g] : cudasim::graphs()) {
    if (node->index >= g->nodes.size() || g->nodes[node->index].get() != node) continue;
    if (deps == nullptr) {
      *count = node->deps.size();
      return cudaSuccess;
    }
    const size_t n = std::min(*count, node->deps.size());
    for (size_t i = 0; i < n; ++i) {
      deps[i] = g->nodes[node->deps[i]].get();
      if (edgeData != nullptr) edgeData[i] = cudaGraphEdgeData{};
    }
    *count = n;
    return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue, "cudaGraphNodeGetDependencies: the node's graph is not live");
}

}  // extern "C"
