// dist/collectives/same_model.h: every rank built the same model, or every rank fails with the difference.
//
// A model that differs between ranks (another argument, another registration order) would make
// the next collectives pair up buffers of different sizes - a hang or garbage. DDP's constructor
// therefore runs this first: every rank gathers every rank's list of names, shapes and dtypes
// (all_gather_strings) and throws the same message naming the first difference, before any other
// collective could mismatch (dist/README.md, "A watchdog instead of hoping").
#pragma once
#include "dist/communicator.h"
#include "dist/collectives/strings.h"
#include "layers/module.h"

namespace tandem::dist {

// Throws on every rank, naming the first difference, unless all ranks hold the same parameter and
// buffer names, shapes and dtypes. Exposed for tests and for tools that wrap models differently.
void check_same_model(Communicator& comm, const Module& m);

}  // namespace tandem::dist
