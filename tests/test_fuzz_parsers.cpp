// tests/test_fuzz_parsers.cpp: seeded mutation fuzzing of the parsers that read untrusted files,
// safetensors::load, image decoding (data/decode.h) and torch.save files (core/torch_save.h: the
// fixtures of tests/data/pth/, damaged as bytes, and their pickles damaged and re-zipped with
// correct CRCs so the damage reaches the unpickler, not only the zip checks).
//
// Real files come first: a checkpoint written by safetensors::save, and a JPEG, an RGB PNG, a grey
// PNG and a BMP written by data::write_image from a procedural image. Each is then damaged with a
// fixed seed: truncation, bit flips, byte overwrites, deleted or repeated chunks, huge 32/64-bit
// values at random places, and damage that knows the format (the safetensors length prefix, dtype
// strings, shapes, data_offsets that overlap or leave the file; the width and height in PNG IHDR,
// JPEG SOF and BMP headers). Every case must end in tandem::Error or a successful parse: any
// other exception fails the test, and a crash or memory error kills it (CI runs the suite under
// ASan and UBSan). Allocations are watched while a parser runs: no single one may exceed the bound
// the parser promises (see the bounds below). The counts per error kind are printed; apps/results/
// <date>/fuzz_parsers.txt keeps one run.
//
// TANDEM_FUZZ_SEED=<n> replays another seed; TANDEM_FUZZ_SCALE=<x> multiplies the case counts.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/torch_save.h"
#include "core/zip_stored.h"
#include "data/decode.h"
#include "data/procedural.h"
#include "tests/support/app_runner.h"

using namespace tandem;
using Bytes = std::string;

// ---- allocation watch -------------------------------------------------------------------------
// Under a sanitizer the runtime calls a hook on every allocation (malloc, new, stb's buffers).
// Without one, replacing operator new sees the C++ allocations (the safetensors header, the JSON
// DOM, vectors) but not malloc (stb, tensor storage): weaker, yet it still catches a header-sized
// std::string.
namespace {
std::atomic<bool> g_watching{false};
std::atomic<size_t> g_largest{0};
void note_allocation(size_t n) {
  if (!g_watching.load(std::memory_order_relaxed)) return;
  size_t cur = g_largest.load(std::memory_order_relaxed);
  while (n > cur && !g_largest.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}
// The largest single allocation made while one of these is alive.
struct AllocationWatch {
  AllocationWatch() {
    g_largest = 0;
    g_watching = true;
  }
  ~AllocationWatch() { g_watching = false; }
  size_t largest() const { return g_largest.load(); }
};
}  // namespace

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TANDEM_FUZZ_SANITIZER_HOOKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TANDEM_FUZZ_SANITIZER_HOOKS 1
#endif
#endif

#ifdef TANDEM_FUZZ_SANITIZER_HOOKS
// Declared here because GCC does not ship sanitizer/allocator_interface.h; libasan/libtsan export it.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*)(const volatile void*, size_t),
                                                          void (*)(const volatile void*));
namespace {
void malloc_hook(const volatile void*, size_t n) { note_allocation(n); }
void free_hook(const volatile void*) {}
const bool g_hooks_installed = __sanitizer_install_malloc_and_free_hooks(malloc_hook, free_hook) != 0;
}  // namespace
#else
void* operator new(size_t n) {
  note_allocation(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#endif

namespace {
// Safetensors: the header string is at most the file, but its JSON DOM costs up to 16 bytes per
// 2-byte array element ("0,"); plus the stream buffer and messages. So: 64 KiB + 16 x file size.
// A length prefix read from the file must never size an allocation by itself.
size_t safetensors_bound(size_t file_size) { return (size_t{64} << 10) + 16 * file_size; }
// Images: the RGB output is capped by max_decoded_bytes; stb's working buffers are at most ~8/3 of
// it (16-bit RGBA PNG), plus fixed tables.
size_t image_bound(size_t file_size) { return 3 * data::max_decoded_bytes(file_size) + (size_t{1} << 20); }

// ---- files and mutations ----------------------------------------------------------------------
std::filesystem::path temp_dir() { return tandem::testing::scratch_dir("tandem_fuzz"); }  // removed at exit
Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
}

using Rng = std::mt19937_64;
uint64_t pick(Rng& r, uint64_t n) { return n ? r() % n : 0; }

void put_be(Bytes& b, size_t at, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes && at + i < b.size(); ++i) b[at + i] = static_cast<char>(v >> (8 * (nbytes - 1 - i)));
}
void put_le(Bytes& b, size_t at, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes && at + i < b.size(); ++i) b[at + i] = static_cast<char>(v >> (8 * i));
}
// Values that break size arithmetic: zero, one, sign bits, all ones, just past common limits.
uint64_t huge_value(Rng& r) {
  const uint64_t v[] = {0, 1, 0x7f, 0xff, 0xffff, 0x8000, 30000, 0x7fffffff, 0x80000000u, 0xffffffffu,
                        1ull << 24, 1ull << 32, 1ull << 62, 0x7fffffffffffffffull, ~0ull};
  return pick(r, 4) == 0 ? r() : v[pick(r, std::size(v))];
}

