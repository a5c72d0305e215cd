// data/decode.cpp: the one translation unit that compiles stb_image and stb_image_write.
#include "data/decode.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/check.h"

// stb is compiled here and only here (its implementation macros must appear in exactly one .cpp).
// Only the decoders tandem promises are built: fewer formats, less attack surface for odd files.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO  // files are read with std::ifstream so an unreadable file gets its own reason
#define STBI_FAILURE_USERMSG
#include <stb_image.h>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb_image_write.h>

namespace tandem::data {

Image Image::blank(int width, int height) {
  Image img;
  img.width = width;
  img.height = height;
  img.pixels.assign(static_cast<size_t>(width) * height * 3, 0);
  return img;
}

namespace {
// Two stb_image 2.27 (Debian 12's libstb-dev) JPEG bugs are kept away from stb here, both found by
// tests/test_fuzz_parsers.cpp:
//  - a DHT table declaring more than 256 codes makes stbi__build_huffman write past its 257-entry
//    size table (UBSan: stb_image.h:1990; fixed upstream in 2.28). T.81 B.2.4.2 allows 256.
//  - a scan that selects a Huffman table no DHT defined makes stb decode with uninitialised tables
//    (valgrind; a segfault in stbi__jpeg_decode_block in the Release build). Baseline scans need
//    their DC and AC tables; progressive scans need the DC table (first DC scan) or the AC table.
// The walk follows stb's own: segment by segment by declared length, byte by byte through
// entropy-coded data, and a DHT is read table after table for as long as its length lasts (bytes
// past the end count as 0, as stb reads them).
const char* jpeg_huffman_problem(const uint8_t* b, size_t n) {
  if (n < 2 || b[0] != 0xFF || b[1] != 0xD8) return nullptr;  // not a JPEG
  auto at = [&](size_t k) -> unsigned { return k < n ? b[k] : 0; };
  bool defined[2][4] = {};  // [DC=0 / AC=1][table id]
  bool progressive = false;
  size_t i = 2;
  while (i + 3 < n) {
    const unsigned m = b[i + 1];
    // Not a segment: entropy-coded data, stuffed 0xFF00, fill bytes, RSTn, SOI, TEM.
    if (b[i] != 0xFF || m == 0x00 || m == 0xFF || (m >= 0xD0 && m <= 0xD8) || m == 0x01) {
      ++i;
      continue;
    }
    if (m == 0xD9) break;  // EOI
    const size_t len = (at(i + 2) << 8) | at(i + 3);
    if (m == 0xC2) progressive = true;
    if (m == 0xC4) {
      long left = static_cast<long>(len) - 2;
      size_t p = i + 4;
      while (left > 0) {
        unsigned codes = 0;
        for (size_t k = 1; k <= 16; ++k) codes += at(p + k);
        if (codes > 256) return "a JPEG Huffman table declares more than 256 codes (the format's limit)";
        const unsigned tc = at(p) >> 4, th = at(p) & 15;
        if (tc <= 1 && th <= 3) defined[tc][th] = true;
        p += 17 + codes;
        left -= 17 + static_cast<long>(codes);
      }
    }
    if (m == 0xDA) {
      const unsigned ns = at(i + 4);
      const unsigned ss = at(i + 5 + 2 * ns), ah = at(i + 7 + 2 * ns) >> 4;
      for (unsigned c = 0; c < ns; ++c) {
        const unsigned q = at(i + 6 + 2 * c), td = q >> 4, ta = q & 15;
        if (td > 3 || ta > 3) continue;  // stb refuses these itself
        const bool need_dc = progressive ? ss == 0 && ah == 0 : true;
        const bool need_ac = progressive ? ss != 0 : true;
        if ((need_dc && !defined[0][td]) || (need_ac && !defined[1][ta]))
          return "a JPEG scan uses a Huffman table that the file never defines";
      }
    }
    i += 2 + len;
  }
  return nullptr;
}

// stb_image 2.27 sizes its PNG data buffer from each IDAT chunk's declared length before reading
// the chunk, so a 3 KB file whose chunk claims 512 MiB allocates 512 MiB (found by the fuzz test's
// allocation watch). A chunk (length, type, data, CRC) must lie inside the file; checked here.
bool png_chunks_inside_file(const uint8_t* b, size_t n) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (n < 8 || std::memcmp(b, kSignature, 8) != 0) return true;  // not a PNG
  size_t i = 8;
  while (i + 8 <= n) {
    const uint64_t len = (uint64_t{b[i]} << 24) | (uint64_t{b[i + 1]} << 16) | (uint64_t{b[i + 2]} << 8) | b[i + 3];
    if (len + 12 > n - i) return false;
    if (std::memcmp(b + i + 4, "IEND", 4) == 0) break;
    i += 12 + len;
  }
  return true;
}
}  // namespace

