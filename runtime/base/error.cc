// Formatting of Tandem's error messages.
#include "runtime/base/error.h"

namespace tandem {
namespace {
std::string format(const std::string& message, const std::string& expression, const char* file, int line) {
  std::ostringstream os;
  os << message << " [";
  if (!expression.empty()) os << expression << " failed at ";
  os << file << ":" << line << "]";
  return os.str();
}
}  // namespace

Error::Error(const std::string& message, const std::string& expression, const char* file, int line)
    : std::runtime_error(format(message, expression, file, line)),
      message_(message),
      expression_(expression),
      file_(file),
      line_(line) {}

}  // namespace tandem
