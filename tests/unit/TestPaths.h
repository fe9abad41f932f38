//===- TestPaths.h - Where the unit tests find their data ------*- C++ -*-===//
//
// The source tree and its testdata/ folder, for tests that read committed
// files. The paths are compiled into one small support library
// (TestPaths.cpp.in, configured by tests/CMakeLists.txt) rather than passed
// to every test as -D definitions, so a test's compile command is the same in
// every checkout and ccache shares its objects between worktrees.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_TESTPATHS_H
#define GMOPT_TESTS_UNIT_TESTPATHS_H

#include <string>

namespace gmopt {

/// The gmopt source tree the tests were configured from.
const std::string &testSourceDir();

/// testSourceDir() + "/testdata".
const std::string &testdataDir();

} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_TESTPATHS_H
