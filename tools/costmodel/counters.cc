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

namespace tandem {
namespace costmodel {

namespace {

// tandem_cudasim_counting's modes (the simulator's counters_abi.h).
enum Mode { kOff = 0, kOn = 1, kDry = 2, kSkip = 3 };

struct Api {
  void (*counting)(int) = nullptr;
  const char* (*take)() = nullptr;
};
const Api& api() {
  static const Api a = [] {
    Api r;
    r.counting = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "tandem_cudasim_counting"));
    r.take = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "tandem_cudasim_take_ops_json"));
    return r;
  }();
  return a;
}

double number(const Json& o, const char* key) { return json_number(json_at(o, key), std::string("op ") + key); }

// One element of tandem_cudasim_take_ops_json's array.
OpCounts convert(const Json& o) {
  OpCounts c;
  const int kind = static_cast<int>(json_int(json_at(o, "kind"), "op kind"));
  c.kind = kind == 0 ? OpKind::Kernel : kind == 1 ? OpKind::Library : OpKind::Copy;
  c.name = json_string(json_at(o, "name"), "op name");
  c.detail = json_string(json_at(o, "detail"), "op detail");
  c.op_class = json_string(json_at(o, "op_class"), "op class");
  c.precision = json_string(json_at(o, "precision"), "op precision");
  c.device = static_cast<int>(number(o, "device"));
  c.ranks = static_cast<int>(number(o, "ranks"));
  c.groups = static_cast<int>(number(o, "groups"));
  const Json& grid = json_array(json_at(o, "grid"), "op grid");
  const Json& block = json_array(json_at(o, "block"), "op block");
  TD_CHECK(grid.size() == 3 && block.size() == 3, "the simulator's op grid and block must have 3 dims");
  c.blocks = c.block_threads = 1;
  for (size_t i = 0; i < 3; ++i) {
    c.blocks *= json_number(grid[i], "op grid");
    c.block_threads *= json_number(block[i], "op block");
  }
  c.threads = number(o, "threads");
  c.load_requests = number(o, "global_load_requests");
  c.store_requests = number(o, "global_store_requests");
  c.load_sectors = number(o, "global_load_sectors");
  c.store_sectors = number(o, "global_store_sectors");
  c.load_bytes = number(o, "global_load_bytes");
  c.store_bytes = number(o, "global_store_bytes");
  c.distinct_load_sectors = number(o, "distinct_load_sectors");
  c.distinct_store_sectors = number(o, "distinct_store_sectors");
  c.shared_requests = number(o, "shared_requests");
  c.shared_wavefronts = number(o, "shared_wavefronts");
  c.atomics = number(o, "atomics");
  c.atomic_requests = number(o, "atomic_requests");
  c.barriers = number(o, "barriers");
  c.collectives = number(o, "warp_collectives");
  c.flops = number(o, "flops");
  c.bytes_read = number(o, "bytes_read");
  c.bytes_written = number(o, "bytes_written");
  const Json& reuse = json_array(json_at(o, "reuse_load_sectors"), "op reuse_load_sectors");
  TD_CHECK(reuse.size() == static_cast<size_t>(OpCounts::kReuseBuckets), "the simulator's ops have ", reuse.size(),
           " reuse buckets, not ", OpCounts::kReuseBuckets);
  for (int b = 0; b < OpCounts::kReuseBuckets; ++b)
    c.reuse_load_sectors[b] = json_number(reuse[static_cast<size_t>(b)], "op reuse_load_sectors");
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
  if (kind == OpKind::Kernel) return name + " at " + detail;
  return name + " " + op_class + " " + precision + (groups > 1 ? " groups " + std::to_string(groups) : "");
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
  r.launches = b.launches;  // launches do not grow with the size; a plan's passes may change below it
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
  api().counting(dry ? kDry : kOn);
}

Recording::~Recording() { api().counting(kOff); }

SkipArithmetic::SkipArithmetic() {
  TD_CHECK(counters_available(), counters_unavailable_reason());
  api().counting(kSkip);
}

SkipArithmetic::~SkipArithmetic() { api().counting(kOff); }

std::vector<OpCounts> Recording::take() {
  for (int d = 0; d < cuda_device_count(); ++d) {
    DeviceGuard guard(Device::cuda(d));
    TD_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<OpCounts> out;
  const Json ops = parse_json(api().take());
  for (const Json& o : json_array(ops, "the simulator's ops")) out.push_back(convert(o));
  return out;
}

}  // namespace costmodel
}  // namespace tandem
