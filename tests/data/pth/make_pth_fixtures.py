#!/usr/bin/python3
"""Writes the .pth fixtures of tests/test_torch_save.cpp with a real torch.save (PyTorch's zip format,
pickle protocol 2). Run with a python3 that has torch (Debian: /usr/bin/python3 with python3-torch;
these were made by torch 1.13):

    /usr/bin/python3 tests/data/pth/make_pth_fixtures.py tests/data/pth

small_cnn.pth        a torch nn.Sequential laid out like tandem's small_cnn (3 classes) after a few
                     training-mode forwards, so its BatchNorm statistics and num_batches_tracked are not
                     the defaults: model.state_dict() as PyTorch users save it (with _metadata).
small_cnn_input.safetensors / small_cnn_logits.safetensors
                     an input (2 x 3 x 16 x 16) and PyTorch's eval-mode logits on it; safetensors written
                     by hand (the format is 8 bytes of header length, a JSON header, raw bytes), since
                     Debian has no Python safetensors package.
wrapped_model.pth    {"model": state_dict, "epoch": 3}   the checkpoint wrappers a state dict is taken from
wrapped_state_dict.pth {"state_dict": state_dict}
strided.pth          {"t": arange(6).reshape(2, 3).t(), "h": arange(4) in f16, "d": f64, "i": int32, "s": a
                     slice at a storage offset}: strides, offsets and dtypes (expected values are formulas)
evil.pth             an object whose __reduce__ calls os.system: must be refused, never run
namespace.pth        {"model": state_dict, "args": argparse.Namespace(...)}: torchvision's checkpoint
                     shape, refused naming argparse.Namespace
compressed.pth       small_cnn.pth re-zipped with deflate: refused (torch.save stores entries)
"""
import argparse
import collections
import json
import os
import struct
import sys
import zipfile

import torch
import torch.nn as nn


def small_cnn(num_classes):
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    return nn.Sequential(*block(3, 16), nn.MaxPool2d(2), *block(16, 32), nn.MaxPool2d(2), *block(32, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/tandem_pth_was_executed",))


def main(out):
    torch.manual_seed(0)
    model = small_cnn(3)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, 16, 16) * 2 + 0.5)
    model.eval()
    sd = model.state_dict()
    torch.save(sd, os.path.join(out, "small_cnn.pth"))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        y = model(x)
    save_safetensors(os.path.join(out, "small_cnn_input.safetensors"), {"input": x})
    save_safetensors(os.path.join(out, "small_cnn_logits.safetensors"), {"logits": y})
    torch.save({"model": sd, "epoch": 3}, os.path.join(out, "wrapped_model.pth"))
    torch.save({"state_dict": sd}, os.path.join(out, "wrapped_state_dict.pth"))
    base = torch.arange(10, dtype=torch.float32)
    strided = collections.OrderedDict(
        t=torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
        h=torch.arange(4, dtype=torch.float16),
        d=torch.arange(3, dtype=torch.float64) * 0.5,
        i=torch.arange(5, dtype=torch.int32) - 2,
        s=base[4:7])
    torch.save(strided, os.path.join(out, "strided.pth"))
    torch.save({"model": Evil()}, os.path.join(out, "evil.pth"))
    torch.save({"model": sd, "args": argparse.Namespace(lr=0.1)}, os.path.join(out, "namespace.pth"))
    with zipfile.ZipFile(os.path.join(out, "small_cnn.pth")) as src, \
            zipfile.ZipFile(os.path.join(out, "compressed.pth"), "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    print("torch", torch.__version__, "wrote", sorted(os.listdir(out)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
