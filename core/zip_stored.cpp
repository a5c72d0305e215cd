// core/zip_stored.cpp: a reader of zip archives with stored entries (see zip_stored.h).
#include "core/zip_stored.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>

#include "core/check.h"  // defines: TANDEM_CHECK, TANDEM_THROW

namespace tandem::zip {

namespace {

// Record signatures and fixed sizes from PKWARE's APPNOTE.TXT (sections 4.3.7, 4.3.12, 4.3.14-16).
constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50,
                   kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;
constexpr size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kEnd64LocatorSize = 20, kEnd64Size = 56;
constexpr size_t kMaxComment = 65535;  // the end record's comment length is 16 bits
constexpr uint16_t kZip64Extra = 0x0001;

uint64_t le(const std::string& b, uint64_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

uint32_t crc32(const char* p, uint64_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;  // the zip polynomial, reflected
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (uint64_t i = 0; i < n; ++i) c = table[(c ^ static_cast<unsigned char>(p[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace

const Entry* Archive::find(const std::string& name) const {
  for (const Entry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::string Archive::read(const std::string& name) const {
  const Entry* e = find(name);
  if (e == nullptr) {
    std::string names;
    for (const Entry& x : entries) names += (names.empty() ? "" : ", ") + x.name;
    TANDEM_THROW("'", path, "' has no entry '", name, "' (it has: ", names, "): is it a file written by torch.save?");
  }
  return bytes.substr(e->offset, e->size);
}

bool looks_like_zip(const std::string& head) { return head.size() >= 4 && le(head, 0, 4) == kLocalHeader; }

Archive open(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TANDEM_CHECK(f.good(), "cannot open '", path, "': check the path and its permissions");
  return open_bytes(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), path);
}

Archive open_bytes(std::string bytes, const std::string& path) {
  Archive a;
  a.path = path;
  a.bytes = std::move(bytes);
  const std::string& b = a.bytes;
  const uint64_t n = b.size();
  const std::string damaged = "': the file is damaged or was cut short; save it again with torch.save";
  TANDEM_CHECK(n >= kEndSize, "'", path, "' is too short to be a zip archive", damaged);
  // The end record: the last signature within the comment's reach.
  uint64_t end = n - kEndSize + 1;
  const uint64_t lowest = n - kEndSize > kMaxComment ? n - kEndSize - kMaxComment : 0;
  do {
    --end;
  } while (end > lowest && le(b, end, 4) != kEnd);
  TANDEM_CHECK(le(b, end, 4) == kEnd, "'", path, "' has no zip end record", damaged);
  uint64_t count = le(b, end + 10, 2), cd_size = le(b, end + 12, 4), cd_offset = le(b, end + 16, 4);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {  // saturated: the zip64 record
    TANDEM_CHECK(end >= kEnd64LocatorSize && le(b, end - kEnd64LocatorSize, 4) == kEnd64Locator, "'", path,
                 "' needs a zip64 end record and has none", damaged);
    const uint64_t at = le(b, end - kEnd64LocatorSize + 8, 8);
    TANDEM_CHECK(at <= n - kEnd64Size && le(b, at, 4) == kEnd64, "'", path, "' has a broken zip64 end record", damaged);
    count = le(b, at + 32, 8), cd_size = le(b, at + 40, 8), cd_offset = le(b, at + 48, 8);
  }
  TANDEM_CHECK(cd_offset <= n && cd_size <= n - cd_offset && count <= cd_size / kCentralSize, "'", path,
               "': its central directory lies outside the file", damaged);
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    TANDEM_CHECK(at <= n - kCentralSize && le(b, at, 4) == kCentralHeader, "'", path, "': central directory entry ",
                 i, " is broken", damaged);
    const uint64_t flags = le(b, at + 8, 2), method = le(b, at + 10, 2), crc = le(b, at + 16, 4);
    uint64_t size = le(b, at + 24, 4), csize = le(b, at + 20, 4), local = le(b, at + 42, 4);
    const uint64_t name_len = le(b, at + 28, 2), extra_len = le(b, at + 30, 2), comment_len = le(b, at + 32, 2);
    const uint64_t var = at + kCentralSize;
    TANDEM_CHECK(name_len + extra_len + comment_len <= n - var, "'", path, "': central directory entry ", i,
                 " runs past the end", damaged);
    Entry e;
    e.name = b.substr(var, name_len);
    // zip64 extra field: the saturated sizes and offset, in this order (APPNOTE 4.5.3).
    for (uint64_t x = var + name_len; x + 4 <= var + name_len + extra_len;) {
      const uint64_t id = le(b, x, 2), len = le(b, x + 2, 2);
      uint64_t p = x + 4;
      const uint64_t stop = std::min<uint64_t>(p + len, var + name_len + extra_len);
      if (id == kZip64Extra) {
        if (size == 0xFFFFFFFF && p + 8 <= stop) size = le(b, p, 8), p += 8;
        if (csize == 0xFFFFFFFF && p + 8 <= stop) csize = le(b, p, 8), p += 8;
        if (local == 0xFFFFFFFF && p + 8 <= stop) local = le(b, p, 8), p += 8;
      }
      x += 4 + len;
    }
    TANDEM_CHECK(!(flags & 1), "'", path, "': entry '", e.name, "' is encrypted; tandem reads unencrypted archives");
    TANDEM_CHECK(method == 0, "'", path, "': entry '", e.name, "' is compressed (zip method ", method, "); torch.save "
                 "stores entries uncompressed: load it in PyTorch and torch.save it again, without re-zipping it");
    TANDEM_CHECK(csize == size, "'", path, "': stored entry '", e.name, "' has two sizes", damaged);
    TANDEM_CHECK(local <= n - kLocalSize && le(b, local, 4) == kLocalHeader, "'", path, "': entry '", e.name,
                 "' has no local header", damaged);
    e.offset = local + kLocalSize + le(b, local + 26, 2) + le(b, local + 28, 2);
    TANDEM_CHECK(e.offset <= n && size <= n - e.offset, "'", path, "': entry '", e.name, "' (", size,
                 " bytes) runs past the end of the file", damaged);
    e.size = size;
    TANDEM_CHECK(crc32(b.data() + e.offset, e.size) == crc, "'", path, "': entry '", e.name,
                 "' fails its CRC-32 check", damaged);
    a.entries.push_back(std::move(e));
    at = var + name_len + extra_len + comment_len;
  }
  return a;
}

}  // namespace tandem::zip
