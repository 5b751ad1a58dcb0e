// Runs test code in a forked child (to change user, limits or crash safely)
// and returns its exit status; an exception in the child is exit status 99.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace epjit::testing {

inline int inChild(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace epjit::testing
