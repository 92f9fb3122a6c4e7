// Stream capture's hooks for the simulator's other parts (graph.cc implements them): which streams are capturing,
// the work they record as graph nodes instead of running it, and the calls CUDA forbids while a capture is under way.
// An illegal call invalidates the capture it conflicts with (cudaStreamEndCapture then fails) and returns CUDA's code.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

#include "tools/cudasim/sim.h"

namespace cudasim {

// Whether `s` belongs to a capture sequence (active or invalidated).
bool capturing(const StreamImpl* s);
// When `s` is capturing: records the work as a node of the capture's graph (it runs when the graph is launched, not
// now) and returns true; an invalidated capture drops it. False when `s` is not capturing.
bool capture_work(StreamImpl* s, const std::string& what, std::function<void()> task, std::function<void()> then);
// For an API given `s`: cudaErrorStreamCaptureInvalidated while s belongs to an invalidated capture, else success.
cudaError_t capture_state_error(const StreamImpl* s);
// Synchronizing or querying `s` (`what` names the call): while s is capturing, invalidates its capture and returns
// cudaErrorStreamCaptureUnsupported; else success.
cudaError_t forbid_while_capturing(const StreamImpl* s, const std::string& what);
// Synchronizing `device` as a whole: while any of its streams is capturing, invalidates those captures and returns
// cudaErrorStreamCaptureUnsupported.
cudaError_t forbid_device_sync(int device, const std::string& what);
// Using the legacy default stream of `device`: while a blocking stream (one not created with cudaStreamNonBlocking)
// of that device is capturing, invalidates that capture and returns cudaErrorStreamCaptureImplicit.
cudaError_t legacy_stream_error(int device, const std::string& what);
// A potentially unsafe call (cudaMalloc, cudaHostAlloc, a library handle's creation) by the calling thread: when the
// thread's capture interaction mode prohibits it (cudaThreadExchangeStreamCaptureMode), invalidates the captures that
// prohibit it and returns cudaErrorStreamCaptureUnsupported.
cudaError_t unsafe_call(const std::string& what);

// Events. cudaEventRecord on a capturing stream: the event stands for the stream's current capture dependencies
// (returns true); otherwise false, and the event is no longer a captured one.
bool record_in_capture(const CUevent_st* e, StreamImpl* s);
void forget_captured_event(const CUevent_st* e);
// cudaStreamWaitEvent: joins `s` to the capture of an event recorded in one (fork), adds its dependencies to a
// capturing stream (join), and refuses what crosses a capture's boundary. *handled is false when neither the stream
// nor the event is part of a capture (an ordinary wait).
cudaError_t wait_in_capture(StreamImpl* s, const CUevent_st* e, bool* handled);
// cudaEventQuery / cudaEventSynchronize on an event last recorded in a capture: invalidates that capture and returns
// cudaErrorCapturedEvent.
cudaError_t captured_event_error(const CUevent_st* e, const std::string& what);
// The graph being captured on `s` (nullptr when s is not capturing): graph memory is owned by it.
const void* capture_graph(const StreamImpl* s);

// When `s` is capturing: invalidates its capture with `code` and returns set_error(code, why); else success.
cudaError_t fail_capture(const StreamImpl* s, cudaError_t code, const std::string& why);
// The graph's record of its allocation nodes (graph.cc): a block allocated in it, and one it frees itself.
void note_graph_allocation(const void* graph, const void* base);
void note_graph_free(const void* graph, const void* base);

// Graph memory (memory.cc): the blocks of allocation nodes, owned by their graph.
// The block at `base` of a destroyed graph: returned to the device when it is not allocated now, else it becomes an
// ordinary pool block (its cudaFreeAsync frees it).
void release_graph_memory(const void* base);
// Whether the graph allocation at `base` is allocated now (host order: launched and not freed since).
bool graph_allocation_live(const void* base);
// A launch of the owning graph allocates it again (host order).
void graph_allocation_relaunched(const void* base);
// Frees the graph allocation at `base` on `s` outside its graph (cudaFreeAsync, or an auto-free at launch).
void free_graph_allocation(const void* base, StreamImpl* s);

}  // namespace cudasim
