// The layer rule of DESIGN.md as a test: every #include of the product's folders (runtime, kernels, models,
// data, parallel, tools) names a file of its own folder or of a folder below it, runtime/'s packages include
// only their own or earlier ones, and no backend of kernels/ and no method of parallel/ includes a sibling's
// files.
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

namespace tandem {
namespace {

namespace fs = std::filesystem;

// The folders in layer order, each with the lower folders it may not use all the same ("knows nothing of").
const std::vector<std::string> kLayers = {"runtime", "kernels", "models", "data", "parallel", "tools"};
const std::map<std::string, std::set<std::string>> kForbiddenBelow = {{"data", {"models"}}};

// Subfolders in layer order within their folder (runtime/BUILD says what each holds): one may include its own
// files and those of the subfolders before it.
const std::map<std::string, std::vector<std::string>> kSublayers = {
    {"runtime", {"base", "memory", "tensor", "nn", "formats", "optim", "progress"}},
};

// Subfolders that are siblings: neither may include the other's files (files directly in the folder are
// shared by all of them and may include none of them).
const std::map<std::string, std::set<std::string>> kSiblings = {
    {"kernels", {"cpu", "cuda", "cudnn", "cublas"}},
    {"parallel", {"bd", "cyclic"}},
};
// Sibling pairs that are one backend: the CUDA backend runs on its own kernels, cuDNN and cuBLAS.
const std::set<std::pair<std::string, std::string>> kSameBackend = {
    {"cuda", "cudnn"}, {"cuda", "cublas"}, {"cudnn", "cuda"}, {"cublas", "cuda"}, {"cudnn", "cublas"}};

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

// Why FILE (a path from the repository root) may not include INCLUDED (as written between the quotes), or ""
// when it may.
std::string layer_violation(const std::string& file, const std::string& included) {
  const std::vector<std::string> from = split_path(file), to = split_path(included);
  const int from_rank = rank_of(from[0]), to_rank = rank_of(to[0]);
  if (from_rank < 0 || to.size() < 2) return "";  // tests/, bench/ and third-party or system headers
  if (to_rank < 0) return from[0] + "/ may not include " + to[0] + "/ (not a layer below it)";
  if (to_rank > from_rank) return from[0] + "/ is below " + to[0] + "/ and may not include it";
  auto forbidden = kForbiddenBelow.find(from[0]);
  if (forbidden != kForbiddenBelow.end() && forbidden->second.count(to[0]))
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
  auto siblings = kSiblings.find(from[0]);
  if (to_rank != from_rank || siblings == kSiblings.end()) return "";
  const std::string from_sub = from.size() > 2 && siblings->second.count(from[1]) ? from[1] : "";
  const std::string to_sub = to.size() > 2 && siblings->second.count(to[1]) ? to[1] : "";
  if (to_sub.empty() || to_sub == from_sub) return "";
  if (from_sub.empty()) return "the shared files of " + from[0] + "/ may not include " + from[0] + "/" + to_sub + "/";
  if (kSameBackend.count({from_sub, to_sub})) return "";
  return from[0] + "/" + from_sub + "/ may not include its sibling " + from[0] + "/" + to_sub + "/";
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
  };
  for (const Include& c : allowed) EXPECT_EQ(layer_violation(c.file, c.included), "") << c.file << " -> " << c.included;
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
  };
  for (const Include& c : refused) EXPECT_NE(layer_violation(c.file, c.included), "") << c.file << " -> " << c.included;
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
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  int files = 0, includes = 0;
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
      while (std::getline(in, line)) {
        ++number;
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        ++includes;
        const std::string why = layer_violation(rel, m[1]);
        if (!why.empty()) violations.push_back(rel + ":" + std::to_string(number) + ": " + m[1].str() + ": " + why);
      }
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(includes, 500);
  for (const std::string& v : violations) ADD_FAILURE() << v;
}

}  // namespace
}  // namespace tandem
