//===- GradientCheckTest.cpp - Finite-difference checks of each rule ------===//
//
// ONNX Runtime's gradient checker, for gmopt's autodiff: each case builds a
// one-op (or few-op) forward graph over random shapes and attributes, adds
// the loss sum(Y * R) with a random R (so every element of dY differs),
// runs the autodiff pass, and compares the gradient the CPU backend
// computes for every float parameter with central finite differences of
// the forward graph's loss, also run on the CPU backend. The graphs run in
// float64 (parameters, constants, every kernel and every gradient op), so a
// step of 1e-6 and agreement within 1e-6 of the largest numeric entry (plus
// 1e-7 absolute) hold (see kFloat64), which a wrong rule (a dropped term, a
// transposed operand, a missed broadcast) misses by orders of magnitude and
// even a float32 rounding inside a kernel misses. The same cases run once
// more in float32, the type models train in, with a step of 1e-2 and 1e-2
// relative (see kFloat32).
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff.h"
#include "passes/GradientRules.h"
#include "passes/PassManager.h"

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

using namespace gmopt;

namespace {

std::string errorText(llvm::Error err) {
  if (!err)
    return "<success>";
  return llvm::toString(std::move(err));
}

/// A draw uniform in [lo, hi) at \p dtype's precision (float32 draws take
/// one 32-bit word of \p rng, float64 draws two).
double uniform(std::mt19937 &rng, double lo, double hi, DType dtype) {
  if (dtype == DType::F32)
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

/// A tensor of float type \p dtype (F32 or F64) holding \p values.
TensorData floatTensor(DType dtype, llvm::ArrayRef<int64_t> shape,
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
    EXPECT_TRUE(bool(node)) << type.str() << ": "
                            << errorText(node.takeError());
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
Value *addProjectionLoss(CaseBuilder &b, Value *y, unsigned seed) {
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
  Value *loss = b.op("ReduceSum", {product}, {{"keepdims", Attribute::getInt(0)}});
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

std::unique_ptr<Module> buildCase(const GradientCase &gradientCase,
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
llvm::StringMap<TensorData> makeInputs(const Module &module,
                                       const InputRanges &inputs,
                                       unsigned seed) {
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
        return llvm::any_of(kinks, [&](double k) { return std::fabs(v - k) < 0.05; });
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
      std::uniform_int_distribution<int64_t> dist(0, intBounds.lookup(name) - 1);
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
double runLoss(Executable &executable, const Module &module,
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

std::unique_ptr<Executable> prepare(const Module &module) {
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
double worstError = 0;

/// Checks every trainable parameter's gradient of one trial; returns the
/// number of parameters checked.
unsigned checkTrial(const GradientCase &gradientCase, unsigned seed,
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
  EXPECT_TRUE(bool(changed)) << gradientCase.name << ": "
                             << errorText(changed.takeError());
  if (!changed)
    return 0;
  EXPECT_EQ(errorText(verifyModule(*training)), "<success>")
      << gradientCase.name;

  llvm::StringMap<TensorData> values =
      makeInputs(*forward, inputs, seed + 2);
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

std::vector<NamedAttribute> attrs(std::initializer_list<NamedAttribute> list) {
  return std::vector<NamedAttribute>(list);
}
NamedAttribute intAttr(llvm::StringRef name, int64_t value) {
  return {name.str(), Attribute::getInt(value)};
}
NamedAttribute floatAttr(llvm::StringRef name, float value) {
  return {name.str(), Attribute::getFloat(value)};
}
NamedAttribute intsAttr(llvm::StringRef name, std::vector<int64_t> values) {
  return {name.str(), Attribute::getInts(std::move(values))};
}

/// Two broadcast-compatible shapes: \p full, and \p full with some
/// extents set to 1 and some leading axes dropped.
std::vector<int64_t> broadcastOf(CaseBuilder &b, std::vector<int64_t> full) {
  unsigned drop = b.pick(0, full.size() - 1);
  std::vector<int64_t> shape(full.begin() + drop, full.end());
  for (int64_t &extent : shape)
    if (b.pick(0, 2) == 0)
      extent = 1;
  return shape;
}

/// A unary elementwise case over values in [lo, hi].
GradientCase unary(llvm::StringRef op, double lo = -1.0, double hi = 1.0,
                   llvm::StringRef domain = "") {
  std::string type = op.str(), opDomain = domain.str();
  return {type, [=](CaseBuilder &b) {
            Value *x = b.param(b.shape(b.pick(1, 3)), lo, hi);
            return b.op(type, {x}, {}, 1, opDomain);
          }};
}

/// A binary elementwise case with broadcasting.
GradientCase binary(llvm::StringRef op, double lo = -1.0, double hi = 1.0,
                    double rhsLo = -1.0, double rhsHi = 1.0) {
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

std::vector<GradientCase> allCases() {
  std::vector<GradientCase> cases;
  // Elementwise math.
  for (const char *op : {"Identity", "Neg", "Relu", "Sigmoid", "Tanh", "Exp",
                         "Erf", "Sin", "Cos", "Atan", "Asinh", "Sinh",
                         "Cosh", "Abs"})
    cases.push_back(unary(op, -1.5, 1.5));
  cases.push_back(unary("Log", 0.5, 2.0));
  cases.push_back(unary("Sqrt", 0.5, 2.0));
  cases.push_back(unary("Reciprocal", 0.5, 2.0));
  cases.push_back(unary("Tan", -1.0, 1.0));
  cases.push_back(unary("Asin", -0.8, 0.8));
  cases.push_back(unary("Acos", -0.8, 0.8));
  cases.push_back(unary("Atanh", -0.8, 0.8));
  cases.push_back(unary("Acosh", 1.2, 2.0));
  cases.push_back(unary("Gelu", -1.5, 1.5, "com.microsoft"));
  cases.push_back(unary("FastGelu", -1.5, 1.5, "com.microsoft"));
  cases.push_back({"Cast", [](CaseBuilder &b) {
                     // To the parameter's own type.
                     return b.op("Cast", {b.param(b.shape(2))},
                                 attrs({intAttr("to", b.stashType())}));
                   }, 1});
  cases.push_back(binary("Add"));
  cases.push_back(binary("Sub"));
  cases.push_back(binary("Mul"));
  cases.push_back(binary("Div", -1.0, 1.0, 0.5, 2.0));
  cases.push_back(binary("Pow", 0.5, 2.0, -1.0, 2.0));
  cases.push_back(binary("Max"));
  cases.push_back(binary("Min"));
  cases.push_back({"Sum", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(3);
                     return b.op("Sum", {b.param(full), b.param(broadcastOf(b, full)),
                                         b.param(full)});
                   }});
  cases.push_back({"Mean", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(2);
                     return b.op("Mean", {b.param(full), b.param(full)});
                   }});
  cases.push_back({"Where", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(3);
                     Value *cond = b.mask(full);
                     return b.op("Where", {cond, b.param(full),
                                           b.param(broadcastOf(b, full))});
                   }});
  // Products.
  cases.push_back(
      {"Gemm", [](CaseBuilder &b) {
         int64_t m = b.pick(1, 4), k = b.pick(1, 4), n = b.pick(1, 4);
         bool transA = b.pick(0, 1), transB = b.pick(0, 1);
         Value *a = b.param(transA ? std::vector<int64_t>{k, m}
                                   : std::vector<int64_t>{m, k});
         Value *bm = b.param(transB ? std::vector<int64_t>{n, k}
                                    : std::vector<int64_t>{k, n});
         std::vector<Value *> operands = {a, bm};
         int64_t biasKind = b.pick(0, 2);
         if (biasKind == 1)
           operands.push_back(b.param({n}));
         else if (biasKind == 2)
           operands.push_back(b.param({m, n}));
         return b.op("Gemm", operands,
                     attrs({intAttr("transA", transA), intAttr("transB", transB),
                            floatAttr("alpha", 0.5f + b.pick(0, 2)),
                            floatAttr("beta", 0.5f + b.pick(0, 2))}));
       }, 6});
  cases.push_back({"MatMul", [](CaseBuilder &b) {
                     int64_t batch = b.pick(1, 3), m = b.pick(1, 4),
                             k = b.pick(1, 4), n = b.pick(1, 4);
                     int64_t kind = b.pick(0, 2);
                     if (kind == 0) // a linear layer: [batch, m, k] x [k, n]
                       return b.op("MatMul", {b.param({batch, m, k}),
                                              b.param({k, n})});
                     if (kind == 1) // attention: batched on both sides
                       return b.op("MatMul", {b.param({batch, 2, m, k}),
                                              b.param({batch, 2, k, n})});
                     // broadcast batch on the left operand
                     return b.op("MatMul", {b.param({1, m, k}),
                                            b.param({batch, k, n})});
                   }, 6});
  // Reductions.
  for (const char *op : {"ReduceSum", "ReduceMean"})
    cases.push_back({op, [op = std::string(op)](CaseBuilder &b) {
                       std::vector<int64_t> shape = b.shape(3);
                       std::vector<int64_t> axes;
                       for (int64_t axis = 0; axis != 3; ++axis)
                         if (b.pick(0, 1))
                           axes.push_back(axis - 3 * b.pick(0, 1));
                       int64_t keepdims = b.pick(0, 1);
                       Value *x = b.param(shape);
                       if (axes.empty())
                         return b.op(op, {x}, attrs({intAttr("keepdims", keepdims)}));
                       if (op == "ReduceSum")
                         return b.op(op, {x, b.int64s(axes)},
                                     attrs({intAttr("keepdims", keepdims)}));
                       return b.op(op, {x}, attrs({intsAttr("axes", axes),
                                                   intAttr("keepdims", keepdims)}));
                     }, 5});
  // Layers.
  for (const char *op : {"Softmax", "LogSoftmax"})
    cases.push_back({op, [op = std::string(op)](CaseBuilder &b) {
                       std::vector<int64_t> shape = b.shape(3);
                       return b.op(op, {b.param(shape, -2, 2)},
                                   attrs({intAttr("axis", b.pick(-3, 2))}));
                     }, 4});
  cases.push_back({"LayerNormalization", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     shape.back() = b.pick(2, 5);
                     int64_t n = shape.back();
                     // The saved statistics in the parameters' type
                     // (stash_type 1 would keep them in float32).
                     return b.op("LayerNormalization",
                                 {b.param(shape, -2, 2), b.param({n}), b.param({n})},
                                 attrs({intAttr("axis", -1),
                                        floatAttr("epsilon", 1e-5f),
                                        intAttr("stash_type", b.stashType())}));
                   }});
  cases.push_back({"SimplifiedLayerNormalization", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     shape.back() = b.pick(2, 5);
                     int64_t n = shape.back();
                     // The saved statistics in the parameters' type
                     // (stash_type 1 would keep them in float32).
                     return b.op("SimplifiedLayerNormalization",
                                 {b.param(shape, -2, 2), b.param({n})},
                                 attrs({intAttr("axis", -1),
                                        floatAttr("epsilon", 1e-5f),
                                        intAttr("stash_type", b.stashType())}));
                   }});
  auto batchNorm = [](bool training) {
    return [training](CaseBuilder &b) {
      int64_t c = b.pick(1, 3);
      std::vector<int64_t> shape = {b.pick(2, 3), c, b.pick(1, 3), b.pick(1, 3)};
      Value *x = b.param(shape, -2, 2);
      Value *scale = b.param({c}, 0.5, 1.5);
      Value *bias = b.param({c});
      Value *mean = b.param({c}, -0.5, 0.5);
      Value *var = b.param({c}, 0.5, 2.0);
      return b.op("BatchNormalization", {x, scale, bias, mean, var},
                  attrs({floatAttr("epsilon", 1e-5f),
                         intAttr("training_mode", training)}));
    };
  };
  // Training mode: rewritten to BatchNormInternal (batch statistics).
  cases.push_back({"BatchNormInternal", batchNorm(true), 3});
  // Inference mode (train-mode off): the running statistics.
  cases.push_back({"BatchNormalization", batchNorm(false), 3, false});
  cases.push_back({"InstanceNormalization", [](CaseBuilder &b) {
                     int64_t c = b.pick(1, 3);
                     std::vector<int64_t> shape = {b.pick(1, 2), c, b.pick(2, 3),
                                                   b.pick(1, 3)};
                     return b.op("InstanceNormalization",
                                 {b.param(shape, -2, 2), b.param({c}, 0.5, 1.5),
                                  b.param({c})},
                                 attrs({floatAttr("epsilon", 1e-5f)}));
                   }, 4});
  cases.push_back({"Dropout", [](CaseBuilder &b) {
                     Value *x = b.param(b.shape(3));
                     return b.op("Dropout", {x, b.scalarF32(0.3f), b.scalarBool(true)});
                   }});
  cases.push_back({"SoftmaxCrossEntropyLoss", [](CaseBuilder &b) {
                     int64_t n = b.pick(1, 4), c = b.pick(2, 5);
                     Value *scores = b.param({n, c}, -2, 2);
                     Value *labels = b.indices({n}, c);
                     bool sum = b.pick(0, 1);
                     return b.op("SoftmaxCrossEntropyLoss", {scores, labels},
                                 {{"reduction", Attribute::getString(
                                                    sum ? "sum" : "mean")}});
                   }, 4});
  cases.push_back({"BitmaskDropout", [](CaseBuilder &b) {
                     Value *x = b.param(b.shape(3));
                     return b.op("BitmaskDropout", {x, b.scalarF32(0.3f), b.scalarBool(true)},
                                 {}, 1, "com.microsoft");
                   }});
  cases.push_back({"BiasDropout", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("BiasDropout",
                                 {b.param(shape), b.param({shape.back()}), b.param(shape),
                                  b.scalarF32(0.3f), b.scalarBool(true)},
                                 {}, 1, "com.microsoft");
                   }});
  cases.push_back({"SoftmaxCrossEntropyLossInternal", [](CaseBuilder &b) {
                     int64_t n = b.pick(1, 4), c = b.pick(2, 5);
                     return b.op("SoftmaxCrossEntropyLossInternal",
                                 {b.param({n, c}, -2, 2), b.indices({n}, c)},
                                 {{"reduction", Attribute::getString(
                                                    b.pick(0, 1) ? "sum" : "mean")}},
                                 1, "com.microsoft");
                   }, 4});
  cases.push_back({"SoftmaxCrossEntropy", [](CaseBuilder &b) {
                     int64_t n = b.pick(1, 4), c = b.pick(2, 5);
                     // Probability labels: a constant one-hot table.
                     std::vector<double> labels(n * c, 0.0);
                     for (int64_t row = 0; row != n; ++row)
                       labels[row * c + b.pick(0, c - 1)] = 1.0;
                     Value *probabilities = b.graph.addInitializer(
                         floatTensor(b.floatType, {n, c}, labels),
                         "probabilities");
                     return b.op("SoftmaxCrossEntropy",
                                 {b.param({n, c}, -2, 2), probabilities}, {}, 1,
                                 "com.microsoft");
                   }, 4});
  cases.push_back({"Conv", [](CaseBuilder &b) {
                     int64_t c = b.pick(1, 3), f = b.pick(1, 3), k = b.pick(1, 3);
                     int64_t size = b.pick(k, 5);
                     Value *x = b.param({2, c, size, size});
                     Value *w = b.param({f, c, k, k});
                     int64_t pad = b.pick(0, 1);
                     return b.op("Conv", {x, w, b.param({f})},
                                 attrs({intsAttr("kernel_shape", {k, k}),
                                        intsAttr("pads", {pad, pad, pad, pad}),
                                        intsAttr("strides", {1, 1})}));
                   }});
  cases.push_back({"MaxPool", [](CaseBuilder &b) {
                     Value *x = b.paramDistinct({1, 2, 4, 4});
                     return b.op("MaxPool", {x},
                                 attrs({intsAttr("kernel_shape", {2, 2}),
                                        intsAttr("strides", {2, 2})}));
                   }, 2});
  cases.push_back({"AveragePool", [](CaseBuilder &b) {
                     Value *x = b.param({1, 2, 4, 4});
                     return b.op("AveragePool", {x},
                                 attrs({intsAttr("kernel_shape", {2, 2}),
                                        intsAttr("strides", {2, 2})}));
                   }, 2});
  cases.push_back({"GlobalAveragePool", [](CaseBuilder &b) {
                     return b.op("GlobalAveragePool", {b.param({2, 3, 3, 2})});
                   }, 2});
  // Data movement.
  cases.push_back({"Reshape", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("Reshape", {b.param(shape), b.int64s({-1})});
                   }});
  cases.push_back({"Flatten", [](CaseBuilder &b) {
                     return b.op("Flatten", {b.param(b.shape(3))},
                                 attrs({intAttr("axis", b.pick(0, 3))}));
                   }});
  cases.push_back({"Squeeze", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     shape.insert(shape.begin() + 1, 1);
                     return b.op("Squeeze", {b.param(shape), b.int64s({1})});
                   }});
  cases.push_back({"Unsqueeze", [](CaseBuilder &b) {
                     return b.op("Unsqueeze", {b.param(b.shape(2)),
                                               b.int64s({b.pick(0, 2)})});
                   }});
  cases.push_back({"Transpose", [](CaseBuilder &b) {
                     std::vector<int64_t> perm = {0, 1, 2};
                     std::shuffle(perm.begin(), perm.end(), b.rng);
                     return b.op("Transpose", {b.param(b.shape(3))},
                                 attrs({intsAttr("perm", perm)}));
                   }, 4});
  cases.push_back({"Expand", [](CaseBuilder &b) {
                     std::vector<int64_t> full = b.shape(3);
                     return b.op("Expand", {b.param(broadcastOf(b, full)),
                                            b.int64s(full)});
                   }, 4});
  cases.push_back({"Slice", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2, 5);
                     int64_t axis = b.pick(0, 1);
                     int64_t start = b.pick(0, shape[axis] - 1);
                     return b.op("Slice", {b.param(shape), b.int64s({start}),
                                           b.int64s({shape[axis]}),
                                           b.int64s({axis})});
                   }, 4});
  cases.push_back({"Gather", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2, 5);
                     int64_t axis = b.pick(0, 1);
                     // Repeated indices: GatherGrad must add, not overwrite.
                     Value *indices = b.indices({b.pick(1, 6)}, shape[axis]);
                     return b.op("Gather", {b.param(shape), indices},
                                 attrs({intAttr("axis", axis)}));
                   }, 4});
  cases.push_back({"Concat", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     std::vector<int64_t> other = shape;
                     other[1] = b.pick(1, 3);
                     return b.op("Concat", {b.param(shape), b.param(other)},
                                 attrs({intAttr("axis", 1)}));
                   }});
  cases.push_back({"Split", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     shape[1] = b.pick(2, 5);
                     int64_t first = b.pick(1, shape[1] - 1);
                     Value *x = b.param(shape);
                     Value *head = b.op("Split", {x, b.int64s({first, shape[1] - first})},
                                        attrs({intAttr("axis", 1)}), 2);
                     // Only the first piece reaches the loss: the second's
                     // gradient is zeros.
                     return head;
                   }});
  // Activations (kinks avoided by the sampled values).
  auto activation = [&](llvm::StringRef op, std::vector<NamedAttribute> opAttrs,
                        double lo, double hi, std::vector<double> kinks,
                        llvm::StringRef domain = "") {
    std::string type = op.str(), opDomain = domain.str();
    cases.push_back({type, [=](CaseBuilder &b) {
                       Value *x = b.paramAvoiding(b.shape(b.pick(1, 3)), lo, hi, kinks);
                       return b.op(type, {x}, opAttrs, 1, opDomain);
                     }});
  };
  activation("LeakyRelu", attrs({floatAttr("alpha", 0.1f)}), -1.5, 1.5, {0});
  activation("Elu", attrs({floatAttr("alpha", 0.8f)}), -1.5, 1.5, {0});
  activation("Celu", attrs({floatAttr("alpha", 0.7f)}), -1.5, 1.5, {0});
  activation("Selu", {}, -1.5, 1.5, {0});
  activation("ThresholdedRelu", attrs({floatAttr("alpha", 0.5f)}), -1.5, 1.5, {0.5});
  activation("HardSigmoid", {}, -3.5, 3.5, {-2.5, 2.5});
  activation("HardSwish", {}, -4.0, 4.0, {-3.0, 3.0});
  activation("Softplus", {}, -2.0, 2.0, {});
  activation("Softsign", {}, -2.0, 2.0, {});
  cases.push_back({"Mish", [](CaseBuilder &b) {
                     b.module.opsetImports[""] = 18; // Mish is opset 18
                     return b.op("Mish", {b.param(b.shape(2), -2.0, 2.0)});
                   }});
  activation("QuickGelu", attrs({floatAttr("alpha", 1.702f)}), -2.0, 2.0, {},
             "com.microsoft");
  for (const char *approximate : {"none", "tanh"})
    cases.push_back({std::string("Gelu"), [approximate](CaseBuilder &b) {
                       b.module.opsetImports[""] = 20; // ONNX Gelu is opset 20
                       return b.op("Gelu", {b.param(b.shape(2), -2.0, 2.0)},
                                   {{"approximate", Attribute::getString(approximate)}});
                     }, 2});
  for (const char *op : {"NegativeLogLikelihoodLossInternal",
                         "NegativeLogLikelihoodLossInternal2"})
    cases.push_back({op, [op = std::string(op)](CaseBuilder &b) {
                       int64_t n = b.pick(1, 4), c = b.pick(2, 4);
                       return b.op(op, {b.param({n, c}), b.indices({n}, c)},
                                   {{"reduction", Attribute::getString(
                                                      b.pick(0, 1) ? "sum" : "mean")}},
                                   1, "com.microsoft");
                     }, 3});
  cases.push_back({"Clip", [](CaseBuilder &b) {
                     Value *x = b.paramAvoiding(b.shape(2), -1.5, 1.5, {-0.5, 0.5});
                     return b.op("Clip", {x, b.scalarFloat(-0.5), b.scalarFloat(0.5)});
                   }});
  cases.push_back({"PRelu", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     Value *x = b.paramAvoiding(shape, -1.5, 1.5, {0});
                     return b.op("PRelu", {x, b.param({shape.back()}, 0.1, 0.5)});
                   }});
  cases.push_back({"BiasGelu", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("BiasGelu", {b.param(shape, -2, 2),
                                              b.param({shape.back()})},
                                 {}, 1, "com.microsoft");
                   }});
  cases.push_back({"CastLike", [](CaseBuilder &b) {
                     return b.op("CastLike", {b.param(b.shape(2)), b.scalarFloat(0)});
                   }, 1});
  // More reductions (axes as the attribute, opset 17).
  auto reduction = [&](llvm::StringRef op, double lo, double hi,
                       std::vector<double> kinks) {
    std::string type = op.str();
    cases.push_back({type, [=](CaseBuilder &b) {
                       std::vector<int64_t> shape = b.shape(3);
                       std::vector<int64_t> axes;
                       for (int64_t axis = 0; axis != 3; ++axis)
                         if (b.pick(0, 1))
                           axes.push_back(axis);
                       std::vector<NamedAttribute> opAttrs = {
                           intAttr("keepdims", b.pick(0, 1))};
                       if (!axes.empty())
                         opAttrs.push_back(intsAttr("axes", axes));
                       bool extreme = type == "ReduceMax" || type == "ReduceMin";
                       return b.op(type, {extreme ? b.paramDistinct(shape, lo, hi)
                                                  : b.paramAvoiding(shape, lo, hi, kinks)},
                                   opAttrs);
                     }, 4});
  };
  reduction("ReduceSumSquare", -1.0, 1.0, {});
  reduction("ReduceL1", -1.0, 1.0, {0});
  reduction("ReduceL2", -1.0, 1.0, {});
  reduction("ReduceLogSum", 0.5, 2.0, {});
  reduction("ReduceLogSumExp", -1.0, 1.0, {});
  reduction("ReduceMax", -1.0, 1.0, {});
  reduction("ReduceMin", -1.0, 1.0, {});
  reduction("ReduceProd", 0.5, 1.5, {});
  cases.push_back({"GlobalMaxPool", [](CaseBuilder &b) {
                     return b.op("GlobalMaxPool", {b.paramDistinct({2, 3, 3, 2})});
                   }, 2});
  // More data movement.
  cases.push_back({"Trilu", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(3);
                     return b.op("Trilu", {b.param(shape), b.int64s({b.pick(-1, 1)})},
                                 attrs({intAttr("upper", b.pick(0, 1))}));
                   }, 4});
  cases.push_back({"Tile", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     return b.op("Tile", {b.param(shape),
                                          b.int64s({b.pick(1, 3), b.pick(1, 3)})});
                   }, 4});
  cases.push_back({"Pad", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     return b.op("Pad", {b.param(shape),
                                         b.int64s({b.pick(0, 2), b.pick(0, 2),
                                                   b.pick(0, 2), b.pick(0, 2)})});
                   }, 4});
  cases.push_back({"GatherElements", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2, 4);
                     int64_t axis = b.pick(0, 1);
                     std::vector<int64_t> indexShape = b.shape(2, 4);
                     indexShape[1 - axis] = shape[1 - axis];
                     Value *indices = b.indices(indexShape, shape[axis]);
                     return b.op("GatherElements", {b.param(shape), indices},
                                 attrs({intAttr("axis", axis)}));
                   }, 4});
  cases.push_back({"GatherND", [](CaseBuilder &b) {
                     int64_t n = b.pick(2, 4);
                     std::vector<int64_t> shape = {n, n, b.pick(1, 3)};
                     Value *indices = b.indices({b.pick(1, 4), 2}, n);
                     return b.op("GatherND", {b.param(shape), indices});
                   }, 4});
  cases.push_back({"ConcatTraining", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     std::vector<int64_t> other = shape;
                     other[1] = b.pick(1, 3);
                     return b.op("ConcatTraining", {b.param(shape), b.param(other)},
                                 attrs({intAttr("axis", 1)}), 1, "com.microsoft");
                   }});
  cases.push_back({"SplitTraining", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     shape[0] = b.pick(2, 5);
                     int64_t first = b.pick(1, shape[0] - 1);
                     Value *x = b.param(shape);
                     Value *head = b.op("SplitTraining",
                                        {x, b.int64s({first, shape[0] - first})},
                                        attrs({intAttr("axis", 0)}), 2,
                                        "com.microsoft");
                     Value *tail = b.lastNode()->getResult(1);
                     // Both pieces reach the loss, the second through Exp.
                     Value *expTail = b.op("Exp", {tail});
                     return b.op("Concat", {expTail, head}, attrs({intAttr("axis", 0)}));
                   }});
  // Scatter, einsum, NLL, FusedMatMul, Scale, Mod.
  cases.push_back({"ScatterElements", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = {b.pick(2, 4), b.pick(2, 4)};
                     // Distinct rows per column: a permutation prefix.
                     int64_t rows = b.pick(1, shape[0]);
                     std::vector<int64_t> order(shape[0]);
                     std::iota(order.begin(), order.end(), 0);
                     std::shuffle(order.begin(), order.end(), b.rng);
                     std::vector<int64_t> values;
                     for (int64_t r = 0; r != rows; ++r)
                       for (int64_t c = 0; c != shape[1]; ++c)
                         values.push_back(order[r]);
                     Value *indices = b.graph.addInitializer(
                         TensorData::fromValues<int64_t>(DType::I64, {rows, shape[1]}, values),
                         "scatter_indices");
                     return b.op("ScatterElements",
                                 {b.param(shape), indices, b.param({rows, shape[1]})},
                                 attrs({intAttr("axis", 0)}));
                   }, 4});
  cases.push_back({"ScatterND", [](CaseBuilder &b) {
                     int64_t n = b.pick(2, 4), width = b.pick(1, 3);
                     std::vector<int64_t> order(n);
                     std::iota(order.begin(), order.end(), 0);
                     std::shuffle(order.begin(), order.end(), b.rng);
                     int64_t count = b.pick(1, n);
                     order.resize(count);
                     Value *indices = b.graph.addInitializer(
                         TensorData::fromValues<int64_t>(DType::I64, {count, 1}, order),
                         "scatter_indices");
                     return b.op("ScatterND", {b.param({n, width}), indices,
                                               b.param({count, width})});
                   }, 4});
  cases.push_back({"Einsum", [](CaseBuilder &b) {
                     int64_t i = b.pick(1, 3), j = b.pick(1, 3), k = b.pick(1, 3);
                     if (b.pick(0, 1))
                       return b.op("Einsum", {b.param({i, j}), b.param({j, k})},
                                   {{"equation", Attribute::getString("ij,jk->ik")}});
                     return b.op("Einsum", {b.param({2, i, j}), b.param({2, k, j})},
                                 {{"equation", Attribute::getString("bij,bkj->bik")}});
                   }, 4});
  cases.push_back({"NegativeLogLikelihoodLoss", [](CaseBuilder &b) {
                     int64_t n = b.pick(1, 4), c = b.pick(2, 4);
                     const char *reductions[] = {"mean", "sum", "none"};
                     return b.op("NegativeLogLikelihoodLoss",
                                 {b.param({n, c}), b.indices({n}, c)},
                                 {{"reduction", Attribute::getString(
                                                    reductions[b.pick(0, 2)])}});
                   }, 4});
  cases.push_back({"FusedMatMul", [](CaseBuilder &b) {
                     int64_t m = b.pick(1, 3), k = b.pick(1, 3), n = b.pick(1, 3);
                     bool transA = b.pick(0, 1), transB = b.pick(0, 1);
                     Value *a = b.param(transA ? std::vector<int64_t>{2, k, m}
                                               : std::vector<int64_t>{2, m, k});
                     Value *bm = b.param(transB ? std::vector<int64_t>{n, k}
                                                : std::vector<int64_t>{k, n});
                     return b.op("FusedMatMul", {a, bm},
                                 attrs({intAttr("transA", transA),
                                        intAttr("transB", transB),
                                        floatAttr("alpha", 0.5f)}),
                                 1, "com.microsoft");
                   }, 6});
  cases.push_back({"Scale", [](CaseBuilder &b) {
                     return b.op("Scale", {b.param(b.shape(2)), b.scalarFloat(2.5)},
                                 attrs({intAttr("scale_down", b.pick(0, 1))}), 1,
                                 "com.microsoft");
                   }, 2});
  cases.push_back({"Mod", [](CaseBuilder &b) {
                     std::vector<int64_t> shape = b.shape(2);
                     // Quotients kept away from integers (where Mod jumps).
                     // a / d in [1.14, 1.9]: trunc(a / d) = 1, so dB = -dY.
                     Value *a = b.param(shape, 1.2, 1.9);
                     Value *d = b.param(shape, 1.0, 1.05);
                     return b.op("Mod", {a, d}, attrs({intAttr("fmod", 1)}));
                   }, 2});
  // A small composite: shared values, broadcasting, several rules.
  cases.push_back({"attention-block", [](CaseBuilder &b) {
                     int64_t s = b.pick(2, 4), d = b.pick(2, 4);
                     Value *x = b.param({1, s, d});
                     Value *wq = b.param({d, d});
                     Value *wk = b.param({d, d});
                     Value *q = b.op("MatMul", {x, wq});
                     Value *k = b.op("MatMul", {x, wk});
                     Value *kt = b.op("Transpose", {k}, attrs({intsAttr("perm", {0, 2, 1})}));
                     Value *scores = b.op("MatMul", {q, kt});
                     Value *probs = b.op("Softmax", {scores}, attrs({intAttr("axis", -1)}));
                     return b.op("MatMul", {probs, x});
                   }, 4});
  return cases;
}

