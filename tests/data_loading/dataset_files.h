// Writers of small dataset files for tests and benchmarks: IDX, CIFAR, JPEG, PNG, gzip, temp folders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace tandem {
namespace testdata {

// A fresh empty directory under $TEST_TMPDIR (else /tmp).
std::string make_temp_dir(const std::string& tag);
void make_dir(const std::string& path);

void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_bytes(const std::string& path);

// IDX files of unsigned bytes: images [n, rows, cols] and labels [n].
std::vector<uint8_t> idx_images(int64_t n, int64_t rows, int64_t cols, const std::vector<uint8_t>& pixels);
std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels);

// JPEG (libjpeg, given quality; baseline, or progressive with libjpeg's default scans) and PNG (libpng)
// encodings of an 8-bit HWC image with 1 or 3 channels.
std::vector<uint8_t> encode_jpeg(const data::Image& image, int quality, bool progressive = false);
std::vector<uint8_t> encode_png(const data::Image& image);
// libjpeg's decoding of well-formed JPEG bytes with its defaults (RGB, or gray for gray files): the
// reference the reader under test must match exactly.
data::Image reference_decode_jpeg(const std::vector<uint8_t>& bytes);

// A smooth random image (sums of a few random gradients and a checker term), so JPEG keeps it close.
data::Image smooth_image(int64_t height, int64_t width, int64_t channels, uint64_t seed);

}  // namespace testdata
}  // namespace tandem
