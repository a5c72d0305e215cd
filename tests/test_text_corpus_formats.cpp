// tests/test_text_corpus_formats.cpp: the text layouts Hugging Face users bring (issue 30):
// one document per line (--line-by-line, run_mlm's --line_by_line) and JSON lines with a "text" field
// (data/text_corpus.h), and train_encoder's warning when nothing is held out - a one-document-per-line
// file read as paragraphs used to become one document, with no validation and no word about it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "data/text_corpus.h"
#include "tests/support/app_runner.h"

namespace fs = std::filesystem;
using namespace tandem;
using tandem::testing::app;
using tandem::testing::AppRun;
using tandem::testing::run_app_on;

namespace {
const fs::path& root() {
  static const fs::path r = tandem::testing::scratch_dir("tandem_corpus_formats");
  return r;
}
std::string write(const std::string& name, const std::string& text) {
  const fs::path p = root() / name;
  std::ofstream(p) << text;
  return p.string();
}
// 40 one-line documents, no blank line between them: the shape of run_mlm's --line_by_line input.
std::string lines_text() {
  std::string s;
  for (int i = 0; i < 40; ++i) s += "the cat sat on the mat number " + std::to_string(i) + "\n";
  return s;
}
}  // namespace

TEST_CASE("split_documents: --line-by-line makes every non-blank line a document; the default makes paragraphs") {
  const std::string text = "first line\nsecond line\n\n  third line  \n";
  CHECK(data::split_documents(text).size() == 2);
  const auto lines = data::split_documents(text, /*line_by_line=*/true);
  REQUIRE(lines.size() == 3);
  CHECK(lines[2] == "third line");
}

TEST_CASE("jsonl_documents: the text field of each line; a line that is not such an object is refused by number") {
  const auto docs = data::jsonl_documents("{\"text\": \"a b\", \"id\": 1}\n\n{\"text\": \"c\"}\n", "text", "f.jsonl");
  REQUIRE(docs.size() == 2);
  CHECK(docs[0] == "a b");
  for (const char* bad : {"{\"text\": \"a\"}\nnot json\n", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n",
                          "{\"text\": \"a\"}\n{\"text\": 5}\n"}) {
    CHECK_THROWS_WITH_AS(data::jsonl_documents(bad, "text", "f.jsonl"), doctest::Contains("f.jsonl line 2"), Error);
  }
  CHECK(data::jsonl_documents("{\"body\": \"x\"}\n", "body", "f.jsonl").size() == 1);
}

TEST_CASE("train_encoder: one document per line - a warning without --line-by-line, held-out text with it; .jsonl") {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  const std::string vocab = (fs::path(src) / "tests/data/wordpiece_vocab.txt").string();
  const std::string lines = write("lines.txt", lines_text());
  std::string jsonl;
  for (int i = 0; i < 40; ++i) jsonl += "{\"text\": \"the cat sat on the mat number " + std::to_string(i) + "\"}\n";
  const std::string json_file = write("docs.jsonl", jsonl);
  const std::string common = app("train_encoder") + " --device cpu --model bert_tiny --seq-len 16 --batch-size 2 "
                                                    "--steps 1 --vocab " + vocab + " --data ";
  const AppRun plain = run_app_on(0, common + lines);
  INFO(plain.output);
  REQUIRE(plain.status == 0);
  CHECK(plain.has("1 training / 0 held-out documents"));
  CHECK(plain.has("warning: nothing is held out"));
  CHECK(plain.has("--line-by-line"));
  const AppRun by_line = run_app_on(0, common + lines + " --line-by-line");
  INFO(by_line.output);
  REQUIRE(by_line.status == 0);
  CHECK(by_line.has("38 training / 2 held-out documents"));  // every 20th of 40
  CHECK(!by_line.has("warning: nothing is held out"));
  const AppRun js = run_app_on(0, common + json_file);
  INFO(js.output);
  REQUIRE(js.status == 0);
  CHECK(js.has("38 training / 2 held-out documents"));
  const AppRun field = run_app_on(0, common + json_file + " --text-field body");
  CHECK(field.status != 0);
  CHECK(field.has("docs.jsonl line 1"));
}

TEST_CASE("train_encoder --evaluate prints the held-out accuracy and loss the run's last validation printed") {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  const std::string vocab = (fs::path(src) / "tests/data/wordpiece_vocab.txt").string();
  const std::string lines = write("eval_lines.txt", lines_text());
  const std::string dir = (root() / "eval_run").string();
  const std::string common = app("train_encoder") + " --device cpu --model bert_tiny --seq-len 16 --batch-size 2 "
                                                    "--vocab " + vocab + " --line-by-line --data " + lines;
  const AppRun train = run_app_on(0, common + " --steps 2 --run-id ev --checkpoint-dir " + dir);
  INFO(train.output);
  REQUIRE(train.status == 0);
  const size_t at = train.output.rfind("validation step 2:");
  REQUIRE(at != std::string::npos);
  const std::string line = train.output.substr(at, train.output.find('\n', at) - at);
  std::string ckpt;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") ckpt = e.path().string();
  REQUIRE(!ckpt.empty());
  const AppRun eval = run_app_on(0, common + " --evaluate --resume " + ckpt);
  INFO(eval.output);
  REQUIRE(eval.status == 0);
  CHECK(eval.has(line));  // the same weights, masks and sequences: the same numbers
  CHECK(!eval.has("step 1/"));  // no training
  tandem::testing::check_refused(common + " --evaluate", "--evaluate needs --resume CHECKPOINT");
}

TEST_CASE("train_encoder --epochs: the steps of that many passes over the training sequences") {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  REQUIRE(src != nullptr);
  const std::string vocab = (fs::path(src) / "tests/data/wordpiece_vocab.txt").string();
  const std::string common = app("train_encoder") + " --device cpu --model bert_tiny --seq-len 16 --batch-size 2 "
                                                    "--log-every 1 --vocab " + vocab + " --line-by-line --data " +
                             write("epoch_lines.txt", lines_text());
  const AppRun r = run_app_on(0, common + " --epochs 2");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const size_t at = r.output.find("--epochs 2: 2 x ");
  REQUIRE(at != std::string::npos);
  const long long sequences = std::stoll(r.output.substr(at + 16));
  const long long steps = (2 * sequences + 1) / 2;  // ceil(2 x sequences / global batch 2)
  CHECK(r.has("= " + std::to_string(steps) + " steps"));
  CHECK(r.has("step " + std::to_string(steps) + "/" + std::to_string(steps) + " |"));
  tandem::testing::check_refused(common + " --epochs 2 --steps 5", "--epochs");
}
