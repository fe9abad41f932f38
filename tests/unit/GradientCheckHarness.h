//===- GradientCheckHarness.h - The gradient checker's machinery -*- C++
//-*-===//
//
// GradientCheckTest's harness: CaseBuilder (a one-op forward graph over
// random shapes, in float32 or float64), GradientCase and the helpers that
// spell cases, the random inputs, and checkTrial, which runs the autodiff
// pass on a case and compares every parameter gradient the CPU backend
// computes with central finite differences of the forward loss (Tolerance:
// kFloat64, kFloat32). The case table and the tests are in
// GradientCheckTest.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_UNIT_GRADIENTCHECKHARNESS_H
#define GMOPT_TESTS_UNIT_GRADIENTCHECKHARNESS_H

#include "passes/PassManager.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/autodiff/GradientRules.h"

#include "backend/Executor.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/Verifier.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace gmopt {
namespace gradcheck {

inline std::string errorText(llvm::Error err) {
  if (!err)
    return "<success>";
  return llvm::toString(std::move(err));
}

/// A draw uniform in [lo, hi) at \p dtype's precision (float32 draws take
/// one 32-bit word of \p rng, float64 draws two).
inline double uniform(std::mt19937 &rng, double lo, double hi, DType dtype) {
  if (dtype == DType::F32)
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

/// A tensor of float type \p dtype (F32 or F64) holding \p values.
inline TensorData floatTensor(DType dtype, llvm::ArrayRef<int64_t> shape,
                              llvm::ArrayRef<double> values) {
  if (dtype == DType::F64)
    return TensorData::fromValues<double>(dtype, shape, values);
  assert(dtype == DType::F32 && "float tensors are F32 or F64");
  std::vector<float> narrowed(values.begin(), values.end());
  return TensorData::fromValues<float>(dtype, shape, narrowed);
}

/// Builds one case's forward graph; the same calls with the same random
/// generator build the same graph, so the training and the reference
/// module are two builds of one case.
class CaseBuilder {
public:
  CaseBuilder(Module &module, std::mt19937 &rng, DType floatType)
      : module(module), graph(module.getGraph()), builder(graph), rng(rng),
        floatType(floatType) {
    module.opsetImports[""] = 17;
    module.opsetImports["com.microsoft"] = 1;
  }

  /// A float parameter with values uniform in [lo, hi].
  Value *param(llvm::ArrayRef<int64_t> shape, double lo = -1.0,
               double hi = 1.0) {
    std::string name = "p" + std::to_string(params++);
    Value *value = graph.addInput(TensorType::get(floatType, shape), name);
    ranges[name] = {lo, hi};
    return value;
  }
  /// A float parameter in [lo, hi] whose values stay 0.05 away from each
  /// of \p kinks (where a piecewise derivative jumps, a finite difference
  /// straddling the kink says nothing).
  Value *paramAvoiding(llvm::ArrayRef<int64_t> shape, double lo, double hi,
                       std::vector<double> kinks) {
    Value *value = param(shape, lo, hi);
    avoid[value->getName()] = std::move(kinks);
    return value;
  }
  /// A float parameter whose elements are a shuffle of evenly spaced
  /// values in [lo, hi] (no near-ties: a maximum stays the maximum under
  /// the finite-difference step).
  Value *paramDistinct(llvm::ArrayRef<int64_t> shape, double lo = -1.0,
                       double hi = 1.0) {
    Value *value = param(shape, lo, hi);
    distinct.insert(value->getName());
    return value;
  }
  /// An int64 data input with values uniform in [0, bound).
  Value *indices(llvm::ArrayRef<int64_t> shape, int64_t bound) {
    std::string name = "input_" + std::to_string(data++);
    Value *value = graph.addInput(TensorType::get(DType::I64, shape), name);
    intBounds[name] = bound;
    return value;
  }
  /// A bool data input.
  Value *mask(llvm::ArrayRef<int64_t> shape) {
    std::string name = "input_" + std::to_string(data++);
    Value *value = graph.addInput(TensorType::get(DType::Bool, shape), name);
    intBounds[name] = 2;
    return value;
  }
  Value *int64s(llvm::ArrayRef<int64_t> values) {
    return graph.addInitializer(
        TensorData::fromValues<int64_t>(
            DType::I64, {static_cast<int64_t>(values.size())}, values),
        "c" + std::to_string(constants++));
  }
  /// A scalar constant of the case's float type.
  Value *scalarFloat(double value) {
    return graph.addInitializer(floatTensor(floatType, {}, {value}),
                                "c" + std::to_string(constants++));
  }
  /// A float32 scalar constant (a Dropout ratio: its own type T1).
  Value *scalarF32(float value) {
    return graph.addInitializer(
        TensorData::fromValues<float>(DType::F32, {}, {value}),
        "c" + std::to_string(constants++));
  }
  Value *scalarBool(bool value) {
    return graph.addInitializer(
        TensorData::fromValues<uint8_t>(DType::Bool, {}, {value}),
        "c" + std::to_string(constants++));
  }
  /// Creates node \p type with inferred types; returns result 0 (or null,
  /// failing the test, when inference rejects it).
  Value *op(llvm::StringRef type, llvm::ArrayRef<Value *> operands,
            llvm::ArrayRef<NamedAttribute> attrs = {}, unsigned results = 1,
            llvm::StringRef domain = "") {
    auto node = builder.createInferred(OpName{domain.str(), type.str()},
                                       operands, results, attrs,
                                       type.str() + std::to_string(nodes++));
    EXPECT_TRUE(bool(node))
        << type.str() << ": " << errorText(node.takeError());
    if (!node)
      return nullptr;
    for (unsigned i = 0; i != results; ++i)
      (*node)->getResult(i)->setName((*node)->getName().str() + "_" +
                                     std::to_string(i));
    last = *node;
    return (*node)->getResult(0);
  }
  Node *lastNode() const { return last; }
  /// The ONNX element type of floatType (a stash_type or Cast's `to`).
  int64_t stashType() const { return floatType == DType::F64 ? 11 : 1; }

  /// Uniform integer in [lo, hi].
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  /// A random shape of \p rank with extents in [1, maxExtent].
  std::vector<int64_t> shape(unsigned rank, int64_t maxExtent = 4) {
    std::vector<int64_t> dims;
    for (unsigned i = 0; i != rank; ++i)
      dims.push_back(pick(1, maxExtent));
    return dims;
  }

  Module &module;
  Graph &graph;
  Builder builder;
  std::mt19937 &rng;
  /// The element type of the parameters and float constants.
  DType floatType;
  llvm::StringMap<std::pair<double, double>> ranges;
  llvm::StringMap<int64_t> intBounds;
  llvm::StringMap<std::vector<double>> avoid;
  llvm::StringSet<> distinct;

private:
  unsigned params = 0, data = 0, constants = 0, nodes = 0;
  Node *last = nullptr;
};

/// A case: builds its op(s) and returns the value the loss reads.
using CaseFn = std::function<Value *(CaseBuilder &)>;

/// One gradient-check case.
struct GradientCase {
  GradientCase(std::string name, CaseFn build, unsigned trials = 3,
               bool trainMode = true)
      : name(std::move(name)), build(std::move(build)), trials(trials),
        trainMode(trainMode) {}
  std::string name;
  CaseFn build;
  /// Random shapes/attributes tried.
  unsigned trials;
  /// The pass's train-mode option.
  bool trainMode;
};

/// Appends loss = ReduceSum(Y * R) to \p b's graph, R from \p seed.
inline Value *addProjectionLoss(CaseBuilder &b, Value *y, unsigned seed) {
  const TensorType &type = y->getType();
  EXPECT_TRUE(type.hasStaticShape()) << type.str();
  std::mt19937 rng(seed);
  std::vector<double> values(type.getNumElements());
  for (double &v : values)
    v = uniform(rng, -1.0, 1.0, type.getDType());
  Value *weights = b.graph.addInitializer(
      floatTensor(type.getDType(), type.getStaticShape(), values),
      "projection");
  Value *product = b.op("Mul", {y, weights});
  Value *loss =
      b.op("ReduceSum", {product}, {{"keepdims", Attribute::getInt(0)}});
  loss->setName("loss");
  while (b.graph.getNumOutputs())
    b.graph.removeOutput(0);
  b.graph.addOutput(loss);
  return loss;
}

/// Builds the case into a fresh module (deterministic in \p seed).
/// What a case says about its inputs' values.
struct InputRanges {
  llvm::StringMap<std::pair<double, double>> ranges;
  llvm::StringMap<int64_t> intBounds;
  llvm::StringMap<std::vector<double>> avoid;
  llvm::StringSet<> distinct;
};

inline std::unique_ptr<Module> buildCase(const GradientCase &gradientCase,
                                         unsigned seed, DType dtype,
                                         InputRanges &inputs) {
  auto module = std::make_unique<Module>();
  std::mt19937 rng(seed);
  CaseBuilder b(*module, rng, dtype);
  Value *y = gradientCase.build(b);
  if (!y)
    return nullptr;
  addProjectionLoss(b, y, seed + 1);
  assignMissingStreamIds(module->getGraph());
  inputs.ranges = b.ranges;
  inputs.intBounds = b.intBounds;
  inputs.avoid = b.avoid;
  inputs.distinct = b.distinct;
  return module;
}

/// Random values for every input of \p module (by name).
inline llvm::StringMap<TensorData>
makeInputs(const Module &module, const InputRanges &inputs, unsigned seed) {
  const auto &ranges = inputs.ranges;
  const auto &intBounds = inputs.intBounds;
  std::mt19937 rng(seed);
  llvm::StringMap<TensorData> values;
  for (const auto &input : module.getGraph().getInputs()) {
    const TensorType &type = input->getType();
    llvm::SmallVector<int64_t, 4> staticShape = type.getStaticShape();
    std::vector<int64_t> shape(staticShape.begin(), staticShape.end());
    uint64_t count = type.getNumElements();
    llvm::StringRef name = input->getName();
    if (type.getDType() == DType::F32 || type.getDType() == DType::F64) {
      auto range = ranges.lookup(name);
      std::vector<double> kinks = inputs.avoid.lookup(name);
      auto nearKink = [&](double v) {
        return llvm::any_of(kinks,
                            [&](double k) { return std::fabs(v - k) < 0.05; });
      };
      std::vector<double> data(count);
      for (double &v : data)
        do
          v = uniform(rng, range.first, range.second, type.getDType());
        while (nearKink(v));
      if (inputs.distinct.contains(name)) {
        for (uint64_t i = 0; i != count; ++i)
          data[i] = range.first + (range.second - range.first) * i /
                                      std::max<uint64_t>(count - 1, 1);
        std::shuffle(data.begin(), data.end(), rng);
      }
      values[name] = floatTensor(type.getDType(), shape, data);
    } else if (type.getDType() == DType::I64) {
      std::uniform_int_distribution<int64_t> dist(0,
                                                  intBounds.lookup(name) - 1);
      std::vector<int64_t> data(count);
      for (int64_t &v : data)
        v = dist(rng);
      values[name] = TensorData::fromValues<int64_t>(DType::I64, shape, data);
    } else {
      std::uniform_int_distribution<int> dist(0, 1);
      std::vector<uint8_t> data(count);
      for (uint8_t &v : data)
        v = dist(rng);
      values[name] = TensorData::fromValues<uint8_t>(DType::Bool, shape, data);
    }
  }
  return values;
}

/// Runs one step of \p executable with \p values and returns \p output.
inline double runLoss(Executable &executable, const Module &module,
                      const llvm::StringMap<TensorData> &values) {
  for (const auto &input : module.getGraph().getInputs()) {
    auto found = values.find(input->getName());
    EXPECT_TRUE(found != values.end()) << input->getName().str();
    if (found == values.end())
      return NAN;
    EXPECT_EQ(errorText(executable.setInput(input.get(), found->second)),
              "<success>");
  }
  EXPECT_EQ(errorText(executable.runStep(0)), "<success>");
  auto loss = executable.readValue(module.getGraph().getOutput(0));
  EXPECT_TRUE(bool(loss)) << errorText(loss.takeError());
  return loss ? loss->getFloatElement(0) : NAN;
}

inline std::unique_ptr<Executable> prepare(const Module &module) {
  ExecutorOptions options;
  options.mode = AllocationMode::Eager;
  options.threads = 1;
  auto executable = prepareCpuExecutable(module, options);
  EXPECT_TRUE(bool(executable)) << errorText(executable.takeError());
  return executable ? std::move(*executable) : nullptr;
}

/// A finite-difference step and the agreement required of a gradient:
/// |analytic - numeric| <= relative * max |numeric| + absolute.
struct Tolerance {
  double step, relative, absolute;
};
/// float32: two float32 losses subtracted with a step of 1e-2 (truncation
/// ~1e-4, rounding ~1e-5 relative).
constexpr Tolerance kFloat32 = {1e-2, 1e-2, 1e-3};
/// float64: with a step of 1e-6 the truncation error is ~h^2 / 6 times the
/// third derivative, ~1e-12, and the rounding error ~eps |loss| / h ~ 1e-9
/// for the losses here (|loss| < 10), so 1e-6 relative leaves a
/// thousandfold margin, while a kernel that rounds anything to float32
/// (~6e-8 relative per value, ~1e-1 once divided by h) misses it by far.
constexpr Tolerance kFloat64 = {1e-6, 1e-6, 1e-7};

/// The largest |analytic - numeric| / (max |numeric| + 1) of the checks
/// since the last reset, printed as the suite's figure.
inline double worstError = 0;

/// Checks every trainable parameter's gradient of one trial; returns the
/// number of parameters checked.
inline unsigned checkTrial(const GradientCase &gradientCase, unsigned seed,
                           DType dtype) {
  InputRanges inputs;
  std::unique_ptr<Module> forward =
      buildCase(gradientCase, seed, dtype, inputs);
  std::unique_ptr<Module> training =
      buildCase(gradientCase, seed, dtype, inputs);
  if (!forward || !training)
    return 0;
  // The projection weights are the loss's constants, not parameters.
  AutodiffPass::Options options;
  options.frozen = "projection";
  if (training->getGraph().lookupValue("probabilities"))
    options.frozen += ",probabilities";
  options.trainMode = gradientCase.trainMode;
  AutodiffPass autodiff(options);
  PassContext context;
  auto changed = autodiff.run(*training, context);
  EXPECT_TRUE(bool(changed))
      << gradientCase.name << ": " << errorText(changed.takeError());
  if (!changed)
    return 0;
  EXPECT_EQ(errorText(verifyModule(*training)), "<success>")
      << gradientCase.name;

  llvm::StringMap<TensorData> values = makeInputs(*forward, inputs, seed + 2);
  const TrainingSignature &signature = training->getSignature();
  llvm::StringMap<TensorData> trainingValues = values;
  for (const ParamInfo &info : signature.getParams())
    if (info.accumulator) {
      TensorType type = info.accumulator->getType();
      trainingValues[info.accumulator->getName()] =
          floatTensor(type.getDType(), type.getStaticShape(),
                      std::vector<double>(type.getNumElements(), 0.0));
    }
  if (Value *reset = signature.getLazyResetGrad())
    trainingValues[reset->getName()] =
        TensorData::fromValues<uint8_t>(DType::Bool, {1}, {1});

  std::unique_ptr<Executable> trainingRun = prepare(*training);
  std::unique_ptr<Executable> forwardRun = prepare(*forward);
  if (!trainingRun || !forwardRun)
    return 0;
  double trainingLoss = runLoss(*trainingRun, *training, trainingValues);
  double forwardLoss = runLoss(*forwardRun, *forward, values);
  bool f64 = dtype == DType::F64;
  EXPECT_NEAR(trainingLoss, forwardLoss,
              (f64 ? 1e-12 : 1e-5) * (1 + std::fabs(forwardLoss)))
      << gradientCase.name << ": the training graph's loss";

  unsigned checked = 0;
  const Tolerance &tol = f64 ? kFloat64 : kFloat32;
  for (const ParamInfo &info : signature.getParams()) {
    if (!info.trainable)
      continue;
    auto analytic = trainingRun->readGradient(info);
    EXPECT_TRUE(bool(analytic)) << errorText(analytic.takeError());
    if (!analytic)
      continue;
    std::string name = info.param->getName().str();
    const TensorData &base = values[name];
    std::vector<double> numeric(base.getNumElements());
    double largest = 0;
    llvm::SmallVector<int64_t, 4> staticShape = base.getType().getStaticShape();
    std::vector<int64_t> shape(staticShape.begin(), staticShape.end());
    for (uint64_t i = 0; i != base.getNumElements(); ++i) {
      std::vector<double> data(base.getNumElements());
      for (uint64_t j = 0; j != data.size(); ++j)
        data[j] = base.getFloatElement(j);
      llvm::StringMap<TensorData> perturbed = values;
      double original = data[i];
      data[i] = original + tol.step;
      perturbed[name] = floatTensor(dtype, shape, data);
      double plus = runLoss(*forwardRun, *forward, perturbed);
      data[i] = original - tol.step;
      perturbed[name] = floatTensor(dtype, shape, data);
      double minus = runLoss(*forwardRun, *forward, perturbed);
      numeric[i] = (plus - minus) / (2 * tol.step);
      largest = std::max(largest, std::fabs(numeric[i]));
    }
    double tolerance = tol.relative * largest + tol.absolute;
    double worst = 0;
    uint64_t worstIndex = 0;
    for (uint64_t i = 0; i != numeric.size(); ++i) {
      double error = std::fabs(analytic->getFloatElement(i) - numeric[i]);
      if (error > worst) {
        worst = error;
        worstIndex = i;
      }
    }
    worstError = std::max(worstError, worst / (largest + 1));
    EXPECT_LE(worst, tolerance)
        << gradientCase.name << " (seed " << seed << "): d loss / d " << name
        << " " << info.param->getType().str() << " element " << worstIndex
        << ": analytic " << analytic->getFloatElement(worstIndex)
        << ", numeric " << numeric[worstIndex];
    ++checked;
  }
  return checked;
}

inline std::vector<NamedAttribute>
attrs(std::initializer_list<NamedAttribute> list) {
  return std::vector<NamedAttribute>(list);
}
inline NamedAttribute intAttr(llvm::StringRef name, int64_t value) {
  return {name.str(), Attribute::getInt(value)};
}
inline NamedAttribute floatAttr(llvm::StringRef name, float value) {
  return {name.str(), Attribute::getFloat(value)};
}
inline NamedAttribute intsAttr(llvm::StringRef name,
                               std::vector<int64_t> values) {
  return {name.str(), Attribute::getInts(std::move(values))};
}

/// Two broadcast-compatible shapes: \p full, and \p full with some
/// extents set to 1 and some leading axes dropped.
inline std::vector<int64_t> broadcastOf(CaseBuilder &b,
                                        std::vector<int64_t> full) {
  unsigned drop = b.pick(0, full.size() - 1);
  std::vector<int64_t> shape(full.begin() + drop, full.end());
  for (int64_t &extent : shape)
    if (b.pick(0, 2) == 0)
      extent = 1;
  return shape;
}

/// A unary elementwise case over values in [lo, hi].
inline GradientCase unary(llvm::StringRef op, double lo = -1.0, double hi = 1.0,
                          llvm::StringRef domain = "") {
  std::string type = op.str(), opDomain = domain.str();
  return {type, [=](CaseBuilder &b) {
            Value *x = b.param(b.shape(b.pick(1, 3)), lo, hi);
            return b.op(type, {x}, {}, 1, opDomain);
          }};
}

/// A binary elementwise case with broadcasting.
inline GradientCase binary(llvm::StringRef op, double lo = -1.0,
                           double hi = 1.0, double rhsLo = -1.0,
                           double rhsHi = 1.0) {
  std::string type = op.str();
  return {type, [=](CaseBuilder &b) {
            std::vector<int64_t> full = b.shape(b.pick(1, 3));
            std::vector<int64_t> other = broadcastOf(b, full);
            bool swap = b.pick(0, 1);
            Value *lhs = b.param(swap ? other : full, lo, hi);
            Value *rhs = b.param(swap ? full : other, rhsLo, rhsHi);
            return b.op(type, {lhs, rhs});
          }};
}

} // namespace gradcheck
} // namespace gmopt

#endif // GMOPT_TESTS_UNIT_GRADIENTCHECKHARNESS_H
