// core/out_of_memory.h: running out of memory - the error an allocation throws (core/storage.cpp),
// and how much memory is left to allocate (for start-up checks, apps/trainer/run/memory.h).
//
// A tandem::Error like any other ("[rank R] file:line: message"), of its own type so that a program
// that knows which of its flags sets the batch size can catch it and name that flag: the message
// itself names only what the library knows - the bytes asked for, the device, what tandem holds
// there, and what to lower ("the batch size", 16-bit compute, ZeRO sharding).
// Its own header, not core/check.h or core/storage.h, which every file includes.
#pragma once
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/device.h"

namespace tandem {

class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Throws OutOfMemory with throw_error's "[rank R] file:line: " prefix (core/check.h).
[[noreturn]] void throw_out_of_memory(const char* file, int line, const std::string& what);

// "1.5 GiB", "312.0 MiB", "4.0 KiB", "12 B": a byte count as messages print it.
std::string human_bytes(double bytes);

// Bytes that could still be allocated on `d` now, as the system reports them: the CPU's
// MemAvailable (/proc/meminfo: free memory plus what the kernel can reclaim without swapping),
// a GPU's free memory (cudaMemGetInfo; blocks tandem's pool keeps for reuse are not in it). -1 when
// unknown (no /proc/meminfo; no CUDA). Defined in core/storage.cpp.
int64_t available_memory(Device d);

}  // namespace tandem
