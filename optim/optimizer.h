// optim/optimizer.h: the interface shared by SGD, AdamW and LAMB, the options struct and the factory.
//
// Segments (what makes the optimizers ZeRO-ready). An optimizer updates a list of *segments*: each
// segment is a contiguous range [offset, offset + numel) of one flattened parameter, with the
// gradient of exactly those elements. Built from named parameters (the usual, unsharded case), every
// parameter is one whole segment and its gradient is read from param.grad() at each step(). ZeRO
// (dist/) gives each rank a contiguous 1/N of the flat parameter space, which cuts through
// parameters: it builds the optimizer from its segments instead, with 1-D views into the parameters
// and into its reduce-scattered gradient shard.
//   - SGD and AdamW are elementwise, so a segment is updated exactly like the same elements of the
//     whole parameter.
//   - LAMB needs per-parameter norms. It sums squares per segment, adds them up per parameter (by
//     ParamSegment::param_index, a rank-independent index), and calls OptimizerOptions::norm_reduce
//     on that vector before applying the trust ratio. ZeRO sets the hook to an all-reduce (sum)
//     across ranks, so sharded LAMB equals unsharded LAMB.
//   - State is addressed canonically: state_slices() tells, for every state tensor, its unsharded
//     name ("<param>.exp_avg"), its element offset and the full size, so the slices of all ranks
//     assemble (assemble_state) into the checkpoint an unsharded run writes. load_state() takes
//     unsharded tensors and each segment copies its own range, so a checkpoint resumes on any
//     world size.
//
// State names follow PyTorch's optimizer state dict, prefixed by the parameter name:
//   SGD:        "<name>.momentum_buffer"  (momentum != 0; created at the parameter's first step)
//   AdamW/LAMB: "<name>.step"             0-d f32 tensor (shape [], as PyTorch's) on the CPU: the
//                                         parameter's own step count (PyTorch also keeps a float
//                                         step per parameter; f32 counts exactly to 2^24 = 16.7 M
//                                         steps), replicated on every segment of the parameter
//               "<name>.exp_avg", "<name>.exp_avg_sq"   first and second moments
// state() returns them with the parameter's shape for an unsharded optimizer; buffers of a partial
// segment are 1-D. A segment that has not yet applied an update (none yet, or only skipped ones,
// see below) has no state entries: it starts fresh, as a parameter PyTorch never stepped.
//
// Update counts live on the device (what makes the step capturable). Every segment of AdamW and
// LAMB, and of SGD with momentum, keeps the number of updates it has applied in a 0-d f32 tensor
// on its parameter's device (Slot::step): the count "<name>.step" saves (AdamW/LAMB), and for SGD
// whether the momentum buffer holds history yet (it is not saved: a loaded buffer counts as one
// update). The update kernels read it (t = count + 1) and a kernel after them advances it, so the
// host never needs to know it - only checkpoints read it back. The CPU loops read and advance the
// same tensors. The count is an f32, as PyTorch's capturable step: it counts exactly to 2^24, and
// beyond that every bias correction 1 - beta^t with beta <= 0.9999 is exactly 1.0 in f64 anyway
// (0.9999^(2^24) = e^-1678), so no update changes.
//
// Skipping on the device: step(found_inf) takes a one-element f32 flag tensor (the loss scaler's,
// optim/loss_scaler.h, all-reduced across ranks by the caller) and every update kernel reads it:
// nonzero leaves the parameters, the state and the counts untouched, with no host read (PyTorch's
// fused optimizers with found_inf). The flag must be the same tensor at every step of a captured
// graph (its address is a kernel argument).
// Capturable (capturable()): a step enqueues only device work that reads every value that changes
// between steps - the LR (written to device memory by set_lr, outside the graph), the counts, the
// flag - from device memory, and never waits on the host, so a CUDA graph may capture it
// (core/cuda/graph.h) once one eager step has allocated the state and uploaded the chunk tables.
// A replayed step runs the same kernels on the same addresses as an eager one: bitwise equal.
//
// Precision. The optimizer updates whatever dtype the parameters have; state buffers share it. CPU
// math is in f32 (f64 for f64 parameters, used by the reference tests); CUDA math is in f32 for f32,
// bf16 and f16 storage. Mixed precision (AMP) hands the optimizer f32 master weights and f32
// gradients, so the update and the moments stay f32. A gradient must match its parameter's dtype,
// device and element count.
//
// Mixed precision, the 16-bit working copy (ParamSegment::low, set by optim/amp.h's
// master_segments()): every update kernel - SGD, AdamW, LAMB's second phase; the CPU loops and the
// multi-tensor CUDA launches alike - stores the f32 result into the master AND, rounded to nearest
// even, into the 16-bit copy, in the same loop over the elements: bit for bit what a separate cast
// (core/ops/copy) of the updated master would write, without the cast's launch and its re-read of
// the master (issue 17: 300 cast launches per bert_large step). Skipped steps and segments without
// a gradient write neither. Segments are grouped into CUDA launches by (dtype, device, low dtype).
//
// Parameters or segments without a gradient at a step are skipped and keep their state (PyTorch
// skips p.grad is None); a parameter's segments must all have, or all lack, a gradient at a step.
// Left out: parameter groups (one lr and weight decay for all), maximize, amsgrad, sparse gradients.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tandem::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Sums partial sums of squares across ranks, in place (ZeRO: an all-reduce with op sum). The vector
// has the same length and meaning on every rank. Null: the local sums are the totals (one process,
// or DDP, whose gradients are already averaged and identical on every rank).
using SumSquaresReduce = std::function<void(std::vector<double>& partial_sums)>;
// The same for a captured step: sums a tensor of partial sums across ranks in place by enqueueing
// the work on the tensor's device (an NCCL all-reduce with op sum on the compute stream, or forked
// from it and joined back through events), with no host read. The tensor is f32 on CUDA and f64 on
// the CPU (each backend's accumulation type); its length and meaning are the same on every rank.
using DeviceSumReduce = std::function<void(Tensor& partial_sums)>;

