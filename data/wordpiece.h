// data/wordpiece.h: BERT's WordPiece tokenizer (BasicTokenizer + WordpieceTokenizer), on vocab.txt.
//
// Matches Hugging Face's BertTokenizer(vocab_file, do_lower_case=True) token ids (tests/
// test_wordpiece.cpp holds its ids for tricky strings; apps/scripts/wordpiece_reference.py made them):
//   1. clean: drop NUL, U+FFFD and control characters, turn every whitespace into ' ';
//   2. put spaces around CJK ideographs (each becomes its own word);
//   3. split on whitespace; per word: lower-case and strip accents (when enabled), then split
//      punctuation into single-character words ("don't" -> don ' t);
//   4. WordPiece per word: greedy longest-match-first from the left; pieces after the first are
//      looked up with the "##" prefix. A word with no full segmentation, or longer than
//      max_input_chars_per_word code points, becomes one [UNK].
// The Unicode coverage of step 1-3 (no ICU) is documented in data/unicode.h.
// Special tokens are not recognised inside the text: "[MASK]" in a string tokenizes as "[", "mask",
// "]" (BertTokenizer would match it as an added token). The corpora fed to it hold no such strings.
//
// Vocab: one token per line, id = line number (0-based), as in BERT's vocab.txt; a trailing '\r' is
// removed. The special tokens [PAD] [UNK] [CLS] [SEP] [MASK] are looked up by name, so BERT's own
// vocab (0, 100, 101, 102, 103) and make_vocab's (0..4) both work.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::data {

class Vocab {
 public:
  Vocab() = default;
  explicit Vocab(std::vector<std::string> tokens);  // id = position; duplicates are an error
  // Reads vocab.txt; throws with the path when it is missing, empty or has duplicate tokens.
  static Vocab load(const std::string& path);
  void save(const std::string& path) const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of token, or -1.
  int64_t find(std::string_view token) const;
  // The id of token; throws naming `purpose` when the vocab lacks it.
  int64_t require(std::string_view token, std::string_view purpose) const;
  const std::string& token(int64_t id) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
};

// The ids of BERT's special tokens in a vocab.
struct SpecialIds {
  int64_t pad = -1, unk = -1, cls = -1, sep = -1, mask = -1;
  // Looks all five up by name; throws naming the missing one.
  static SpecialIds from(const Vocab& vocab);
  bool is_special(int64_t id) const { return id == pad || id == unk || id == cls || id == sep || id == mask; }
};

struct BasicTokenizerOptions {
  bool lower_case = true;     // BertTokenizer's do_lower_case (uncased BERT)
  bool strip_accents = true;  // BERT strips accents exactly when it lower-cases; set both for cased
  bool split_cjk = true;      // tokenize_chinese_chars: every CJK ideograph is its own word
};

// Steps 1-3 of the header comment: the words that WordPiece then splits.
std::vector<std::string> basic_tokenize(std::string_view text, const BasicTokenizerOptions& opt = {});

struct WordPieceOptions {
  BasicTokenizerOptions basic;
  int max_input_chars_per_word = 100;  // BERT's default: longer words become [UNK]
};

class WordPiece {
 public:
  explicit WordPiece(Vocab vocab, WordPieceOptions opt = {});
  static WordPiece from_file(const std::string& vocab_path, WordPieceOptions opt = {});

  // Token strings of text ("un", "##aff", "##able").
  std::vector<std::string> tokenize(std::string_view text) const;
  // Token ids of text, without [CLS]/[SEP] (add_special_tokens=False).
  std::vector<int64_t> encode(std::string_view text) const;
  // Tokens joined by spaces, "##" pieces glued to the previous token (lower-cased, as tokenized).
  std::string decode(const std::vector<int64_t>& ids) const;

  // WordPiece of one basic-tokenized word, appended to out.
  void split_word(const std::string& word, std::vector<int64_t>& out) const;

  const Vocab& vocab() const { return vocab_; }
  const SpecialIds& special() const { return special_; }
  const WordPieceOptions& options() const { return opt_; }

 private:
  Vocab vocab_;
  SpecialIds special_;
  WordPieceOptions opt_;
};

}  // namespace tandem::data
