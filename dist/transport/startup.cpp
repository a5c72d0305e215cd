// dist/transport/startup.cpp: the ranks' start-up reports, gathered on rank 0 under a deadline and
// handed back to every rank (see startup.h).
#include "dist/transport/startup.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "dist/transport/watchdog.h"  // defines: abort_job

namespace tandem::dist {

namespace {

// The report to rank 0 and the list back, on MPI_COMM_WORLD: tags no communicator uses (the
// watchdog's are 7001/7002 on its own duplicate).
constexpr int kReportTag = 7101, kVerdictTag = 7102;
// How often a waiting rank looks for a message: start-up is not latency-bound, and a 1 ms sleep
// keeps a rank that waits for a slow peer off the CPU its busy peers need.
constexpr auto kPoll = std::chrono::milliseconds(1);
// The default deadline, InitOptions::comm_timeout_s's (bootstrap.h says why 45 s).
constexpr double kDefaultTimeoutS = 45;

// "<status> <host length> <message length>\n<host><message>" per report: any bytes in the texts.
void pack(std::ostringstream& out, const StartupReport& r) {
  out << r.status << ' ' << r.host.size() << ' ' << r.message.size() << '\n' << r.host << r.message;
}

std::vector<StartupReport> unpack(const std::string& s) {
  std::vector<StartupReport> all;
  std::istringstream in(s);
  StartupReport r;
  size_t host = 0, message = 0;
  while (in >> r.status >> host >> message) {
    in.get();  // the '\n'
    r.host.assign(host, '\0'), r.message.assign(message, '\0');
    in.read(r.host.data(), static_cast<std::streamsize>(host));
    in.read(r.message.data(), static_cast<std::streamsize>(message));
    r.rank = static_cast<int>(all.size());
    all.push_back(r);
  }
  return all;
}

// Waits for a message from `source` until `deadline`; true and the message when it came.
bool receive_by(int source, int tag, std::chrono::steady_clock::time_point deadline, std::string& out) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st);
    if (flag) {
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      out.assign(static_cast<size_t>(n), '\0');
      MPI_Recv(out.data(), n, MPI_CHAR, source, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPoll);
  }
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

}  // namespace

int launcher_world_size() {
  for (const char* v : {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

double startup_timeout_s() {
  const char* s = std::getenv("TANDEM_COMM_TIMEOUT_S");
  const double t = s ? std::atof(s) : 0;
  return t > 0 ? t : kDefaultTimeoutS;
}

std::vector<StartupReport> agree_at_startup(int status, const std::string& message, const std::string& what,
                                            double timeout_s) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const StartupReport mine{rank, host_name(), status, message};
  using Clock = std::chrono::steady_clock;
  const auto wait = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const Clock::time_point deadline = Clock::now() + wait;
  if (rank != 0) {
    std::ostringstream out;
    pack(out, mine);
    const std::string sent = out.str();
    MPI_Request req;
    MPI_Isend(sent.data(), static_cast<int>(sent.size()), MPI_CHAR, 0, kReportTag, MPI_COMM_WORLD, &req);
    std::string list;
    // Twice the deadline: rank 0 itself waits up to one deadline for the slowest rank first.
    if (!receive_by(0, kVerdictTag, deadline + wait, list)) {
      std::fprintf(stderr, "[rank %d on %s] tandem: rank 0 did not answer the start-up check '%s' within %.0f s: it "
                   "hangs or died before it; ending the job\n", rank, mine.host.c_str(), what.c_str(), 2 * timeout_s);
      abort_job();
    }
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    return unpack(list);
  }
  std::vector<StartupReport> all(static_cast<size_t>(size));
  all[0] = mine;
  std::vector<bool> arrived(static_cast<size_t>(size), false);
  arrived[0] = true;
  for (int p = 1; p < size; ++p) {
    std::string got;
    if (!receive_by(p, kReportTag, deadline, got)) continue;  // named below, with every other absentee
    all[static_cast<size_t>(p)] = unpack(got).at(0);
    all[static_cast<size_t>(p)].rank = p;
    arrived[static_cast<size_t>(p)] = true;
  }
  std::string missing;
  for (int p = 1; p < size; ++p)
    if (!arrived[static_cast<size_t>(p)]) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
  if (!missing.empty()) {
    std::fprintf(stderr, "[rank 0 on %s] tandem: rank(s) %s did not reach the start-up check '%s' within %.0f s (hung "
                 "or died before it; TANDEM_COMM_TIMEOUT_S sets the wait); ending the job\n", mine.host.c_str(),
                 missing.c_str(), what.c_str(), timeout_s);
    abort_job();
  }
  std::ostringstream out;
  for (const StartupReport& r : all) pack(out, r);
  const std::string list = out.str();
  std::vector<MPI_Request> sends(static_cast<size_t>(size), MPI_REQUEST_NULL);
  for (int p = 1; p < size; ++p)
    MPI_Isend(list.data(), static_cast<int>(list.size()), MPI_CHAR, p, kVerdictTag, MPI_COMM_WORLD,
              &sends[static_cast<size_t>(p)]);
  MPI_Waitall(size, sends.data(), MPI_STATUSES_IGNORE);
  return all;
}

}  // namespace tandem::dist