// A contiguous range of one flattened parameter (see the file comment).
struct ParamSegment {
  std::string name;          // the parameter's name: keys the state ("<name>.exp_avg")
  Tensor param;              // the elements updated in place: the whole parameter or a 1-D view of a range
  Tensor grad;               // same numel, dtype and device; undefined: skipped at this step
  int64_t offset = 0;        // element offset of the range in the flattened parameter
  int64_t param_numel = -1;  // elements of the whole parameter; -1: param.numel() (a whole segment)
  int64_t param_index = -1;  // index of the parameter in a list that is the same on every rank (LAMB
                             // norms); -1: the segment's position in the list given to the optimizer
  Tensor low;                // AMP: the 16-bit working copy the model computes with (f16/bf16, param's
                             // numel and device; param must be f32). The update writes it in the same
                             // pass, low = param rounded to nearest even, so no cast runs after the
                             // step (see "Mixed precision" above); undefined: none
};

// One state tensor of one segment, with where it sits in the unsharded state tensor.
struct StateSlice {
  std::string key;         // unsharded name, e.g. "fc.weight.exp_avg"
  int64_t offset = 0;      // element offset of `value` in the unsharded tensor (0 for "<name>.step")
  int64_t full_numel = 0;  // elements of the unsharded tensor (1 for "<name>.step")
  Tensor value;            // the live buffer (1-D for partial segments), or a fresh step tensor
};

// Joins the slices of every rank into unsharded, 1-D, CPU tensors, in order of first appearance.
// Fails when a key's slices do not tile [0, full_numel) exactly (overlaps must be identical copies,
// as the replicated "<name>.step" entries are). load_state() reshapes them to the parameters.
NamedTensors assemble_state(const std::vector<StateSlice>& slices);

// One options struct for every optimizer. Unset optionals take each optimizer's PyTorch default.
struct OptimizerOptions {
  std::optional<double> lr;            // SGD 0.1 (ImageNet recipe for batch 256, see SGDOptions);
                                       // AdamW and LAMB 1e-3 (torch.optim.AdamW, apex FusedLAMB)
  std::optional<double> weight_decay;  // SGD 0 (L2 added to the gradient); AdamW 1e-2 (decoupled,
                                       // torch.optim.AdamW); LAMB 1e-2 (in the update, apex FusedLAMB)
  // SGD (torch.optim.SGD's defaults)
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // AdamW and LAMB
  double beta1 = 0.9;                  // torch.optim.AdamW's betas = (0.9, 0.999)
  double beta2 = 0.999;
  std::optional<double> eps;           // AdamW 1e-8 (PyTorch), LAMB 1e-6 (apex FusedLAMB)
  SumSquaresReduce norm_reduce;        // LAMB: cross-rank sum of per-parameter norms (ZeRO); others ignore it
  DeviceSumReduce norm_reduce_device;  // LAMB: the same without leaving the device (a captured step);
                                       // at most one of the two may be set
};

class Optimizer {
 public:
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer();

