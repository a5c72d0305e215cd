// tests/test_safetensors.cpp: the safetensors reader/writer - round trips of every dtype, the byte
// layout the format prescribes, atomic writes, clear errors on damaged files, and the conv layout
// conversion (OIHW in the file, OHWI in tandem) on a hand-built file.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "core/random.h"
#include "core/safetensors.h"
#include "checkpoint/state_dict.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
// A fresh directory per test case, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("tandem_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() { static int c = 0; return c; }
};

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}
// A file built by hand: 8-byte length, the given header text, then `data`.
std::string make_file(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s + header + data;
}
// Runs load() and returns the error message ("" when it did not throw).
std::string load_error(const std::string& p) {
  try {
    safetensors::load(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
// An empty tensor has no storage (data_ptr() is null), and memcmp on null is undefined even for 0 bytes.
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}
}  // namespace

TEST_CASE("round trip of every dtype keeps names, shapes, bytes and metadata") {
  TempDir dir;
  Generator g(7);
  safetensors::NamedTensors in;
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    // Odd sizes so that tensors after the first start at offsets that are not multiples of 8.
    Tensor x = randn({3, 5}, g, DType::F64).to(t);
    in.emplace_back(std::string("w_") + dtype_name(t), x);
  }
  in.emplace_back("ints32", Tensor::from_vector_i64({-3, 0, 7, 2147483647}, {4}, DType::I32));
  in.emplace_back("ints64", Tensor::from_vector_i64({-1, 1ll << 40, 5}, {3}, DType::I64));
  in.emplace_back("scalar", Tensor::from_vector({2.5f}, {}));
  in.emplace_back("empty", Tensor::empty({0, 4}));
  safetensors::Metadata meta{{"step", "12"}, {"note", "hello \"quoted\""}};
  safetensors::save(dir.file("a.safetensors"), in, meta);

  safetensors::File f = safetensors::load(dir.file("a.safetensors"));
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    const Tensor* back = f.find(name);
    REQUIRE(back != nullptr);
    CHECK(same_bytes(*back, t));
    CHECK(back->device().is_cpu());
  }
  CHECK(f.find("missing") == nullptr);
  CHECK_THROWS_WITH_AS(f.at("missing"), doctest::Contains("no tensor named 'missing'"), Error);
}

TEST_CASE("the byte layout matches the safetensors specification") {
  TempDir dir;
  Tensor a = Tensor::from_vector({1, 2, 3}, {3});
  Tensor b = Tensor::from_vector_i64({4, 5}, {1, 2});
  safetensors::save(dir.file("l.safetensors"), {{"a", a}, {"b", b}}, {{"k", "v"}});
  std::string bytes = read_bytes(dir.file("l.safetensors"));
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  CHECK((8 + n) % 8 == 0);  // the data section starts 8-byte aligned
  CHECK(bytes.size() == 8 + n + 12 + 16);
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(h["a"]["dtype"] == "F32");
  CHECK(h["a"]["shape"] == nlohmann::json::array({3}));
  CHECK(h["a"]["data_offsets"] == nlohmann::json::array({0, 12}));
  CHECK(h["b"]["dtype"] == "I64");
  CHECK(h["b"]["data_offsets"] == nlohmann::json::array({12, 28}));
  CHECK(h["__metadata__"]["k"] == "v");
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  CHECK(first == 1.0f);
}

TEST_CASE("a hand-written file (as PyTorch writes it) loads") {
  TempDir dir;
  // Unsorted keys, no padding, no metadata: all allowed by the format.
  std::string header = R"({"z":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  float z[2] = {0.5f, -1.0f};
  int32_t a = 42;
  std::string data(reinterpret_cast<char*>(z), 8);
  data += std::string(reinterpret_cast<char*>(&a), 4);
  write_bytes(dir.file("h.safetensors"), make_file(header, data));
  auto f = safetensors::load(dir.file("h.safetensors"));
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "z");  // data-offset order
  CHECK(f.at("z").to_vector() == std::vector<float>{0.5f, -1.0f});
  CHECK(f.at("a").to_vector_i64() == std::vector<int64_t>{42});
}

TEST_CASE("atomic write: no temporary file is left, and an existing file is replaced whole") {
  TempDir dir;
  std::string p = dir.file("c.safetensors");
  safetensors::save(p, {{"x", Tensor::ones({4})}});
  safetensors::save(p, {{"y", Tensor::zeros({2, 2})}});
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    ++files;
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
  }
  CHECK(files == 1);
  auto f = safetensors::load(p);
  CHECK(f.find("x") == nullptr);
  CHECK(f.at("y").to_vector() == std::vector<float>(4, 0.0f));

  // A failed write (directory missing) throws and leaves nothing behind.
  CHECK_THROWS_WITH_AS(safetensors::save(dir.file("nope/d.safetensors"), {{"x", Tensor::ones({1})}}),
                       doctest::Contains("cannot create"), Error);
}