bool try_decode_memory(const uint8_t* bytes, size_t size, Image& out, std::string* reason) {
  auto fail = [&](const std::string& why) {
    if (reason) *reason = why;
    return false;
  };
  if (size == 0) return fail("the file is empty");
  if (size > static_cast<size_t>(INT32_MAX)) return fail("the file is larger than 2 GiB");
  if (const char* problem = jpeg_huffman_problem(bytes, size)) return fail(std::string(problem) + ": the file is corrupt");
  if (!png_chunks_inside_file(bytes, size))
    return fail("a PNG chunk runs past the end of the file: the file is truncated or corrupt");
  int w = 0, h = 0, channels_in_file = 0;
  // Dimensions first: a corrupt or hostile header must not make stb allocate a huge pixel buffer.
  if (!stbi_info_from_memory(bytes, static_cast<int>(size), &w, &h, &channels_in_file)) {
    const char* why = stbi_failure_reason();
    return fail(std::string("stb_image: ") + (why ? why : "unknown error"));
  }
  const uint64_t rgb_bytes = static_cast<uint64_t>(w) * static_cast<uint64_t>(h) * 3;
  if (w <= 0 || h <= 0 || rgb_bytes > max_decoded_bytes(size))
    return fail("the header declares a " + std::to_string(w) + " x " + std::to_string(h) + " image (" +
                std::to_string(rgb_bytes >> 20) + " MiB of pixels) in a " + std::to_string(size) +
                "-byte file, more than an image file can expand to (see max_decoded_bytes): the file is "
                "corrupt");
  // Asking for 3 channels makes stb do the grey->RGB replication and alpha dropping for us.
  stbi_uc* px = stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &channels_in_file, 3);
  if (!px) {
    const char* why = stbi_failure_reason();
    return fail(std::string("stb_image: ") + (why ? why : "unknown error"));
  }
  out.width = w;
  out.height = h;
  out.pixels.assign(px, px + static_cast<size_t>(w) * h * 3);
  stbi_image_free(px);
  return true;
}

bool try_decode_file(const std::string& path, Image& out, std::string* reason) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (reason) *reason = "the file cannot be opened (missing or no read permission)";
    return false;
  }
  // One read of the whole file: far faster than streaming iterators for multi-100 KB JPEGs.
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(size > 0 ? static_cast<size_t>(size) : 0);
  if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (size < 0 || !in) {
    if (reason) *reason = "reading the file failed (I/O error)";
    return false;
  }
  return try_decode_memory(bytes.data(), bytes.size(), out, reason);
}

Image decode_file(const std::string& path) {
  Image img;
  std::string reason;
  if (!try_decode_file(path, img, &reason))
    TANDEM_THROW("cannot decode image ", path, ": ", reason, ". Remove or replace the file.");
  return img;
}

namespace {
std::string lower_extension(const std::string& path) {
  size_t dot = path.find_last_of('.');
  size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}
}  // namespace

bool has_image_extension(const std::string& path) {
  std::string ext = lower_extension(path);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp";
}

void write_image(const std::string& path, int width, int height, int channels, const uint8_t* pixels,
                 int jpeg_quality) {
  TANDEM_CHECK(width > 0 && height > 0 && channels >= 1 && channels <= 4, "write_image(", path,
               "): bad geometry ", width, "x", height, "x", channels);
  std::string ext = lower_extension(path);
  int ok = 0;
  if (ext == ".jpg" || ext == ".jpeg")
    ok = stbi_write_jpg(path.c_str(), width, height, channels, pixels, std::clamp(jpeg_quality, 1, 100));
  else if (ext == ".png")
    ok = stbi_write_png(path.c_str(), width, height, channels, pixels, width * channels);
  else if (ext == ".bmp")
    ok = stbi_write_bmp(path.c_str(), width, height, channels, pixels);
  else
    TANDEM_THROW("write_image(", path, "): unknown extension '", ext, "'; use .jpg, .jpeg, .png or .bmp");
  TANDEM_CHECK(ok != 0, "could not write ", path, ": check that the folder exists and is writable");
}

}  // namespace tandem::data
