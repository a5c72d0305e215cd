// core/safetensors.cpp: safetensors writer (atomic) and validating reader. See safetensors.h.
#include "core/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <utility>

namespace tandem::safetensors {

// The format is little-endian and so is every machine tandem targets (x86-64, aarch64); a
// big-endian port would need byte swaps on every tensor.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {
using json = nlohmann::json;

const std::pair<DType, const char*> kDtypeNames[] = {
    {DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
    {DType::F64, "F64"}, {DType::I32, "I32"}, {DType::I64, "I64"},
};

// Writes all of `n` bytes, retrying short writes (large buffers, signals).
void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    TANDEM_CHECK(w > 0, "writing '", path, "' failed: ", std::strerror(errno),
                 ". Check that the disk is not full and the directory is writable.");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

std::mutex g_progress_mutex;
WriteProgress g_progress;  // set_write_progress's hook, copied by each save()

// The file's bytes in chunks of kChunkBytes, each pushed to the disk while the next one is written.
// 8 MiB: at 10 MB/s a chunk takes under a second, so progress moves far more often than any
// watchdog timeout (seconds); at NVMe speed it is a few milliseconds, and one chunk in flight keeps
// the disk busy while the next is copied into the page cache, so saving is no slower than write +
// fsync. Without sync_file_range (not Linux, or a file system that refuses it) the chunks are
// plain writes and the final fsync does the flushing, as before.
class ChunkedWriter {
 public:
  static constexpr uint64_t kChunkBytes = 8ull << 20;
  ChunkedWriter(int fd, const std::string& path, uint64_t total, WriteProgress progress)
      : fd_(fd), path_(path), total_(total), progress_(std::move(progress)) {
    report(0);
  }
  void write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const size_t piece = std::min<uint64_t>(n, kChunkBytes - (written_ - chunk_start_));
      write_all(fd_, c, piece, path_);
      c += piece, n -= piece, written_ += piece;
      if (written_ - chunk_start_ == kChunkBytes) end_chunk();
    }
  }
  // The last chunk, then fsync: the whole file is on the disk.
  void finish() {
    if (written_ > chunk_start_) end_chunk();
    TANDEM_CHECK(::fsync(fd_) == 0, "fsync of '", path_, "' failed: ", std::strerror(errno));
    report(total_);
  }

 private:
  void end_chunk() {
#ifdef __linux__
    // Start writing this chunk back, then wait until the one before it is on the disk. Advisory:
    // an error turns it off for this file (the final fsync still makes everything durable).
    if (flush_behind_ && ::sync_file_range(fd_, chunk_start_, written_ - chunk_start_, SYNC_FILE_RANGE_WRITE) != 0)
      flush_behind_ = false;
    if (flush_behind_ && chunk_start_ > prev_start_ &&
        ::sync_file_range(fd_, prev_start_, chunk_start_ - prev_start_,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0)
      flush_behind_ = false;
#endif
    prev_start_ = chunk_start_;
    chunk_start_ = written_;
    report(written_);
  }
  void report(uint64_t done) {
    if (progress_) progress_(done, total_);
  }

  int fd_;
  const std::string& path_;
  uint64_t total_, written_ = 0, chunk_start_ = 0, prev_start_ = 0;
  bool flush_behind_ = true;
  WriteProgress progress_;
};

// Makes the rename itself durable: without this a crash could forget the new directory entry.
void fsync_directory(const std::filesystem::path& file) {
  std::filesystem::path dir = file.parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // some filesystems do not allow opening directories; the data is still synced
  ::fsync(fd);
  ::close(fd);
}
}  // namespace

const char* dtype_to_safetensors(DType t) {
  for (const auto& [d, name] : kDtypeNames)
    if (d == t) return name;
  TANDEM_THROW("dtype ", dtype_name(t), " has no safetensors name");
}

DType dtype_from_safetensors(const std::string& name, const std::string& context) {
  for (const auto& [d, n] : kDtypeNames)
    if (name == n) return d;
  TANDEM_THROW(context, ": dtype \"", name,
               "\" is not supported by tandem (supported: F32, F16, BF16, F64, I32, I64). Convert the tensor "
               "to one of these before saving, e.g. tensor.float() in PyTorch.");
}

const Tensor* File::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& File::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string have;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) have += (i ? ", " : "") + tensors[i].first;
  if (tensors.size() > 8) have += ", ...";
  TANDEM_THROW("no tensor named '", name, "' in the file (it holds ", tensors.size(), " tensors: ", have, ")");
}

std::string temp_path(const std::string& path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
  std::string h = host;
  for (char& c : h)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return path + ".tmp." + h + "." + std::to_string(::getpid());
}

WriteProgress set_write_progress(WriteProgress hook) {
  std::lock_guard<std::mutex> lock(g_progress_mutex);
  return std::exchange(g_progress, std::move(hook));
}

