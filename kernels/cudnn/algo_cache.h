// The cuDNN convolution algorithm choices kept on disk between runs, so that a program's first steps need not
// ask cuDNN again: one JSON file whose entries are keyed by the GPU model, driver and cuDNN versions and the
// problem. A corrupt or unreadable file is ignored (with one warning), never fatal. A writer merges its entries
// with the file as it is on disk and replaces it by a rename, so concurrent processes never leave a partial
// file (the last writer wins: an entry another process added meanwhile may be dropped and found again later).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace tandem {
namespace cudnn {

// Where a choice holds: the same GPU model under the same driver and cuDNN.
struct AlgoContext {
  std::string gpu;   // the device's name
  int driver = 0;    // cudaDriverGetVersion
  size_t cudnn = 0;  // cudnnGetVersion
};

// A choice as kept: the algorithm and its math type (the workspace is asked of cuDNN when it is used).
struct StoredAlgo {
  int algo = 0;
  int math = 0;
};

// $TANDEM_CACHE_DIR/cudnn-conv-algos.json, else $HOME/.cache/tandem/cudnn-conv-algos.json; "" (nothing kept)
// when TANDEM_CUDNN_CACHE=0 or neither folder is known.
std::string default_algo_cache_path();

class AlgoDiskCache {
 public:
  using Warn = std::function<void(const std::string&)>;
  // `path` "" keeps nothing. `warn` (empty: a "tandem: ..." line on stderr) is told once why the file was
  // ignored or could not be written.
  explicit AlgoDiskCache(std::string path, Warn warn = nullptr);

  // The choice for `problem` under `context`; the file is read on the first call.
  std::optional<StoredAlgo> lookup(const AlgoContext& context, const std::string& problem);
  // Keeps the choice: rewrites the file with its entries as they are on disk now plus this object's.
  void store(const AlgoContext& context, const std::string& problem, StoredAlgo choice);

  const std::string& path() const { return path_; }

 private:
  // The file's entries; none (and the warning) when it is unreadable or not such a file.
  std::map<std::string, StoredAlgo> read_file();
  void warn_once(const std::string& why);

  std::string path_;
  Warn warn_;
  std::mutex mu_;
  bool loaded_ = false, warned_ = false;
  std::map<std::string, StoredAlgo> entries_;  // the file's, as read first, and this object's
  std::map<std::string, StoredAlgo> mine_;     // those this object stored (written again by every store)
};

}  // namespace cudnn
}  // namespace tandem
