//===- KernelTestHarness.h - Running CPU kernels in tests -------*- C++ -*-===//
//
// Test support for the CPU kernel library (header-only; used by the
// tests/unit/CpuKernels*Test.cpp files). HostTensor is a tensor with its
// bytes in a std::vector; KernelRunner builds a one-node Module with
// explicitly typed results (no dependence on the op registry's inference),
// allocates the outputs from a CountingAllocator, fills them with a
// poison pattern so unwritten elements show up, and calls runCpuKernel.
// numericGradient gives central finite differences for gradient checks.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_TESTING_KERNELTESTHARNESS_H
#define GMOPT_BACKEND_CPU_TESTING_KERNELTESTHARNESS_H

#include "backend/cpu/CpuKernel.h"
#include "backend/cpu/Half.h"
#include "ir/Module.h"

#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace gmopt {
namespace cpu {
namespace testing {

/// A tensor whose bytes live in a vector.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// A tensor of \p dtype and \p shape holding \p values (stored as T).
  template <typename T>
  static HostTensor of(DType dtype, std::vector<int64_t> shape,
                       const std::vector<T> &values) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.bytes.resize(values.size() * sizeof(T));
    if (!values.empty())
      std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }
  static HostTensor f32(std::vector<int64_t> shape,
                        const std::vector<float> &values) {
    return of(DType::F32, std::move(shape), values);
  }
  static HostTensor f64(std::vector<int64_t> shape,
                        const std::vector<double> &values) {
    return of(DType::F64, std::move(shape), values);
  }
  static HostTensor i64(std::vector<int64_t> shape,
                        const std::vector<int64_t> &values) {
    return of(DType::I64, std::move(shape), values);
  }
  static HostTensor i32(std::vector<int64_t> shape,
                        const std::vector<int32_t> &values) {
    return of(DType::I32, std::move(shape), values);
  }
  static HostTensor boolean(std::vector<int64_t> shape,
                            const std::vector<uint8_t> &values) {
    return of(DType::Bool, std::move(shape), values);
  }
  /// fp32 values stored as f16 (rounded to nearest even).
  static HostTensor f16(std::vector<int64_t> shape,
                        const std::vector<float> &values) {
    std::vector<uint16_t> bits;
    for (float v : values)
      bits.push_back(floatToHalf(v));
    return of(DType::F16, std::move(shape), bits);
  }
  /// fp32 values stored as bf16 (rounded to nearest even).
  static HostTensor bf16(std::vector<int64_t> shape,
                         const std::vector<float> &values) {
    std::vector<uint16_t> bits;
    for (float v : values)
      bits.push_back(floatToBFloat16(v));
    return of(DType::BF16, std::move(shape), bits);
  }

  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  TensorType type() const { return TensorType::get(dtype, shape); }
  /// A view of the bytes (valid while this tensor lives and is not resized).
  TensorView view() { return TensorView(bytes.data(), dtype, shape); }

  /// The elements reinterpreted as T.
  template <typename T> std::vector<T> values() const {
    std::vector<T> result(bytes.size() / sizeof(T));
    if (!result.empty())
      std::memcpy(result.data(), bytes.data(), result.size() * sizeof(T));
    return result;
  }
  /// The elements of a float tensor (f32, f64, f16, bf16) as float.
  std::vector<float> floats() const {
    std::vector<float> result;
    if (dtype == DType::F32)
      return values<float>();
    if (dtype == DType::F64)
      for (double v : values<double>())
        result.push_back(static_cast<float>(v));
    if (dtype == DType::F16)
      for (uint16_t v : values<uint16_t>())
        result.push_back(halfToFloat(v));
    if (dtype == DType::BF16)
      for (uint16_t v : values<uint16_t>())
        result.push_back(bfloat16ToFloat(v));
    return result;
  }
};

/// A result type standing for an absent optional result.
inline TensorType absentResult() { return TensorType(); }

/// Runs single nodes on the CPU kernels.
class KernelRunner {
public:
  KernelRunner() : ctx(allocator) {
    opsets[""] = 17;
    opsets[std::string(kMsDomain)] = 1;
  }

  CountingAllocator &getAllocator() { return allocator; }
  CpuKernelContext &getContext() { return ctx; }
  /// Sets the opset version the node's module imports for \p domain.
  void setOpset(const std::string &domain, int64_t version) {
    opsets[domain] = version;
  }

  /// With \p planned (the default) kernels take scratch from a slice of
  /// exactly their declared workspace (getCpuKernelWorkspaceBytes), as in
  /// planned execution, and a request beyond it fails the run; without,
  /// scratch is allocated and counted, as in eager execution.
  void setPlannedWorkspace(bool planned) { plannedWorkspace = planned; }

  /// Makes the following runs write result \p result into a copy of
  /// operand \p operand's bytes that the kernel also reads that operand
  /// from, as the planner's in-place reuse does.
  void setInPlace(unsigned result, unsigned operand) {
    inPlace = std::make_pair(result, operand);
  }

