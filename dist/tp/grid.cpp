// dist/tp/grid.cpp: the grid's coordinates and its two splits (see grid.h).
#include "dist/tp/grid.h"

namespace tandem::dist::tp {

GridCoords grid_coords(int rank, int tp) {
  TANDEM_CHECK(tp >= 1 && rank >= 0, "grid_coords: needs a TP size >= 1 and a rank >= 0, got ", tp, " and ", rank);
  return {rank % tp, rank / tp};
}

Grid::Grid(Communicator& world, int tp) {
  TANDEM_CHECK(tp >= 1 && world.size() % tp == 0, "tensor parallel size ", tp, " must divide the world size ",
               world.size(), " (world = TP x DP); launch a multiple of ", tp, " ranks or pick another TP size");
  const GridCoords c = grid_coords(world.rank(), tp);
  // Same dp index -> one TP group, ranked by tp index; same tp index -> one DP group, ranked by dp.
  tp_ = world.split(c.dp_rank, c.tp_rank, "split tp groups");
  dp_ = world.split(c.tp_rank, c.dp_rank, "split dp groups");
}

}  // namespace tandem::dist::tp