// Damage that knows nothing about the format.
Bytes generic_mutation(const Bytes& src, Rng& r) {
  Bytes b = src;
  switch (pick(r, 6)) {
    case 0: b.resize(pick(r, b.size())); break;  // truncation
    case 1:                                      // 1-8 bit flips
      for (uint64_t k = 1 + pick(r, 8); k > 0 && !b.empty(); --k) b[pick(r, b.size())] ^= static_cast<char>(1 << pick(r, 8));
      break;
    case 2:  // bytes overwritten with 0x00 / 0xff / random
      for (uint64_t k = 1 + pick(r, 4); k > 0 && !b.empty(); --k)
        b[pick(r, b.size())] = static_cast<char>(pick(r, 3) == 0 ? 0 : pick(r, 2) ? 0xff : r());
      break;
    case 3: {  // a chunk deleted
      size_t at = pick(r, b.size()), n = 1 + pick(r, 64);
      b.erase(at, n);
      break;
    }
    case 4: {  // a chunk repeated
      size_t at = pick(r, b.size()), n = 1 + pick(r, 64);
      b.insert(at, b.substr(at, n));
      break;
    }
    default:  // a huge value at a random place, either byte order
      if (b.size() >= 8) (pick(r, 2) ? put_le : put_be)(b, pick(r, b.size() - 4), huge_value(r), pick(r, 2) ? 4 : 8);
  }
  return b;
}

// ---- safetensors ------------------------------------------------------------------------------
Bytes with_length_prefix(uint64_t n, const Bytes& header, const Bytes& data) {
  Bytes s(8, '\0');
  put_le(s, 0, n, 8);
  return s + header + data;
}