bool is_temp_name(const std::string& filename) {
  // "<name>.tmp.<host>.<pid>" or 0.1's "<name>.tmp.<pid>": a non-empty name, ".tmp.", an optional
  // host part, and the pid's digits at the end.
  static const std::regex re(R"(.+\.tmp\.([A-Za-z0-9._-]+\.)?[0-9]+)");
  return std::regex_match(filename, re);
}

std::string tensor_digest(const void* data, size_t nbytes) {
  constexpr uint64_t kBasis = 0xcbf29ce484222325ull, kPrime = 0x100000001b3ull;  // FNV-1a 64's constants
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h[4] = {kBasis, kBasis ^ 1, kBasis ^ 2, kBasis ^ 3};  // four lanes, each started apart
  const size_t words = nbytes / 8;
  size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + 8 * (i + l), 8);
      h[l] = (h[l] ^ w) * kPrime;
    }
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    h[0] = (h[0] ^ w) * kPrime;
  }
  for (size_t b = 8 * words; b < nbytes; ++b) h[1] = (h[1] ^ p[b]) * kPrime;
  uint64_t r = kBasis;
  for (uint64_t lane : h) r = (r ^ lane) * kPrime;
  r = (r ^ static_cast<uint64_t>(nbytes)) * kPrime;
  // splitmix64's finalizer: a change in any bit reaches every bit of the result
  r ^= r >> 30, r *= 0xbf58476d1ce4e5b9ull, r ^= r >> 27, r *= 0x94d049bb133111ebull, r ^= r >> 31;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return std::string("fnv1a64x4:") + hex;
}

void save(const std::string& path, const NamedTensors& tensors, const Metadata& metadata_in, bool digests) {
  Metadata metadata = metadata_in;
  // Host copies first: a GPU tensor's bytes are only readable after a device-to-host copy.
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  json header = json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TANDEM_CHECK(!name.empty() && name != "__metadata__", "cannot save a tensor named '", name,
                 "' to '", path, "': the name is empty or reserved by the format. Rename it.");
    TANDEM_CHECK(seen.insert(name).second, "cannot save '", path, "': the tensor name '", name,
                 "' appears twice. Names in a safetensors file must be unique.");
    TANDEM_CHECK(t.defined(), "cannot save '", path, "': tensor '", name, "' is undefined");
    host.push_back(t.is_cuda() ? t.to(Device::cpu()) : t);
    if (digests) metadata[kDigestKey + name] = tensor_digest(host.back().data_ptr(), host.back().nbytes());
    uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", dtype_to_safetensors(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text;
  try {
    text = header.dump();  // strict UTF-8: a name PyTorch's reader would reject is refused here, not there
  } catch (const json::type_error&) {
    TANDEM_THROW("cannot save '", path, "': a tensor name or metadata value is not valid UTF-8, which the "
                 "format's JSON header cannot hold. Rename it.");
  }
  // Pad with spaces (valid JSON whitespace) so the data section, and so every tensor written at an
  // offset that is a multiple of its element size, starts 8-byte aligned in the file.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  const std::string tmp = temp_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TANDEM_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno),
               ". Check that the directory exists and is writable.");
  WriteProgress progress;
  {
    std::lock_guard<std::mutex> lock(g_progress_mutex);
    progress = g_progress;
  }
  try {
    ChunkedWriter out(fd, tmp, 8 + n + offset, std::move(progress));
    out.write(len, 8);
    out.write(text.data(), text.size());
    for (const Tensor& t : host) out.write(t.data_ptr(), t.nbytes());
    out.finish();
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    TANDEM_THROW("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err),
                 ". Check that the destination is writable and not a directory.");
  }
  fsync_directory(path);
}

namespace {
const char* const kBad = " The file is corrupt or not a safetensors file: re-create it (or re-export it with "
                         "safetensors.torch.save_file).";

// A validated header: the file's size, the JSON header's length and the parsed JSON object.
struct Header {
  uint64_t size = 0;
  uint64_t n = 0;
  json j;
};

// Opens `path` into `in` and reads its length field and JSON header, checking both before trusting
// them; `in` is left at the start of the data section.
Header read_header(std::ifstream& in, const std::string& path) {
  const std::string where = "'" + path + "'";
  Header h;
  std::error_code ec;
  h.size = std::filesystem::file_size(path, ec);
  TANDEM_CHECK(!ec, "cannot read ", where, ": ", ec.message(), ". Check the path.");
  in.open(path, std::ios::binary);
  TANDEM_CHECK(in, "cannot open ", where, ": ", std::strerror(errno), ". Check the path and its permissions.");

  TANDEM_CHECK(h.size >= 8, where, " is ", h.size, " bytes long, shorter than the 8-byte header length.", kBad);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  for (int i = 0; i < 8; ++i) h.n |= static_cast<uint64_t>(len[i]) << (8 * i);
  TANDEM_CHECK(h.n <= kMaxHeaderBytes, where, " declares a ", h.n, "-byte JSON header (limit ", kMaxHeaderBytes,
               ").", kBad);
  TANDEM_CHECK(h.n <= h.size - 8, where, " declares a ", h.n, "-byte JSON header but only ", h.size - 8,
               " bytes follow: the file is truncated.", kBad);
  std::string text(h.n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(h.n));
  TANDEM_CHECK(in, "reading the header of ", where, " failed.", kBad);
  try {
    h.j = json::parse(text);
  } catch (const json::parse_error& e) {
    TANDEM_THROW("the JSON header of ", where, " does not parse (", e.what(), ").", kBad);
  }
  TANDEM_CHECK(h.j.is_object(), "the JSON header of ", where, " is not an object.", kBad);
  return h;
}

Metadata parse_metadata(const json& v, const std::string& where) {
  TANDEM_CHECK(v.is_object(), where, ": __metadata__ must be an object of strings.", kBad);
  Metadata m;
  for (const auto& [k, s] : v.items()) {
    TANDEM_CHECK(s.is_string(), where, ": __metadata__ value for '", k, "' is not a string.", kBad);
    m[k] = s.get<std::string>();
  }
  return m;
}
}  // namespace

