#include "gpu_target.h"

#include <sys/wait.h>
#include <unistd.h>

#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit::bench {
namespace {

// The child's answer: "T" and the target, or "E" and the error's three parts
// (what was wrong, what was expected, the fix), separated by NULs.
std::string ask_device(const std::string& device) {
  try {
    auto gpu = device == "hip" ? make_hip_device(0) : make_cuda_device(0);
    return "T" + gpu->default_target();
  } catch (const Error& error) {
    return "E" + error.problem() + '\0' + error.expected() + '\0' + error.fix();
  } catch (const std::exception& error) {
    return std::string("E") + error.what() + '\0' + "" + '\0' + "";
  }
}

}  // namespace

std::string detected_gpu_target(const std::string& device) {
  int fds[2];
  if (pipe(fds) != 0) throw Error("pipe() failed while finding the GPU's target", "a pipe", "retry");
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork() failed while finding the GPU's target", "a child process", "retry");
  if (pid == 0) {
    close(fds[0]);
    const std::string answer = ask_device(device);
    const bool written = write(fds[1], answer.data(), answer.size()) == ssize_t(answer.size());
    _exit(written ? 0 : 1);
  }
  close(fds[1]);
  std::string answer;
  char buffer[4096];
  for (ssize_t got; (got = read(fds[0], buffer, sizeof buffer)) > 0;) answer.append(buffer, size_t(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (answer.size() > 1 && answer[0] == 'T') return answer.substr(1);
  if (answer.size() > 1 && answer[0] == 'E') {
    const std::string body = answer.substr(1);
    const size_t first = body.find('\0'), second = body.find('\0', first + 1);
    if (first != std::string::npos && second != std::string::npos)
      throw Error(body.substr(0, first), body.substr(first + 1, second - first - 1), body.substr(second + 1));
  }
  throw Error("the process that opened " + device + " GPU 0 to read its target ended without an answer (status " +
                  std::to_string(status) + ")",
              "a working " + device + " driver", "pass --target with the GPU's target");
}

}  // namespace epjit::bench
