// tests/test_flag_words.cpp: the checkpoint folder's messages name its options ("[resume auto]"); the
// trainers' boundary (apps/trainer/run/flag_words.h) turns them into the flags a user types, word for word
// what the library said before it stopped naming flags.
#include <doctest/doctest.h>

#include <string>

#include "apps/trainer/run/flag_words.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint_test_util.h"

using namespace tandem;
using tandem::trainer::flag_words;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a fresh-start refusal: library words in the library, the trainers' flags after flag_words") {
  ckpt_test::Scratch dir("flag_words");
  ckpt_test::write(checkpoint_path(dir.str(), 3), ckpt_test::state("3f2a", 30, 3));
  const std::string library = fresh_start_refusal(dir.str(), list_checkpoints(dir.str()));
  CHECK(!has(library, "--"));
  const std::string user = flag_words(library);
  CHECK(has(user, "Continue that run with --resume auto (or --resume <file>); or start a new run beside those "
                  "files with --overwrite-checkpoints (they are kept, never pruned and never replaced, and "
                  "--resume auto then follows the new run); or choose another --checkpoint-dir."));
  CHECK(!has(user, "["));
  CHECK(has(user, "checkpoint_epoch3.safetensors  run 3f2a  step 30"));  // the rest untouched
}

TEST_CASE("resume auto's notes and errors, the lock's refusal, the data and optimizer words") {
  const std::string d = "/data/ck";
  CHECK(flag_words(resume_auto_found_nothing(d, false, "", {})) ==
        "--resume auto: checkpoint folder '/data/ck' did not exist (created it), so there is nothing to resume: "
        "starting a new run");
  CHECK(flag_words("give this job another [dir].") == "give this job another --checkpoint-dir.");
  CHECK(flag_words("pass [dir <folder>]") == "pass --checkpoint-dir <folder>");
  CHECK(flag_words("name its run ([run_id <id>]).") == "name its run (--run-id <id>).");
  CHECK(flag_words("[servers 3] must be between 1 and 2") == "--ps-servers 3 must be between 1 and 2");
  CHECK(flag_words("drop [strict] to skip") == "drop --strict to skip");
  CHECK(flag_words("pass [text_field NAME] for another field") == "pass --text-field NAME for another field");
  CHECK(flag_words("(leave [clip_grad_norm] unset)") == "(leave --clip-grad-norm unset)");
  CHECK(flag_words("use [momentum] instead") == "use --momentum instead");
}

TEST_CASE("brackets that are not options are left alone") {
  for (const std::string s : {"shape [out, in]", "[B, S, H]", "x[0]", "[unknown_option]", "a [b", "", "[]"})
    CHECK(flag_words(s) == s);
}
