//===- PassTestSupport.h - What the pass tests share -------------*- C++ -*-===//
//
// The helpers of the tests that rewrite a graph and compare it with the
// original (fold-scale, fold-transpose, fuse-attention, fuse-cross-entropy):
// run a pipeline, count an op, and the relative error of a result against
// its reference.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_PASSTESTSUPPORT_H
#define GMOPT_TESTS_UNIT_PASSTESTSUPPORT_H

#include "passes/PassManager.h"
#include "tests/unit/TestdataTraining.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace gmopt {
namespace testing {

/// Runs \p pipeline on \p module with \p manager (a fresh one when null);
/// "<success>" or the error's text.
inline std::string runPipeline(Module &module, llvm::StringRef pipeline,
                               PassManager *manager = nullptr) {
  PassManager local;
  PassManager &pm = manager ? *manager : local;
  if (llvm::Error err = pm.addPipeline(pipeline))
    return testdataErrorText(std::move(err));
  return testdataErrorText(pm.run(module));
}

/// How many nodes of (\p domain, \p type) \p module has.
inline unsigned countOps(const Module &module, llvm::StringRef domain,
                         llvm::StringRef type) {
  unsigned count = 0;
  for (const Node &node : module.getGraph().getNodes())
    count += node.isa(domain, type);
  return count;
}

/// Largest |a - b| over the elements, relative to the largest |b| (at
/// least 1e-30): how far \p a is from the reference \p b.
inline double relativeError(const TensorData &a, const TensorData &b) {
  EXPECT_EQ(a.getType(), b.getType());
  if (a.getType() != b.getType())
    return INFINITY;
  double maxDiff = 0, maxRef = 1e-30;
  for (uint64_t i = 0, e = a.getNumElements(); i != e; ++i) {
    maxDiff = std::max(maxDiff,
                       std::fabs(a.getFloatElement(i) - b.getFloatElement(i)));
    maxRef = std::max(maxRef, std::fabs(b.getFloatElement(i)));
  }
  return maxDiff / maxRef;
}

} // namespace testing
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_PASSTESTSUPPORT_H
