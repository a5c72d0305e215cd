// apps/train/faults.h: failure drills - faults injected on purpose, so tests (tests/test_faults.cpp)
// can check what a user sees when a rank dies, hangs, diverges, straggles or crashes while saving.
//
// One switch, the environment variable TANDEM_FAULT=rank:step:kind[:arg], fires at one rank when
// it reaches `step` (1-based, the number progress lines print: "step 5/12" is the fifth step):
//   kill                 the process dies at once: _Exit(137), no destructors, no MPI_Finalize,
//                        nothing flushed - the status a shell shows for SIGKILL. Not a real
//                        signal, because MPICH's launcher tears the job down by itself on a
//                        signal whatever its flags, and the drill must be able to show tandem's
//                        own detection (mpiexec -disable-auto-cleanup: the watchdog names the rank)
//   hang                 it stops calling collectives (sleeps forever); dist's watchdog must end
//                        the job (TANDEM_COMM_TIMEOUT_S) naming this rank
//   nan                  its loss becomes NaN in this step (and so do its gradients)
//   slow[:DURATION]      it sleeps DURATION (default 100ms; "250ms", "1.5s" or plain milliseconds)
//                        in every step from `step` on, between forward and backward: after
//                        forward's buffer broadcast, so the other ranks wait for it in backward's
//                        all-reduce, where their wait counts as communication, not compute, and
//                        the end-of-run straggler report (apps/train/stragglers.h) names this rank
//   crash-in-checkpoint  the first checkpoint written at or after `step` is left half-written
//                        and the process dies before the rename (rank must be 0: only rank 0
//                        writes checkpoints; see checkpoint/checkpoint.h's crash hook)
//   slow-checkpoint[:RATE]  every checkpoint written from `step` on goes to a slow disk: the
//                        writer's progress (core/safetensors.h set_write_progress) is held to RATE
//                        bytes per second ("100KB/s", "2MB/s", "500B/s" or plain bytes/s; decimal
//                        units, as disks are sold; default 1MB/s), its bytes dribbling out every
//                        100 ms as a real slow disk's would. RATE 0: the disk stops - the write
//                        hangs with no progress, and the watchdog must name it (rank must be 0).
//                        The ranks waiting for rank 0 meanwhile test dist's slow-vs-hung watchdog
//                        (dist/transport/busy.h), and a SIGTERM sent meanwhile lands during a save
// Unset or empty: no fault, and nothing here costs anything. A malformed value is an error at
// start-up, never silently ignored.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"  // defines: Tensor

namespace tandem::apps {

enum class FaultKind { Kill, Hang, Nan, Slow, CrashInCheckpoint, SlowCheckpoint };

struct Fault {
  int rank = 0;
  int64_t step = 1;        // 1-based step at which the fault fires (slow: from which it fires)
  FaultKind kind = FaultKind::Kill;
  double slow_ms = 100;    // slow: sleep per step; 100 ms is far above a tiny test step's noise
  double bytes_per_s = 1e6;  // slow-checkpoint: the disk's rate (0: it stops); 1 MB/s makes even a tiny
                             // test model's checkpoint (tens of KB) take a visible fraction of a second
};

// Parses "rank:step:kind[:arg]"; throws tandem::Error naming the bad part and the accepted forms.
Fault parse_fault(const std::string& spec);
// TANDEM_FAULT, parsed; nullopt when unset or empty. `world_size` bounds the rank.
std::optional<Fault> fault_from_env(int world_size);

// The step loop's hooks. `step` is the 1-based number of the step about to run.
// Before the step: kill and hang act here; crash-in-checkpoint and slow-checkpoint arm their hooks.
void fault_before_step(const std::optional<Fault>& f, int rank, int64_t step);
// Between forward and backward: slow sleeps here. Returns the step's loss as this rank reports it:
// NaN (through autograd, so the gradients are NaN too) when a nan fault fires, else `loss` itself.
Tensor fault_in_step(const std::optional<Fault>& f, int rank, int64_t step, const Tensor& loss);

}  // namespace tandem::apps
