// data/unicode_tables.h: lookups into the generated Unicode tables (internal to data/unicode.cpp).
#pragma once

namespace tandem::data::unicode::tables {

bool is_punctuation_category(char32_t c);  // general category P*
bool is_format_or_private(char32_t c);     // Cf or Co
bool is_space_separator(char32_t c);       // Zs
char32_t lower(char32_t c);                // simple lower case in the covered blocks, else c
char32_t base_letter(char32_t c);          // NFD base of a precomposed letter in U+00C0-1FFF, else c

}  // namespace tandem::data::unicode::tables
