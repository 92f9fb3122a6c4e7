// IDX datasets (MNIST, Fashion-MNIST): ubyte image and label files, plain or gzip-compressed.
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"

namespace tandem {
namespace data {

// Reads an IDX image file ([N, rows, cols] of u8) and its label file ([N] of u8, labels 0..9), whole, at open.
// Throws IoError naming the file for a missing file, a wrong magic number, truncated or trailing data,
// mismatched counts or a label out of range (naming the record too).
std::shared_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path,
                                  const std::string& name);

// The split of an IDX dataset in `dir`: train-images-idx3-ubyte / train-labels-idx1-ubyte for train,
// t10k-* for test, each optionally .gz (MNIST's "train-images.idx3-ubyte" spelling is accepted too).
std::shared_ptr<Dataset> open_idx_dir(const std::string& dir, bool train, const std::string& name);

// The Debian package dataset-fashion-mnist's copy (or $TANDEM_FASHION_MNIST_DIR); when it is absent the
// IoError names the package to install.
std::string fashion_mnist_dir();
std::shared_ptr<Dataset> open_fashion_mnist(bool train);

}  // namespace data
}  // namespace tandem