// Damage to the length prefix, the JSON entries or the data section of a valid file.
Bytes safetensors_mutation(const Bytes& src, Rng& r) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(src[i])) << (8 * i);
  Bytes data = src.substr(8 + n);
  nlohmann::json h = nlohmann::json::parse(src.substr(8, n));
  std::vector<std::string> names;
  for (const auto& [k, v] : h.items())
    if (k != "__metadata__") names.push_back(k);
  nlohmann::json& e = h[names[pick(r, names.size())]];
  const nlohmann::json& other = h[names[pick(r, names.size())]];
  switch (pick(r, 9)) {
    case 0: {  // header length beyond the file, over the limit, or too short
      const uint64_t lens[] = {src.size() - 7, src.size() * 1000, safetensors::kMaxHeaderBytes,
                               safetensors::kMaxHeaderBytes + 1, 1ull << 63, ~0ull, 0, 1, n - 1, n + 8};
      return with_length_prefix(lens[pick(r, std::size(lens))], h.dump(), data);
    }
    case 1: {  // dtypes tandem does not read, or not a string at all
      const nlohmann::json bad[] = {"BOOL", "U8", "F8_E4M3", "", "f32", "F32 ", 42, nullptr, nlohmann::json::array()};
      e["dtype"] = bad[pick(r, std::size(bad))];
      break;
    }
    case 2: {  // shapes whose element count overflows or is not a list of sizes
      const nlohmann::json bad[] = {{1ull << 62, 4},      {1ull << 31, 1ull << 31, 1ull << 31}, {-1}, {1.5}, "3",
                                    nlohmann::json::array(), {0},   {~0ull, 0}, {1ull << 32, 1ull << 32}};
      e["shape"] = bad[pick(r, std::size(bad))];
      break;
    }
    case 3:  // overlapping: the same bytes as another tensor, or shifted into the next one
      if (pick(r, 2)) {
        e["data_offsets"] = other["data_offsets"];
      } else {
        const uint64_t d = 2 * (1 + pick(r, 4));
        e["data_offsets"] = {e["data_offsets"][0].get<uint64_t>() + d, e["data_offsets"][1].get<uint64_t>() + d};
      }
      break;
    case 4: {  // out of range, reversed, negative, wrong arity or type
      const uint64_t b0 = e["data_offsets"][0], b1 = e["data_offsets"][1];
      const nlohmann::json bad[] = {{0, 1ull << 63}, {b1, b0}, {~0ull - 3, ~0ull}, {-4, 0}, {b0}, {"0", 4},
                                    {b0, b1, b1}, {b0, data.size() + 8}, nullptr};
      e["data_offsets"] = bad[pick(r, std::size(bad))];
      break;
    }
    case 5: e.erase(pick(r, 3) == 0 ? "dtype" : pick(r, 2) ? "shape" : "data_offsets"); break;
    case 6: {  // the header's shape itself
      const nlohmann::json bad[] = {nlohmann::json::array(), "x", 5, {{"__metadata__", {{"k", 5}}}},
                                    {{"__metadata__", nlohmann::json::array()}}};
      h = bad[pick(r, std::size(bad))];
      break;
    }
    case 7:  // the data section cut short or padded
      if (pick(r, 2)) data.resize(pick(r, data.size()));
      else data.append(1 + pick(r, 16), 'x');
      break;
    default: {  // the header text cut inside the JSON, length prefix kept consistent
      Bytes text = h.dump();
      text.resize(pick(r, text.size()));
      return with_length_prefix(text.size(), text, data);
    }
  }
  Bytes text = h.dump();
  return with_length_prefix(text.size(), text, data);
}

// The kind of a safetensors error, from the sentence safetensors.cpp writes for it (the text after
// TANDEM_CHECK's "check failed (<condition>): ", whose condition would match the wrong kind).
std::string safetensors_kind(const std::string& message) {
  std::string m = message;
  if (size_t c = m.find("check failed ("); c != std::string::npos && m.find("): ", c) != std::string::npos)
    m = m.substr(m.find("): ", c) + 3);
  const std::pair<const char*, const char*> kinds[] = {
      {"shorter than the 8-byte", "file shorter than the length prefix"},
      {"-byte JSON header (limit", "header length over the 100 MB limit"},
      {"bytes follow: the file is truncated", "header length beyond the file"},
      {"does not parse", "header JSON does not parse"},
      {"is not an object", "header is not a JSON object"},
      {"__metadata__", "bad __metadata__"},
      {"needs dtype, shape and data_offsets", "entry misses a field"},
      {"dtype", "bad dtype"},
      {"data_offsets must be", "data_offsets not two integers"},
      {"fall outside", "data_offsets outside the data section"},
      {"data_offsets span", "data_offsets disagree with dtype x shape"},
      {"shape", "bad shape"},
      {"overlaps the previous", "overlapping tensors"},
      {"belong to no tensor", "hole in the data section"},
      {"its tensors cover", "data section longer than its tensors"},
  };
  for (const auto& [needle, kind] : kinds)
    if (m.find(needle) != std::string::npos) return kind;
  return "other: " + m.substr(0, 120);
}

