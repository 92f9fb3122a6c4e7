// Small file-system helpers shared by the tools and sessions: folders, whole text files.
#pragma once

#include <string>

namespace tandem {

// Creates `path` and its missing parents (like mkdir -p). Throws IoError naming the folder that failed.
void make_dirs(const std::string& path);

// Writes `text` and a newline to `path` atomically (to a temporary file of this call alone, then rename), so a
// reader never sees half a file and concurrent writers leave one of their texts whole. Throws IoError.
void write_text(const std::string& path, const std::string& text);

// The whole file. Throws IoError when it cannot be read.
std::string read_text(const std::string& path);

}  // namespace tandem
