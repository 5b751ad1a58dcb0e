#include "trusted_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "epjit/error.h"

namespace epjit {
namespace {

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

std::string reason_for(const struct stat& status, const std::string& path, Ownership ownership, bool directory) {
  const uid_t me = ::geteuid();
  const bool owner_ok = status.st_uid == me || (ownership == Ownership::CurrentUserOrRoot && status.st_uid == 0);
  if (!owner_ok)
    return path + " is owned by uid " + std::to_string(status.st_uid) + ", not by this user (uid " + std::to_string(me) +
           "): remove it, or use a directory of your own";
  if (status.st_mode & (S_IWGRP | S_IWOTH)) {
    // A directory with the sticky bit (like /tmp) still lets others add files.
    return path + " is writable by " + ((status.st_mode & S_IWOTH) ? "other users" : "its group") + " (mode " +
           mode_text(status.st_mode) + "): run `chmod go-w " + path + "`" + (directory ? "" : " or remove it");
  }
  return {};
}

}  // namespace

std::string untrusted_directory_reason(const std::string& path, Ownership ownership) {
  // A link (~/.cache is one on some systems) is judged by what it names.
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) return path + " does not exist";
  if (!S_ISDIR(status.st_mode)) return path + " is not a directory";
  return reason_for(status, path, ownership, true);
}

std::string untrusted_file_reason(int fd, const std::string& path, Ownership ownership) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) return path + " cannot be examined";
  if (!S_ISREG(status.st_mode)) return path + " is not a regular file";
  return reason_for(status, path, ownership, false);
}

void require_trusted_directory(const std::string& path, Ownership ownership, const std::string& purpose) {
  const std::string why = untrusted_directory_reason(path, ownership);
  if (!why.empty())
    throw Error(purpose + " " + why, "a directory only this user can write into",
                "fix the directory as the message says, or point epjit at one of your own");
}

}  // namespace epjit