// ---- images -----------------------------------------------------------------------------------
// Where each format keeps its width and height: (offset, bytes, big-endian). JPEG: the first SOF
// marker (baseline FFC0 or progressive FFC2) holds height at +5 and width at +7.
struct DimField {
  size_t at;
  int nbytes;
  bool big_endian;
};
std::vector<DimField> dim_fields(const Bytes& b, const std::string& ext) {
  if (ext == ".png") return {{16, 4, true}, {20, 4, true}};
  if (ext == ".bmp") return {{18, 4, false}, {22, 4, false}};
  for (size_t i = 0; i + 9 < b.size(); ++i)
    if (static_cast<unsigned char>(b[i]) == 0xff && (b[i + 1] == '\xc0' || b[i + 1] == '\xc2'))
      return {{i + 5, 2, true}, {i + 7, 2, true}};
  return {};
}
Bytes image_mutation(const Bytes& src, const std::string& ext, Rng& r) {
  Bytes b = src;
  const uint64_t dims[] = {0, 1, 2, 64, 255, 4000, 30000, 65535, 1ull << 24, 0x7fffffff, 0x80000000u, ~0ull};
  for (const DimField& f : dim_fields(b, ext))
    if (pick(r, 3)) (f.big_endian ? put_be : put_le)(b, f.at, pick(r, 4) ? dims[pick(r, std::size(dims))] : r(), f.nbytes);
  // A truncated scan after a header edit: stb fills the missing JPEG blocks, so only the size cap
  // stops a small file from producing a huge image.
  if (pick(r, 2)) b.resize(b.size() / 2 + pick(r, b.size() / 2));
  return b;
}
std::string image_kind(const std::string& m) {
  if (m.find("more than an image file can expand to") != std::string::npos) return "dimensions over the decode cap";
  if (m.find("more than 256 codes") != std::string::npos) return "JPEG Huffman table over 256 codes";
  if (m.find("never defines") != std::string::npos) return "JPEG scan uses an undefined Huffman table";
  if (m.find("runs past the end of the file") != std::string::npos) return "PNG chunk beyond the file";
  size_t at = m.find("stb_image: ");
  if (at != std::string::npos) {
    std::string why = m.substr(at + 11);
    return "stb: " + why.substr(0, why.find(". Remove"));
  }
  if (m.find("the file is empty") != std::string::npos) return "empty file";
  return "other: " + m.substr(0, 120);
}

// ---- torch.save ---------------------------------------------------------------------------------
// A torch.save file holds the file, its storages, the tensors cut from them (no larger: expanded
// views are refused) and one small Value per pickle opcode: 64 KiB + 32 x file size.
size_t torch_save_bound(size_t file_size) { return (size_t{64} << 10) + 32 * file_size; }

uint32_t crc32_of(const Bytes& b) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}
// A zip of stored entries, as torch.save writes one (without its 64-byte alignment).
Bytes stored_zip(const std::vector<std::pair<std::string, Bytes>>& entries) {
  Bytes out, central;
  auto le = [](Bytes& b, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  };
  for (const auto& [name, data] : entries) {
    const uint64_t local = out.size();
    const uint32_t crc = crc32_of(data);
    le(out, 0x04034b50, 4), le(out, 20, 2), le(out, 0, 2), le(out, 0, 2), le(out, 0, 4), le(out, crc, 4);
    le(out, data.size(), 4), le(out, data.size(), 4), le(out, name.size(), 2), le(out, 0, 2);
    out += name + data;
    le(central, 0x02014b50, 4), le(central, 20, 2), le(central, 20, 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 4), le(central, crc, 4), le(central, data.size(), 4), le(central, data.size(), 4);
    le(central, name.size(), 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 4), le(central, local, 4);
    central += name;
  }
  const uint64_t at = out.size();
  out += central;
  le(out, 0x06054b50, 4), le(out, 0, 2), le(out, 0, 2), le(out, entries.size(), 2), le(out, entries.size(), 2);
  le(out, central.size(), 4), le(out, at, 4), le(out, 0, 2);
  return out;
}
// Damage to the pickle that knows its opcodes: an opcode swapped for another one (state-dict ones
// and foreign ones), an argument byte set to a huge value, a string length stretched.
Bytes pickle_mutation(const Bytes& src, Rng& r) {
  Bytes b = src;
  const char ops[] = {'(', ')', ']', '}', 't', 'u', 's', 'a', 'e', 'R', 'b', 'Q', 'q', 'h', 'j', 'r', 'K', 'M', 'J',
                      '.', 'N', 'X', 'c', 'i', 'o', '\x80', '\x85', '\x86', '\x87', '\x88', '\x8a', '\x8c', '\x94', 'G'};
  switch (pick(r, 3)) {
    case 0:
      for (uint64_t k = 1 + pick(r, 3); k > 0; --k) b[pick(r, b.size())] = ops[pick(r, std::size(ops))];
      break;
    case 1: put_le(b, pick(r, b.size()), huge_value(r), pick(r, 2) ? 1 : 4); break;
    default: {
      const size_t x = b.find('X', pick(r, b.size()));
      if (x != std::string::npos) put_le(b, x + 1, huge_value(r), 4);
    }
  }
  return b;
}

