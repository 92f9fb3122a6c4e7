// open_dataset: the spec string parser that picks a dataset reader.
#include <string>

#include "data/cifar.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/record_file.h"
#include "data/synthetic.h"
#include "runtime/base/spec_reader.h"

namespace tandem {
namespace data {

std::shared_ptr<Dataset> open_dataset(const std::string& spec, bool train) {
  // The argument of a directory or file reader is the rest as written (a path may hold ':' and ',').
  const SpecReader r("dataset spec", spec);
  const std::string kind = r.name(), arg = r.rest();
  auto need_arg = [&](const char* what) {
    if (arg.empty()) r.fail(kind, " needs ", what, " (", kind, ":", what, ")");
  };
  if (kind == "synthetic") return make_synthetic(parse_synthetic_options(spec), train);
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
  r.fail("unknown kind '", kind,
         "' (known: fashion-mnist[:DIR], mnist:DIR, idx:DIR, cifar10:DIR, cifar100:DIR, folder:DIR, packed:PATH, "
         "synthetic[:n=N,classes=K,h=H,w=W,c=C,seed=S,noise=A])");
}

}  // namespace data
}  // namespace tandem
