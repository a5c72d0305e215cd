#!/usr/bin/env python3
"""apps/scripts/wordpiece_reference.py: the expected ids of tests/test_wordpiece.cpp, from Hugging Face.

Tokenizes the tricky strings below with transformers' BertTokenizer(vocab_file, do_lower_case=True)
on tests/data/wordpiece_vocab.txt (a hand-written vocab with [UNK]/[MASK] at non-BERT positions, so
the C++ side must look them up by name), encode(..., add_special_tokens=False), and prints a C++
table to paste into the test. Where transformers also ships the pure-Python tokenizer
(BertTokenizerLegacy in transformers 5, BertTokenizer itself in 4.x) it is run too and any
disagreement is reported, so the table is what both implementations say.

    pip install transformers      # no torch needed
    python3 apps/scripts/wordpiece_reference.py [path/to/vocab.txt]
"""
import json
import sys
from pathlib import Path

# (C++ literal, Python string). The C++ side spells each string as a UTF-8 literal; keeping both
# spellings here means the printed table can be pasted unchanged.
CASES = [
    (r'"Caf\u00e9 na\u00efve r\u00e9sum\u00e9"', "Café naïve résumé"),
    (r'"unaffable"', "unaffable"),
    (r'"UNAFFABLE unaffables unaffed"', "UNAFFABLE unaffables unaffed"),
    (r'"Hello, World!"', "Hello, World!"),
    (r'"don\'t stop-believing..."', "don't stop-believing..."),
    (r'"1999 $42.50 3.14"', "1999 $42.50 3.14"),
    (r'"\u4e2d\u56fd\u4eba abc\u4e2d"', "中国人 abc中"),
    (r'"a\x01" "b\x7f" "c \u200bd"', "a\x01b\x7fc \u200bd"),
    ('std::string(101, \'x\') + " " + std::string(12, \'x\')', "x" * 101 + " " + "x" * 12),
    (r'"tabs\tand\nnewlines\r\nhere"', "tabs\tand\nnewlines\r\nhere"),
    (r'"it\'s \u201cquoted\u201d \u2014 \u00abque\u00bb \u2026 \u00bfque?"', "it's “quoted” — «que» … ¿que?"),
    (r'"emoji \U0001F600 here \U0001F389!"', "emoji 😀 here 🎉!"),
    (r'"\u00c0\u00c9\u00ce\u00d5\u00dc \u00f1 \u00e7 \u00d8 \u00df"', "ÀÉÎÕÜ ñ ç Ø ß"),
    (r'"\u0391\u0398\u0389\u039d\u0391 \u0401\u0436\u0438\u043a"', "ΑΘΉΝΑ Ёжик"),
    (r'"  leading and trailing spaces  \u00a0nbsp\u3000ideographic space "', "  leading and trailing spaces  \u00a0nbsp\u3000ideographic space "),
    (r'""', ""),
    (r'"e\u0301 combining"', "e\u0301 combining"),
    (r'"foo@bar.com http://x.y/z?a=1&b=2"', "foo@bar.com http://x.y/z?a=1&b=2"),
    (r'"soft\u00adhyphen zero\u200dwidth"', "soft\u00adhyphen zero\u200dwidth"),
    (r'"\u0130stanbul STRASSE Stra\u00dfe"', "İstanbul STRASSE Straße"),
    (r'"\u01d5 \u0133 \u00b7dot"', "Ǖ ĳ ·dot"),
    (r'"a~b^c`d|e"', "a~b^c`d|e"),
]


def main():
    vocab = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "tests/data/wordpiece_vocab.txt"
    import transformers
    from transformers import BertTokenizer
    tokenizers = {"BertTokenizer": BertTokenizer(str(vocab), do_lower_case=True)}
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
        tokenizers["BertTokenizerLegacy"] = BertTokenizerLegacy(str(vocab), do_lower_case=True)
    except ImportError:
        pass
    print(f"// transformers {transformers.__version__}: {', '.join(tokenizers)} on {vocab.name}")
    disagree = 0
    for cpp, text in CASES:
        ids = {name: tok.encode(text, add_special_tokens=False) for name, tok in tokenizers.items()}
        ref = ids["BertTokenizer"]
        for name, got in ids.items():
            if got != ref:
                disagree += 1
                print(f"// DISAGREE {name} on {text!r}: {got} vs BertTokenizer {ref}", file=sys.stderr)
        print(f"    {{{cpp}, {{{', '.join(map(str, ref))}}}}},")
    if disagree:
        print(f"{disagree} disagreements between Hugging Face's implementations (see above)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
