// Writers of small dataset files, with libjpeg, libpng and zlib used directly.
#include "tests/data_loading/dataset_files.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <png.h>

#include "runtime/base/philox.h"

namespace tandem {
namespace testdata {

std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return buf.data();
}

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) throw std::runtime_error("mkdir failed: " + path);
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb6");
  if (f == nullptr) throw std::runtime_error("gzopen failed: " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size()))
    throw std::runtime_error("gzwrite failed: " + path);
  gzclose(f);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

namespace {
void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}
}  // namespace

std::vector<uint8_t> idx_images(int64_t n, int64_t rows, int64_t cols, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> b;
  put_be32(b, 0x00000803u);
  put_be32(b, static_cast<uint32_t>(n));
  put_be32(b, static_cast<uint32_t>(rows));
  put_be32(b, static_cast<uint32_t>(cols));
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_be32(b, 0x00000801u);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

std::vector<uint8_t> encode_jpeg(const data::Image& image, int quality, bool progressive) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = static_cast<int>(image.channels);
  cinfo.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image.hwc.data() + cinfo.next_scanline * image.width * image.channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> bytes(out, out + size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

data::Image reference_decode_jpeg(const std::vector<uint8_t>& bytes) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  jpeg_start_decompress(&cinfo);
  data::Image im;
  im.height = cinfo.output_height;
  im.width = cinfo.output_width;
  im.channels = cinfo.output_components;
  im.hwc.resize(static_cast<size_t>(im.height * im.width * im.channels));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = im.hwc.data() + cinfo.output_scanline * im.width * im.channels;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return im;
}

std::vector<uint8_t> encode_png(const data::Image& image) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.width);
  img.height = static_cast<png_uint_32>(image.height);
  img.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  const auto stride = static_cast<png_int_32>(image.width * image.channels);
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, image.hwc.data(), stride, nullptr))
    throw std::runtime_error(std::string("png size query failed: ") + img.message);
  std::vector<uint8_t> bytes(size);
  if (!png_image_write_to_memory(&img, bytes.data(), &size, 0, image.hwc.data(), stride, nullptr))
    throw std::runtime_error(std::string("png write failed: ") + img.message);
  bytes.resize(size);
  return bytes;
}

data::Image smooth_image(int64_t height, int64_t width, int64_t channels, uint64_t seed) {
  data::Image im;
  im.height = height;
  im.width = width;
  im.channels = channels;
  im.hwc.resize(static_cast<size_t>(height * width * channels));
  for (int64_t c = 0; c < channels; ++c) {
    philox::Block b = philox::generate(seed, static_cast<uint64_t>(c));
    const double a = (b.x[0] % 1000) / 1000.0 * 6.28, fy = 1 + b.x[1] % 4, fx = 1 + b.x[2] % 4;
    const double base = 60 + b.x[3] % 120;
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x) {
        double v = base + 50 * std::sin(a + fy * 3.14159 * y / height) * std::cos(fx * 3.14159 * x / width);
        im.hwc[(y * width + x) * channels + c] = static_cast<uint8_t>(std::lround(std::min(255.0, std::max(0.0, v))));
      }
  }
  return im;
}

}  // namespace testdata
}  // namespace tandem
