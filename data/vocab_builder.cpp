// data/vocab_builder.cpp: alphabet + frequency-ranked pair merges with incremental pair counts.
//
// Recounting every pair after each merge would cost (total symbols) x (merges), minutes for 8000
// merges; instead each merge only revisits the words that hold the merged pair (a pair -> words
// index), and a lazy max-heap holds (count, pair) entries, stale ones being skipped when popped.
#include "data/vocab_builder.h"

#include <algorithm>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "data/unicode.h"

namespace tandem::data {

void count_words(std::string_view text, const BasicTokenizerOptions& opt, WordCounts& counts) {
  for (std::string& w : basic_tokenize(text, opt)) ++counts[std::move(w)];
}

namespace {

using Pair = uint64_t;  // (left symbol << 32) | right symbol
Pair make_pair(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t left(Pair p) { return static_cast<int32_t>(p >> 32); }
int32_t right(Pair p) { return static_cast<int32_t>(p & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

struct HeapEntry {
  int64_t count;
  Pair pair;
  // Max-heap on count; among equal counts the smaller (earlier-learnt) pair wins.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

class Merger {
 public:
  std::vector<std::string> symbols;                 // symbol id -> token string
  std::unordered_map<std::string, int32_t> lookup;  // token string -> symbol id
  std::vector<Word> words;
  std::unordered_map<Pair, int64_t> pair_count;
  std::unordered_map<Pair, std::vector<int32_t>> pair_words;  // may hold stale or repeated words
  std::priority_queue<HeapEntry> heap;

  int32_t symbol(const std::string& s) {
    auto [it, inserted] = lookup.emplace(s, static_cast<int32_t>(symbols.size()));
    if (inserted) symbols.push_back(s);
    return it->second;
  }
  void add_pairs(int32_t w, int64_t sign, std::unordered_set<Pair>* touched) {
    const Word& word = words[static_cast<size_t>(w)];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      Pair p = make_pair(word.symbols[i], word.symbols[i + 1]);
      pair_count[p] += sign * word.count;
      if (sign > 0) pair_words[p].push_back(w);
      if (touched) touched->insert(p);
    }
  }
  // Rewrites every word holding p with the merged symbol m.
  void merge(Pair p, int32_t m) {
    std::vector<int32_t> ws = std::move(pair_words[p]);
    pair_words.erase(p);
    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    std::unordered_set<Pair> touched;
    for (int32_t w : ws) {
      std::vector<int32_t>& s = words[static_cast<size_t>(w)].symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = make_pair(s[i], s[i + 1]) == p;
      if (!has) continue;  // a stale index entry
      add_pairs(w, -1, &touched);
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left(p) && s[i + 1] == right(p)) out.push_back(m), ++i;
        else out.push_back(s[i]);
      }
      s = std::move(out);
      add_pairs(w, +1, &touched);
    }
    for (Pair t : touched) {
      auto it = pair_count.find(t);
      if (it != pair_count.end() && it->second > 0) heap.push({it->second, t});
    }
  }
};

}  // namespace

Vocab build_wordpiece_vocab(const WordCounts& counts, const VocabBuilderOptions& opt) {
  const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  TANDEM_CHECK(opt.vocab_size > static_cast<int64_t>(specials.size()), "make_vocab: the vocab size must exceed the ",
               specials.size(), " special tokens, got ", opt.vocab_size);
  TANDEM_CHECK(!counts.empty(), "make_vocab: the corpus holds no words; pass files with text in them");
  // Alphabet: characters at a word's start, and "##"-characters after it, ranked by frequency.
  std::map<std::string, int64_t> alphabet;
  std::vector<std::pair<std::vector<std::string>, int64_t>> split;  // words as character tokens
  for (const auto& [word, n] : counts) {
    std::u32string cps = unicode::decode_utf8(word);
    if (cps.empty() || cps.size() > static_cast<size_t>(opt.max_input_chars_per_word)) continue;
    std::vector<std::string> chars;
    for (size_t i = 0; i < cps.size(); ++i) {
      std::string t = i == 0 ? "" : "##";
      unicode::append_utf8(t, cps[i]);
      alphabet[t] += n;
      chars.push_back(std::move(t));
    }
    split.emplace_back(std::move(chars), n);
  }
  std::vector<std::pair<std::string, int64_t>> ranked(alphabet.begin(), alphabet.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  const auto room = static_cast<size_t>(opt.vocab_size) - specials.size();
  if (ranked.size() > room) ranked.resize(room);

  Merger m;
  std::vector<std::string> vocab = specials;
  for (const auto& [t, n] : ranked) vocab.push_back(t), m.symbol(t);
  for (auto& [chars, n] : split) {
    Word w;
    w.count = n;
    bool known = true;
    for (const std::string& c : chars) {
      auto it = m.lookup.find(c);
      if (it == m.lookup.end()) { known = false; break; }  // holds a character left out: always [UNK]
      w.symbols.push_back(it->second);
    }
    if (known && w.symbols.size() > 1) m.words.push_back(std::move(w));
  }
  for (int32_t w = 0; w < static_cast<int32_t>(m.words.size()); ++w) m.add_pairs(w, +1, nullptr);
  for (const auto& [p, n] : m.pair_count) m.heap.push({n, p});

  std::unordered_set<std::string> in_vocab(vocab.begin(), vocab.end());
  while (static_cast<int64_t>(vocab.size()) < opt.vocab_size && !m.heap.empty()) {
    HeapEntry e = m.heap.top();
    m.heap.pop();
    auto it = m.pair_count.find(e.pair);
    if (it == m.pair_count.end() || it->second != e.count) continue;  // stale entry
    if (e.count < opt.min_frequency) break;  // the best remaining pair is too rare
    const std::string& b = m.symbols[static_cast<size_t>(right(e.pair))];
    std::string merged = m.symbols[static_cast<size_t>(left(e.pair))] + b.substr(2);  // b always starts with ##
    int32_t id = m.symbol(merged);
    m.merge(e.pair, id);
    if (in_vocab.insert(merged).second) vocab.push_back(merged);
  }
  return Vocab(std::move(vocab));
}

}  // namespace tandem::data
