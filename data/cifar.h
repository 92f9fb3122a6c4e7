// CIFAR-10 and CIFAR-100 in their binary formats.
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"

namespace tandem {
namespace data {

// CIFAR-10: records of <1 label byte><3072 pixel bytes: 1024 R, 1024 G, 1024 B, row-major 32x32>, in
// data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin (test), in `dir` or dir/cifar-10-batches-bin.
std::shared_ptr<Dataset> open_cifar10(const std::string& dir, bool train);
// CIFAR-100: records of <coarse label byte><fine label byte><3072 pixel bytes> in train.bin or test.bin, in
// `dir` or dir/cifar-100-binary. The fine labels (100 classes) are used.
std::shared_ptr<Dataset> open_cifar100(const std::string& dir, bool train);

}  // namespace data
}  // namespace tandem
