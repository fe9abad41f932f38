//===- CudaCoverageTest.cpp - Every registry op has a CUDA kernel ---------===//
//
// Host-only: enumerates every (domain, op) in gmopt's op registry and asks
// the CUDA kernel table (hasCudaKernelFor) whether it has a kernel; the test
// fails listing those that do not. Ops whose CUDA kernel is still to be
// written are listed in kStillMissing, each named, so the gap is visible and
// shrinking it is a one-line edit; an op listed there that gains a kernel
// fails the test too, so the list cannot go stale.
// Without the CUDA toolkit the table is empty and the test skips.
//
//===----------------------------------------------------------------------===//

#include "backend/cpu/CpuKernel.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/MemorySpaces.h"
#include "ir/OpRegistry.h"

#include "llvm/ADT/StringSet.h"

#include "gtest/gtest.h"

#include <set>
#include <string>

using namespace gmopt;

namespace {

/// "domain::op" with the default ONNX domain spelled "".
std::string key(llvm::StringRef domain, llvm::StringRef op) {
  if (domain == "ai.onnx")
    domain = "";
  return (domain + "::" + op).str();
}

/// Registry ops with no CUDA kernel. Each is a known gap, reported as
/// such; it is never "covered" by a stub.
const char *const kStillMissing[] = {
    // ORTModule's hand-off to PyTorch: its outputs (the gradients of the
    // module's outputs) come from outside the graph, so no backend of a
    // self-contained training step runs it; the CPU backend has no kernel
    // either (checked below), and the importer's training step never
    // contains one.
    "com.microsoft::YieldOp",
};

TEST(CudaCoverageTest, EveryRegistryOpHasACudaKernel) {
  if (!isCudaBackendBuilt())
    GTEST_SKIP() << "this machine has no CUDA toolkit (the CUDA backend is not "
                    "built): no kernel "
                    "table to check";
  llvm::StringSet<> missingAllowed;
  for (const char *op : kStillMissing)
    missingAllowed.insert(op);

  // The copy ops (ir/MemorySpaces.h) are no kernels: the plan interpreter
  // runs them through the Device's copies on every backend.
  std::set<std::string> ops;
  for (const OpSchema *schema : OpRegistry::instance().all())
    if (!isCopyOp(schema->domain, schema->name))
      ops.insert(key(schema->domain, schema->name));
  ASSERT_GT(ops.size(), 50u) << "the registry looks empty";

  std::string uncovered, nowCovered;
  for (const std::string &op : ops) {
    llvm::StringRef ref(op);
    auto [domain, name] = ref.split("::");
    bool has = hasCudaKernelFor(domain, name);
    if (!has && !missingAllowed.contains(op))
      uncovered += "  " + op + "\n";
    if (has && missingAllowed.contains(op))
      nowCovered += "  " + op + "\n";
  }
  EXPECT_TRUE(uncovered.empty()) << "registry ops without a CUDA kernel:\n"
                                 << uncovered;
  EXPECT_TRUE(nowCovered.empty())
      << "ops listed in kStillMissing now have a kernel (drop them):\n"
      << nowCovered;
  // Every exclusion must name a registry op, so a renamed op cannot hide,
  // and one the CPU backend runs is no longer an exclusion.
  for (const char *op : kStillMissing) {
    EXPECT_TRUE(ops.count(op)) << op << " is not in the registry";
    auto [domain, name] = llvm::StringRef(op).split("::");
    EXPECT_FALSE(cpu::hasCpuKernel(domain, name))
        << op << " has a CPU kernel: the CUDA backend needs one too";
  }
}

} // namespace
