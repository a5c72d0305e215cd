// data/unicode.h: the small slice of Unicode that BERT's tokenizer needs, without ICU.
//
// UTF-8 decoding (malformed bytes become U+FFFD, which the tokenizer then drops like BERT drops
// U+FFFD), and the character classes of BERT's BasicTokenizer:
//   - whitespace: ' ', '\t', '\n', '\r' and category Zs;
//   - control: category Cc (except '\t' '\n' '\r'), Cf and Co. BERT also drops unassigned code
//     points (Cn) and surrogates (Cs); surrogates cannot appear in valid UTF-8, unassigned points are
//     KEPT here (that needs the full assignment table; corpora rarely contain them);
//   - punctuation: ASCII 33-47, 58-64, 91-96, 123-126 plus category P (the whole of Unicode);
//   - CJK ideographs: BERT's block list (U+4E00-9FFF, 3400-4DBF, F900-FAFF and the SIP blocks).
// Case and accents (Python's str.lower(), then NFD and dropping the combining marks):
//   - to_lower covers Latin, Greek, Coptic, Cyrillic, Armenian, Georgian, Latin/Greek Extended,
//     Glagolitic, Cyrillic/Latin Extended-B..D and fullwidth ASCII. Not covered: scripts outside these
//     blocks (Cherokee, Deseret, ...) and Python's context-dependent final sigma (always σ here);
//   - strip_accent maps every precomposed letter in U+00C0-U+1FFF whose NFD is one base character
//     plus nonspacing marks (Latin-1, Latin Extended-A/B/Additional, Greek, Cyrillic, Arabic, Indic
//     ...) to that base, and drops the combining marks U+0300-U+036F. Not covered: standalone
//     nonspacing marks outside U+0300-036F (BERT drops every Mn character) and precomposed
//     characters above U+1FFF.
// The tables are generated from Python's unicodedata (data/unicode_tables.cpp says how).
#pragma once
#include <string>
#include <string_view>

namespace tandem::data::unicode {

constexpr char32_t kReplacement = 0xFFFD;

// Code points of s; each malformed byte sequence becomes one U+FFFD.
std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view s);

bool is_whitespace(char32_t c);
bool is_control(char32_t c);
bool is_punctuation(char32_t c);
bool is_cjk(char32_t c);
// Simple (one code point) lower case; see the header comment for the coverage. U+0130 (İ), whose
// Python lower case is two code points, is handled by lower_into.
char32_t to_lower(char32_t c);
void lower_into(std::u32string& out, char32_t c);
// True for U+0300-U+036F, the combining diacritical marks that accent stripping drops.
bool is_combining_mark(char32_t c);
// The base character of a precomposed letter (é -> e, й -> и), or c itself.
char32_t strip_accent(char32_t c);

}  // namespace tandem::data::unicode