  /// Runs (\p domain, \p opType) on \p inputs (null entries are absent
  /// operands) with results of \p resultTypes (absentResult() entries are
  /// absent results, returned as empty tensors).
  llvm::Expected<std::vector<HostTensor>>
  run(llvm::StringRef domain, llvm::StringRef opType,
      std::vector<HostTensor *> inputs, std::vector<TensorType> resultTypes,
      std::vector<NamedAttribute> attrs = {}, std::string name = "node") {
    Module module;
    module.opsetImports = opsets;
    Graph &graph = module.getGraph();
    std::vector<Value *> operands;
    for (unsigned i = 0; i < inputs.size(); ++i)
      operands.push_back(inputs[i] ? graph.addInput(inputs[i]->type(),
                                                    "in" + std::to_string(i))
                                   : nullptr);
    Builder builder(graph);
    Node *node = builder.create(OpName{domain.str(), opType.str()}, operands,
                                resultTypes, attrs, name);
    // As the ONNX importer does: a random node's stream is its `seed`
    // attribute where present, else computed from its name.
    if (const Attribute *seed = node->getAttr("seed"))
      if (seed->getKind() == Attribute::Kind::Int)
        node->setStreamId(static_cast<uint64_t>(seed->getInt()));
    assignMissingStreamIds(graph);
    std::vector<HostTensor> results(resultTypes.size());
    std::vector<TensorView> outViews(resultTypes.size());
    std::vector<TensorView *> outputs(resultTypes.size(), nullptr);
    for (unsigned i = 0; i < resultTypes.size(); ++i) {
      if (resultTypes[i].getDType() == DType::Undefined) {
        graph.dropResult(node, i);
        continue;
      }
      HostTensor &result = results[i];
      result.dtype = resultTypes[i].getDType();
      auto shape = resultTypes[i].getStaticShape();
      result.shape.assign(shape.begin(), shape.end());
      // A poison pattern: an element the kernel forgets to write shows up.
      result.bytes.assign(result.type().getSizeInBytes(), 0xA5);
      if (inPlace && inPlace->first == i && inPlace->second < inputs.size() &&
          inputs[inPlace->second])
        result.bytes = inputs[inPlace->second]->bytes;
      outViews[i] = result.view();
      outputs[i] = &outViews[i];
    }
    std::vector<TensorView> inViews(inputs.size());
    std::vector<const TensorView *> inPtrs(inputs.size(), nullptr);
    for (unsigned i = 0; i < inputs.size(); ++i)
      if (inputs[i]) {
        inViews[i] = inputs[i]->view();
        if (inPlace && inPlace->second == i &&
            inPlace->first < outputs.size() && outputs[inPlace->first])
          inViews[i] = *outputs[inPlace->first];
        inPtrs[i] = &inViews[i];
      }
    // Scratch comes from a slice of exactly the declared workspace, as in
    // planned execution: a kernel that asks for more fails the test.
    std::vector<uint8_t> workspace(getCpuKernelWorkspaceBytes(*node) +
                                   kBufferAlignment);
    uintptr_t raw = reinterpret_cast<uintptr_t>(workspace.data());
    auto *aligned = reinterpret_cast<uint8_t *>(
        (raw + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
    uint64_t unplannedBefore = ctx.getUnplannedScratchBytes();
    if (plannedWorkspace)
      ctx.setWorkspaceSlice(aligned, workspace.size() - kBufferAlignment);
    llvm::Error err = runCpuKernel(*node, inPtrs, outputs, ctx);
    ctx.clearWorkspaceSlice();
    if (err)
      return err;
    if (ctx.getUnplannedScratchBytes() != unplannedBefore)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "%s requested %llu scratch bytes beyond its declared workspace of "
          "%llu (getCpuKernelWorkspaceBytes)",
          node->getOp().str().c_str(),
          (unsigned long long)(ctx.getUnplannedScratchBytes() -
                               unplannedBefore),
          (unsigned long long)(workspace.size() - kBufferAlignment));
    return results;
  }

private:
  CountingAllocator allocator;
  CpuKernelContext ctx;
  std::map<std::string, int64_t> opsets;
  /// (result, operand) sharing bytes, when set.
  std::optional<std::pair<unsigned, unsigned>> inPlace;
  bool plannedWorkspace = true;
};

/// A named attribute.
inline NamedAttribute attr(const std::string &name, Attribute value) {
  return NamedAttribute{name, std::move(value)};
}
inline NamedAttribute intAttr(const std::string &name, int64_t value) {
  return attr(name, Attribute::getInt(value));
}
inline NamedAttribute floatAttr(const std::string &name, float value) {
  return attr(name, Attribute::getFloat(value));
}
inline NamedAttribute intsAttr(const std::string &name,
                               std::vector<int64_t> value) {
  return attr(name, Attribute::getInts(std::move(value)));
}
inline NamedAttribute stringAttr(const std::string &name, std::string value) {
  return attr(name, Attribute::getString(std::move(value)));
}

/// fp32 result type of \p shape.
inline TensorType f32Type(std::vector<int64_t> shape) {
  return TensorType::get(DType::F32, shape);
}

/// Uniform random floats in [low, high) from a fixed seed.
inline std::vector<float> randomFloats(size_t n, unsigned seed,
                                       float low = -1.0f, float high = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(engine);
  return values;
}

/// Central finite differences of L(x) = sum_i weights[i] * f(x)[i] with
/// respect to x, in double: (L(x + eps e_j) - L(x - eps e_j)) / (2 eps).
inline std::vector<double> numericGradient(
    const std::function<std::vector<float>(const std::vector<float> &)> &f,
    std::vector<float> x, const std::vector<float> &weights,
    float eps = 1e-3f) {
  auto loss = [&](const std::vector<float> &point) {
    std::vector<float> y = f(point);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i)
      sum += static_cast<double>(weights[i]) * y[i];
    return sum;
  };
  std::vector<double> grad(x.size());
  for (size_t j = 0; j < x.size(); ++j) {
    float saved = x[j];
    x[j] = saved + eps;
    double plus = loss(x);
    x[j] = saved - eps;
    double minus = loss(x);
    x[j] = saved;
    // The perturbation actually applied, after fp32 rounding.
    double step =
        static_cast<double>(saved + eps) - static_cast<double>(saved - eps);
    grad[j] = (plus - minus) / step;
  }
  return grad;
}

} // namespace testing
} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_TESTING_KERNELTESTHARNESS_H
