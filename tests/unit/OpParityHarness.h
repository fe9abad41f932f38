//===- OpParityHarness.h - One-node CUDA-vs-CPU parity cases ----*- C++ -*-===//
//
// What the per-op CUDA parity tests share: a case is one op on given
// inputs (fresh random tensors in f32, f16 or bf16 storage, index tensors,
// constant operands, absent optional operands), built into a one-node
// module, run on the CPU backend (the reference, eagerly) and on the CUDA
// backend (eagerly, or under a plan with the CUDA workspace model), and
// the results compared: integer, bool and bit-packed results bit for bit,
// float results exactly or within a per-dtype tolerance (fp32 1e-5 +
// 1e-4 |x|; 16-bit two units in the result's last place plus two at 1.0),
// which a case may scale (a long reduction) or loosen for an eager run.
// The CPU half of every case runs in every build (checkCpuHalf: the
// module verifies, the CPU backend runs it, its float results are
// finite); the CUDA half needs a device.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_OPPARITYHARNESS_H
#define GMOPT_TESTS_UNIT_OPPARITYHARNESS_H

#include "backend/Executor.h"
#include "backend/cuda/CudaDevice.h"
#include "ir/Half.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/Plan.h"
#include "ir/Verifier.h"

#include "tests/unit/BackendStep.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace gmopt {
namespace test {

/// Random values in [\p low, \p high) stored as \p dtype (f32, f16 or
/// bf16), drawn from a generator seeded with \p seed.
inline TensorData randomTensor(DType dtype, std::vector<int64_t> shape,
                               unsigned seed, float low, float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  if (dtype == DType::F32)
    return TensorData::fromValues<float>(dtype, shape, values);
  std::vector<uint16_t> bits;
  for (float v : values)
    bits.push_back(dtype == DType::F16 ? floatToHalf(v) : floatToBFloat16(v));
  return TensorData::fromValues<uint16_t>(dtype, shape, bits);
}

/// How closely a case's float results must agree.
enum class Agreement { Exact, Rounded };

/// One op on given inputs.
struct OpCase {
  std::string what;
  std::string domain, op;
  /// The operands in order; a null tensor is an absent optional operand.
  std::vector<TensorData> inputs;
  /// The result types; an Undefined one is a dropped optional result.
  /// Empty: numResults results of the types the registry infers.
  std::vector<TensorType> results;
  std::vector<NamedAttribute> attrs;
  Agreement agreement = Agreement::Rounded;
  /// Needs the planned workspace (asymmetric pads): not run eagerly.
  bool plannedOnly = false;
  /// Added to the tolerance of an eager run: a 16-bit scatter-add without
  /// its planned fp32 accumulator rounds every add.
  double eagerSlack = 0;
  /// Multiplies the per-dtype tolerance (a long fp32 reduction, summed in
  /// another order on each backend).
  double toleranceScale = 1;
  /// Operands that are initializers rather than graph inputs (the shapes,
  /// axes and pads the kernels read when the step is prepared).
  std::vector<unsigned> constantOperands = {};
  /// Results to infer when `results` is empty.
  unsigned numResults = 1;
  /// The op writes its operands in place (optimizers, accumulators): the
  /// graph inputs after the step are compared as well.
  bool comparesWrittenOperands = false;
  /// The ai.onnx opset the module imports (Gelu needs 20).
  int64_t onnxOpset = 17;
};

/// Makes the cases of one storage type, each on fresh seeds that its name
/// records (so a failure can be replayed).
class CaseMaker {
public:
  CaseMaker(DType dtype, unsigned firstSeed)
      : dtype(dtype), seed(firstSeed), caseSeed(firstSeed) {}

  /// Random values in [low, high) in the cases' storage type.
  TensorData rnd(std::vector<int64_t> shape, float low = -1, float high = 1) {
    return randomTensor(dtype, shape, seed++, low, high);
  }
  /// Random fp32 values in [low, high).
  TensorData f32(std::vector<int64_t> shape, float low = -1, float high = 1) {
    return randomTensor(DType::F32, shape, seed++, low, high);
  }

  /// A case of (\p domain, \p op) on \p inputs with \p numResults inferred
  /// results, named \p what, its storage type and the seeds it drew.
  OpCase make(std::string what, llvm::StringRef domain, llvm::StringRef op,
              std::vector<TensorData> inputs,
              std::vector<NamedAttribute> attrs = {}, unsigned numResults = 1) {
    OpCase c;
    c.what = what + " " + dtypeName(dtype).str() +
             (seed == caseSeed ? std::string(" (no random inputs)")
                               : " (seeds " + std::to_string(caseSeed) +
                                     " to " + std::to_string(seed - 1) + ")");
    caseSeed = seed;
    c.domain = domain.str();
    c.op = op.str();
    c.inputs = std::move(inputs);
    c.attrs = std::move(attrs);
    c.numResults = numResults;
    return c;
  }

