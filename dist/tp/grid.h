// dist/tp/grid.h: the 2-D grid of ranks - tensor parallel (TP) inside, data parallel (DP) across.
//
// World N = T x D. Ranks are laid out TP-innermost, as Megatron-LM does: the T ranks of one TP group
// are adjacent (rank = dp * T + tp), so on a machine with 8 GPUs and T <= 8 a TP group shares one
// NVLink domain, where its per-layer all-reduces of activations belong; the DP groups, whose
// gradient all-reduce runs once per step and overlaps with backward, cross the machines.
//
//            tp 0   tp 1          TP groups: rows    {0, 1}, {2, 3}   (split colour = dp index)
//   dp 0  [  r0     r1  ]         DP groups: columns {0, 2}, {1, 3}   (split colour = tp index)
//   dp 1  [  r2     r3  ]
//
// A Grid owns the two sub-communicators (Communicator::split of the world it is given): pass
// tp() to the TP model (tp/bert.h) and dp() to DDP or ZeRO, exactly as the world's communicator
// would be passed without TP. Destroy it before dist::finalize().
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace tandem::dist::tp {

// Where world rank `rank` sits in a grid of TP size `tp`: (rank % tp, rank / tp).
struct GridCoords {
  int tp_rank = 0;
  int dp_rank = 0;
};
GridCoords grid_coords(int rank, int tp);

class Grid {
 public:
  // A collective of `world` (two splits): every rank calls it with the same tp, which must divide
  // world.size().
  Grid(Communicator& world, int tp);
  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  int tp_size() const { return tp_->size(); }
  int dp_size() const { return dp_->size(); }
  int tp_rank() const { return tp_->rank(); }
  int dp_rank() const { return dp_->rank(); }

 private:
  std::unique_ptr<Communicator> tp_, dp_;
};

}  // namespace tandem::dist::tp
