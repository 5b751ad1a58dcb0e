// Files the runtime carries in its binary: the device preludes and
// numerics.h (for in-memory compilers like NVRTC and hipRTC, and written out
// for subprocess compilers), and the templates (whose digests key the cache).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace epjit {

struct EmbeddedFile {
  std::string_view name;  // "epjit/targets/amdgcn/prelude.h", or a template name
  std::string_view text;
};

std::span<const EmbeddedFile> embedded_headers();
std::span<const EmbeddedFile> embedded_templates();

// SHA-256 of every embedded header: changes when any prelude changes.
const std::string& headers_digest();
// SHA-256 of a template's text and of every template it includes (ep.include,
// transitively); empty when there is no such template.
std::string template_digest(std::string_view name);
// SHA-256 of every template, in name order (name, NUL, text, NUL each): what a
// compiler provider built with these templates states as its templates
// (compiler/kernel_source computes the same over its copy).
const std::string& all_templates_digest();

// A directory holding the embedded headers (include root): private to this
// user (0700) under TMPDIR, named by the user and the content digest, its
// contents checked against the embedded ones once per process and TMPDIR.
// Throws epjit::Error when it cannot be written, or when a directory of that
// name is not this user's.
std::string materialized_header_dir();

}  // namespace epjit
