// dist/collectives/strings.h: every rank's string, in rank order - a blocking helper for setup and reporting.
//
// Two all_gathers on the communicator given - the lengths, then the characters packed into i64
// words, as many as the longest string needs - so it is ordered with that communicator's other
// collectives and covered by its watchdog. DDP's model check (same_model.h), ZeRO's agreement on
// state names (dist/zero_state.cpp) and the per-rank Chrome trace (dist/measure/timeline.h)
// use it; tests use it as a barrier that carries a message.
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace tandem::dist {

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

}  // namespace tandem::dist
