// tests/test_text_dataset.cpp: the text pipeline for the encoder: corpus files and their documents,
// the learnt vocab, packing, MLM masking statistics, sharding and resume of the text loader, the
// unigram baseline, and the errors a user can meet. Uses its own small corpus, never the fortunes
// package.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/check.h"
#include "data/mlm_baseline.h"
#include "data/text_corpus.h"
#include "data/text_dataset.h"
#include "data/text_loader.h"
#include "data/vocab_builder.h"
#include "data_test_util.h"

using namespace tandem;
using namespace tandem::data;
namespace fs = std::filesystem;

namespace {

// 60 short English documents built from a few sentences, so words repeat like real text.
std::vector<std::string> sample_documents() {
  const std::vector<std::string> s = {
      "The cat sat on the mat.", "A dog barked at the mailman, twice!", "Nobody expects the Spanish inquisition.",
      "Time flies like an arrow; fruit flies like a banana.", "It's a truth universally acknowledged.",
      "The quick brown fox jumps over the lazy dog.", "Programs must be written for people to read."};
  std::vector<std::string> docs;
  for (size_t d = 0; d < 60; ++d)
    docs.push_back(s[d % s.size()] + " " + s[(d * 3 + 1) % s.size()] + (d % 4 == 0 ? " " + s[(d + 2) % s.size()] : ""));
  return docs;
}

std::string fortune_file(const std::vector<std::string>& docs) {
  std::string out;
  for (const std::string& d : docs) out += d + "\n%\n";
  return out;
}

WordPiece sample_tokenizer() {
  WordCounts counts;
  for (const std::string& d : sample_documents()) count_words(d, {}, counts);
  VocabBuilderOptions o;
  o.vocab_size = 150;
  return WordPiece(build_wordpiece_vocab(counts, o));
}

std::shared_ptr<MlmDataset> sample_dataset(const WordPiece& wp, int64_t seq_len, int repeat = 1) {
  std::vector<int64_t> stream;
  for (int r = 0; r < repeat; ++r)
    for (const std::string& d : sample_documents()) {
      std::vector<int64_t> ids = wp.encode(d);
      stream.insert(stream.end(), ids.begin(), ids.end());
      stream.push_back(wp.special().sep);
    }
  MlmOptions o;
  o.seq_len = seq_len;
  return std::make_shared<MlmDataset>(std::move(stream), wp.special(), wp.vocab().size(), o);
}

TextLoaderOptions loader_options(int64_t batch_size, uint64_t seed) {
  TextLoaderOptions o;
  o.batch_size = batch_size;
  o.seed = seed;
  return o;
}

// One batch row as a tuple of its four rows, for set comparisons.
using Row = std::vector<int64_t>;
std::vector<Row> rows(const TextBatch& b) {
  std::vector<Row> out;
  const int64_t B = b.input_ids.size(0), L = b.input_ids.size(1);
  auto ids = b.input_ids.to_vector_i64(), attn = b.attention_mask.to_vector_i64(), lab = b.labels.to_vector_i64();
  for (int64_t r = 0; r < B; ++r) {
    Row row(ids.begin() + r * L, ids.begin() + (r + 1) * L);
    row.insert(row.end(), attn.begin() + r * L, attn.begin() + (r + 1) * L);
    row.insert(row.end(), lab.begin() + r * L, lab.begin() + (r + 1) * L);
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

TEST_CASE("text corpus: fortune entries and paragraphs become documents") {
  CHECK(split_documents("one\n%\ntwo lines\nhere\n%\n\n%\n  three \n") ==
        std::vector<std::string>{"one", "two lines\nhere", "three"});
  // No "%" line: paragraphs at blank (or whitespace-only) lines; a "%" inside a line is text.
  CHECK(split_documents("first para\n100% sure\n \t\nsecond\r\n\n\n") ==
        std::vector<std::string>{"first para\n100% sure", "second"});
  CHECK(split_documents("").empty());
}

TEST_CASE("text corpus: folders skip .dat indexes and linked duplicates; split is every n-th document") {
  TempDir dir;
  const std::vector<std::string> docs = sample_documents();
  std::ofstream(dir.file("b")) << fortune_file(std::vector<std::string>(docs.begin(), docs.begin() + 30));
  std::ofstream(dir.file("a")) << fortune_file(std::vector<std::string>(docs.begin() + 30, docs.end()));
  std::ofstream(dir.file("a.dat")) << std::string("\0\0\x02garbage", 10);
  fs::create_symlink(dir.file("a"), dir.file("a.u8"));
  CHECK(list_text_files({dir.path.string()}) == std::vector<std::string>{dir.file("a"), dir.file("b")});

  WordPiece wp = sample_tokenizer();
  TextCorpusOptions opt;
  opt.held_out_every = 3;
  TokenStreams s = build_token_streams({dir.path.string()}, wp, opt);
  CHECK(s.files == 2);
  CHECK(s.train_documents == 40);
  CHECK(s.held_out_documents == 20);
  // Corpus order is a's documents (30..59) then b's (0..29); document d is held out when d % 3 == 2.
  std::vector<int64_t> train, held;
  for (int d = 0; d < 60; ++d) {
    std::vector<int64_t> ids = wp.encode(docs[static_cast<size_t>(d < 30 ? d + 30 : d - 30)]);
    ids.push_back(wp.special().sep);
    (d % 3 == 2 ? held : train).insert((d % 3 == 2 ? held : train).end(), ids.begin(), ids.end());
  }
  CHECK(s.train == train);
  CHECK(s.held_out == held);
}

TEST_CASE("text corpus: errors for missing paths and corpora without text") {
  TempDir dir;
  WordPiece wp = sample_tokenizer();
  CHECK_THROWS_WITH_AS(build_token_streams({dir.file("nope")}, wp), doctest::Contains("does not exist"), Error);
  CHECK_THROWS_WITH_AS(build_token_streams({dir.path.string()}, wp), doctest::Contains("no text files"), Error);
  std::ofstream(dir.file("blank")) << "%\n \n%\n\x01\x02\n%\n";
  CHECK_THROWS_WITH_AS(build_token_streams({dir.path.string()}, wp), doctest::Contains("hold no text"), Error);
  CHECK_THROWS_WITH_AS(MlmDataset({}, wp.special(), wp.vocab().size()), doctest::Contains("stream is empty"), Error);
  Vocab no_mask(std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"});
  CHECK_THROWS_WITH_AS(SpecialIds::from(no_mask), doctest::Contains("[MASK]"), Error);
  auto tiny = sample_dataset(wp, 512);
  CHECK_THROWS_WITH_AS(TextLoader(tiny, loader_options(64, 0)), doctest::Contains("no full batch"), Error);
}

TEST_CASE("vocab builder: specials first, common words whole, every corpus word known, deterministic") {
  WordPiece wp = sample_tokenizer();
  const Vocab& v = wp.vocab();
  CHECK(v.size() == 150);
  CHECK(std::vector<std::string>(v.tokens().begin(), v.tokens().begin() + 5) ==
        std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"});
  for (const char* w : {"the", "flies", "like"}) CHECK_MESSAGE(v.find(w) >= 0, w);
  for (const std::string& d : sample_documents()) {
    std::vector<int64_t> ids = wp.encode(d);
    CHECK(std::find(ids.begin(), ids.end(), wp.special().unk) == ids.end());
  }
  CHECK(sample_tokenizer().vocab().tokens() == v.tokens());
}

TEST_CASE("mlm: packing is [CLS] + seq_len-2 stream tokens + [SEP]; only the last sequence is padded") {
  WordPiece wp = sample_tokenizer();
  auto ds = sample_dataset(wp, 16);
  const std::vector<int64_t>& st = ds->stream();
  const int64_t body = 14;
  CHECK(ds->size() == (static_cast<int64_t>(st.size()) + body - 1) / body);
  std::vector<int64_t> ids(16), attn(16);
  std::vector<int64_t> rebuilt;
  for (int64_t i = 0; i < ds->size(); ++i) {
    ds->packed(i, ids.data(), attn.data());
    CHECK(ids[0] == wp.special().cls);
    const int64_t n = std::count(attn.begin(), attn.end(), 1);
    CHECK(ids[static_cast<size_t>(n - 1)] == wp.special().sep);
    if (i + 1 < ds->size()) CHECK(n == 16);
    for (int64_t p = n; p < 16; ++p) CHECK(ids[static_cast<size_t>(p)] == wp.special().pad);
    rebuilt.insert(rebuilt.end(), ids.begin() + 1, ids.begin() + n - 1);
  }
  CHECK(rebuilt == st);  // packing loses and repeats nothing
}

TEST_CASE("mlm: masking proportions and labels") {
  WordPiece wp = sample_tokenizer();
  auto ds = sample_dataset(wp, 64, 20);
  const SpecialIds& sp = wp.special();
  std::vector<int64_t> ids(64), attn(64), labels(64), orig(64), orig_attn(64);
  int64_t chosen = 0, as_mask = 0, kept = 0, random = 0;
  for (int64_t i = 0; i < ds->size(); ++i) {
    ds->packed(i, orig.data(), orig_attn.data());
    const int64_t k = ds->get(i, {7, 0}, ids.data(), attn.data(), labels.data());
    const int64_t candidates = std::count_if(orig.begin(), orig.end(), [&](int64_t t) { return !sp.is_special(t); });
    CHECK(k == std::max<int64_t>(1, std::llround(0.15 * static_cast<double>(candidates))));  // exact count
    CHECK(attn == orig_attn);
    for (size_t p = 0; p < 64; ++p) {
      if (labels[p] == kIgnoreIndex) {
        CHECK(ids[p] == orig[p]);  // unchosen positions are untouched
        continue;
      }
      ++chosen;
      CHECK(labels[p] == orig[p]);
      CHECK_FALSE(sp.is_special(orig[p]));  // specials are never predicted
      if (ids[p] == sp.mask) ++as_mask;
      else if (ids[p] == orig[p]) ++kept;
      else {
        ++random;
        CHECK_FALSE(sp.is_special(ids[p]));
      }
    }
    CHECK(chosen > 0);
  }
  // chosen is ~2000, so each fraction's standard deviation is <= sqrt(0.25 / 2000) = 0.011; the
  // tolerances are ~4 of them. A random draw equal to the original (1 in ~145) counts as kept.
  REQUIRE(chosen > 1500);
  const double n = static_cast<double>(chosen);
  CHECK(std::abs(as_mask / n - 0.8) < 0.045);
  CHECK(std::abs(random / n - 0.1) < 0.04);
  CHECK(std::abs(kept / n - 0.1) < 0.04);
}

TEST_CASE("mlm: masks depend on (seed, epoch, index) only") {
  WordPiece wp = sample_tokenizer();
  auto ds = sample_dataset(wp, 32);
  auto draw = [&](uint64_t seed, int64_t epoch, int64_t i) {
    std::vector<int64_t> ids(32), attn(32), labels(32);
    ds->get(i, {seed, epoch}, ids.data(), attn.data(), labels.data());
    return labels;
  };
  CHECK(draw(1, 0, 3) == draw(1, 0, 3));
  CHECK(draw(1, 0, 3) != draw(1, 1, 3));  // dynamic masking: a new mask every epoch
  CHECK(draw(1, 0, 3) != draw(2, 0, 3));
}

TEST_CASE("text loader: 2 ranks x batch 2 see exactly 1 rank x batch 4, masks included") {
  WordPiece wp = sample_tokenizer();
  auto ds = sample_dataset(wp, 16);
  TextLoaderOptions one = loader_options(4, 11);
  one.pad_shards = false;
  TextLoader single(ds, one);
  std::vector<std::unique_ptr<TextLoader>> shards;
  for (int r = 0; r < 2; ++r) {
    TextLoaderOptions o = one;
    o.batch_size = 2, o.rank = r, o.world_size = 2;
    shards.push_back(std::make_unique<TextLoader>(ds, o));
  }
  REQUIRE(single.batches_per_epoch() == shards[0]->batches_per_epoch());
  std::multiset<Row> seen_epoch;
  single.start_epoch(2);
  for (auto& s : shards) s->start_epoch(2);
  TextBatch b, b0, b1;
  while (single.next(b)) {
    REQUIRE(shards[0]->next(b0));
    REQUIRE(shards[1]->next(b1));
    CHECK(b0.token_type_ids.to_vector_i64() == std::vector<int64_t>(32, 0));
    std::vector<Row> want = rows(b), got = rows(b0), more = rows(b1);
    got.insert(got.end(), more.begin(), more.end());
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    CHECK(got == want);
    CHECK(b0.masked + b1.masked == b.masked);
    for (Row& r : got) seen_epoch.insert(r);
  }
  // drop_last and no padding: every row once; disjoint across ranks.
  CHECK(std::set<Row>(seen_epoch.begin(), seen_epoch.end()).size() == seen_epoch.size());
  CHECK(static_cast<int64_t>(seen_epoch.size()) == single.batches_per_epoch() * 4);
}

TEST_CASE("text loader: resume mid-epoch equals the uninterrupted run") {
  WordPiece wp = sample_tokenizer();
  auto ds = sample_dataset(wp, 16);
  TextLoader full(ds, loader_options(3, 5)), resumed(ds, loader_options(3, 5));
  std::vector<std::vector<Row>> all;
  full.start_epoch(1);
  TextBatch b;
  while (full.next(b)) all.push_back(rows(b));
  REQUIRE(all.size() > 4);
  resumed.start_epoch(1);
  resumed.skip(4);
  for (size_t k = 4; k < all.size(); ++k) {
    REQUIRE(resumed.next(b));
    CHECK(b.index == static_cast<int64_t>(k));
    CHECK(rows(b) == all[k]);
  }
  CHECK_FALSE(resumed.next(b));
  CHECK(rows(full.batch(1, 2)) == all[2]);  // random access agrees too
}

TEST_CASE("text loader: k batches at (W, B), then the rest from samples_consumed() at (W', B'): the epoch's order once") {
  WordPiece wp = sample_tokenizer();
  auto ds = sample_dataset(wp, 16);
  const int64_t n = ds->size(), epoch = 2;
  REQUIRE(n >= 20);  // one batch of 5 on each of 4 ranks
  const uint64_t seed = 13;
  const std::vector<int64_t> perm = DistributedSampler({n, 0, 1, true, seed, false}).permutation(epoch);
  std::vector<std::vector<Row>> expected(static_cast<size_t>(n));  // sequence i, masked with (seed, epoch)
  {
    std::vector<int64_t> ids(16), attn(16), lab(16);
    for (int64_t i = 0; i < n; ++i) {
      ds->get(i, {seed, epoch}, ids.data(), attn.data(), lab.data());
      Row row = ids;
      row.insert(row.end(), attn.begin(), attn.end());
      row.insert(row.end(), lab.begin(), lab.end());
      expected[static_cast<size_t>(i)] = {row};
    }
  }
  // Reads from `start`, at most `steps` steps (-1: all), on `world` ranks of batch `batch`; appends
  // the rows in global reading order (step, row, rank) and returns samples_consumed().
  auto read = [&](int world, int64_t batch, bool pad, int64_t start, int64_t steps, std::vector<Row>& seq) {
    std::vector<std::unique_ptr<TextLoader>> ranks;
    for (int r = 0; r < world; ++r) {
      TextLoaderOptions o = loader_options(batch, seed);
      o.rank = r, o.world_size = world, o.pad_shards = pad;
      ranks.push_back(std::make_unique<TextLoader>(ds, o));
      ranks.back()->start_epoch(epoch, start);
    }
    const int64_t left = ranks[0]->batches_left();
    const size_t before = seq.size();
    for (int64_t j = 0; j < left && (steps < 0 || j < steps); ++j) {
      std::vector<std::vector<Row>> per_rank;
      for (auto& l : ranks) {
        TextBatch b;
        REQUIRE(l->next(b));
        CHECK(b.index == j);
        per_rank.push_back(rows(b));
      }
      for (size_t i = 0; i < per_rank[0].size(); ++i)
        for (const auto& rr : per_rank) seq.push_back(rr[i]);
      for (auto& l : ranks) {
        CHECK(l->samples_consumed() == std::min<int64_t>(n, start + static_cast<int64_t>(seq.size() - before)));
        CHECK(l->batches_left() == left - j - 1);
      }
    }
    return ranks[0]->samples_consumed();
  };
  for (bool pad : {true, false})
    for (int w : {1, 2, 4})
      for (int64_t b : {2, 3, 5}) {
        TextLoaderOptions probe = loader_options(b, seed);
        probe.world_size = w, probe.pad_shards = pad;
        const int64_t batches = TextLoader(ds, probe).batches_per_epoch();
        for (int64_t k : {int64_t{0}, int64_t{1}, batches / 2, batches - 1, batches}) {
          std::vector<Row> head;
          const int64_t offset = read(w, b, pad, 0, k, head);
          REQUIRE(head.size() == static_cast<size_t>(k * b * w));
          for (int w2 : {1, 2, 4})
            for (int64_t b2 : {2, 3, 5}) {
              CAPTURE(pad); CAPTURE(w); CAPTURE(b); CAPTURE(k); CAPTURE(w2); CAPTURE(b2);
              std::vector<Row> seq = head;
              read(w2, b2, pad, offset, -1, seq);
              // Position p of the reading holds sequence perm[p % n] (p >= n: padding), masked alike.
              for (size_t p = 0; p < seq.size(); ++p) {
                CAPTURE(p);
                REQUIRE(seq[p] == expected[static_cast<size_t>(perm[p % static_cast<size_t>(n)])][0]);
              }
              const auto got = static_cast<int64_t>(seq.size());
              CHECK(got < n + std::max(w, w2));                     // padding: under one world's worth
              CHECK(n - got < b2 * w2 + (pad ? 0 : w2));            // drop_last + cut: under a step's worth
            }
        }
      }
  // skip(k) is start_epoch(e, k * B * W) on the same W and B, batch numbers aside.
  TextLoaderOptions o = loader_options(3, seed);
  o.world_size = 2, o.rank = 1;
  TextLoader skipped(ds, o), offset(ds, o);
  skipped.start_epoch(epoch);
  skipped.skip(2);
  offset.start_epoch(epoch, 2 * 3 * 2);
  CHECK(skipped.samples_consumed() == offset.samples_consumed());
  CHECK(skipped.batches_left() == offset.batches_left());
  TextBatch x, y;
  while (skipped.next(x)) {
    REQUIRE(offset.next(y));
    CHECK(rows(x) == rows(y));
    CHECK(x.index == y.index + 2);
  }
  CHECK_FALSE(offset.next(y));
  CHECK_THROWS_AS(offset.start_epoch(epoch, n + 1), Error);
}

TEST_CASE("unigram baseline: the training stream's top token scored on held-out masked labels") {
  WordPiece wp = sample_tokenizer();
  auto held = sample_dataset(wp, 16);
  const SpecialIds& sp = wp.special();
  const int64_t the = wp.vocab().find("the"), cat = wp.vocab().find("cat");
  REQUIRE(the >= 0);
  REQUIRE(cat >= 0);
  // "cat" dominates this training stream even though "the" dominates the held-out text.
  std::vector<int64_t> train = {cat, cat, cat, the, sp.sep, sp.sep, sp.sep, sp.sep, sp.sep};
  UnigramBaseline u = unigram_baseline(train, *held, {3, 0});
  CHECK(u.token == cat);  // [SEP] is more frequent but special
  int64_t masked = 0, hits = 0;
  double nll = 0;
  const double denom = 4.0 + static_cast<double>(wp.vocab().size() - 5);
  std::vector<int64_t> ids(16), attn(16), labels(16);
  for (int64_t i = 0; i < held->size(); ++i) {
    held->get(i, {3, 0}, ids.data(), attn.data(), labels.data());
    for (int64_t y : labels) {
      if (y == kIgnoreIndex) continue;
      ++masked, hits += y == cat;
      nll -= std::log((y == cat ? 4.0 : y == the ? 2.0 : 1.0) / denom);
    }
  }
  CHECK(u.masked == masked);
  CHECK(u.accuracy == doctest::Approx(static_cast<double>(hits) / static_cast<double>(masked)));
  CHECK(u.loss == doctest::Approx(nll / static_cast<double>(masked)));
  CHECK(u.accuracy > 0);
  CHECK(u.accuracy < 0.2);
}

TEST_CASE("text corpus: a device such as /dev/zero is refused by name, not read until memory runs out") {
  // Issue 29, item 5: train_encoder --data /dev/zero ended in a bare std::bad_alloc.
  std::string e;
  try {
    list_text_files({"/dev/zero"});
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(e.find("'/dev/zero' is neither a text file nor a folder") != std::string::npos);
}
