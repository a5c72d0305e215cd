// apps/make_vocab: learns a BERT-style WordPiece vocab.txt from a text corpus.
//
//   make_vocab [paths...] --out vocab.txt --size 8000
//
// Paths are text files or folders (default: /usr/share/games/fortunes, Debian's `fortunes` package:
// apt-get install fortunes); folders are read as data/text_corpus.h describes (fortune entries or
// paragraphs, *.dat skipped). The vocab is [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4, the alphabet,
// then pieces learnt by frequency-ranked merges (data/vocab_builder.h). The output is a pure
// function of the corpus and the flags. Prints corpus statistics, the time taken, and a sample
// sentence tokenized with the new vocab.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"            // defines: tandem::Error
#include "data/text_corpus.h"      // defines: list_text_files, read_text_file, split_documents
#include "data/vocab_builder.h"    // defines: count_words, build_wordpiece_vocab
#include "data/wordpiece.h"        // defines: WordPiece (the sample tokenization)

using namespace tandem;

namespace {

struct Options {
  std::vector<std::string> inputs{"/usr/share/games/fortunes"};
  std::string out = "vocab.txt";
  data::VocabBuilderOptions build;
  bool cased = false;
  std::string sample = "The quick brown fox doesn't jump over the unbelievably lazy dog.";
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  data::VocabBuilderOptions b = o.build;
  b.basic.lower_case = b.basic.strip_accents = !o.cased;
  data::WordCounts counts;
  int64_t files = 0, bytes = 0, docs = 0;
  for (const std::string& f : data::list_text_files(o.inputs)) {
    std::string text = data::read_text_file(f);
    ++files, bytes += static_cast<int64_t>(text.size());
    for (const std::string& d : data::split_documents(text)) data::count_words(d, b.basic, counts), ++docs;
  }
  int64_t words = 0;
  for (const auto& [w, n] : counts) words += n;
  std::printf("corpus: %lld files, %.2f MB, %lld documents, %lld words (%zu distinct), read in %.2f s\n",
              (long long)files, bytes / 1e6, (long long)docs, (long long)words, counts.size(), seconds_since(t0));
  const auto t1 = std::chrono::steady_clock::now();
  data::Vocab vocab = data::build_wordpiece_vocab(counts, b);
  vocab.save(o.out);
  std::printf("vocab: %lld tokens written to %s in %.2f s%s\n", (long long)vocab.size(), o.out.c_str(),
              seconds_since(t1),
              vocab.size() < b.vocab_size ? " (fewer than --size: no pair left with --min-frequency occurrences)" : "");
  data::WordPieceOptions wo;
  wo.basic = b.basic;
  data::WordPiece wp(vocab, wo);
  std::printf("sample: %s\n  ->", o.sample.c_str());
  for (const std::string& t : wp.tokenize(o.sample)) std::printf(" %s", t.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Learn a BERT-style WordPiece vocab.txt from text files or folders"};
  app.add_option("inputs", o.inputs, "Text files or folders (fortune files, or paragraphs split at blank lines)")
      ->capture_default_str();
  app.add_option("--out", o.out, "Where to write vocab.txt")->capture_default_str();
  app.add_option("--size", o.build.vocab_size, "Vocab size, the 5 special tokens included")
      ->capture_default_str()->check(CLI::Range(int64_t{6}, int64_t{1} << 31));
  app.add_option("--min-frequency", o.build.min_frequency, "Never merge a pair seen fewer times")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--cased", o.cased, "Keep case and accents (default: lower-case and strip accents, uncased BERT)");
  app.add_option("--sample", o.sample, "A sentence to tokenize with the new vocab")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "make_vocab: %s\n", e.what());
    return 1;
  }
}
