// Where epjit reads code from or writes code to must belong to the user
// running it: a directory another user can write into (or owns) could hand
// this process a kernel or a header to compile and run. The checks follow
// ssh's for its keys: the owner is the current user (root may own read-only
// overlays) and nobody else may write.
#pragma once

#include <string>

namespace epjit {

enum class Ownership { CurrentUser, CurrentUserOrRoot };

// Empty when `path` (followed if it is a link) is a directory owned as
// `ownership` says and not writable by group or others; otherwise why not,
// with the fix ("chmod go-w PATH", "chown", "remove it").
std::string untrusted_directory_reason(const std::string& path, Ownership ownership);
// The same for a regular file, already open as `fd` (fstat: no race with a rename).
std::string untrusted_file_reason(int fd, const std::string& path, Ownership ownership);

// Throws epjit::Error with that reason when the directory is not trusted.
void require_trusted_directory(const std::string& path, Ownership ownership, const std::string& purpose);

}  // namespace epjit
