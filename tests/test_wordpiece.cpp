// tests/test_wordpiece.cpp: the WordPiece tokenizer against Hugging Face's BertTokenizer ids, the
// Unicode helpers under it, vocab loading and its errors.
//
// kReference was printed by apps/scripts/wordpiece_reference.py (transformers 5.23.0; its Rust-backed
// BertTokenizer and the pure-Python BertTokenizerLegacy agreed on every string) on
// tests/data/wordpiece_vocab.txt, whose [UNK] (2) and [MASK] (5) sit at non-BERT positions.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/unicode.h"
#include "data/wordpiece.h"
#include "data_test_util.h"

using namespace tandem;
using namespace tandem::data;

namespace {

std::string vocab_path() {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");  // set by ctest (tests/CMakeLists.txt)
  std::filesystem::path root = src ? src : std::filesystem::path(__FILE__).parent_path().parent_path();
  return (root / "tests" / "data" / "wordpiece_vocab.txt").string();
}

struct Case {
  std::string text;
  std::vector<int64_t> ids;
};

// clang-format off
const std::vector<Case> kReference = {
    {"Caf\u00e9 na\u00efve r\u00e9sum\u00e9", {120, 121, 122}},
    {"unaffable", {123, 124, 125}},
    {"UNAFFABLE unaffables unaffed", {123, 124, 125, 123, 124, 125, 111, 123, 124, 127}},
    {"Hello, World!", {129, 17, 130, 6}},
    {"don\'t stop-believing...", {128, 12, 86, 131, 18, 132, 126, 19, 19, 19}},
    {"1999 $42.50 3.14", {133, 134, 9, 135, 19, 52, 57, 50, 19, 48, 61}},
    {"\u4e2d\u56fd\u4eba abc\u4e2d", {137, 138, 139, 67, 94, 95, 137}},
    {"a\x01" "b\x7f" "c \u200bd", {67, 94, 95, 70}},
    {std::string(101, 'x') + " " + std::string(12, 'x'), {2, 90, 116, 116, 116, 116, 116, 116, 116, 116, 116, 116, 116}},
    {"tabs\tand\nnewlines\r\nhere", {146, 147, 148, 149, 144}},
    {"it\'s \u201cquoted\u201d \u2014 \u00abque\u00bb \u2026 \u00bfque?", {150, 12, 85, 43, 152, 44, 42, 40, 151, 41, 45, 39, 151, 26}},
    {"emoji \U0001F600 here \U0001F389!", {145, 2, 144, 2, 6}},
    {"\u00c0\u00c9\u00ce\u00d5\u00dc \u00f1 \u00e7 \u00d8 \u00df", {67, 97, 101, 107, 113, 80, 69, 170, 2}},
    {"\u0391\u0398\u0389\u039d\u0391 \u0401\u0436\u0438\u043a", {140, 141}},
    {"  leading and trailing spaces  \u00a0nbsp\u3000ideographic space ", {161, 147, 162, 163, 164, 165, 166, 167}},
    {"", {}},
    {"e\u0301 combining", {71, 168}},
    {"foo@bar.com http://x.y/z?a=1&b=2", {155, 27, 156, 19, 153, 154, 21, 20, 20, 90, 19, 91, 20, 92, 26, 67, 24, 48, 11, 68, 24, 49}},
    {"soft\u00adhyphen zero\u200dwidth", {157, 100, 117, 108, 100, 97, 106, 159, 160}},
    {"\u0130stanbul STRASSE Stra\u00dfe", {143, 85, 112, 110, 93, 111, 111, 97, 142}},
    {"\u01d5 \u0133 \u00b7dot", {87, 2, 46, 70, 107, 112}},
    {"a~b^c`d|e", {67, 37, 68, 31, 69, 33, 70, 35, 71}},
};
// clang-format on

}  // namespace

TEST_CASE("wordpiece: ids equal Hugging Face BertTokenizer's on tricky strings") {
  WordPiece wp = WordPiece::from_file(vocab_path());
  CHECK(wp.vocab().size() == 172);
  for (const Case& c : kReference) {
    CAPTURE(c.text);
    std::vector<int64_t> got = wp.encode(c.text);
    CAPTURE(wp.decode(got));
    CHECK(got == c.ids);
  }
}

TEST_CASE("wordpiece: special tokens are found by name, not position") {
  WordPiece wp = WordPiece::from_file(vocab_path());
  CHECK(wp.special().pad == 0);
  CHECK(wp.special().unk == 2);
  CHECK(wp.special().cls == 3);
  CHECK(wp.special().sep == 4);
  CHECK(wp.special().mask == 5);
  CHECK(wp.special().is_special(5));
  CHECK_FALSE(wp.special().is_special(1));  // [unused0] is an ordinary token
}

