// data/decode.h: image files <-> 8-bit RGB pixels (stb_image / stb_image_write).
//
// Decoding accepts JPEG (baseline and progressive), PNG (any bit depth; 16-bit is reduced to 8) and
// BMP, and always returns 3 interleaved channels: grayscale is replicated, grey+alpha and RGBA drop
// the alpha channel (no compositing over a background: ImageNet-style data is opaque, and
// torchvision's loader does the same with PIL's convert("RGB")). The format is detected from the
// bytes, not from the file name.
//
// Decompression bombs: a few hundred bytes of PNG, or of a JPEG whose scan data is cut short (stb
// fills the missing blocks), can declare a 30000 x 30000 image, and stb would allocate and fill
// the whole pixel buffer. So the header is read first (stbi_info) and the image is refused, before
// any pixel is allocated, when its RGB buffer would exceed max_decoded_bytes(file size):
//   max(kDecodeFloorBytes, kMaxDecodeExpansion * file size)
// kMaxDecodeExpansion = 4096 covers the most an honest file can expand: deflate's ceiling is
// 1032:1 and a grey PNG triples again into RGB; baseline JPEG stays under ~512:1. The 16 MiB floor
// (an RGB image of about 2300 x 2300) lets any image of ordinary size through however well it
// compresses. stb's own working buffers are a small multiple of the output (at most ~3x, for
// 16-bit RGBA PNGs), so memory per decode stays proportional to the file.
//
// Failures never abort: try_decode_* return false with a reason a person can read ("truncated
// JPEG", "unknown image type"), so the loader can decide whether to skip or fail (LoaderOptions::
// strict). decode_file throws tandem::Error naming the file.
//
// Encoding is here only so that apps/make_dataset and the tests can write images without
// including stb themselves (the implementation is compiled once, in decode.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

// Row-major, interleaved RGB (HWC, uint8): pixel (x, y) channel c is at (y * width + x) * 3 + c.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3 bytes
  uint8_t* at(int x, int y) { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
  const uint8_t* at(int x, int y) const { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
  static Image blank(int width, int height);  // black
};

inline constexpr size_t kDecodeFloorBytes = size_t{16} << 20;
inline constexpr size_t kMaxDecodeExpansion = 4096;
// The largest RGB buffer (width * height * 3 bytes) decoding a `file_size`-byte file may produce.
inline size_t max_decoded_bytes(size_t file_size) {
  return file_size > kDecodeFloorBytes / kMaxDecodeExpansion ? file_size * kMaxDecodeExpansion : kDecodeFloorBytes;
}

// Decodes an in-memory file. On failure returns false and sets *reason (when non-null).
bool try_decode_memory(const uint8_t* bytes, size_t size, Image& out, std::string* reason = nullptr);
// Reads and decodes a file; unreadable files (missing, permission) fail the same way.
bool try_decode_file(const std::string& path, Image& out, std::string* reason = nullptr);
// Throws tandem::Error "cannot decode <path>: <reason>".
Image decode_file(const std::string& path);

// True when the name ends in .jpg/.jpeg/.png/.bmp, compared case-insensitively (ImageNet's own
// files end in .JPEG).
bool has_image_extension(const std::string& path);

// Writes `channels` (1 = grey, 2 = grey+alpha, 3 = RGB, 4 = RGBA) interleaved 8-bit pixels. The
// format follows the extension: .jpg/.jpeg (quality 1-100, alpha is not representable and is
// dropped by the encoder), .png or .bmp. Throws tandem::Error when the file cannot be written.
void write_image(const std::string& path, int width, int height, int channels, const uint8_t* pixels,
                 int jpeg_quality = 90);
inline void write_image(const std::string& path, const Image& img, int jpeg_quality = 90) {
  write_image(path, img.width, img.height, 3, img.pixels.data(), jpeg_quality);
}

}  // namespace tandem::data
