// Tandem's error types and the check macros that throw them with the failed expression and file:line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

// Base of every error Tandem throws. what() reads:
//   "<message> [<expression> failed at <file>:<line>]"
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const std::string& expression, const char* file, int line);
  const std::string& message() const { return message_; }
  const std::string& expression() const { return expression_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  std::string expression_;
  const char* file_;
  int line_;
};

#define TANDEM_DEFINE_ERROR(Name) \
  class Name : public Error {     \
   public:                        \
    using Error::Error;           \
  }

TANDEM_DEFINE_ERROR(ValueError);         // a bad argument or configuration
TANDEM_DEFINE_ERROR(ShapeError);         // shapes that do not fit together
TANDEM_DEFINE_ERROR(DTypeError);         // an unsupported or mismatched element type
TANDEM_DEFINE_ERROR(DeviceError);        // mixed devices, or a device that is not there
TANDEM_DEFINE_ERROR(IndexError);         // an index or label out of range
TANDEM_DEFINE_ERROR(AutogradError);      // a misuse of the autograd graph
TANDEM_DEFINE_ERROR(IoError);            // a file that is missing, truncated or corrupt
TANDEM_DEFINE_ERROR(BackendError);       // an error reported by CUDA, cuBLAS, cuDNN or NCCL
TANDEM_DEFINE_ERROR(InternalError);      // a broken invariant inside Tandem
TANDEM_DEFINE_ERROR(StreamOrderError);   // two streams' accesses with no declared order (TANDEM_STREAM_CHECK)
TANDEM_DEFINE_ERROR(GraphCaptureError);  // work that is illegal while a CUDA graph is captured

#undef TANDEM_DEFINE_ERROR

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  return os.str();
}
template <typename E>
[[noreturn]] void raise(const std::string& message, const char* expression, const char* file, int line) {
  throw E(message, expression, file, line);
}
}  // namespace detail

}  // namespace tandem

// TD_CHECK_T(ErrorType, cond, message parts...): throws ErrorType when cond is false.
#define TD_CHECK_T(ErrorType, cond, ...)                                                                              \
  do {                                                                                                                \
    if (__builtin_expect(!(cond), 0))                                                                                 \
      ::tandem::detail::raise<::tandem::ErrorType>(::tandem::detail::concat(__VA_ARGS__), #cond, __FILE__, __LINE__); \
  } while (0)

#define TD_CHECK(cond, ...) TD_CHECK_T(ValueError, cond, __VA_ARGS__)
#define TD_CHECK_SHAPE(cond, ...) TD_CHECK_T(ShapeError, cond, __VA_ARGS__)
#define TD_CHECK_DTYPE(cond, ...) TD_CHECK_T(DTypeError, cond, __VA_ARGS__)
#define TD_CHECK_DEVICE(cond, ...) TD_CHECK_T(DeviceError, cond, __VA_ARGS__)
#define TD_CHECK_INDEX(cond, ...) TD_CHECK_T(IndexError, cond, __VA_ARGS__)
#define TD_CHECK_IO(cond, ...) TD_CHECK_T(IoError, cond, __VA_ARGS__)
#define TD_ASSERT(cond, ...) TD_CHECK_T(InternalError, cond, __VA_ARGS__)

// TD_THROW(ErrorType, message parts...): throws unconditionally.
#define TD_THROW(ErrorType, ...) \
  ::tandem::detail::raise<::tandem::ErrorType>(::tandem::detail::concat(__VA_ARGS__), "", __FILE__, __LINE__)
