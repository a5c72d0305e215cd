// apps/trainer/step/name_table.h: an enum's names as one table, read both ways.
//
// The choices a user spells on the command line (a strategy, a precision) are enums inside the
// library. One table per enum gives both directions - the enum from a flag's word, the word for a
// printout - so a new choice is one row, not a case in a switch and an if in a parser that can
// drift apart. Several words may name one value (aliases such as "off" and "f32"); the first row of
// a value is its printed name. Header-only: apps/whatif reads its strategy names with it too.
#pragma once
#include <optional>
#include <string_view>
#include <utility>

namespace tandem::trainer {

template <class E>
using NameTable = std::pair<E, const char*>;

// The value `word` names in `table`; nullopt when no row spells it (the caller words the refusal).
template <class E, size_t N>
std::optional<E> from_name(const NameTable<E> (&table)[N], std::string_view word) {
  for (const auto& [value, name] : table)
    if (word == name) return value;
  return std::nullopt;
}

// The first name of `value` in `table`; "?" for a value the table lacks.
template <class E, size_t N>
const char* name_of(const NameTable<E> (&table)[N], E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";
}

}  // namespace tandem::trainer