  /// The storage type of rnd's tensors.
  DType dtype;

private:
  /// The next seed, and the first of the case being made.
  unsigned seed, caseSeed;
};

/// \p shape as `[2,3,5]` (for case names).
inline std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

/// Tensors of static \p shape holding \p values.
inline TensorData int64s(std::vector<int64_t> shape,
                         std::vector<int64_t> values) {
  return TensorData::fromValues<int64_t>(DType::I64, shape, values);
}
inline TensorData bools(std::vector<int64_t> shape,
                        std::vector<uint8_t> values) {
  return TensorData::fromValues<uint8_t>(DType::Bool, shape, values);
}
inline TensorData floats(std::vector<int64_t> shape,
                         std::vector<float> values) {
  return TensorData::fromValues<float>(DType::F32, shape, values);
}

/// The one-node module of \p c: each operand a graph input (in order) or
/// an initializer, each result a graph output, random nodes given their
/// stream id as the importers do.
inline std::unique_ptr<Module> buildOpModule(const OpCase &c) {
  auto module = std::make_unique<Module>();
  module->opsetImports[""] = c.onnxOpset;
  module->opsetImports[std::string(kMsDomain)] = 1;
  Graph &graph = module->getGraph();
  std::vector<Value *> operands;
  for (unsigned i = 0; i < c.inputs.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    if (c.inputs[i].isNull())
      operands.push_back(nullptr);
    else if (llvm::is_contained(c.constantOperands, i))
      operands.push_back(graph.addInitializer(c.inputs[i], name));
    else
      operands.push_back(graph.addInput(c.inputs[i].getType(), name));
  }
  Builder builder(graph);
  bool infer = c.results.empty();
  std::vector<TensorType> types =
      infer ? std::vector<TensorType>(c.numResults) : c.results;
  Node *node =
      builder.create(OpName{c.domain, c.op}, operands, types, c.attrs, c.op);
  if (infer)
    if (llvm::Error err = inferAndSetTypes(*node))
      ADD_FAILURE() << c.what << ": " << llvm::toString(std::move(err));
  for (unsigned i = 0; i < types.size(); ++i)
    if (!infer && types[i].getDType() == DType::Undefined)
      graph.dropResult(node, i);
  assignMissingStreamIds(graph);
  for (Value *result : node->getResults())
    if (result)
      graph.addOutput(result);
  return module;
}

/// The graph-input operands of \p c, in order (what runBackendStep binds).
inline std::vector<TensorData> boundInputs(const OpCase &c) {
  std::vector<TensorData> bound;
  for (unsigned i = 0; i < c.inputs.size(); ++i)
    if (!c.inputs[i].isNull() && !llvm::is_contained(c.constantOperands, i))
      bound.push_back(c.inputs[i]);
  return bound;
}

/// Gives \p module the plan a CUDA run gets: every value its own slice and
/// each node the CUDA workspace model's scratch.
inline llvm::Error planForCuda(Module &module) {
  auto plan = makeTrivialPlan(module, getCudaKernelWorkspaceBytes,
                              kCudaWorkspaceModelName);
  if (!plan)
    return plan.takeError();
  module.plan = std::move(*plan);
  return llvm::Error::success();
}

/// \p c's results on the CUDA backend (\p onCuda; planned or eager per
/// \p mode) or eagerly on the CPU backend; then, for a case that writes its
/// operands, every graph input after the step.
inline llvm::Expected<std::vector<TensorData>>
runOpCase(const OpCase &c, bool onCuda,
          AllocationMode mode = AllocationMode::Eager) {
  std::unique_ptr<Module> module = buildOpModule(c);
  ExecutorOptions options;
  options.mode = onCuda ? mode : AllocationMode::Eager;
  options.threads = 1;
  if (options.mode == AllocationMode::Planned)
    if (llvm::Error err = planForCuda(*module))
      return err;
  return runBackendStep(*module, boundInputs(c), onCuda, options,
                        c.comparesWrittenOperands);
}

/// The unit in the last place of \p dtype's numbers near \p magnitude.
inline double ulpNear(DType dtype, double magnitude) {
  int mantissaBits = dtype == DType::F16 ? 10 : dtype == DType::BF16 ? 7 : 23;
  int exponent = 0;
  std::frexp(magnitude, &exponent);
  return std::ldexp(1.0, exponent - 1 - mantissaBits);
}

/// How far a CUDA result \p got may lie from the CPU's \p want in \p dtype:
/// fp32 1e-5 + 1e-4 |want| (the kernels' fp32 math and sums in another
/// order); 16-bit two units in the result's last place (fp32 math, then
/// rounded once on each side) plus two at 1.0, the inputs' scale.
inline double parityTolerance(DType dtype, double want, double got) {
  if (dtype == DType::F32)
    return 1e-5 + 1e-4 * std::fabs(want);
  if (dtype == DType::F64)
    return 1e-12 + 1e-10 * std::fabs(want);
  return 2 * ulpNear(dtype, std::max(std::fabs(want), std::fabs(got))) +
         2 * ulpNear(dtype, 1.0);
}

/// Expects \p actual (CUDA) to agree with \p expected (CPU) as \p c says;
/// non-float results bit for bit.
inline void expectAgreement(const OpCase &c,
                            const std::vector<TensorData> &expected,
                            const std::vector<TensorData> &actual, bool eager) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t r = 0; r < expected.size(); ++r) {
    const TensorData &e = expected[r], &a = actual[r];
    ASSERT_EQ(e.getNumElements(), a.getNumElements()) << "result " << r;
    DType dtype = e.getType().getDType();
    ASSERT_EQ(dtype, a.getType().getDType()) << "result " << r;
    if (!isFloatingPoint(dtype)) {
      EXPECT_TRUE(e.getBytes() == a.getBytes())
          << "result " << r << " (" << dtypeName(dtype).str()
          << ") differs from the CPU backend's";
      continue;
    }
    for (uint64_t k = 0; k < e.getNumElements(); ++k) {
      double want = e.getFloatElement(k), got = a.getFloatElement(k);
      if (c.agreement == Agreement::Exact) {
        ASSERT_EQ(got, want) << "result " << r << " element " << k;
        continue;
      }
      double tolerance = c.toleranceScale * parityTolerance(dtype, want, got);
      if (eager)
        tolerance += c.eagerSlack;
      ASSERT_NEAR(got, want, tolerance) << "result " << r << " element " << k;
    }
  }
}

