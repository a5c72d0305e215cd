// data/text_corpus.h: text files -> documents -> the token streams of a masked-language-model corpus.
//
// Files: each path is a file or a folder; a folder contributes its regular files recursively, in
// sorted path order. Skipped: names ending ".dat" (the strfile indexes that sit beside fortune files)
// and files whose canonical path was already taken (the fortunes package links x.u8 -> x), so the
// Debian fortunes folder reads each text once.
// Documents: a file whose name ends ".jsonl" holds one JSON object per line and its `jsonl_field`
// string ("text", as Hugging Face's datasets write it) is a document; a line that is not such an
// object is refused, naming the file and line. With line_by_line (HF run_mlm's --line_by_line) every
// non-blank line of any other file is a document. Otherwise a file that has a line consisting of "%"
// alone is in fortune(6) format and every "%"-separated entry is a document, and any other file is
// split into paragraphs at blank lines (lines of whitespace only). Documents that tokenize to
// nothing are dropped.
// Split: documents are numbered 0, 1, ... in file order across the whole corpus, and document d is
// held out when d % held_out_every == held_out_every - 1 (every 20th: 5 %, taken from every file, so
// held-out text has the same mix of topics as training text).
// Stream: each split's documents are tokenized once (data/wordpiece.h) and concatenated, each
// followed by [SEP], so a document boundary is always visible to the model, including inside a
// packed sequence (data/text_dataset.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/wordpiece.h"

namespace tandem::data {

struct TextCorpusOptions {
  int held_out_every = 20;          // every 20th document is held out (5 %); must be >= 2
  bool line_by_line = false;        // every non-blank line is a document (not .jsonl files)
  std::string jsonl_field = "text";  // the string field of a .jsonl line that is the document
};

// The text files under paths, as described above; throws for a missing path or no files at all.
std::vector<std::string> list_text_files(const std::vector<std::string>& paths);
// The documents of one file's content (fortune entries or paragraphs; lines with line_by_line),
// whitespace-trimmed.
std::vector<std::string> split_documents(std::string_view content, bool line_by_line = false);
// The `field` strings of a JSON-lines content, one per non-blank line; throws naming `file` and the
// line for a line that is not an object with that string field.
std::vector<std::string> jsonl_documents(std::string_view content, const std::string& field, const std::string& file);
// The file's content; throws naming the file when it cannot be read.
std::string read_text_file(const std::string& path);

struct TokenStreams {
  std::vector<int64_t> train;     // token ids, [SEP] after every document
  std::vector<int64_t> held_out;  // same for the held-out documents
  int64_t files = 0;
  int64_t bytes = 0;
  int64_t train_documents = 0;
  int64_t held_out_documents = 0;
};

// Reads, splits and tokenizes the corpus; throws when it holds no (non-empty) document.
TokenStreams build_token_streams(const std::vector<std::string>& paths, const WordPiece& tokenizer,
                                 const TextCorpusOptions& opt = {});

}  // namespace tandem::data
