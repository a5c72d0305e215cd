// core/safetensors.h: read and write the safetensors file format.
//
// A safetensors file is: 8 bytes holding N, the header length (unsigned 64-bit, little-endian);
// N bytes of JSON, {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// "__metadata__": {"<key>": "<string>"}}; then the raw tensor bytes, row-major, little-endian.
// Offsets are relative to the start of the data section and the data section is covered exactly
// (no holes, no overlaps). This is the format PyTorch's `safetensors` package reads and writes, so
// files move freely between tandem and PyTorch.
//
// What this file does:
//   - save(): writes host copies of the tensors (GPU tensors are copied to the host first), pads
//     the header with spaces to a multiple of 8 bytes (so every tensor starts 8-byte aligned),
//     and writes atomically: the bytes go to temp_path(path) ("<path>.tmp.<host>.<pid>"), which is
//     fsynced, then renamed over `path`, then the directory is fsynced. The first fsync is what
//     makes the rename safe: without it a power loss can leave `path` renamed but empty (ext4 and
//     XFS may commit the rename before the data). A crash leaves either the old file or the new
//     one, never a torn one - plus, possibly, the temporary, which is_temp_name() recognises so a
//     folder's owner can remove it (checkpoint/checkpoint_dir.h does, at start-up). The bytes go out in
//     8 MiB chunks, each pushed to the disk while the next is written (Linux sync_file_range), so
//     save() advances at the disk's pace and can report it (set_write_progress): a 1.1 GB file on a
//     10 MB/s disk would otherwise land in the page cache in a second and then sit in fsync for
//     110 s, with nothing to show that it is advancing (dist's watchdog must tell that from a hang).
//   - load(): validates everything before trusting it (length, JSON, dtypes, shapes, offsets,
//     coverage) and returns CPU tensors. Every error names the file and says what to do.
//   - read_metadata(): the header only (the 8-byte length and the JSON), for listing a folder of
//     large files without reading their tensors.
// What it leaves out: tensor layouts (conv OIHW vs OHWI is checkpoint/state_dict's concern), lazy or
// memory-mapped loading (checkpoints here are at most a few hundred MB), and dtypes tandem has no
// tensor type for (BOOL, U8, I8, I16, F8...): such files are rejected with the list of supported ones.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tandem::safetensors {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// The contents of one file. Tensors are in data-offset order (the order they were written).
struct File {
  NamedTensors tensors;
  Metadata metadata;  // digest.* keys included
  // How many tensors load() checked against a digest in the metadata: all of them for a file
  // written with digests (a mismatch throws), 0 for one without.
  size_t digests_checked = 0;

  // nullptr when absent.
  const Tensor* find(const std::string& name) const;
  // Throws naming the file's tensors when absent.
  const Tensor& at(const std::string& name) const;
};

// "F32", "F16", "BF16", "F64", "I32", "I64": the safetensors spelling of tandem's dtypes.
const char* dtype_to_safetensors(DType t);
// Throws, listing the supported names, for anything else ("BOOL", "U8", ...). `context` names the
// file and tensor in the message.
DType dtype_from_safetensors(const std::string& name, const std::string& context);

// Writes `tensors` (names must be unique and non-empty, and not "__metadata__") and `metadata`
// to `path` atomically. Tensors may live on any device. `digests`: also a digest of each tensor's
// bytes in the metadata, "digest.<name>" = "fnv1a64x4:<16 hex digits>" (see tensor_digest), which
// load() checks; the file stays plain safetensors (PyTorch reads the keys as strings and ignores them).
void save(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {}, bool digests = false);

// The metadata key of a tensor's digest, and the digest itself: FNV-1a's basis and prime over the
// bytes as 64-bit words in four interleaved lanes (so the multiplies overlap: several GB/s), the
// lanes and the length folded together, then a final mix; "fnv1a64x4:" + 16 hex digits. Not a
// cryptographic hash: it finds damage (a flipped bit, a finite overwrite, a zeroed block), not an
// adversary. Changing any single 64-bit word always changes it (each step is a bijection).
inline constexpr const char* kDigestKey = "digest.";
std::string tensor_digest(const void* data, size_t nbytes);

// Progress of save(), for a caller that must show it is alive while a large file goes to a slow
// disk (apps/trainer/run/preemption.cpp hands it to dist's Busy scope, so the watchdog knows the writing
// rank is advancing, not hung). Called on the writing thread with the bytes written so far - the
// ones before the current chunk have reached the disk - and the file's size: (0, total) before the
// first byte, after each chunk, and (total, total) after the final fsync. Process-wide; set it while
// no save runs. Returns the hook it replaces, so a hook may wrap the one before it (the slow-disk
// drill of apps/train/faults.h does). Empty: no reports (the default).
using WriteProgress = std::function<void(uint64_t done, uint64_t total)>;
WriteProgress set_write_progress(WriteProgress hook);

// Reads and validates `path`. All tensors are returned on the CPU. When the metadata holds digests
// (save's `digests`), every tensor must have one and match it; a mismatch throws naming the tensor
// and saying the file is damaged.
File load(const std::string& path);

// Reads only the header of `path` and returns its __metadata__ (empty when it has none). Validates
// the length field, the JSON and that metadata values are strings; the tensors are not checked
// (load() does that), so a file whose data section is damaged may still pass.
Metadata read_metadata(const std::string& path);

// The name save() writes `path` under before renaming it: "<path>.tmp.<host>.<pid>". The host is
// part of it so two machines writing into one shared folder never share a temporary (pids repeat
// across machines); characters other than [A-Za-z0-9._-] in the host name become '_'.
std::string temp_path(const std::string& path);
// Whether a file name (no folder) is such a temporary: "<name>.tmp.<host>.<pid>", or the
// "<name>.tmp.<pid>" of tandem 0.1's writer.
bool is_temp_name(const std::string& filename);

// The limit on the JSON header's size. The real format caps it at 100 MB as well; a larger value
// means the file is not safetensors (or is corrupt), and refusing avoids a huge allocation.
inline constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

}  // namespace tandem::safetensors