  virtual const char* name() const = 0;  // "SGD", "AdamW", "LAMB" (error messages)
  // Updates every segment that has a gradient (an NVTX range "optimizer.step").
  void step();
  // The same, skipped on the device where the one-element f32 tensor `found_inf` is nonzero (see
  // "Skipping on the device" above); it must live on the parameters' device. Undefined: step().
  void step(const Tensor& found_inf);
  // Whether a CUDA graph may capture step() (see "Capturable" above): SGD and AdamW always; LAMB
  // unless OptimizerOptions::norm_reduce (a host round trip) is set.
  virtual bool capturable() const = 0;
  // Zeroes the existing gradients in place (param.grad() or the segments' gradients).
  void zero_grad();
  void set_lr(double lr);
  double lr() const { return lr_; }
  int64_t steps() const { return steps_; }  // calls of step() so far, device-skipped ones included

  // The gradients step() would use now (undefined entries skipped): for clip_grad_norm.
  std::vector<Tensor> grads() const;
  // Replaces the segments' gradients (same order and count as the segments; undefined: skip).
  // Only for optimizers built from segments: the others read param.grad().
  void set_grads(const std::vector<Tensor>& grads);
  size_t num_segments() const { return slots_.size(); }

  // Unsharded state tensors with the parameters' shapes (see the file comment for the names).
  // Fails for an optimizer that holds only part of a parameter: use state_slices() there.
  NamedTensors state() const;
  std::vector<StateSlice> state_slices() const;
  // Copies state in from unsharded tensors (any shape with the parameter's element count; dtype is
  // converted). Parameters not named start fresh at their next step, as after PyTorch's
  // load_state_dict; a parameter's entries must be complete ("step", "exp_avg" and "exp_avg_sq").
  // An optimizer built from segments takes its ranges and skips entries of parameters it does not
  // hold (every rank loads the same unsharded checkpoint); one built from parameters fails on them.
  void load_state(const NamedTensors& state);

 protected:
  // One segment with its state.
  struct Slot {
    ParamSegment seg;
    Tensor whole;              // unsharded construction: the parameter whose .grad is read per step
    Tensor grad;               // this step's gradient (set by step() before update())
    std::vector<Tensor> bufs;  // state_names() order; undefined until the first step with a gradient
    Tensor step;               // updates applied: 0-d f32 on the parameter's device (see "Update
                               // counts" above); undefined until the first step, and without
                               // uses_step_count()
  };

  Optimizer(NamedTensors named_params, double lr);
  Optimizer(std::vector<ParamSegment> segments, int64_t num_params, double lr);

  // Buffer names ("momentum_buffer" or "exp_avg", "exp_avg_sq") and whether a "<name>.step" entry
  // exists (a per-segment step count).
  virtual std::vector<std::string> state_names() const = 0;
  virtual bool has_step_count() const = 0;
  // Whether the slots keep an update count (Slot::step) at all: every optimizer that saves one, and
  // SGD with momentum, which keeps it unsaved (see "Update counts" above).
  virtual bool uses_step_count() const { return has_step_count(); }
  // Updates `active` (the slots with a gradient this step, grad set, all checked, step counts
  // allocated), skipping on the device where found_inf (undefined: never) is nonzero.
  virtual void update(std::vector<Slot*>& active, const Tensor& found_inf) = 0;
  // After set_lr: the CUDA kernels read the LR from device memory (so that a captured CUDA graph
  // follows the schedule), and each optimizer writes it there now. Default: nothing to do.
  virtual void lr_changed() {}

  int64_t num_params() const { return num_params_; }
  // The CPU loops' view of the flag: true when defined and nonzero (a CPU tensor: a plain load).
  static bool skipped_on_cpu(const Tensor& found_inf);
  // The flag as a kernel argument: null when undefined (never skip).
  static const float* flag_ptr(const Tensor& found_inf);
  // A slot's count as an integer (a host read, a device sync on CUDA: checkpoints only); 0 when none.
  static int64_t count_of(const Slot& s);
  std::vector<Slot> slots_;

 private:
  void add_slot(ParamSegment seg, Tensor whole, size_t position);
  double lr_;
  int64_t steps_ = 0;
  int64_t num_params_ = 0;
};

// "sgd", "adamw" or "lamb"; fails with the valid names otherwise.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedTensors named_params,
                                          const OptimizerOptions& opt);
// The same over segments; num_params is the length of the rank-independent parameter list that
// ParamSegment::param_index refers to.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamSegment> segments,
                                          int64_t num_params, const OptimizerOptions& opt);

}  // namespace tandem::optim
