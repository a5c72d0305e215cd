// core/profile.cpp: NVTX push/pop and an in-memory Chrome trace buffer.
#include "core/profile.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/check.h"
#ifdef TANDEM_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace tandem::profile {
namespace {
const auto g_origin = std::chrono::steady_clock::now();
std::atomic<int> g_level{-1};  // -1: tracing off
std::mutex g_mutex;
std::vector<Event> g_events;
}  // namespace

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - g_origin).count();
}

void enable_trace(Level max_level) { g_level.store(static_cast<int>(max_level)); }
void disable_trace() { g_level.store(-1); }
bool trace_enabled() { return g_level.load() >= 0; }

void add_event(Event e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back(std::move(e));
}

std::vector<Event> take_events() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<Event> out;
  out.swap(g_events);
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<std::vector<Event>>& per_rank) {
  nlohmann::json events = nlohmann::json::array();
  static const char* kTrackNames[] = {"compute", "communication", "data"};
  for (size_t rank = 0; rank < per_rank.size(); ++rank) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    for (int t = 0; t < 3; ++t)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", t},
                        {"args", {{"name", kTrackNames[t]}}}});
    for (const Event& e : per_rank[rank])
      events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", rank}, {"tid", e.track},
                        {"ts", e.start_us}, {"dur", e.duration_us}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    TANDEM_CHECK(f.good(), "cannot write trace file ", tmp, ": check the directory exists and is writable");
    f << doc.dump();
  }
  TANDEM_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path);
}

Range::Range(const char* name, Level level, int track) : name_(name), level_(level), track_(track) {
#ifdef TANDEM_WITH_CUDA
  nvtxRangePushA(name);
#endif
  if (g_level.load() >= static_cast<int>(level)) {
    owned_name_ = name;  // the caller's string may not outlive the range
    start_ = now_us();
  }
}

Range::~Range() {
#ifdef TANDEM_WITH_CUDA
  nvtxRangePop();
#endif
  if (start_ >= 0) {
    static const char* kCats[] = {"step", "layer", "op"};
    add_event({owned_name_, kCats[static_cast<int>(level_)], start_, now_us() - start_, track_});
  }
}

}  // namespace tandem::profile
