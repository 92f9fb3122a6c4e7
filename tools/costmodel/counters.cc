// The simulator's counters through dlsym, converted to OpCounts.
#include "tools/costmodel/counters.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/base/cuda_check.h"
#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/formats/json.h"
#include "runtime/memory/stream.h"
#include "tools/cudasim/counters_abi.h"

namespace tandem {
namespace costmodel {

namespace {

struct Api {
  void (*counting)(int) = nullptr;
  size_t (*take)(TandemCudasimOp*, size_t) = nullptr;
};
const Api& api() {
  static const Api a = [] {
    Api r;
    r.counting = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "tandem_cudasim_counting"));
    r.take = reinterpret_cast<size_t (*)(TandemCudasimOp*, size_t)>(dlsym(RTLD_DEFAULT, "tandem_cudasim_take_ops"));
    return r;
  }();
  return a;
}

OpCounts convert(const TandemCudasimOp& o) {
  OpCounts c;
  c.kind = o.kind == TANDEM_CUDASIM_KERNEL    ? OpKind::Kernel
           : o.kind == TANDEM_CUDASIM_LIBRARY ? OpKind::Library
                                              : OpKind::Copy;
  c.name = o.name;
  c.detail = o.detail;
  c.op_class = o.op_class;
  c.precision = o.precision;
  c.device = o.device;
  c.ranks = o.ranks;
  c.groups = o.groups;
  c.threads = static_cast<double>(o.threads);
  c.block_threads = static_cast<double>(o.block[0]) * o.block[1] * o.block[2];
  c.blocks = static_cast<double>(o.grid[0]) * o.grid[1] * o.grid[2];
  c.load_requests = static_cast<double>(o.global_load_requests);
  c.store_requests = static_cast<double>(o.global_store_requests);
  c.load_sectors = static_cast<double>(o.global_load_sectors);
  c.store_sectors = static_cast<double>(o.global_store_sectors);
  c.load_bytes = static_cast<double>(o.global_load_bytes);
  c.store_bytes = static_cast<double>(o.global_store_bytes);
  c.distinct_load_sectors = static_cast<double>(o.distinct_load_sectors);
  c.distinct_store_sectors = static_cast<double>(o.distinct_store_sectors);
  c.shared_requests = static_cast<double>(o.shared_requests);
  c.shared_wavefronts = static_cast<double>(o.shared_wavefronts);
  c.atomics = static_cast<double>(o.atomics);
  c.atomic_requests = static_cast<double>(o.atomic_requests);
  c.barriers = static_cast<double>(o.barriers);
  c.collectives = static_cast<double>(o.warp_collectives);
  c.flops = o.flops;
  static_assert(OpCounts::kReuseBuckets == TANDEM_CUDASIM_REUSE_BUCKETS, "the reuse buckets of counters_abi.h");
  for (int b = 0; b < OpCounts::kReuseBuckets; ++b)
    c.reuse_load_sectors[b] = static_cast<double>(o.reuse_load_sectors[b]);
  c.bytes_read = o.bytes_read;
  c.bytes_written = o.bytes_written;
  return c;
}

// Every number of an op, for the arithmetic below.
template <typename F>
void for_each_number(OpCounts& a, const OpCounts& b, F f) {
  f(a.launches, b.launches);
  f(a.threads, b.threads);
  f(a.blocks, b.blocks);
  f(a.block_threads, b.block_threads);
  f(a.load_requests, b.load_requests);
  f(a.store_requests, b.store_requests);
  f(a.load_sectors, b.load_sectors);
  f(a.store_sectors, b.store_sectors);
  f(a.load_bytes, b.load_bytes);
  f(a.store_bytes, b.store_bytes);
  f(a.distinct_load_sectors, b.distinct_load_sectors);
  f(a.distinct_store_sectors, b.distinct_store_sectors);
  f(a.shared_requests, b.shared_requests);
  f(a.shared_wavefronts, b.shared_wavefronts);
  f(a.atomics, b.atomics);
  f(a.atomic_requests, b.atomic_requests);
  f(a.barriers, b.barriers);
  f(a.collectives, b.collectives);
  f(a.flops, b.flops);
  f(a.bytes_read, b.bytes_read);
  f(a.bytes_written, b.bytes_written);
  for (int i = 0; i < OpCounts::kReuseBuckets; ++i) f(a.reuse_load_sectors[i], b.reuse_load_sectors[i]);
}

// Every numeric field by its JSON name.
template <typename Op, typename F>
void for_each_field(Op& op, F f) {
  f("launches", op.launches);
  f("threads", op.threads);
  f("blocks", op.blocks);
  f("block_threads", op.block_threads);
  f("load_requests", op.load_requests);
  f("store_requests", op.store_requests);
  f("load_sectors", op.load_sectors);
  f("store_sectors", op.store_sectors);
  f("load_bytes", op.load_bytes);
  f("store_bytes", op.store_bytes);
  f("distinct_load_sectors", op.distinct_load_sectors);
  f("distinct_store_sectors", op.distinct_store_sectors);
  f("shared_requests", op.shared_requests);
  f("shared_wavefronts", op.shared_wavefronts);
  f("atomics", op.atomics);
  f("atomic_requests", op.atomic_requests);
  f("barriers", op.barriers);
  f("collectives", op.collectives);
  f("flops", op.flops);
  f("bytes_read", op.bytes_read);
  f("bytes_written", op.bytes_written);
}

const char* kind_name(OpKind k) { return k == OpKind::Kernel ? "kernel" : k == OpKind::Library ? "library" : "copy"; }

}  // namespace

