// NonCopyable: a private base for the classes that must not be copied (scope guards restoring saved state,
// owners of a handle, a file or threads); they may still declare their own moves.
#pragma once

namespace tandem {

class NonCopyable {
 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;

 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;
};

}  // namespace tandem