/// Checks every case of allCases() with parameters of \p dtype, and that
/// every differentiable op of the rule table has a case.
void checkEveryRule(DType dtype) {
  unsigned seed = 1;
  std::set<std::string> covered;
  unsigned cases = 0, trials = 0, parameters = 0;
  worstError = 0;
  for (const GradientCase &gradientCase : allCases()) {
    unsigned checked = 0;
    for (unsigned trial = 0; trial != gradientCase.trials; ++trial)
      checked += checkTrial(gradientCase, seed += 7, dtype);
    EXPECT_GT(checked, 0u) << gradientCase.name << ": nothing was checked";
    covered.insert(gradientCase.name);
    ++cases;
    trials += gradientCase.trials;
    parameters += checked;
  }
  std::printf("%s: %u cases, %u random trials, %u parameter gradients "
              "checked; worst error %.3g of max |gradient| + 1\n",
              dtype == DType::F64 ? "float64" : "float32", cases, trials,
              parameters, worstError);
  for (const std::string &op : GradientRuleTable::instance().differentiableOps()) {
    llvm::StringRef name = op;
    name.consume_front("com.microsoft.");
    EXPECT_TRUE(covered.count(name.str())) << "no gradient check for " << op;
  }
}

// The check proper: float64 graphs, tight tolerance (kFloat64).
TEST(GradientCheckTest, EveryRuleMatchesFiniteDifferences) {
  checkEveryRule(DType::F64);
}