Json op_to_json(const OpCounts& op) {
  Json j = Json::object();
  j["kind"] = kind_name(op.kind);
  j["name"] = op.name;
  j["detail"] = op.detail;
  j["op_class"] = op.op_class;
  j["precision"] = op.precision;
  j["device"] = op.device;
  j["ranks"] = op.ranks;
  j["groups"] = op.groups;
  for_each_field(op, [&](const char* name, double v) { j[name] = v; });
  Json reuse = Json::array();
  for (double v : op.reuse_load_sectors) reuse.push_back(v);
  j["reuse_load_sectors"] = reuse;
  return j;
}

OpCounts op_from_json(const Json& j) {
  OpCounts op;
  json_object(j, "op");
  const std::string& kind = json_string(json_at(j, "kind"), "op kind");
  TD_CHECK(kind == "kernel" || kind == "library" || kind == "copy", "op kind '", kind,
           "' is not kernel, library or copy");
  op.kind = kind == "kernel" ? OpKind::Kernel : kind == "library" ? OpKind::Library : OpKind::Copy;
  op.name = json_string(json_at(j, "name"), "op name");
  op.detail = json_string(json_at(j, "detail"), "op detail");
  op.op_class = json_string(json_at(j, "op_class"), "op class");
  op.precision = json_string(json_at(j, "precision"), "op precision");
  op.device = static_cast<int>(json_int(json_at(j, "device"), "op device"));
  op.ranks = static_cast<int>(json_int(json_at(j, "ranks"), "op ranks"));
  op.groups = static_cast<int>(json_int(json_at(j, "groups"), "op groups"));
  for_each_field(op,
                 [&](const char* name, double& v) { v = json_number(json_at(j, name), std::string("op ") + name); });
  const Json& reuse = json_array(json_at(j, "reuse_load_sectors"), "op reuse_load_sectors");
  TD_CHECK(reuse.size() == static_cast<size_t>(OpCounts::kReuseBuckets), "op reuse_load_sectors has ", reuse.size(),
           " buckets, not ", OpCounts::kReuseBuckets);
  for (int b = 0; b < OpCounts::kReuseBuckets; ++b)
    op.reuse_load_sectors[b] = json_number(reuse[static_cast<size_t>(b)], "op reuse_load_sectors");
  return op;
}

std::string OpCounts::key() const {
  return kind == OpKind::Kernel ? name + " at " + detail : name + " " + op_class + " " + precision;
}

OpCounts OpCounts::scaled(double f) const {
  OpCounts r = *this;
  for_each_number(r, *this, [f](double& x, double) { x *= f; });
  r.block_threads = block_threads;  // a shape, not a count
  return r;
}

void OpCounts::add(const OpCounts& o) {
  const double total = launches + o.launches;
  const double shape = total > 0 ? (block_threads * launches + o.block_threads * o.launches) / total : 0;
  for_each_number(*this, o, [](double& x, double y) { x += y; });
  block_threads = shape;
}

OpCounts OpCounts::extrapolate(const OpCounts& a, const OpCounts& b, double f) {
  OpCounts r = a;
  for_each_number(r, b, [f](double& x, double y) { x = std::max(0.0, x + f * (y - x)); });
  return r;
}

bool counters_available() { return api().counting != nullptr && api().take != nullptr; }

std::string counters_unavailable_reason() {
  if (counters_available()) return "";
  return "the cost counters come from Tandem's simulated GPU: build with --config=cudasim (or run through "
         "tools/tandem sim)";
}

Recording::Recording(bool dry) {
  TD_CHECK(counters_available(), counters_unavailable_reason());
  api().counting(dry ? TANDEM_CUDASIM_COUNTING_DRY : TANDEM_CUDASIM_COUNTING_ON);
}

Recording::~Recording() { api().counting(TANDEM_CUDASIM_COUNTING_OFF); }

SkipArithmetic::SkipArithmetic() {
  TD_CHECK(counters_available(), counters_unavailable_reason());
  api().counting(TANDEM_CUDASIM_COUNTING_SKIP);
}

SkipArithmetic::~SkipArithmetic() { api().counting(TANDEM_CUDASIM_COUNTING_OFF); }

std::vector<OpCounts> Recording::take() {
  for (int d = 0; d < cuda_device_count(); ++d) {
    DeviceGuard guard(Device::cuda(d));
    TD_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<OpCounts> out;
  std::vector<TandemCudasimOp> buf(4096);
  for (;;) {
    const size_t n = api().take(buf.data(), buf.size());
    for (size_t i = 0; i < n; ++i) out.push_back(convert(buf[i]));
    if (n < buf.size()) break;
  }
  return out;
}

}  // namespace costmodel
}  // namespace tandem