/// The CPU half of \p c, which needs no device: the module verifies, the
/// CPU backend runs it, and every float result is finite.
inline void checkCpuHalf(const OpCase &c) {
  std::unique_ptr<Module> module = buildOpModule(c);
  if (llvm::Error err = verifyModule(*module))
    ADD_FAILURE() << "the module does not verify: "
                  << llvm::toString(std::move(err));
  auto results = runOpCase(c, /*onCuda=*/false);
  ASSERT_TRUE(bool(results)) << llvm::toString(results.takeError());
  size_t outputs = module->getGraph().getOutputs().size();
  ASSERT_EQ(results->size(),
            outputs + (c.comparesWrittenOperands ? boundInputs(c).size() : 0));
  for (size_t r = 0; r < results->size(); ++r) {
    const TensorData &result = (*results)[r];
    if (!isFloatingPoint(result.getType().getDType()))
      continue;
    for (uint64_t k = 0; k < result.getNumElements(); ++k)
      ASSERT_TRUE(std::isfinite(result.getFloatElement(k)))
          << "result " << r << " element " << k;
  }
}

/// Expects the CUDA kernel table to accept \p c's node and a plan with the
/// CUDA workspace model to be made for it; neither needs a device.
inline void expectCudaAccepts(const OpCase &c) {
  if (!isCudaBackendBuilt())
    return;
  std::unique_ptr<Module> module = buildOpModule(c);
  if (llvm::Error err = checkCudaModule(*module))
    ADD_FAILURE() << llvm::toString(std::move(err));
  if (llvm::Error err = planForCuda(*module))
    ADD_FAILURE() << llvm::toString(std::move(err));
}

/// Runs every case of \p cases on the CPU and the CUDA backend (in each of
/// \p modes; plannedOnly cases planned only) and expects agreement.
inline void expectCudaParity(const std::vector<OpCase> &cases,
                             llvm::ArrayRef<AllocationMode> modes) {
  for (const OpCase &c : cases) {
    SCOPED_TRACE(c.what);
    auto cpu = runOpCase(c, /*onCuda=*/false);
    ASSERT_TRUE(bool(cpu)) << llvm::toString(cpu.takeError());
    for (AllocationMode mode : modes) {
      if (c.plannedOnly && mode == AllocationMode::Eager)
        continue;
      SCOPED_TRACE(mode == AllocationMode::Planned ? "planned" : "eager");
      auto cuda = runOpCase(c, /*onCuda=*/true, mode);
      ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
      expectAgreement(c, *cpu, *cuda, mode == AllocationMode::Eager);
    }
  }
}

} // namespace test
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_OPPARITYHARNESS_H
