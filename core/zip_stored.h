// core/zip_stored.h: the entries of a zip archive whose entries are stored (not compressed) - the
// container of PyTorch's torch.save files (core/torch_save.h).
//
// torch.save writes a zip of stored entries (PyTorch's miniz writer, with a zip64 end record and
// data aligned to 64 bytes through the local headers' extra fields). This reader takes the central
// directory (zip64 where the classic fields are saturated), finds each entry's data after its
// local header, checks that everything lies inside the file and that each entry's CRC-32 matches,
// and refuses a compressed entry by name: inflating it would need a dependency for files that
// torch.save never writes. Left out: encryption, multi-disk archives, data descriptors' sizes.
// Every error names the file and the entry and says what to do.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::zip {

struct Entry {
  std::string name;
  uint64_t offset = 0;  // of the data, from the start of the archive
  uint64_t size = 0;
};

struct Archive {
  std::string path;
  std::string bytes;  // the whole file
  std::vector<Entry> entries;

  // nullptr when absent.
  const Entry* find(const std::string& name) const;
  // The entry's bytes; throws naming the archive's entries when absent.
  std::string read(const std::string& name) const;
};

// True when `head` (a file's first bytes) starts like a zip archive ("PK\3\4").
bool looks_like_zip(const std::string& head);

// Reads and checks `path` (see above). Throws tandem::Error.
Archive open(const std::string& path);

// The same on bytes in memory; `path` only names them in messages.
Archive open_bytes(std::string bytes, const std::string& path);

}  // namespace tandem::zip
