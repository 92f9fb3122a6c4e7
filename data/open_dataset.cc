// open_dataset: the spec string parser that picks a dataset reader.
#include <string>

#include "data/cifar.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/record_file.h"
#include "data/synthetic.h"
#include "runtime/base/error.h"

namespace tandem {
namespace data {

std::shared_ptr<Dataset> open_dataset(const std::string& spec, bool train) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto need_arg = [&](const char* what) {
    TD_CHECK(!arg.empty(), "dataset spec '", spec, "': ", kind, " needs ", what, " (", kind, ":", what, ")");
  };
  if (kind == "synthetic") return make_synthetic(parse_synthetic_options(arg), train);
  if (kind == "fashion-mnist") {
    if (arg.empty()) return open_fashion_mnist(train);
    return open_idx_dir(arg, train, "fashion-mnist");
  }
  if (kind == "mnist" || kind == "idx") {
    need_arg("DIR");
    return open_idx_dir(arg, train, kind);
  }
  // The readers of one directory or file: the kind, what its argument names, the reader.
  struct Reader {
    const char* kind;
    const char* what;
    std::shared_ptr<Dataset> (*open)(const std::string&, bool);
  };
  static const Reader kReaders[] = {
      {"cifar10", "DIR", open_cifar10},
      {"cifar100", "DIR", open_cifar100},
      {"folder", "DIR",
       [](const std::string& dir, bool t) -> std::shared_ptr<Dataset> { return open_image_folder(dir, t); }},
      {"packed", "PATH", open_packed},
  };
  for (const Reader& r : kReaders)
    if (kind == r.kind) {
      need_arg(r.what);
      return r.open(arg, train);
    }
  TD_THROW(ValueError, "unknown dataset spec '", spec,
           "' (known: fashion-mnist[:DIR], mnist:DIR, idx:DIR, cifar10:DIR, cifar100:DIR, folder:DIR, "
           "packed:PATH, synthetic[:n=N,classes=K,h=H,w=W,c=C,seed=S,noise=A])");
}

}  // namespace data
}  // namespace tandem
