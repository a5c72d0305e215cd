// tests/support/thread_ranks.h: a test body on several world sizes in one process - each size as
// that many threads with a communicator each (dist/transport/comm_thread.h) - with the size named
// in a failure's message.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <initializer_list>

#include "dist/transport/comm_thread.h"

namespace tandem::testing {

inline void on_ranks(std::initializer_list<int> sizes, const std::function<void(dist::Communicator&)>& body) {
  for (int n : sizes) {
    CAPTURE(n);
    dist::run_ranks(n, body);
  }
}

}  // namespace tandem::testing
