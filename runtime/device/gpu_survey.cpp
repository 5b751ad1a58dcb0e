// survey_gpus: a forked child opens the API's GPUs and writes back what it
// found; the parent never loads the driver.
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit {
namespace {

constexpr int kMostGpus = 8;

// The child's report: the count, the target, and the error's three parts,
// each ended by a NUL ("" where there is none).
std::string survey_here(std::string_view kind) {
  int count = 0;
  std::string target, problem, expected, fix;
  for (int ordinal = 0; ordinal < kMostGpus; ++ordinal) {
    try {
      auto device = make_device(kind, ordinal);
      if (count == 0) target = device->default_target();
      ++count;
    } catch (const Error& error) {
      if (count == 0) problem = error.problem(), expected = error.expected(), fix = error.fix();
      break;
    } catch (const std::exception& error) {
      if (count == 0) problem = error.what();
      break;
    }
  }
  if (!problem.empty()) count = 0;  // GPU 0 opened, but epjit has no target for it
  return std::to_string(count) + '\0' + target + '\0' + problem + '\0' + expected + '\0' + fix + '\0';
}

std::vector<std::string> fields_of(const std::string& report) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t end; (end = report.find('\0', start)) != std::string::npos; start = end + 1)
    fields.push_back(report.substr(start, end - start));
  return fields;
}

}  // namespace

GpuSurvey survey_gpus(std::string_view kind) {
  if (kind != "cuda" && kind != "hip")
    throw Error("survey_gpus(\"" + std::string(kind) + "\")", "a GPU API: cuda or hip", "pass cuda or hip");
  int fds[2];
  if (pipe(fds) != 0) throw Error("pipe() failed while surveying the " + std::string(kind) + " GPUs", "a pipe", "retry");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error("fork() failed while surveying the " + std::string(kind) + " GPUs", "a child process", "retry");
  }
  if (pid == 0) {
    close(fds[0]);
    const std::string report = survey_here(kind);
    const bool written = write(fds[1], report.data(), report.size()) == ssize_t(report.size());
    _exit(written ? 0 : 1);
  }
  close(fds[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t got; (got = read(fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, size_t(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::vector<std::string> fields = fields_of(report);
  GpuSurvey survey;
  if (fields.size() != 5 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    survey.error = Error("the process that opened the " + std::string(kind) + " GPUs ended without a report (status " +
                             std::to_string(status) + ")",
                         "a working " + std::string(kind) + " driver", "check the driver with the vendor's tool");
    return survey;
  }
  survey.count = std::stoi(fields[0]);
  survey.target = fields[1];
  if (!fields[2].empty()) survey.error = Error(fields[2], fields[3], fields[4]);
  return survey;
}

}  // namespace epjit