// ---- the run ----------------------------------------------------------------------------------
struct Tally {
  int cases = 0, parsed = 0, errors = 0, foreign = 0, over_bound = 0;
  size_t largest = 0;
  std::map<std::string, int> kinds;
};

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}
int scaled(int n) {
  const char* v = std::getenv("TANDEM_FUZZ_SCALE");
  return v && *v ? static_cast<int>(n * std::atof(v)) : n;
}

// Runs one case: `parse` must return or throw tandem::Error; anything else is a finding.
template <typename Parse, typename Kind>
void run_case(Tally& t, size_t file_size, size_t bound, Parse parse, Kind kind, const std::string& must_name) {
  ++t.cases;
  AllocationWatch watch;
  try {
    parse();
    ++t.parsed;
  } catch (const Error& e) {
    ++t.errors;
    const std::string m = e.what();
    ++t.kinds[m.find(must_name) == std::string::npos ? "error without the file name" : kind(m)];
  } catch (const std::exception& e) {
    ++t.foreign;
    ++t.kinds[std::string("NOT a tandem::Error: ") + e.what()];
  }
  t.largest = std::max(t.largest, watch.largest());
  if (watch.largest() > bound) {
    ++t.over_bound;
    ++t.kinds["allocation of " + std::to_string(watch.largest()) + " bytes from a " + std::to_string(file_size) +
              "-byte file"];
  }
}

void print(const char* name, const Tally& t) {
  std::printf("%-12s cases %5d  parsed %5d  tandem::Error %5d  other exceptions %d  over the allocation bound %d"
              "  largest allocation %zu B\n",
              name, t.cases, t.parsed, t.errors, t.foreign, t.over_bound, t.largest);
  for (const auto& [k, n] : t.kinds) std::printf("    %5d  %s\n", n, k.c_str());
}
}  // namespace

