// The root of every group this process made a unique id for: one thread and
// one listening socket per process, however many ids it makes. Connections
// are served concurrently (a poll loop): each must prove within
// kHandshakeSeconds that it holds its group's secret, so idle or hostile
// connections cannot delay a group; members' collectives are matched by
// sequence number and kind. Nothing it does can escape as an exception: a
// failure ends the connection or fails the group, with a message to every
// member.
#pragma once

#include <cstdint>
#include <string>

#include "wire.h"

namespace epjit::comm {

struct Endpoint {
  std::string address;
  uint16_t port = 0;
};

// Registers a group with the process's bootstrap (starting it on first use,
// and again in a forked child) and returns where ranks reach it.
Endpoint register_group(const GroupId& group, const Secret& secret);

}  // namespace epjit::comm
