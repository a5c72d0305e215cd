#!/usr/bin/python3
"""Writes the key lists tests/test_export_weights.cpp compares export_weights' files with: one
"name shape" line per state_dict() entry, in the framework's order.

    /usr/bin/python3 tests/data/export/make_key_lists.py tests/data/export

torchvision_resnet18.txt, torchvision_resnet50.txt
    torchvision.models.resnetXX().state_dict() (1000 classes; Debian's python3-torchvision 0.14).
hf_bert_tiny_mlm.txt
    Hugging Face's BertForMaskedLM(bert_tiny: 2 layers, hidden 128, vocab 30522).state_dict(). With
    transformers installed it is read from transformers itself; without it (this machine), from
    apps/scripts/bert_torch.py - whose parameter names are HF's named_parameters(), checked there
    against transformers - plus the two entries HF's state_dict() adds for the tied decoder
    (cls.predictions.decoder.weight and .bias; position_ids is a non-persistent buffer since
    transformers 4.31). The file's first line says which source made it.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, sd, source):
    with open(path, "w") as f:
        f.write(f"# {source}\n")
        for name, t in sd.items():
            f.write(f"{name} [{','.join(str(n) for n in t.shape)}]\n")
    print("wrote", path, len(sd), "entries")


def main(out):
    import torchvision
    for depth in (18, 50):
        m = getattr(torchvision.models, f"resnet{depth}")()
        write(os.path.join(out, f"torchvision_resnet{depth}.txt"), m.state_dict(),
              f"torchvision {torchvision.__version__} resnet{depth}().state_dict()")
    try:
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=512)
        import transformers
        write(os.path.join(out, "hf_bert_tiny_mlm.txt"), BertForMaskedLM(cfg).state_dict(),
              f"transformers {transformers.__version__} BertForMaskedLM(bert_tiny).state_dict()")
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "apps", "scripts"))
        import bert_torch
        sd = dict(bert_torch.BertForMaskedLM("bert_tiny", vocab=30522).state_dict())
        sd["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"]
        sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"]
        write(os.path.join(out, "hf_bert_tiny_mlm.txt"), sd,
              "apps/scripts/bert_torch.py BertForMaskedLM(bert_tiny) + HF's tied-decoder aliases (no transformers here)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
