// cuDNN's two convolution APIs side by side on a GPU, so that a GPU run can decide which one Tandem keeps (issue
// 23, item 4): the legacy calls as Tandem's CUDA backend makes them (kernels/cudnn/conv.cc: descriptors cached per
// shape, cuDNN's heuristic algorithm, the stream's cached workspace) against the graph API (cuDNN's backend C API:
// an operation graph of one convolution node, engine configs from heuristics mode A, an execution plan built once
// per shape, a variant pack per call), for forward, backward data and backward filter.
//
// The convolutions are those of a training step of each zoo model (ResNet-18, ResNet-50, MobileNetV2 by default,
// at batch 256 and 224x224 and 32x32): one step runs through Tandem first and the passes and shapes it asked
// cuDNN about (kernels/cudnn/conv_algos.h) are replayed in NHWC (or NCHW with --nchw), f32 with TF32 as the
// runtime is set. Per pass and shape: GPU microseconds per call (CUDA events around back-to-back calls, so host
// time shows where the host issues slower than the GPU runs) and host microseconds per call (the issuing loop);
// per model, size and pass, the sums over the step (each shape's time times the calls the step made). The graph
// API's functions are looked up when the program starts: where cuDNN lacks them (the simulated GPU's), only the
// legacy calls are timed.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cudnn/conv_algos.h"
#include "kernels/cudnn/cudnn_check.h"
#include "kernels/cudnn/handle.h"
#include "models/losses.h"
#include "models/registry.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

using cudnn::ConvPass;

struct Options {
  Device device = Device::cuda(0);
  int64_t batch = 256;
  std::vector<int64_t> sizes{224, 32};
  std::vector<std::string> models{"resnet18", "resnet50", "mobilenet_v2"};
  int64_t iters = 10;
  bool runtime_compiled = false;
  bool nchw = false;
  double budget_s = 0;
};

// ---- the graph API, looked up at run time ----

struct GraphApi {
  decltype(&cudnnBackendCreateDescriptor) create = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy = nullptr;
  decltype(&cudnnBackendSetAttribute) set = nullptr;
  decltype(&cudnnBackendGetAttribute) get = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
  bool available() const { return create && destroy && set && get && finalize && execute; }
};

template <typename F>
void lookup(F* f, const char* name) {
  *f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

const GraphApi& graph_api() {
  static const GraphApi api = [] {
    GraphApi a;
    lookup(&a.create, "cudnnBackendCreateDescriptor");
    lookup(&a.destroy, "cudnnBackendDestroyDescriptor");
    lookup(&a.set, "cudnnBackendSetAttribute");
    lookup(&a.get, "cudnnBackendGetAttribute");
    lookup(&a.finalize, "cudnnBackendFinalize");
    lookup(&a.execute, "cudnnBackendExecute");
    return a;
  }();
  return api;
}

// One backend descriptor, destroyed with its owner.
struct DescDeleter {
  void operator()(void* d) const { graph_api().destroy(d); }
};
using Desc = std::unique_ptr<void, DescDeleter>;

Desc make_desc(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  TD_CUDNN_CHECK(graph_api().create(type, &d));
  return Desc(d);
}

void set(const Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
         const void* values) {
  TD_CUDNN_CHECK(graph_api().set(d.get(), name, type, count, values));
}
void set_desc(const Desc& d, cudnnBackendAttributeName_t name, const Desc& value) {
  void* v = value.get();
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

// The dims and strides of a tensor [a, b, c, d] (the logical NCHW order) stored NHWC or NCHW.
struct Layout {
  int64_t dims[4], strides[4];
};
Layout layout(int64_t n, int64_t c, int64_t h, int64_t w, bool channels_last) {
  Layout l{{n, c, h, w}, {c * h * w, h * w, w, 1}};
  if (channels_last) l = Layout{{n, c, h, w}, {h * w * c, 1, w * c, c}};
  return l;
}

// Unique ids of the operands in a variant pack: x (dx), w (dw), y (dy).
constexpr int64_t kX = 1, kW = 2, kY = 3;

Desc tensor(int64_t uid, const Layout& l) {
  Desc t = make_desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const int64_t alignment = 16;
  set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dims);
  set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.strides);
  set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  TD_CUDNN_CHECK(graph_api().finalize(t.get()));
  return t;
}

