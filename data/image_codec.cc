// Image decoding: libjpeg with an error manager that longjmps out of fatal errors, and libpng's png_image API.
#include "data/image_codec.h"

// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "runtime/base/error.h"

namespace tandem {
namespace data {

ImageFormat sniff_image_format(const uint8_t* data, size_t size) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::Jpeg;
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

namespace {

// Larger images are refused as corrupt headers rather than attempted allocations of many gigabytes: at most
// 2^28 pixels, and no more pixels per byte of the file than the format can encode. PNG's deflate expands a byte
// to at most about 1,032, i.e. some 8,300 one-bit pixels: 2^14 per byte. Huffman-coded JPEG spends at least a
// bit per 8x8 block (a progressive file's DC scan), 512 pixels per byte: 2^10 per byte, which also bounds the
// whole-image coefficient buffers libjpeg allocates for progressive files (arithmetic-coded JPEGs, which could
// compress a flat image further, are held to the same bound).
constexpr int64_t kMaxPixels = int64_t{1} << 28;
constexpr int64_t kMaxPngPixelsPerByte = int64_t{1} << 14;
constexpr int64_t kMaxJpegPixelsPerByte = int64_t{1} << 10;
// Progressive JPEGs have about ten scans; thousands of tiny scans over a large image only burn time (a hostile
// file could keep the decoder busy for minutes), so more than this many is refused as libjpeg-turbo's own
// TJFLAG_LIMITSCANS does.
constexpr int kMaxJpegScans = 500;

// False, with the reason in `msg`, when a height x width image is larger than a file of `size` bytes holding at
// most `per_byte` pixels per byte justifies.
bool size_allowed(int64_t height, int64_t width, size_t size, int64_t per_byte, char* msg, size_t msg_size) {
  const int64_t pixels = height * width;  // both below 2^32: no overflow
  const int64_t by_file = static_cast<int64_t>(std::min<size_t>(size, size_t{1} << 40)) * per_byte;
  if (pixels <= kMaxPixels && pixels <= by_file) return true;
  if (pixels > kMaxPixels)
    std::snprintf(msg, msg_size, "%lldx%lld pixels is more than the limit of 2^28 pixels",
                  static_cast<long long>(height), static_cast<long long>(width));
  else
    std::snprintf(msg, msg_size, "%lldx%lld pixels is more than a file of %zu bytes can hold (%lld pixels per byte)",
                  static_cast<long long>(height), static_cast<long long>(width), size,
                  static_cast<long long>(per_byte));
  return false;
}

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

// libjpeg's default error_exit calls exit(); this returns to decode_jpeg_into's setjmp instead.
void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// A premature end of the data is fatal: libjpeg would pad the image with gray, which is silent garbage.
// Other warnings (e.g. extraneous bytes before a marker) are tolerated, as common decoders do.
void jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::longjmp(err->jump, 1);
  }
}

// Refuses a progressive JPEG with more than kMaxJpegScans scans (libjpeg calls this as it reads them).
void jpeg_limit_scans(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->progressive_mode && d->input_scan_number > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "more than %d progressive scans", kMaxJpegScans);
    std::longjmp(err->jump, 1);
  }
}

// Plain C-style decoding between setjmp and longjmp: no C++ objects with destructors live in this frame.
// Returns false with `err->message` set on failure. `out` receives HWC pixels once the size is known.
bool decode_jpeg_into(const uint8_t* data, size_t size, int channels, Image* out, JpegError* err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_error_exit;
  err->mgr.emit_message = jpeg_emit_message;
  err->message[0] = '\0';
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_progress_mgr progress;
  progress.progress_monitor = jpeg_limit_scans;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // Checked before jpeg_start_decompress, which allocates buffers for the whole image (progressive files).
  if (!size_allowed(cinfo.image_height, cinfo.image_width, size, kMaxJpegPixelsPerByte, err->message,
                    sizeof(err->message))) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  int want = channels != 0 ? channels : (cinfo.num_components == 1 ? 1 : 3);
  if (cmyk)
    cinfo.out_color_space = JCS_CMYK;  // converted to RGB/gray below (libjpeg cannot)
  else
    cinfo.out_color_space = want == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int64_t h = cinfo.output_height, w = cinfo.output_width, comps = cinfo.output_components;
  out->height = h;
  out->width = w;
  out->channels = want;
  out->hwc.resize(static_cast<size_t>(h * w * want));
  uint8_t* row_buf =
      cmyk ? static_cast<uint8_t*>((*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE,
                                                              static_cast<JDIMENSION>(w * comps), 1)[0])
           : nullptr;
  while (cinfo.output_scanline < cinfo.output_height) {
    const int64_t y = cinfo.output_scanline;
    uint8_t* dst = out->hwc.data() + y * w * want;
    JSAMPROW row = cmyk ? row_buf : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) {
      // Adobe writes inverted CMYK: R = C * K / 255 with the stored (inverted) values.
      for (int64_t x = 0; x < w; ++x) {
        const uint8_t* p = row_buf + x * 4;
        int r = p[0] * p[3] / 255, g = p[1] * p[3] / 255, b = p[2] * p[3] / 255;
        if (want == 1) {
          dst[x] = static_cast<uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
        } else {
          dst[x * 3] = static_cast<uint8_t>(r);
          dst[x * 3 + 1] = static_cast<uint8_t>(g);
          dst[x * 3 + 2] = static_cast<uint8_t>(b);
        }
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Image decode_png(const uint8_t* data, size_t size, int channels, const std::string& what) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size))
    TD_THROW(IoError, what, ": undecodable PNG (", img.message, ")");
  char too_large[160];
  if (!size_allowed(img.height, img.width, size, kMaxPngPixelsPerByte, too_large, sizeof(too_large))) {
    png_image_free(&img);
    TD_THROW(IoError, what, ": PNG of ", too_large);
  }
  int want = channels != 0 ? channels : ((img.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1);
  img.format = want == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image out;
  out.height = img.height;
  out.width = img.width;
  out.channels = want;
  out.hwc.assign(static_cast<size_t>(out.height * out.width * want), 0);  // zero: alpha composites onto black
  if (!png_image_finish_read(&img, nullptr, out.hwc.data(), static_cast<png_int_32>(out.width * want), nullptr)) {
    std::string msg = img.message;
    png_image_free(&img);
    TD_THROW(IoError, what, ": undecodable PNG (", msg, ")");
  }
  return out;
}

}  // namespace

Image decode_image(const uint8_t* data, size_t size, int channels, const std::string& what) {
  TD_CHECK(channels == 0 || channels == 1 || channels == 3, "decode_image: channels must be 0, 1 or 3, got ", channels);
  switch (sniff_image_format(data, size)) {
    case ImageFormat::Jpeg: {
      Image out;
      JpegError err;
      if (!decode_jpeg_into(data, size, channels, &out, &err))
        TD_THROW(IoError, what, ": undecodable JPEG (", err.message, ")");
      TD_CHECK_IO(out.height > 0 && out.width > 0, what, ": JPEG of size ", out.height, "x", out.width);
      return out;
    }
    case ImageFormat::Png: return decode_png(data, size, channels, what);
    case ImageFormat::Unknown: break;
  }
  TD_THROW(IoError, what, ": neither a JPEG nor a PNG (", size < 8 ? "too short" : "unknown signature", ")");
}

}  // namespace data
}  // namespace tandem
