// data/text_corpus.cpp: file listing, fortune/paragraph splitting and the train/held-out streams.
#include "data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"

namespace tandem::data {
namespace fs = std::filesystem;

namespace {

bool skipped_name(const fs::path& p) { return p.extension() == ".dat"; }

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t a = s.find_first_not_of(ws);
  if (a == std::string_view::npos) return {};
  size_t b = s.find_last_not_of(ws);
  return std::string(s.substr(a, b - a + 1));
}

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& paths) {
  TANDEM_CHECK(!paths.empty(), "text corpus: no input given; pass text files or folders (e.g. ",
               "/usr/share/games/fortunes after apt-get install fortunes)");
  std::vector<std::string> files;
  std::set<fs::path> seen;
  auto add = [&](const fs::path& p) {
    fs::path canon = fs::weakly_canonical(p);
    if (seen.insert(canon).second) files.push_back(p.string());
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    TANDEM_CHECK(fs::exists(path, ec), "text corpus: '", path, "' does not exist; pass text files or folders");
    if (fs::is_directory(path)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::recursive_directory_iterator(path, fs::directory_options::follow_directory_symlink))
        if (e.is_regular_file() && !skipped_name(e.path())) found.push_back(e.path());
      std::sort(found.begin(), found.end());
      for (const fs::path& p : found) add(p);
    } else {
      // A device or a pipe (/dev/zero) would be read to its end - which may never come - into memory.
      TANDEM_CHECK(fs::is_regular_file(path, ec), "text corpus: '", path, "' is neither a text file nor a folder "
                   "(a device or a pipe?); pass text files or folders");
      add(path);
    }
  }
  TANDEM_CHECK(!files.empty(), "text corpus: no text files under the given paths (names ending .dat are skipped)");
  return files;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), "text corpus: cannot read '", path, "'; check its permissions");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> jsonl_documents(std::string_view content, const std::string& field, const std::string& file) {
  std::vector<std::string> docs;
  int64_t number = 0;
  for (size_t pos = 0; pos < content.size();) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    const std::string_view line = content.substr(pos, nl - pos);
    pos = nl + 1, ++number;
    if (blank(line)) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    TANDEM_CHECK(j.is_object() && j.contains(field) && j[field].is_string(), "text corpus: ", file, " line ", number,
                 " is not a JSON object with a string \"", field, "\" field (a .jsonl file holds one such object per "
                 "line; pass [text_field NAME] for another field)");
    std::string t = trim(j[field].get<std::string>());
    if (!t.empty()) docs.push_back(std::move(t));
  }
  return docs;
}

std::vector<std::string> split_documents(std::string_view content, bool line_by_line) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < content.size();) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    lines.push_back(content.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::vector<std::string> docs;
  if (line_by_line) {
    for (std::string_view l : lines)
      if (std::string t = trim(l); !t.empty()) docs.push_back(std::move(t));
    return docs;
  }
  auto is_percent = [](std::string_view l) { return l == "%" || l == "%\r"; };
  const bool fortune = std::any_of(lines.begin(), lines.end(), is_percent);
  std::string cur;
  auto flush = [&]() {
    std::string t = trim(cur);
    if (!t.empty()) docs.push_back(std::move(t));
    cur.clear();
  };
  for (std::string_view l : lines) {
    if (fortune ? is_percent(l) : blank(l)) {
      flush();
    } else {
      cur.append(l);
      cur.push_back('\n');
    }
  }
  flush();
  return docs;
}

TokenStreams build_token_streams(const std::vector<std::string>& paths, const WordPiece& tokenizer,
                                 const TextCorpusOptions& opt) {
  TANDEM_CHECK(opt.held_out_every >= 2, "text corpus: held_out_every must be >= 2 (every n-th document is held ",
               "out), got ", opt.held_out_every);
  TokenStreams out;
  const int64_t sep = tokenizer.special().sep;
  int64_t doc_index = 0;
  for (const std::string& file : list_text_files(paths)) {
    std::string content = read_text_file(file);
    out.files += 1;
    out.bytes += static_cast<int64_t>(content.size());
    const bool jsonl = fs::path(file).extension() == ".jsonl";
    for (const std::string& doc : jsonl ? jsonl_documents(content, opt.jsonl_field, file)
                                        : split_documents(content, opt.line_by_line)) {
      std::vector<int64_t> ids = tokenizer.encode(doc);
      if (ids.empty()) continue;  // only control characters or whitespace
      const bool held = doc_index % opt.held_out_every == opt.held_out_every - 1;
      std::vector<int64_t>& stream = held ? out.held_out : out.train;
      stream.insert(stream.end(), ids.begin(), ids.end());
      stream.push_back(sep);
      (held ? out.held_out_documents : out.train_documents) += 1;
      ++doc_index;
    }
  }
  TANDEM_CHECK(doc_index > 0, "text corpus: the ", out.files, " file(s) under the given paths hold no text; ",
               "pass files with words in them");
  return out;
}

}  // namespace tandem::data
