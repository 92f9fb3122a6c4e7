// JPEG (libjpeg-turbo) and PNG (libpng) decoding into 8-bit HWC images, with errors as exceptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace tandem {
namespace data {

enum class ImageFormat { Unknown, Jpeg, Png };

// The format announced by the first bytes (JPEG: FF D8 FF; PNG: its 8-byte signature).
ImageFormat sniff_image_format(const uint8_t* data, size_t size);

// Decodes a JPEG or PNG held in memory. channels: 0 keeps the file's (1 for gray, else 3; alpha is
// composited onto black), 1 or 3 converts. Throws IoError starting with `what` (a file name, or a file and
// record) for an unknown format or undecodable data; never exits or crashes (libjpeg's fatal errors are
// caught with setjmp/longjmp, libpng's by its simplified API).
Image decode_image(const uint8_t* data, size_t size, int channels, const std::string& what);

}  // namespace data
}  // namespace tandem
