// The layer rule (README, "Layout"; the order is tools/bazel/layers.bzl's) as a test: every #include of the
// product's folders (runtime, kernels, models, data, parallel, tools) names a file of its own folder or of a folder
// below it, runtime/'s packages include only their own or earlier ones, no backend of kernels/ and no method of
// parallel/ includes a sibling's files, and the simulated GPU (tools/cudasim) includes only its own files and the
// system headers it may use, and no layer includes its files.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/layer_order.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

using layers::kCudasim;
using layers::kCudasimSystemIncludes;
using layers::kKnowsNothingOf;
using layers::kLayers;
using layers::kSiblingGroups;
using layers::kSublayers;

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= p.size(); ++i)
    if (i == p.size() || p[i] == '/') {
      parts.push_back(p.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

int index_in(const std::vector<std::string>& order, const std::string& name) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == name) return static_cast<int>(i);
  return -1;
}
int rank_of(const std::string& folder) { return index_in(kLayers, folder); }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The group of `folder`'s siblings that `sub` is in (its index), or -1 when `sub` is no sibling of it.
int sibling_group(const std::string& folder, const std::string& sub) {
  auto groups = kSiblingGroups.find(folder);
  if (groups == kSiblingGroups.end()) return -1;
  for (size_t g = 0; g < groups->second.size(); ++g)
    if (groups->second[g].count(sub)) return static_cast<int>(g);
  return -1;
}

// Why FILE (a path from the repository root) may not include INCLUDED (as written between the quotes), or ""
// when it may.
std::string layer_violation(const std::string& file, const std::string& included) {
  const std::string cudasim = kCudasim + "/";
  if (starts_with(file, cudasim))
    return starts_with(included, cudasim) ? "" : kCudasim + "/ includes only its own files (not " + included + ")";
  const std::vector<std::string> from = split_path(file), to = split_path(included);
  const int from_rank = rank_of(from[0]), to_rank = rank_of(to[0]);
  if (from_rank < 0 || to.size() < 2) return "";  // tests/, bench/ and third-party or system headers
  if (starts_with(included, cudasim))
    return "only the simulator build reaches " + kCudasim + "/ (through NVIDIA's headers), and its tests";
  if (to_rank < 0) return from[0] + "/ may not include " + to[0] + "/ (not a layer below it)";
  if (to_rank > from_rank) return from[0] + "/ is below " + to[0] + "/ and may not include it";
  auto forbidden = kKnowsNothingOf.find(from[0]);
  if (forbidden != kKnowsNothingOf.end() && forbidden->second.count(to[0]))
    return from[0] + "/ knows nothing of " + to[0] + "/";
  auto sublayers = kSublayers.find(from[0]);
  if (to_rank == from_rank && sublayers != kSublayers.end()) {
    const std::vector<std::string>& order = sublayers->second;
    const int from_sub = from.size() > 2 ? index_in(order, from[1]) : -1;
    const int to_sub = to.size() > 2 ? index_in(order, to[1]) : -1;
    if (from_sub < 0 || to_sub < 0)
      return from[0] + "/'s files live in its packages (" + (from_sub < 0 ? file : included) + " is in none)";
    if (to_sub > from_sub)
      return from[0] + "/" + from[1] + "/ is below " + to[0] + "/" + to[1] + "/ and may not include it";
    return "";
  }
  if (to_rank != from_rank) return "";
  const int from_group = from.size() > 2 ? sibling_group(from[0], from[1]) : -1;
  const int to_group = to.size() > 2 ? sibling_group(to[0], to[1]) : -1;
  if (to_group < 0 || to_group == from_group) return "";
  if (from_group < 0) return "the shared files of " + from[0] + "/ may not include " + from[0] + "/" + to[1] + "/";
  return from[0] + "/" + from[1] + "/ may not include its sibling " + from[0] + "/" + to[1] + "/";
}