TEST_CASE("a length prefix larger than the file is refused before anything that size is allocated") {
  auto dir = temp_dir();
  const std::string path = (dir / "long.safetensors").string();
  const Bytes header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  for (uint64_t claimed : {uint64_t{50} << 20, safetensors::kMaxHeaderBytes + 1, uint64_t{1} << 62}) {
    CAPTURE(claimed);
    write_file(path, with_length_prefix(claimed, header, Bytes(8, '\0')));
    AllocationWatch watch;
    std::string msg;
    try {
      safetensors::load(path);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(safetensors_kind(msg).find("header length") == 0);
    CHECK(watch.largest() < (size_t{1} << 20));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("an image header declaring more pixels than the file can expand to is refused before decoding") {
  auto dir = temp_dir();
  const std::string path = (dir / "p.png").string();
  data::write_image(path, data::draw_procedural(1, 7, 0, 32, 32));
  Bytes b = read_file(path);
  // IHDR 8000 x 8000: 183 MiB of RGB from ~3 KB (under stb's own 1 GiB limit, which would refuse
  // with a vaguer message).
  put_be(b, 16, 8000, 4);
  put_be(b, 20, 8000, 4);
  data::Image img;
  std::string reason;
  AllocationWatch watch;
  CHECK_FALSE(data::try_decode_memory(reinterpret_cast<const uint8_t*>(b.data()), b.size(), img, &reason));
  CHECK(image_kind(reason) == "dimensions over the decode cap");
  CHECK(watch.largest() < (size_t{1} << 20));
  // A highly compressible honest image still decodes: 2048 x 2048 grey is 12 MiB of RGB from ~42 KB.
  std::vector<uint8_t> grey(2048 * 2048, 128);
  data::write_image(path, 2048, 2048, 1, grey.data());
  CHECK(std::filesystem::file_size(path) * 200 < 12u << 20);
  img = data::decode_file(path);
  CHECK(img.width == 2048);
  CHECK(data::max_decoded_bytes(10) == data::kDecodeFloorBytes);
  CHECK(data::max_decoded_bytes(1 << 20) == (size_t{1} << 20) * data::kMaxDecodeExpansion);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fuzz: thousands of damaged safetensors and image files end in tandem::Error or a parse") {
  const uint64_t seed = env_u64("TANDEM_FUZZ_SEED", 20261122);
  Rng rng(seed);
  auto dir = temp_dir();
  const auto t0 = std::chrono::steady_clock::now();

  // Seed files, written by tandem's own writers.
  const std::string st_seed = (dir / "seed.safetensors").string();
  safetensors::save(st_seed,
                    {{"conv.weight", Tensor::full({4, 3, 3, 3}, 0.5f)},
                     {"bn.running_mean", Tensor::zeros({4}, DType::F64)},
                     {"step", Tensor::zeros({1}, DType::I64)},
                     {"emb", Tensor::zeros({3, 5}, DType::BF16)},
                     {"empty", Tensor::zeros({0, 7}, DType::F16)}},
                    {{"format", "pt"}});
  const Bytes st = read_file(st_seed);
  const data::Image picture = data::draw_procedural(3, 11, 0, 48, 40);
  std::vector<std::pair<std::string, Bytes>> images;
  for (const char* name : {"seed.jpg", "seed.png", "seed.bmp"}) {
    data::write_image((dir / name).string(), picture, 85);
    images.emplace_back(std::filesystem::path(name).extension().string(), read_file((dir / name).string()));
  }
  std::vector<uint8_t> grey(40 * 24);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = static_cast<uint8_t>(i * 7);
  data::write_image((dir / "grey.png").string(), 40, 24, 1, grey.data());
  images.emplace_back(".png", read_file((dir / "grey.png").string()));

  // safetensors: half format-aware damage, half blind byte damage (sometimes both).
  Tally st_tally;
  const std::string st_path = (dir / "case.safetensors").string();
  for (int i = 0; i < scaled(2000); ++i) {
    Bytes b = pick(rng, 2) ? safetensors_mutation(st, rng) : generic_mutation(st, rng);
    if (pick(rng, 8) == 0) b = generic_mutation(b, rng);
    write_file(st_path, b);
    run_case(
        st_tally, b.size(), safetensors_bound(b.size()),
        [&] {
          safetensors::File f = safetensors::load(st_path);
          size_t total = 0;
          for (const auto& [n, t] : f.tensors) total += t.nbytes();
          TANDEM_CHECK(total <= b.size(), "loaded more tensor bytes than the file holds");
        },
        safetensors_kind, st_path);
  }

  // Images, through decode_file (the path the loader's strict mode reports).
  Tally img_tally;
  for (int i = 0; i < scaled(3000); ++i) {
    const auto& [ext, src] = images[pick(rng, images.size())];
    Bytes b = pick(rng, 2) ? image_mutation(src, ext, rng) : generic_mutation(src, rng);
    if (pick(rng, 8) == 0) b = generic_mutation(b, rng);
    const std::string path = (dir / ("case" + ext)).string();
    write_file(path, b);
    run_case(
        img_tally, b.size(), image_bound(b.size()),
        [&] {
          data::Image img = data::decode_file(path);
          TANDEM_CHECK(img.pixels.size() == static_cast<size_t>(img.width) * img.height * 3 &&
                           img.pixels.size() <= data::max_decoded_bytes(b.size()),
                       "decoded image breaks its size contract");
        },
        image_kind, path);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::printf("fuzz_parsers: seed %llu, %.1f s, allocation watch: %s\n", static_cast<unsigned long long>(seed), secs,
#ifdef TANDEM_FUZZ_SANITIZER_HOOKS
              "sanitizer malloc hook (every allocation)"
#else
              "operator new (C++ allocations only)"
#endif
  );
  print("safetensors", st_tally);
  print("images", img_tally);
  std::printf("crashes: 0 (this line is printed only when every case returned)\n");
  std::fflush(stdout);

  CHECK(st_tally.cases == st_tally.parsed + st_tally.errors + st_tally.foreign);
  CHECK(st_tally.foreign == 0);
  CHECK(img_tally.foreign == 0);
  CHECK(st_tally.over_bound == 0);
  CHECK(img_tally.over_bound == 0);
  CHECK(st_tally.kinds.count("error without the file name") == 0);
  CHECK(img_tally.kinds.count("error without the file name") == 0);
  // The mutations reach the deep checks, not only the first one.
  CHECK(st_tally.kinds.size() >= 10);
  CHECK(img_tally.parsed > 0);
  CHECK(img_tally.kinds.count("dimensions over the decode cap") == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fuzz: damaged torch.save files end in tandem::Error or a parse, never in a call") {
  const uint64_t seed = env_u64("TANDEM_FUZZ_SEED", 20261128);
  Rng rng(seed);
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  std::vector<Bytes> seeds;
  for (const char* f : {"strided.pth", "small_cnn.pth", "wrapped_model.pth"})
    seeds.push_back(read_file((std::filesystem::path(src) / "tests/data/pth" / f).string()));
  Tally t;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = "case.pth";
  for (int i = 0; i < scaled(1500); ++i) {
    const Bytes& seed_file = seeds[pick(rng, seeds.size())];
    Bytes b;
    if (pick(rng, 3) == 0) {
      b = generic_mutation(seed_file, rng);  // zip-level damage: the CRC and bounds checks
    } else {  // the pickle damaged, re-zipped with a correct CRC
      const zip::Archive a = zip::open_bytes(seed_file, "seed");
      std::vector<std::pair<std::string, Bytes>> entries;
      for (const zip::Entry& e : a.entries) {
        Bytes data = a.read(e.name);
        const bool pickle = e.name.size() > 8 && e.name.substr(e.name.size() - 8) == "data.pkl";
        if (pickle) data = pick(rng, 2) ? pickle_mutation(data, rng) : generic_mutation(data, rng);
        else if (pick(rng, 20) == 0) data.resize(pick(rng, data.size()));  // a storage cut short
        entries.emplace_back(e.name, data);
      }
      b = stored_zip(entries);
    }
    run_case(
        t, b.size(), torch_save_bound(b.size()),
        [&] {
          const safetensors::NamedTensors sd = torch_save::load_bytes(b, name);
          size_t total = 0;
          for (const auto& [n, x] : sd) total += x.nbytes();
          TANDEM_CHECK(total <= b.size(), "loaded more tensor bytes than the file holds");
        },
        [](const std::string& message) {
          std::string m = message;  // the sentence after TANDEM_CHECK's "check failed (<condition>): "
          if (size_t c = m.find("check failed ("); c != std::string::npos && m.find("): ", c) != std::string::npos)
            m = m.substr(m.find("): ", c) + 3);
          for (const char* k : {"CRC-32", "two sizes", "no local header", "central directory", "is not part of a state dict", "the pickle imports", "the pickle calls",
                                "runs past", "ends early", "outside", "not a state dict", "not a torch.save file",
                                "zip end record", "is compressed", "storage", "memo", "MARK", "stack", "STOP",
                                "has no entry", "too short", "dict", "tuple", "integer"})
            if (m.find(k) != std::string::npos) return std::string(k);
          return "other: " + m.substr(0, 120);
        },
        name);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fuzz torch.save: seed %llu, %.1f s\n", static_cast<unsigned long long>(seed), secs);
  print("torch.save", t);
  std::fflush(stdout);
  CHECK(t.foreign == 0);
  CHECK(t.over_bound == 0);
  CHECK(t.kinds.count("error without the file name") == 0);
  CHECK(t.kinds.size() >= 8);  // the damage reaches the unpickler's checks, not only the zip's
  CHECK(!std::filesystem::exists("/tmp/tandem_pth_was_executed"));
}
