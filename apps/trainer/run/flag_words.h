// apps/trainer/run/flag_words.h: library words -> the trainers' flags, at the apps' boundary.
//
// Libraries name their own options, never a program's flag: an option in brackets, with its value
// if any ("[resume auto]", "[overwrite]", "[dir <folder>]": checkpoint/README.md). Every message of a
// library that the trainers print or record goes through flag_words first, so a user reads the flag
// to change ("--resume auto", "--overwrite-checkpoints", "--checkpoint-dir <folder>"). A bracket whose
// option is not in the table is left as it is.
#pragma once
#include <string>

namespace tandem::trainer {

std::string flag_words(const std::string& library_message);

}  // namespace tandem::trainer
