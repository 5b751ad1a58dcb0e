// A collective call of an op (reset(), close()) meets the other ranks. A rank
// that refuses it or cannot start it (its stream captures a graph, a kernel
// of its stream faulted) used to throw before the meeting, leaving the other
// ranks there until the communicator's timeout (120 s by default) with
// nothing said of why. Every rank now says first whether it goes ahead: a
// refusal anywhere is every rank's error at once, naming the rank and its
// reason, and no rank has begun the call's work.
#pragma once

#include <functional>

namespace epjit {
class Communicator;
}

namespace epjit::ep {

// Runs `prepare` (the call's local checks and waits) on this rank, then meets
// every rank: returns when every rank's prepare succeeded. Otherwise throws
// on every rank: this rank's own exception where its prepare threw, else an
// epjit::Error naming the ranks that refused `call` and why. The meeting is
// the call's first barrier: on return no rank is still inside its prepare.
void start_collective(Communicator& comm, const char* call, const std::function<void()>& prepare);

}  // namespace epjit::ep
