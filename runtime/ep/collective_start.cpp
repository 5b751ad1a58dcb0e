#include "collective_start.h"

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "../comm/wire.h"
#include "epjit/comm/communicator.h"
#include "epjit/error.h"

namespace epjit::ep {
namespace {

// A refusal crosses as its problem and its fix, in the bootstrap's wire
// format; an empty vote goes ahead.
std::vector<uint8_t> vote_of(const std::string& problem, const std::string& fix) {
  return comm::Writer().text(problem).text(fix).out;
}

struct Refusal {
  int rank;
  std::string problem, fix;
};

Refusal refusal_of(int rank, const std::vector<uint8_t>& vote) {
  comm::Reader reader{vote};
  std::string problem = reader.text(comm::kMaxContributionBytes);
  return {rank, std::move(problem), reader.text(comm::kMaxContributionBytes)};
}

}  // namespace

void start_collective(Communicator& comm, const char* call, const std::function<void()>& prepare) {
  std::exception_ptr failure;
  std::vector<uint8_t> mine;
  try {
    prepare();
  } catch (const Error& error) {
    failure = std::current_exception();
    mine = vote_of(error.problem(), error.fix());
  } catch (const std::exception& error) {
    failure = std::current_exception();
    mine = vote_of(error.what(), "");
  }
  const std::vector<std::vector<uint8_t>> votes = comm.allgather(mine);
  if (failure) std::rethrow_exception(failure);
  std::vector<Refusal> refusals;
  for (size_t rank = 0; rank < votes.size(); ++rank)
    if (!votes[rank].empty()) refusals.push_back(refusal_of(int(rank), votes[rank]));
  if (refusals.empty()) return;
  std::string ranks, reasons, fixes;
  for (const Refusal& refusal : refusals) {
    const std::string who = "rank " + std::to_string(refusal.rank);
    ranks += (ranks.empty() ? "" : ", ") + who;
    reasons += (reasons.empty() ? "" : "; ") + who + ": " + refusal.problem;
    if (!refusal.fix.empty()) fixes += (fixes.empty() ? "" : "; ") + who + ": " + refusal.fix;
  }
  const std::string name = std::string(call) + "()";
  throw Error(name + " on rank " + std::to_string(comm.rank()) + " did not run: " + ranks + " refused it (" + reasons +
                  "); no rank began it",
              "every rank able to run " + name + " when it is called (a collective call)",
              (fixes.empty() ? "fix what " + ranks + " reported" : fixes) + ", then call " + name +
                  " on every rank again");
}

}  // namespace epjit::ep