// The operation descriptor of a pass and its attributes: x (dx), w (dw), y (dy), the convolution, alpha, beta.
struct OpNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
const OpNames& op_names(ConvPass pass) {
  static const OpNames forward{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
  static const OpNames data{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
  static const OpNames filter{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  return pass == ConvPass::Forward ? forward : (pass == ConvPass::BackwardData ? data : filter);
}

// An execution plan for one pass and shape, and what made it (kept alive with it).
struct GraphPlan {
  std::vector<Desc> parts;  // tensors, convolution, operation, graph, heuristics, engine configs
  Desc plan;
  int64_t workspace = 0;
  std::string engine;  // "engine N" and its notes, or why there is no plan
};

// The engine's global index and notes, for the table.
std::string engine_text(const Desc& config, bool* runtime_compiled, bool* tensor_cores) {
  const GraphApi& api = graph_api();
  Desc engine = make_desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  void* e = engine.get();
  int64_t n = 0;
  TD_CUDNN_CHECK(api.get(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  int64_t index = -1;
  TD_CUDNN_CHECK(api.get(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t behaviors = 0;
  TD_CUDNN_CHECK(api.get(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT,
                         &behaviors, behavior));
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t numericals = 0;
  TD_CUDNN_CHECK(api.get(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                         CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &numericals, numerical));
  *runtime_compiled = std::count(behavior, behavior + behaviors, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) > 0;
  *tensor_cores = std::count(numerical, numerical + numericals, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) > 0;
  return "engine " + std::to_string(index) + (*runtime_compiled ? " rtc" : "") + (*tensor_cores ? " tc" : "");
}

// The graph of one convolution pass of g, and a plan from the first of cuDNN's heuristic configs that finalizes
// (runtime-compiled engines skipped unless allowed; tensor-core engines only with TF32 allowed).
GraphPlan build_plan(ConvPass pass, const Conv2dGeometry& g, cudnnHandle_t handle, const Options& o) {
  GraphPlan p;
  const bool cl = g.channels_last;
  p.parts.push_back(tensor(kX, layout(g.n, g.c, g.h, g.w, cl)));
  p.parts.push_back(tensor(kW, layout(g.o, g.c / g.groups, g.kh, g.kw, cl)));
  p.parts.push_back(tensor(kY, layout(g.n, g.o, g.oh, g.ow, cl)));
  const Desc &x = p.parts[0], &w = p.parts[1], &y = p.parts[2];

  Desc conv = make_desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, dilation[2] = {g.dilation_h, g.dilation_w}, stride[2] = {g.stride_h, g.stride_w},
                pad[2] = {g.pad_h, g.pad_w};
  set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
  set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  TD_CUDNN_CHECK(graph_api().finalize(conv.get()));

  const OpNames& names = op_names(pass);
  const float alpha = 1.f, beta = 0.f;
  Desc op = make_desc(names.type);
  set_desc(op, names.x, x);
  set_desc(op, names.w, w);
  set_desc(op, names.y, y);
  set_desc(op, names.conv, conv);
  set(op, names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(op, names.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  TD_CUDNN_CHECK(graph_api().finalize(op.get()));

  Desc graph = make_desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set_desc(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  TD_CUDNN_CHECK(graph_api().finalize(graph.get()));

  Desc heuristics = make_desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  set_desc(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
  TD_CUDNN_CHECK(graph_api().finalize(heuristics.get()));
  int64_t count = 0;
  TD_CUDNN_CHECK(graph_api().get(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr));
  std::vector<Desc> configs;
  std::vector<void*> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(make_desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  if (count > 0)
    TD_CUDNN_CHECK(graph_api().get(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   count, &returned, raw.data()));
  for (Desc* d : {&conv, &op, &graph, &heuristics}) p.parts.push_back(std::move(*d));
  int skipped = 0;
  for (int64_t i = 0; i < returned && !p.plan; ++i) {
    bool rtc = false, tc = false;
    const std::string engine = engine_text(configs[i], &rtc, &tc);
    if ((rtc && !o.runtime_compiled) || (tc && !allow_tf32())) {
      ++skipped;
      continue;
    }
    Desc plan = make_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
    if (graph_api().finalize(plan.get()) != CUDNN_STATUS_SUCCESS) continue;  // the next config, as cuDNN advises
    int64_t n = 0, workspace = 0;
    TD_CUDNN_CHECK(
        graph_api().get(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &workspace));
    if (workspace > static_cast<int64_t>(cudnn::kMaxConvWorkspace)) continue;
    p.plan = std::move(plan);
    p.workspace = workspace;
    p.engine = engine + " (config " + std::to_string(i + 1) + " of " + std::to_string(returned) + ")";
  }
  for (Desc& c : configs) p.parts.push_back(std::move(c));
  if (!p.plan)
    p.engine = "no plan: " + std::to_string(returned) + " configs, " + std::to_string(skipped) + " skipped" +
               (o.runtime_compiled ? "" : " (runtime-compiled: --runtime-compiled allows them)");
  return p;
}

// Runs the plan on x, w, y (whichever the pass reads or writes) with a variant pack made for the call.
void execute(const GraphPlan& p, cudnnHandle_t handle, void* x, void* w, void* y, const Stream& s) {
  const Storage workspace = cuda::workspace(static_cast<size_t>(p.workspace), s);
  Desc pack = make_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {x, w, y};
  void* ws = workspace.data();
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  TD_CUDNN_CHECK(graph_api().finalize(pack.get()));
  TD_CUDNN_CHECK(graph_api().execute(handle, p.plan.get(), pack.get()));
}

// ---- the convolutions of a training step ----

struct Problem {
  ConvPass pass;
  Conv2dGeometry g;
  int64_t calls;  // in one training step
};

// The passes and shapes of one training step of `model` at size x size, in the layout asked for.
std::vector<Problem> step_problems(const std::string& model, int64_t size, const Options& o) {
  const std::vector<cudnn::SeenConv> before = cudnn::conv_problems_seen();
  {
    models::ModelOptions mo;
    mo.seed = 1;
    std::shared_ptr<models::Network> net = models::make_model(model, mo);
    net->to(o.device);
    net->train();
    Generator gen(2);
    Tensor x = randn({o.batch, 3, size, size}, gen).to(o.device);
    if (!o.nchw) x = to_channels_last(x);
    std::vector<int64_t> labels(static_cast<size_t>(o.batch));
    for (int64_t& l : labels) l = static_cast<int64_t>(gen.integer(1000));
    models::cross_entropy(net->forward(x), from_vector<int64_t>(labels, {o.batch}).to(o.device)).backward();
    current_stream(o.device).synchronize();
  }
  const std::vector<cudnn::SeenConv> after = cudnn::conv_problems_seen();
  std::vector<Problem> out;
  for (size_t i = 0; i < after.size(); ++i) {
    const int64_t calls = after[i].calls - (i < before.size() ? before[i].calls : 0);
    if (calls == 0) continue;
    Conv2dGeometry g = after[i].g;
    g.channels_last = !o.nchw;  // the layout asked for, whatever the model's ops ran in
    auto same = [&](const Problem& p) { return p.pass == after[i].pass && conv2d_key(p.g) == conv2d_key(g); };
    auto it = std::find_if(out.begin(), out.end(), same);
    if (it != out.end())
      it->calls += calls;
    else
      out.push_back({after[i].pass, g, calls});
  }
  return out;
}

// ---- timing ----

struct Timing {
  double gpu_us = 0, host_us = 0;
};

// Per call: `call` twice untimed (choices, descriptors, plans, workspaces), then `iters` calls back to back.
Timing time_calls(const std::function<void()>& call, const Stream& s, int64_t iters) {
  call();
  call();
  s.synchronize();
  Event start(true), stop(true);
  start.record(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) call();
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop.record(s);
  stop.synchronize();
  return {start.elapsed_ms(stop) * 1e3 / static_cast<double>(iters), host_s * 1e6 / static_cast<double>(iters)};
}

const char* pass_tag(ConvPass p) {
  return p == ConvPass::Forward ? "fwd" : (p == ConvPass::BackwardData ? "bwd_data" : "bwd_filter");
}

std::string shape_text(const Conv2dGeometry& g) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "x%lldx%lldx%lldx%lld w%lldx%lldx%lldx%lld s%lld p%lld g%lld",
                static_cast<long long>(g.n), static_cast<long long>(g.c), static_cast<long long>(g.h),
                static_cast<long long>(g.w), static_cast<long long>(g.o), static_cast<long long>(g.c / g.groups),
                static_cast<long long>(g.kh), static_cast<long long>(g.kw), static_cast<long long>(g.stride_h),
                static_cast<long long>(g.pad_h), static_cast<long long>(g.groups));
  return buf;
}

// v with `decimals` decimals, or "-" when there is none.
std::string cell(bool has, double v, int decimals) {
  if (!has) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Sums over a step's convolutions of one pass, in microseconds (calls x time per call); graph sums only over the
// shapes the graph API ran, legacy_matched over the same shapes.
struct Sums {
  double legacy_gpu = 0, legacy_host = 0, graph_gpu = 0, graph_host = 0, legacy_matched_gpu = 0,
         legacy_matched_host = 0;
  int shapes = 0, graph_shapes = 0;
};

int run(const Options& o) {
  check_device_available(o.device);
  DeviceGuard device(o.device);
  cudaDeviceProp prop{};
  TD_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device.index));
  const bool graph = graph_api().available();
  std::printf("conv_api_bench: %s, cuDNN %zu, batch %lld, %s f32, TF32 %s; graph API: %s\n", prop.name,
              cudnnGetVersion(), static_cast<long long>(o.batch), o.nchw ? "NCHW" : "NHWC", allow_tf32() ? "on" : "off",
              graph ? "timed" : "not in this cuDNN (legacy calls only)");
  const Stream s = current_stream(o.device);
  NNBackend& nn = nn_backend_for(o.device);
  const auto started = std::chrono::steady_clock::now();
  auto over_budget = [&] {
    return o.budget_s > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() > o.budget_s;
  };
  std::printf("%-13s %4s %-10s %5s %-44s %10s %10s %7s %10s %10s  %s\n", "model", "size", "pass", "calls", "shape",
              "legacy_us", "graph_us", "g/l", "l_host_us", "g_host_us", "graph engine");
  std::map<std::string, Sums> sums;  // by "model size pass"
  std::vector<std::string> order;
  bool cut = false;
  for (const std::string& model : o.models) {
    for (int64_t size : o.sizes) {
      if ((cut = cut || over_budget())) break;
      for (const Problem& p : step_problems(model, size, o)) {
        if ((cut = cut || over_budget())) break;
        const Conv2dGeometry& g = p.g;
        TensorOptions f32 = TensorOptions(DType::F32).with_device(o.device);
        Generator gen(3);
        Tensor x = uniform({g.n * g.c * g.h * g.w}, -1, 1, gen, f32);
        Tensor w = uniform({g.o * (g.c / g.groups) * g.kh * g.kw}, -1, 1, gen, f32);
        Tensor y = uniform({g.n * g.o * g.oh * g.ow}, -1, 1, gen, f32);
        void *xp = x.raw_data(), *wp = w.raw_data(), *yp = y.raw_data();
        const Timing legacy = time_calls(
            [&] {
              switch (p.pass) {
                case ConvPass::Forward: return nn.conv2d_forward({g, xp, wp, nullptr, yp}, s);
                case ConvPass::BackwardData: return nn.conv2d_backward_data({g, yp, wp, xp}, s);
                case ConvPass::BackwardFilter: return nn.conv2d_backward_weight({g, xp, yp, wp}, s);
              }
            },
            s, o.iters);
        Timing graphed;
        std::string engine = "-";
        if (graph) {
          // A shape the graph API refuses (a descriptor it will not finalize) is a row without graph figures.
          try {
            cudnnHandle_t handle = cudnn_handle(o.device.index, s.cuda());
            GraphPlan plan = build_plan(p.pass, g, handle, o);
            engine = plan.engine;
            if (plan.plan) graphed = time_calls([&] { execute(plan, handle, xp, wp, yp, s); }, s, o.iters);
          } catch (const Error& e) {
            engine = std::string("failed: ") + e.what();
            graphed = Timing();
            s.synchronize();
          }
        }
        const std::string key = model + " " + std::to_string(size) + " " + pass_tag(p.pass);
        if (!sums.count(key)) order.push_back(key);
        Sums& t = sums[key];
        const double calls = static_cast<double>(p.calls);
        t.legacy_gpu += calls * legacy.gpu_us;
        t.legacy_host += calls * legacy.host_us;
        ++t.shapes;
        if (graphed.gpu_us > 0) {
          t.graph_gpu += calls * graphed.gpu_us;
          t.graph_host += calls * graphed.host_us;
          t.legacy_matched_gpu += calls * legacy.gpu_us;
          t.legacy_matched_host += calls * legacy.host_us;
          ++t.graph_shapes;
        }
        const bool ran = graphed.gpu_us > 0;
        std::printf("%-13s %4lld %-10s %5lld %-44s %10.1f %10s %7s %10.1f %10s  %s\n", model.c_str(),
                    static_cast<long long>(size), pass_tag(p.pass), static_cast<long long>(p.calls),
                    shape_text(g).c_str(), legacy.gpu_us, cell(ran, graphed.gpu_us, 1).c_str(),
                    cell(ran, graphed.gpu_us / legacy.gpu_us, 3).c_str(), legacy.host_us,
                    cell(ran, graphed.host_us, 1).c_str(), engine.c_str());
        std::fflush(stdout);
      }
    }
  }
  std::printf(
      "\n== per model, size and pass: sums over one training step's convolutions (ms; graph and the legacy "
      "sum beside it over the shapes the graph API ran)\n");
  std::printf("%-30s %7s %12s %12s %12s %7s %12s %12s\n", "case", "shapes", "legacy_ms", "legacy*_ms", "graph_ms",
              "g/l*", "l*_host_ms", "g_host_ms");
  double lg = 0, gg = 0, lh = 0, gh = 0;
  int faster = 0, compared = 0;
  for (const std::string& key : order) {
    const Sums& t = sums[key];
    const bool any = t.graph_shapes > 0;
    std::printf("%-30s %3d/%-3d %12.3f %12.3f %12s %7s %12.3f %12s\n", key.c_str(), t.graph_shapes, t.shapes,
                t.legacy_gpu * 1e-3, t.legacy_matched_gpu * 1e-3, cell(any, t.graph_gpu * 1e-3, 3).c_str(),
                cell(any, t.graph_gpu / t.legacy_matched_gpu, 3).c_str(), t.legacy_matched_host * 1e-3,
                cell(any, t.graph_host * 1e-3, 3).c_str());
    if (!any) continue;
    lg += t.legacy_matched_gpu, gg += t.graph_gpu, lh += t.legacy_matched_host, gh += t.graph_host;
    ++compared;
    faster += t.graph_gpu < t.legacy_matched_gpu;
  }
  std::printf("\n");
  if (cut) std::printf("conv_api_bench: stopped at the --budget of %.0f s; the sums cover what ran\n", o.budget_s);
  if (compared == 0) {
    std::printf("conv_api_bench: no graph-API timings (%s): nothing to compare\n",
                graph ? "no plan for any shape" : "this cuDNN has no graph API");
    return 0;
  }
  std::printf(
      "conv_api_bench: graph API / legacy, GPU time over the shapes both ran: %.3f (graph faster in %d of %d "
      "cases)\n",
      gg / lg, faster, compared);
  std::printf("conv_api_bench: graph API / legacy, host time per call over the same shapes: %.3f\n", gh / lh);
  std::printf("conv_api_bench: keep the %s API for convolutions (by GPU time)\n", gg < lg ? "graph" : "legacy");
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Options o;
  tandem::flags::Parser p(
      "conv_api_bench",
      "conv_api_bench [--device=DEV] [--batch=N] [--sizes=224,32] [--models=A,B] [--iters=N] [--nchw]\n"
      "                      [--runtime-compiled] [--budget=S]",
      "Times cuDNN's legacy convolution calls, as Tandem's CUDA backend makes them, against cuDNN's graph API\n"
      "(an execution plan per shape from heuristics mode A, a variant pack per call) for the forward, backward\n"
      "data and backward filter passes of one training step of each model, in NHWC f32 (TF32 as the runtime is\n"
      "set), and prints per shape and per model, size and pass the GPU and host microseconds per call and their\n"
      "sums over the step. Needs a GPU; where cuDNN has no graph API it times the legacy calls alone.");
  p.custom(
      "--device", "DEV", [&](const std::string& v) { o.device = tandem::Device::parse(v); },
      "the GPU (default cuda:0)");
  p.integer("--batch", "N", &o.batch, "batch (default 256)", 1);
  p.integers("--sizes", "LIST", &o.sizes, "image sizes (default 224,32)", 1);
  p.words("--models", "A,B", &o.models, "zoo models (default resnet18,resnet50,mobilenet_v2)");
  p.integer("--iters", "N", &o.iters, "timed calls per pass and shape (default 10, after 2 untimed)", 1);
  p.flag("--nchw", &o.nchw, true, "NCHW tensors instead of NHWC");
  p.flag("--runtime-compiled", &o.runtime_compiled, true,
         "let the graph API use runtime-compiled engines (they need libnvrtc and\ncompile on first use)");
  p.number("--budget", "S", &o.budget_s, "stop starting new shapes after S seconds (default 0: no limit)", 0);
  p.parse(argc, argv);
  if (o.device.is_cpu()) tandem::flags::usage_error("--device must be a GPU (cuda or cuda:N)");
  return tandem::flags::run_reporting_errors("conv_api_bench", [&] { return tandem::run(o); });
}
