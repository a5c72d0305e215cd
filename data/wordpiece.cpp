// data/wordpiece.cpp: vocab.txt, BERT's BasicTokenizer and greedy longest-match WordPiece.
#include "data/wordpiece.h"

#include <fstream>

#include "core/check.h"
#include "data/unicode.h"

namespace tandem::data {

Vocab::Vocab(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    auto [it, inserted] = ids_.emplace(tokens_[i], static_cast<int64_t>(i));
    TANDEM_CHECK(inserted, "vocab: token '", tokens_[i], "' appears twice (ids ", it->second, " and ", i,
                 "); every line of vocab.txt must be a distinct token");
  }
}

Vocab Vocab::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), "vocab: cannot open '", path, "'; pass a BERT-style vocab.txt (build one with make_vocab)");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(line);
  }
  TANDEM_CHECK(!tokens.empty(), "vocab: '", path, "' is empty; it needs one token per line");
  try {
    return Vocab(std::move(tokens));
  } catch (const Error& e) {
    TANDEM_THROW("vocab '", path, "': ", e.what());
  }
}

void Vocab::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  TANDEM_CHECK(out.good(), "vocab: cannot write '", path, "'; check that its folder exists and is writable");
  for (const std::string& t : tokens_) out << t << '\n';
  TANDEM_CHECK(out.good(), "vocab: writing '", path, "' failed (disk full?)");
}

int64_t Vocab::find(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

int64_t Vocab::require(std::string_view token, std::string_view purpose) const {
  int64_t id = find(token);
  TANDEM_CHECK(id >= 0, "vocab: no token '", token, "' (needed for ", purpose, "); the vocab must list it on a ",
               "line of its own (make_vocab writes [PAD] [UNK] [CLS] [SEP] [MASK] first)");
  return id;
}

const std::string& Vocab::token(int64_t id) const {
  TANDEM_CHECK(id >= 0 && id < size(), "vocab: id ", id, " is outside [0, ", size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

SpecialIds SpecialIds::from(const Vocab& v) {
  SpecialIds s;
  s.pad = v.require("[PAD]", "padding");
  s.unk = v.require("[UNK]", "unknown words");
  s.cls = v.require("[CLS]", "the start of each sequence");
  s.sep = v.require("[SEP]", "document and sequence ends");
  s.mask = v.require("[MASK]", "masked-language-model inputs");
  return s;
}

std::vector<std::string> basic_tokenize(std::string_view text, const BasicTokenizerOptions& opt) {
  using namespace unicode;
  // Steps 1 and 2 (clean, CJK spacing) run per character; step 3 runs per whitespace-separated word.
  std::u32string clean;
  for (char32_t c : decode_utf8(text)) {
    if (c == 0 || c == kReplacement || is_control(c)) continue;
    if (is_whitespace(c)) {
      clean.push_back(' ');
    } else if (opt.split_cjk && is_cjk(c)) {
      clean.push_back(' '), clean.push_back(c), clean.push_back(' ');
    } else {
      clean.push_back(c);
    }
  }
  std::vector<std::string> words;
  std::u32string word, folded;
  auto flush = [&]() {
    if (word.empty()) return;
    folded.clear();
    for (char32_t c : word) {
      if (opt.lower_case) lower_into(folded, c); else folded.push_back(c);
    }
    std::string piece;
    for (char32_t c : folded) {
      if (opt.strip_accents) {
        if (is_combining_mark(c)) continue;
        c = strip_accent(c);
      }
      if (is_punctuation(c)) {
        if (!piece.empty()) words.push_back(std::move(piece)), piece.clear();
        std::string p;
        append_utf8(p, c);
        words.push_back(std::move(p));
      } else {
        append_utf8(piece, c);
      }
    }
    if (!piece.empty()) words.push_back(std::move(piece));
    word.clear();
  };
  for (char32_t c : clean) {
    if (c == ' ') flush(); else word.push_back(c);
  }
  flush();
  return words;
}

WordPiece::WordPiece(Vocab vocab, WordPieceOptions opt)
    : vocab_(std::move(vocab)), special_(SpecialIds::from(vocab_)), opt_(opt) {
  TANDEM_CHECK(opt_.max_input_chars_per_word > 0, "wordpiece: max_input_chars_per_word must be positive, got ",
               opt_.max_input_chars_per_word);
}

WordPiece WordPiece::from_file(const std::string& vocab_path, WordPieceOptions opt) {
  return WordPiece(Vocab::load(vocab_path), opt);
}

void WordPiece::split_word(const std::string& word, std::vector<int64_t>& out) const {
  // Byte offsets of the code-point boundaries: pieces never cut a UTF-8 sequence.
  std::vector<size_t> cuts;
  for (size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) cuts.push_back(i);
  cuts.push_back(word.size());
  const size_t chars = cuts.size() - 1;
  if (chars > static_cast<size_t>(opt_.max_input_chars_per_word)) {
    out.push_back(special_.unk);
    return;
  }
  const size_t first = out.size();
  std::string key;
  for (size_t start = 0; start < chars;) {
    int64_t found = -1;
    size_t end = chars;
    for (; end > start; --end) {  // longest match first
      key.assign(start > 0 ? "##" : "");
      key.append(word, cuts[start], cuts[end] - cuts[start]);
      found = vocab_.find(key);
      if (found >= 0) break;
    }
    if (found < 0) {  // no piece fits here: the whole word is unknown, as in BERT
      out.resize(first);
      out.push_back(special_.unk);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int64_t> WordPiece::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const std::string& w : basic_tokenize(text, opt_.basic)) split_word(w, ids);
  return ids;
}

std::vector<std::string> WordPiece::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (int64_t id : encode(text)) out.push_back(vocab_.token(id));
  return out;
}

std::string WordPiece::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    const std::string& t = vocab_.token(id);
    if (t.size() > 2 && t.compare(0, 2, "##") == 0) {
      out.append(t, 2, std::string::npos);
    } else {
      if (!out.empty()) out.push_back(' ');
      out += t;
    }
  }
  return out;
}

}  // namespace tandem::data