TEST_CASE("save refuses duplicate and reserved names") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(safetensors::save(dir.file("d"), {{"x", Tensor::ones({1})}, {"x", Tensor::ones({1})}}),
                       doctest::Contains("appears twice"), Error);
  CHECK_THROWS_WITH_AS(safetensors::save(dir.file("d"), {{"__metadata__", Tensor::ones({1})}}),
                       doctest::Contains("reserved"), Error);
  CHECK(!fs::exists(dir.file("d")));
}

TEST_CASE("damaged files fail with an error naming the file and the problem") {
  TempDir dir;
  std::string good = dir.file("good.safetensors");
  safetensors::save(good, {{"w", Tensor::ones({4, 4})}, {"b", Tensor::ones({4})}});
  const std::string bytes = read_bytes(good);
  std::string p = dir.file("bad.safetensors");
  auto error_for = [&](const std::string& content) {
    write_bytes(p, content);
    return load_error(p);
  };
  // Loading a file made of `header` and `data` fails with an error that holds every one of `says`.
  auto check_error = [&](const std::string& header, const std::string& data, std::initializer_list<const char*> says) {
    const std::string e = error_for(make_file(header, data));
    for (const char* s : says) CHECK_MESSAGE(e.find(s) != std::string::npos, e);
  };

  SUBCASE("missing file") { CHECK(load_error(dir.file("absent")).find("cannot read") != std::string::npos); }
  SUBCASE("shorter than the length field") {
    std::string e = error_for(bytes.substr(0, 5));
    CHECK(e.find("bad.safetensors") != std::string::npos);
    CHECK(e.find("shorter than the 8-byte header length") != std::string::npos);
  }
  SUBCASE("truncated inside the header") {
    CHECK(error_for(bytes.substr(0, 20)).find("the file is truncated") != std::string::npos);
  }
  SUBCASE("truncated inside the data") {
    CHECK(error_for(bytes.substr(0, bytes.size() - 4)).find("outside") != std::string::npos);
  }
  SUBCASE("absurd header length") {
    std::string b = bytes;
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(0xff);
    CHECK(error_for(b).find("-byte JSON header (limit") != std::string::npos);
  }
  SUBCASE("header is not JSON") {
    check_error("{not json", "", {"does not parse"});
  }
  SUBCASE("header is JSON but not an object") {
    check_error("[1,2]", "", {"is not an object"});
  }
  SUBCASE("unknown dtype") {
    check_error(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\1\0", {"\"BOOL\" is not supported", "tensor 'm'"});
  }
  SUBCASE("offsets out of range") {
    check_error(R"({"m":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234", {"fall outside the 4-byte data section"});
  }
  SUBCASE("size does not match dtype and shape") {
    check_error(R"({"m":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678", {"span 8 bytes but F32[3] needs 12"});
  }
  SUBCASE("overlapping tensors") {
    check_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                "12345678", {"overlaps"});
  }
  SUBCASE("a hole in the data section") {
    check_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "12345678", {"belong to no tensor"});
  }
  SUBCASE("negative shape") {
    check_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "", {"non-negative integer"});
  }
  SUBCASE("metadata that is not strings") {
    check_error(R"({"__metadata__":{"step":3}})", "", {"is not a string"});
  }
}

// ---- layout conversion: a PyTorch (OIHW) conv weight in a hand-built file lands OHWI in tandem ----

namespace {
// Stands in for layers' Conv2d: state_dict recognises conv weights by type_name() == "Conv2d".
struct ConvLike : Module {
  ConvLike(int64_t o, int64_t k, int64_t i) {
    register_parameter("weight", Tensor::zeros({o, k, k, i}));  // OHWI, tandem's layout
    register_parameter("bias", Tensor::zeros({o}));
  }
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Conv2d"; }
};
struct Net : Module {
  std::shared_ptr<ConvLike> conv;
  Net() { conv = register_module("conv1", std::make_shared<ConvLike>(2, 3, 4)); }
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Net"; }
};
}  // namespace