// Why FILE may not include the system header INCLUDED (as written between <>), or "" when it may: the rule
// covers the simulated GPU alone (the other layers' third-party dependencies are their BUILD files' business).
std::string system_include_violation(const std::string& file, const std::string& included) {
  if (!starts_with(file, kCudasim + "/")) return "";
  if (included.find_first_of("./") == std::string::npos) return "";  // the C++ standard library
  for (const std::string& allowed : kCudasimSystemIncludes)
    if (starts_with(included, allowed)) return "";
  return kCudasim + "/ may not include <" + included +
         "> (only the standard library, NVIDIA's headers and those of tools/bazel/layers.bzl's "
         "CUDASIM_SYSTEM_INCLUDES)";
}

// An include written in `file` (a path from the repository root) naming `included`.
struct Include {
  const char* file;
  const char* included;
};

TEST(LayerRule, AllowsIncludesOfTheSameOrALowerLayer) {
  const Include allowed[] = {
      // a lower layer
      {"models/zoo/resnet.cc", "runtime/tensor/tensor.h"},
      {"parallel/bd/runner.cc", "data/loader.h"},
      {"tools/demo/demo.cc", "parallel/bd/session.h"},
      // a folder's shared files, and a sibling of the same backend
      {"kernels/cpu/gemm.cc", "kernels/dispatch.h"},
      {"kernels/cuda/gemm.cc", "kernels/cublas/handle.h"},
      {"parallel/cyclic/trainer.cc", "parallel/executor.h"},
      // tests/ is no layer of the rule
      {"tests/bd/x_test.cc", "tools/train/trainer.h"},
      // runtime/'s own package or an earlier one
      {"runtime/optim/optim.cc", "runtime/nn/nn_ops.h"},
      {"runtime/tensor/tensor.h", "runtime/memory/storage.h"},
      {"runtime/nn/nn_conv.cc", "runtime/nn/nn_ops.h"},
      // the simulated GPU's own files, and its tests
      {"tools/cudasim/nccl_ops.cc", "tools/cudasim/nccl_internal.h"},
      {"tests/cudasim/simt_test.cc", "tools/cudasim/simt.h"},
  };
  for (const Include& c : allowed) EXPECT_EQ(layer_violation(c.file, c.included), "") << c.file << " -> " << c.included;
  const Include system[] = {
      {"tools/cudasim/runtime.cc", "vector"},
      {"tools/cudasim/runtime.cc", "cuda_runtime_api.h"},
      {"tools/cudasim/cudnn.cc", "cudnn.h"},
      {"tools/cudasim/nccl.cc", "nccl.h"},
      {"tools/cudasim/simt.cc", "boost/context/detail/fcontext.hpp"},
      {"tools/cudasim/memory.cc", "sys/mman.h"},
      {"runtime/base/device.cc", "cuda_runtime_api.h"},  // the rule covers tools/cudasim only
      {"kernels/cpu/onednn.cc", "oneapi/dnnl/dnnl.hpp"},
  };
  for (const Include& c : system)
    EXPECT_EQ(system_include_violation(c.file, c.included), "") << c.file << " -> <" << c.included << ">";
}