Metadata read_metadata(const std::string& path) {
  std::ifstream in;
  Header h = read_header(in, path);
  auto it = h.j.find("__metadata__");
  return it == h.j.end() ? Metadata{} : parse_metadata(*it, "'" + path + "'");
}

File load(const std::string& path) {
  // Every message names the file; kBad adds the common advice for a damaged file.
  const std::string where = "'" + path + "'";
  const char* bad = kBad;
  std::ifstream in;
  const Header hd = read_header(in, path);
  const uint64_t size = hd.size, n = hd.n;
  const json& header = hd.j;

  File out;
  const uint64_t data_size = size - 8 - n;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = parse_metadata(v, where);
      continue;
    }
    const std::string ctx = where + ", tensor '" + name + "'";
    TANDEM_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), ctx,
                 ": the entry needs dtype, shape and data_offsets.", bad);
    TANDEM_CHECK(v["dtype"].is_string(), ctx, ": dtype is not a string.", bad);
    Entry e{name, dtype_from_safetensors(v["dtype"].get<std::string>(), ctx), {}, 0, 0};
    TANDEM_CHECK(v["shape"].is_array(), ctx, ": shape is not an array.", bad);
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      TANDEM_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), ctx,
                   ": shape holds something other than a non-negative integer.", bad);
      uint64_t dim = d.get<uint64_t>();
      // Reject shapes whose element count cannot fit in the file before multiplying further.
      TANDEM_CHECK(dim <= size && (dim == 0 || numel <= size / dim), ctx, ": shape ", v["shape"].dump(),
                   " is larger than the whole file.", bad);
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    TANDEM_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                 ctx, ": data_offsets must be two non-negative integers [begin, end].", bad);
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    TANDEM_CHECK(e.begin <= e.end && e.end <= data_size, ctx, ": data_offsets [", e.begin, ", ", e.end,
                 "] fall outside the ", data_size, "-byte data section (the file may be truncated).", bad);
    TANDEM_CHECK(e.end - e.begin == numel * dtype_size(e.dtype), ctx, ": data_offsets span ", e.end - e.begin,
                 " bytes but ", v["dtype"].get<std::string>(), v["shape"].dump(), " needs ",
                 numel * dtype_size(e.dtype), ".", bad);
    entries.push_back(std::move(e));
  }

  // The format requires the data section to be covered exactly: sorted by offset, each tensor
  // starts where the previous one ended. Overlaps would alias tensors; holes hide unknown bytes.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const Entry& e : entries) {
    TANDEM_CHECK(e.begin >= expect, where, ": tensor '", e.name, "' at [", e.begin, ", ", e.end,
                 ") overlaps the previous tensor, which ends at ", expect, ".", bad);
    TANDEM_CHECK(e.begin == expect, where, ": bytes [", expect, ", ", e.begin,
                 ") of the data section belong to no tensor.", bad);
    expect = e.end;
  }
  TANDEM_CHECK(expect == data_size, where, ": the data section is ", data_size, " bytes but its tensors cover ",
               expect, ".", bad);

  const bool has_digests = std::any_of(out.metadata.begin(), out.metadata.end(),
                                       [](const auto& kv) { return kv.first.rfind(kDigestKey, 0) == 0; });
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    TANDEM_CHECK(in, "reading tensor '", e.name, "' from ", where, " failed.", bad);
    if (has_digests) {
      const auto it = out.metadata.find(kDigestKey + e.name);
      TANDEM_CHECK(it != out.metadata.end(), where, ": tensor '", e.name, "' has no digest although the file's "
                   "other tensors have one: the file is damaged. Use an earlier copy of it.");
      const std::string got = tensor_digest(t.data_ptr(), t.nbytes());
      TANDEM_CHECK(got == it->second, where, ": tensor '", e.name, "' does not match its digest (", it->second,
                   " written, ", got, " read): the file is damaged (a disk, copy or storage error). Use an earlier "
                   "copy of it.");
      ++out.digests_checked;
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tandem::safetensors
