// apps/trainer/run/startup.cpp: the start-up verdicts (see startup.h).
#include "apps/trainer/run/startup.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "apps/trainer/run/flag_words.h"      // defines: flag_words
#include "dist/transport/startup.h"  // defines: agree_at_startup, startup_timeout_s

namespace tandem::trainer {

namespace {

namespace fs = std::filesystem;
using dist::StartupReport;

// The file rank 0 writes into the checkpoint folder and every rank reads back. A dot file: the
// folder's listing of checkpoints (checkpoint/checkpoint_dir.h) never takes it for one.
constexpr const char* kCheckFile = ".tandem_shared_check";

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Prints the verdict (rank 0 every failure, a failing rank its own) and returns this rank's exit
// status: 0 when every rank passed, its own status when it failed, else the first failure's.
int judge(const std::string& program, const std::vector<StartupReport>& all, int rank) {
  std::vector<const StartupReport*> failed;
  for (const StartupReport& r : all)
    if (r.status != 0) failed.push_back(&r);
  if (failed.empty()) return 0;
  const StartupReport& me = all.at(static_cast<size_t>(rank));
  bool shared = failed.size() == all.size();  // every rank failed alike: one line, as a rank alone says it
  for (const StartupReport* r : failed) shared = shared && r->message == failed[0]->message;
  if (shared) {
    if (rank == 0) std::cerr << program << ": " << me.message << "\n";
  } else {
    if (me.status != 0 && rank != 0)
      std::cerr << "[rank " << rank << " on " << me.host << "] " << program << ": " << me.message << "\n";
    if (rank == 0) {
      // Ranks with the same words on one line: "ranks 1, 3 on b, c".
      std::map<std::string, std::vector<const StartupReport*>> by_message;
      for (const StartupReport* r : failed) by_message[r->message].push_back(r);
      std::ostringstream out;
      out << program << ": start-up failed on " << failed.size() << " of " << all.size()
          << " ranks, so every rank stops (exit " << failed[0]->status << "):\n";
      for (const auto& [message, ranks] : by_message) {
        std::string who, hosts;
        for (const StartupReport* r : ranks) {
          who += (who.empty() ? "" : ", ") + std::to_string(r->rank);
          if (hosts.find(r->host) == std::string::npos) hosts += (hosts.empty() ? "" : ", ") + r->host;
        }
        out << "  rank" << (ranks.size() > 1 ? "s " : " ") << who << " on " << hosts << ": " << message << "\n";
      }
      std::cerr << out.str();
    }
  }
  std::cerr.flush();
  return me.status != 0 ? me.status : failed[0]->status;
}

// Rank 0: writes the check file (a token no other run or host could have written) and returns the
// token, or "" with `error` set when the folder cannot take it.
std::string write_check_file(const std::string& dir, std::string& error) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string token = std::string(host) + ":" + std::to_string(getpid()) + ":" +
                            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::ofstream f(fs::path(dir) / kCheckFile, std::ios::trunc);
  f << token;
  f.close();
  if (!f) error = "could not write " + (fs::path(dir) / kCheckFile).string() + ": check that --checkpoint-dir is "
                  "writable";
  return f ? token : "";
}

// Every rank: the folder it was given holds rank 0's token.
std::string folder_check(const std::string& dir, const std::string& token) {
  const fs::path file = fs::path(dir) / kCheckFile;
  std::ifstream f(file);
  std::string seen;
  std::getline(f, seen);
  if (f.is_open() && seen == token) return "";
  return "--checkpoint-dir " + dir + " here is not the folder rank 0 opened (" +
         (f.is_open() ? "its check file " + file.string() + " holds another run's token"
                      : "rank 0's check file " + file.string() + " is not there") +
         "): rank 0 writes every checkpoint and every rank reads the one it resumes from, so the folder must be "
         "one shared folder (NFS, Lustre, ...) at the same path on every host; a folder on each host's local disk "
         "is refused";
}

std::string readable(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream f(path, std::ios::binary);
  if (f.is_open() && fs::is_regular_file(path)) return "";
  return "cannot read the checkpoint to resume from, " + path + ", on this host: it must be readable by every rank "
         "(a shared folder at the same path on every host)";
}

}  // namespace

int agree_on_arguments(const std::string& program, int status, const std::string& message) {
  dist::init_mpi();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return judge(program, dist::agree_at_startup(status, trimmed(message), "the command line",
                                               dist::startup_timeout_s()), rank);
}

void check_every_rank(const RunFolder& folder, const std::string& resume_path, const dist::World& w,
                      const std::string& program, const LocalCheck& data) {
  if (w.size == 1) return;  // alone, the folder and the data fail where they are first used, as before
  const double timeout = dist::startup_timeout_s();
  std::string token, error;
  if (folder.owned()) {
    // Round 1: rank 0's token to every rank (after RunFolder::open created the folder).
    if (w.rank == 0) token = write_check_file(folder.dir(), error);
    const std::vector<StartupReport> r0 = dist::agree_at_startup(0, token, "the checkpoint folder", timeout);
    token = r0.at(0).message;
  }
  // Round 2: every rank's checks. The first that fails is this rank's report.
  int status = 0;
  std::string message;
  if (folder.owned() && !error.empty()) status = kStartupUsageExit, message = error;
  else if (folder.owned() && !(message = folder_check(folder.dir(), token)).empty()) status = kStartupUsageExit;
  else if (!(message = readable(resume_path)).empty()) status = kStartupErrorExit;
  else if (data && !(message = data()).empty()) status = kStartupErrorExit;
  message = flag_words(message);  // a library's words (the folder's, the data's) in the trainers' flags
  const std::vector<StartupReport> all = dist::agree_at_startup(status, message, "the folders and files", timeout);
  if (w.rank == 0 && folder.owned()) {
    std::error_code ignored;  // a check file left behind is harmless: the next run overwrites it
    fs::remove(fs::path(folder.dir()) / kCheckFile, ignored);
  }
  if (const int rc = judge(program, all, w.rank); rc != 0) {
    // The first failing rank's words, for the folder's run_status.json (judge printed them all).
    for (const StartupReport& r : all)
      if (r.status != 0)
        throw StartupFailed(rc, "start-up failed: rank " + std::to_string(r.rank) + " on " + r.host + ": " + r.message);
  }
}

}  // namespace tandem::trainer