TEST_CASE("wordpiece: tokenize and decode") {
  WordPiece wp = WordPiece::from_file(vocab_path());
  CHECK(wp.tokenize("Unaffable!") == std::vector<std::string>{"un", "##aff", "##able", "!"});
  CHECK(wp.decode(wp.encode("UNAFFABLE cafe, naive")) == "unaffable cafe , naive");
  // max_input_chars_per_word counts code points, not bytes: 60 two-byte letters fit in 100.
  std::string long_word;
  for (int i = 0; i < 60; ++i) long_word += "\u00e9";  // é -> e after accent stripping
  WordPieceOptions opt;
  CHECK(wp.encode(long_word).size() == 60);
  opt.max_input_chars_per_word = 59;
  WordPiece short_limit(wp.vocab(), opt);
  CHECK(short_limit.encode(long_word) == std::vector<int64_t>{2});
}

TEST_CASE("wordpiece: cased basic tokenization keeps case and accents") {
  BasicTokenizerOptions cased;
  cased.lower_case = false;
  cased.strip_accents = false;
  CHECK(basic_tokenize("Caf\u00e9 D\u00e9j\u00e0-vu", cased) ==
        std::vector<std::string>{"Caf\u00e9", "D\u00e9j\u00e0", "-", "vu"});
  CHECK(basic_tokenize("Caf\u00e9 D\u00e9j\u00e0-vu") == std::vector<std::string>{"cafe", "deja", "-", "vu"});
}

TEST_CASE("unicode: UTF-8 round trip and malformed bytes") {
  using namespace unicode;
  const std::string s = "a\u00e9\u4e2d\U0001F600";
  CHECK(decode_utf8(s) == std::u32string{U'a', 0xE9, 0x4E2D, 0x1F600});
  CHECK(encode_utf8(decode_utf8(s)) == s);
  // A stray continuation byte, a truncated sequence and an overlong '/' are each one U+FFFD.
  CHECK(decode_utf8("\x80z") == std::u32string{kReplacement, U'z'});
  CHECK(decode_utf8("\xE4\xB8") == std::u32string{kReplacement, kReplacement});
  CHECK(decode_utf8("\xC0\xAF") == std::u32string{kReplacement, kReplacement});
  // ...and the tokenizer drops them, as BERT drops U+FFFD.
  CHECK(basic_tokenize("ab\xFF" "cd") == std::vector<std::string>{"abcd"});
}

TEST_CASE("unicode: character classes") {
  using namespace unicode;
  CHECK(is_punctuation(U'$'));       // ASCII symbol: punctuation for BERT
  CHECK(is_punctuation(0x2014));     // em dash (Pd)
  CHECK(is_punctuation(0x3002));     // ideographic full stop (Po)
  CHECK_FALSE(is_punctuation(0x20AC));  // euro sign is Sc, not P
  CHECK(is_whitespace(0x3000));
  CHECK(is_whitespace(U'\t'));
  CHECK_FALSE(is_control(U'\n'));
  CHECK(is_control(0x200B));  // zero width space is Cf
  CHECK(is_control(0xE000));  // private use
  CHECK(to_lower(0x410) == 0x430);     // Cyrillic А
  CHECK(to_lower(0x178) == 0xFF);      // Ÿ -> ÿ
  CHECK(to_lower(0x1E9E) == 0xDF);     // ẞ -> ß
  CHECK(strip_accent(0x1EC7) == U'e');  // ệ
  CHECK(strip_accent(0xD8) == 0xD8);   // Ø has no decomposition
  CHECK(is_cjk(0x4E2D));
  CHECK_FALSE(is_cjk(0x3042));  // hiragana is not in BERT's CJK list
}

TEST_CASE("vocab: load errors name the problem") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(Vocab::load(dir.file("missing.txt")), doctest::Contains("cannot open"), Error);
  std::ofstream(dir.file("empty.txt")).close();
  CHECK_THROWS_WITH_AS(Vocab::load(dir.file("empty.txt")), doctest::Contains("is empty"), Error);
  std::ofstream(dir.file("dup.txt")) << "[PAD]\na\nb\na\n";
  CHECK_THROWS_WITH_AS(Vocab::load(dir.file("dup.txt")), doctest::Contains("appears twice"), Error);
  std::ofstream(dir.file("nomask.txt")) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n";
  CHECK_THROWS_WITH_AS(WordPiece::from_file(dir.file("nomask.txt")), doctest::Contains("[MASK]"), Error);
  // CRLF files load to the same tokens.
  std::ofstream(dir.file("crlf.txt")) << "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nab\r\n";
  Vocab v = Vocab::load(dir.file("crlf.txt"));
  CHECK(v.find("ab") == 5);
  v.save(dir.file("saved.txt"));
  CHECK(Vocab::load(dir.file("saved.txt")).tokens() == v.tokens());
}