TEST_CASE("an OIHW conv weight written by hand loads as OHWI, element by element, and saves back as OIHW") {
  TempDir dir;
  const int64_t O = 2, I = 4, K = 3;
  // PyTorch's layout: w[o][i][h][w] at ((o*I + i)*K + h)*K + w. The value encodes its index, so any
  // misplaced element shows up.
  std::vector<float> oihw(O * I * K * K);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t h = 0; h < K; ++h)
        for (int64_t w = 0; w < K; ++w) oihw[((o * I + i) * K + h) * K + w] = 1000.f * o + 100.f * i + 10.f * h + w;
  std::string header = R"({"conv1.weight":{"dtype":"F32","shape":[2,4,3,3],"data_offsets":[0,288]},)"
                       R"("conv1.bias":{"dtype":"F32","shape":[2],"data_offsets":[288,296]}})";
  float bias[2] = {0.25f, -0.5f};
  std::string data(reinterpret_cast<const char*>(oihw.data()), oihw.size() * 4);
  data += std::string(reinterpret_cast<const char*>(bias), 8);
  write_bytes(dir.file("torch.safetensors"), make_file(header, data));

  Net net;
  load_model(dir.file("torch.safetensors"), net);
  const Tensor w = net.conv->named_parameters()[0].second;  // a copy: the vector is a temporary
  REQUIRE(w.shape() == Shape{O, K, K, I});
  std::vector<float> got = w.to_vector();
  for (int64_t o = 0; o < O; ++o)
    for (int64_t h = 0; h < K; ++h)
      for (int64_t x = 0; x < K; ++x)
        for (int64_t i = 0; i < I; ++i) {
          INFO("o=", o, " h=", h, " w=", x, " i=", i);
          CHECK(got[((o * K + h) * K + x) * I + i] == 1000.f * o + 100.f * i + 10.f * h + x);
        }
  CHECK(net.conv->named_parameters()[1].second.to_vector() == std::vector<float>{0.25f, -0.5f});

  // And back: the saved file holds exactly the bytes PyTorch wrote.
  save_model(dir.file("back.safetensors"), net);
  auto f = safetensors::load(dir.file("back.safetensors"));
  CHECK(f.at("conv1.weight").shape() == Shape{O, I, K, K});
  CHECK(f.at("conv1.weight").to_vector() == oihw);
}

TEST_CASE("temporaries are named <path>.tmp.<host>.<pid> and recognised, 0.1's <path>.tmp.<pid> too") {
  const std::string t = safetensors::temp_path("/d/checkpoint_epoch3.safetensors");
  CHECK(t.rfind("/d/checkpoint_epoch3.safetensors.tmp.", 0) == 0);
  CHECK(t.ends_with("." + std::to_string(::getpid())));
  CHECK(t.find('/', 3) == std::string::npos);  // the host part adds no folder
  CHECK(safetensors::is_temp_name(fs::path(t).filename().string()));
  CHECK(safetensors::is_temp_name("checkpoint_step5.safetensors.tmp.1234"));
  CHECK(safetensors::is_temp_name("c.safetensors.tmp.node-7.cluster.org.99"));
  for (const char* n : {"checkpoint_step5.safetensors", "c.tmp.", "c.tmp.host", ".tmp.12", "c.tmp.host.12x"})
    CHECK_FALSE(safetensors::is_temp_name(n));
}

TEST_CASE("read_metadata reads the header only") {
  TempDir dir;
  const std::string p = dir.file("m.safetensors");
  safetensors::save(p, {{"w", Tensor::ones({64})}}, {{"format", "x"}, {"step", "3"}});
  const std::string bytes = read_bytes(p);
  write_bytes(p, bytes.substr(0, bytes.size() - 100));  // the data section is cut short
  CHECK(safetensors::read_metadata(p) == safetensors::Metadata{{"format", "x"}, {"step", "3"}});
  CHECK(load_error(p).find("outside") != std::string::npos);  // load() still sees the damage
  safetensors::save(p, {{"w", Tensor::ones({1})}});
  CHECK(safetensors::read_metadata(p).empty());
  write_bytes(p, make_file(R"({"__metadata__":{"step":3}})", ""));
  CHECK_THROWS_WITH_AS(safetensors::read_metadata(p), doctest::Contains("is not a string"), Error);
  CHECK_THROWS_WITH_AS(safetensors::read_metadata(dir.file("absent")), doctest::Contains("cannot read"), Error);
}

TEST_CASE("a name or metadata value that is not UTF-8 is refused at save, with the file named") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(safetensors::save(dir.file("u"), {{"x", Tensor::ones({1})}}, {{"k", "\xff"}}),
                       doctest::Contains("is not valid UTF-8"), Error);
  CHECK(!fs::exists(dir.file("u")));
}
