//===- Errors.h - llvm::Error to Python exceptions --------------*- C++ -*-===//
//
// gmopt's libraries return llvm::Error; the bindings turn each into one
// Python exception, gmopt.Error (a RuntimeError), carrying the library's
// message unchanged. Nothing in the package aborts on user input.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PYTHON_SRC_ERRORS_H
#define GMOPT_PYTHON_SRC_ERRORS_H

#include "llvm/Support/Error.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace gmopt::python {

/// The C++ side of gmopt.Error; registered in the module as `Error`.
class GmoptError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws GmoptError with \p err's message when it is a failure.
inline void check(llvm::Error err) {
  if (err)
    throw GmoptError(llvm::toString(std::move(err)));
}

/// The value of \p expected, or throws GmoptError with its message.
template <typename T> T unwrap(llvm::Expected<T> expected) {
  if (!expected)
    throw GmoptError(llvm::toString(expected.takeError()));
  return std::move(*expected);
}

} // namespace gmopt::python

#endif // GMOPT_PYTHON_SRC_ERRORS_H
