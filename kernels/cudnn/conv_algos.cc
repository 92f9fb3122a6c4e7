// The cuDNN convolution algorithm choice: the process's cache, the disk cache and the counts.
#include "kernels/cudnn/conv_algos.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "kernels/cudnn/algo_cache.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/lru_cache.h"

namespace tandem {
namespace cudnn {

namespace {

std::atomic<int64_t> g_heuristic{0}, g_searched{0}, g_from_disk{0}, g_fallbacks{0};

using Key = std::array<int64_t, 5 + std::tuple_size<Conv2dKey>::value>;
Key key_of(const ConvProblem& p) {
  Key key{static_cast<int64_t>(p.pass), p.device, p.deterministic, p.tf32, p.benchmark};
  const Conv2dKey shape = conv2d_key(p.g);
  std::copy(shape.begin(), shape.end(), key.begin() + 5);
  return key;
}

// The problem as the disk cache's entries name it: every field of the key, readable.
std::string problem_text(const ConvProblem& p) {
  const Conv2dGeometry& g = p.g;
  std::ostringstream os;
  os << pass_name(p.pass) << (p.benchmark ? ", searched" : ", heuristic") << (p.deterministic ? ", deterministic" : "")
     << (p.tf32 ? ", tf32" : "") << ", " << dtype_name(g.dtype) << (g.channels_last ? " channels-last" : " nchw")
     << ", x [" << g.n << ", " << g.c << ", " << g.h << ", " << g.w << "], w [" << g.o << ", " << g.c / g.groups << ", "
     << g.kh << ", " << g.kw << "], y " << g.oh << "x" << g.ow << ", stride " << g.stride_h << "x" << g.stride_w
     << ", pad " << g.pad_h << "x" << g.pad_w << ", dilation " << g.dilation_h << "x" << g.dilation_w << ", groups "
     << g.groups;
  return os.str();
}

// The GPU model, driver and cuDNN of `device` (asked once per device).
AlgoContext context_of(int device) {
  static std::mutex mu;
  static std::map<int, AlgoContext> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  AlgoContext c;
  cudaDeviceProp prop{};
  TD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  c.gpu = prop.name;
  TD_CUDA_CHECK(cudaDriverGetVersion(&c.driver));
  c.cudnn = cudnnGetVersion();
  return known.emplace(device, c).first->second;
}

struct Caches {
  std::mutex mu;
  LruCache<Key, std::optional<ConvChoice>> chosen{kConvAlgoShapes};  // this process's choices, "none" included
  std::map<Key, size_t> seen_at;                                     // the index in `seen` of each key recorded
  std::vector<SeenConv> seen;
  std::shared_ptr<AlgoDiskCache> disk = std::make_shared<AlgoDiskCache>(default_algo_cache_path());
};
Caches& caches() {
  static Caches c;
  return c;
}

// The disk cache in use (held by the caller while a test points the process at another).
std::shared_ptr<AlgoDiskCache> disk() {
  std::lock_guard<std::mutex> lock(caches().mu);
  return caches().disk;
}

}  // namespace

std::optional<ConvChoice> choose_conv(const ConvProblem& p, const WorkspaceQuery& runs,
                                      const std::function<std::optional<ConvChoice>()>& search) {
  Caches& c = caches();
  const Key key = key_of(p);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto at = c.seen_at.find(key);
    if (at == c.seen_at.end() && c.seen.size() < kConvAlgoShapes) {
      at = c.seen_at.emplace(key, c.seen.size()).first;
      c.seen.push_back({p.pass, p.g, 0});
    }
    if (at != c.seen_at.end()) ++c.seen[at->second].calls;
    if (const std::optional<ConvChoice>* kept = c.chosen.find(key)) return *kept;
  }
  // Outside the lock: a search takes a while; two threads searching the same shape at once is harmless.
  const AlgoContext context = context_of(p.device);
  const std::string problem = problem_text(p);
  std::optional<ConvChoice> choice;
  if (std::optional<StoredAlgo> stored = disk()->lookup(context, problem)) {
    ConvChoice kept;
    kept.algo = stored->algo;
    kept.math = static_cast<cudnnMathType_t>(stored->math);
    // A choice another cuDNN build or a damaged file holds is not trusted: it must still run here.
    if (runs(kept.algo, kept.math, &kept.workspace) == CUDNN_STATUS_SUCCESS && kept.workspace <= kMaxConvWorkspace) {
      choice = kept;
      ++g_from_disk;
    }
  }
  if (!choice) {
    choice = search();
    ++(p.benchmark ? g_searched : g_heuristic);
    if (choice) disk()->store(context, problem, {choice->algo, static_cast<int>(choice->math)});
  }
  std::lock_guard<std::mutex> lock(c.mu);
  if (const std::optional<ConvChoice>* kept = c.chosen.find(key)) return *kept;  // another thread's, first
  return c.chosen.put(key, choice);
}

ConvAlgoStats conv_algo_stats() {
  ConvAlgoStats s;
  s.heuristic = g_heuristic.load();
  s.searched = g_searched.load();
  s.from_disk = g_from_disk.load();
  s.fallbacks = g_fallbacks.load();
  return s;
}

void count_conv_fallback() { ++g_fallbacks; }

std::vector<SeenConv> conv_problems_seen() {
  std::lock_guard<std::mutex> lock(caches().mu);
  return caches().seen;
}

void set_conv_algo_cache_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(caches().mu);
  caches().disk = std::make_shared<AlgoDiskCache>(path);
  caches().chosen = LruCache<Key, std::optional<ConvChoice>>(kConvAlgoShapes);
  caches().seen_at.clear();
  caches().seen.clear();
}

}  // namespace cudnn
}  // namespace tandem