// The checker is proven on the bugs it exists to catch.
TEST(LayerRule, RefusesUpwardAndSidewaysIncludes) {
  const Include refused[] = {
      {"runtime/tensor/tensor.cc", "models/module.h"},
      {"kernels/cpu/conv.cc", "parallel/worker.h"},
      {"models/layers.cc", "data/loader.h"},
      {"data/loader.cc", "models/module.h"},
      {"runtime/tensor/ops.h", "tests/testing.h"},
      {"kernels/cuda/launch.h", "kernels/cpu/strided.h"},
      {"kernels/cpu/gemm.cc", "kernels/cublas/handle.h"},
      {"kernels/dispatch.h", "kernels/cuda/launch.h"},
      {"parallel/bd/runner.cc", "parallel/cyclic/rules.h"},
      {"parallel/executor.cc", "parallel/bd/plan.h"},
      {"runtime/memory/storage.cc", "runtime/tensor/tensor.h"},
      {"runtime/base/error.h", "runtime/memory/stream.h"},
      {"runtime/tensor/tensor.cc", "runtime/optim/optim.h"},
      {"runtime/nn/nn_ops.h", "runtime/stray.h"},
      // the simulated GPU uses nothing of Tandem's, and no layer uses it
      {"tools/cudasim/runtime.cc", "runtime/base/error.h"},
      {"tools/cudasim/simt.h", "kernels/cuda/kernel_launch.cuh"},
      {"tools/cudasim/cudnn.cc", "tools/flags/flags.h"},
      {"kernels/cuda/launch.cc", "tools/cudasim/sim.h"},
      {"tools/train/main.cc", "tools/cudasim/state.h"},
      {"runtime/base/device.cc", "tools/cudasim/sim.h"},
  };
  for (const Include& c : refused) EXPECT_NE(layer_violation(c.file, c.included), "") << c.file << " -> " << c.included;
  const Include system[] = {
      {"tools/cudasim/runtime.cc", "oneapi/dnnl/dnnl.hpp"}, {"tools/cudasim/nccl.cc", "mpi/mpi.h"},
      {"tools/cudasim/simt.cc", "boost/asio.hpp"},          {"tools/cudasim/cudnn.cc", "nlohmann/json.hpp"},
      {"tools/cudasim/cublas.cc", "gtest/gtest.h"},
  };
  for (const Include& c : system)
    EXPECT_NE(system_include_violation(c.file, c.included), "") << c.file << " -> <" << c.included << ">";
}

// The header written from tools/bazel/layers.bzl holds the layers this test was written for.
TEST(LayerRule, ReadsTheOrderOfLayersBzl) {
  EXPECT_EQ(kLayers, (std::vector<std::string>{"runtime", "kernels", "models", "data", "parallel", "tools"}));
  EXPECT_EQ(kSublayers.at("runtime").front(), "base");
  EXPECT_EQ(kCudasim, "tools/cudasim");
  EXPECT_NE(sibling_group("kernels", "cuda"), sibling_group("kernels", "cpu"));
  EXPECT_EQ(sibling_group("kernels", "cudnn"), sibling_group("kernels", "cuda"));
}

// The repository's root: the runfile tests/testing.h is a link into the source tree.
fs::path source_root() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (!srcdir || !workspace) return {};
  const fs::path runfile = fs::path(srcdir) / workspace / "tests" / "testing.h";
  std::error_code ec;
  const fs::path real = fs::canonical(runfile, ec);
  return ec ? fs::path() : real.parent_path().parent_path();
}

// The source tree is read directly (the test names one runfile, not every source: Bazel reruns it each time,
// tests are never cached here).
TEST(LayerRule, EveryIncludeOfTheTreeFollowsIt) {
  const fs::path root = source_root();
  ASSERT_FALSE(root.empty()) << "cannot find the source tree from TEST_SRCDIR";
  const std::regex include_line(R"re(^\s*#\s*include\s*(["<])([^">]+)[">])re");
  int files = 0, includes = 0, cudasim_files = 0;
  std::vector<std::string> violations;
  for (const std::string& layer : kLayers) {
    ASSERT_TRUE(fs::is_directory(root / layer)) << (root / layer);
    for (const auto& entry : fs::recursive_directory_iterator(root / layer)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string rel = fs::relative(entry.path(), root).string();
      std::ifstream in(entry.path());
      std::string line;
      int number = 0;
      ++files;
      cudasim_files += starts_with(rel, kCudasim + "/");
      while (std::getline(in, line)) {
        ++number;
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        ++includes;
        const bool quoted = m[1] == "\"";
        const std::string why = quoted ? layer_violation(rel, m[2]) : system_include_violation(rel, m[2]);
        if (!why.empty()) violations.push_back(rel + ":" + std::to_string(number) + ": " + m[2].str() + ": " + why);
      }
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(includes, 500);
  EXPECT_GT(cudasim_files, 10);
  for (const std::string& v : violations) ADD_FAILURE() << v;
}

}  // namespace
}  // namespace tandem