// The same cases in float32, the type models train in: the float32 kernels
// (vector paths included) behind every rule, at kFloat32's tolerance.
TEST(GradientCheckTest, EveryRuleMatchesFiniteDifferencesInFloat32) {
  checkEveryRule(DType::F32);
}

/// True for the ops that carry a training step rather than compute a
/// forward value: gradients, accumulation, optimizers, loss scaling, and
/// the data-parallel collectives (gmopt domain), which the data-parallel
/// pass places after autodiff.
bool isTrainingSupportOp(const OpSchema &schema) {
  if (schema.domain == "gmopt")
    return true;
  llvm::StringRef name = schema.name;
  if (name.contains("Grad") || name.ends_with("Optimizer") ||
      name.ends_with("OptimizerV2"))
    return true;
  return llvm::is_contained(
      std::initializer_list<llvm::StringRef>{
          "InPlaceAccumulator", "InPlaceAccumulatorV2", "ZeroGradient",
          "IsAllFinite", "IsFinite", "MixedPrecisionScale", "YieldOp",
          "PassThrough", "BroadcastGradientArgs", "ReduceSumTraining"},
      name);
}

TEST(GradientCheckTest, EveryForwardRegistryOpHasARule) {
  std::set<std::string> missing;
  for (const OpSchema *schema : OpRegistry::instance().all()) {
    if (isTrainingSupportOp(*schema))
      continue;
    if (!GradientRuleTable::instance().lookup(
            OpName{schema->domain, schema->name}))
      missing.insert((schema->domain.empty() ? "" : schema->domain + ".") +
                     schema->name);
  }
  std::string list;
  for (const std::string &name : missing)
    list += " " + name;
  EXPECT_TRUE(missing.empty()) << "forward ops without a gradient rule:"
                               << list;
}

} // namespace
