// data/vocab_builder.h: learns a WordPiece vocab.txt from word counts (what apps/make_vocab runs).
//
// Layout of the result (ids = positions):
//   0-4   [PAD] [UNK] [CLS] [SEP] [MASK]. A small vocab puts them first instead of at BERT's
//         0/100/101/102/103 (BERT's 1-99 are [unused] slots); the tokenizer finds them by name.
//   then  the alphabet: every character of the basic-tokenized words, and "##c" for every character
//         seen after a word's first, most frequent first (ties by code point). When the alphabet alone
//         exceeds the size, the rarest characters are left out (they tokenize to [UNK]).
//   then  merged pieces, in the order they were learnt.
// Merges (byte-pair-encoding style, frequency based; Hugging Face's WordPiece trainer also learns
// its pieces this way): every distinct word starts as its characters ("h", "##e", "##l", ...),
// weighted by its count. Repeatedly, the adjacent pair with the largest summed count becomes one new
// piece ("h" + "##e" -> "he", "##l" + "##o" -> "##lo") in every word that has it, until the vocab
// reaches the size or no pair occurs min_frequency times. Ties go to the pair of earlier-learnt
// pieces, so the output is a pure function of the counts. A frequent word ends up as one piece
// because each of its merges was among the most frequent pairs; the tokenizer's greedy
// longest-match then finds it whole.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/wordpiece.h"

namespace tandem::data {

struct VocabBuilderOptions {
  int64_t vocab_size = 8000;       // total tokens, specials included (BERT-base uses 30522)
  int64_t min_frequency = 2;       // a pair seen fewer times is never merged (no pieces for one-offs)
  int max_input_chars_per_word = 100;  // longer words are skipped: the tokenizer maps them to [UNK]
  BasicTokenizerOptions basic;     // must match the tokenizer that will use the vocab
};

// Word counts, in a sorted map so iteration (and so the vocab) is deterministic.
using WordCounts = std::map<std::string, int64_t>;

// Adds the basic-tokenized words of text to counts.
void count_words(std::string_view text, const BasicTokenizerOptions& opt, WordCounts& counts);

// The vocab learnt from counts, as described above.
Vocab build_wordpiece_vocab(const WordCounts& counts, const VocabBuilderOptions& opt = {});

}  // namespace tandem::data
