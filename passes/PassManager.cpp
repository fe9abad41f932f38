//===- PassManager.cpp - Running a pipeline of passes ---------------------===//
//
// The run loop: dump before, time and run the pass, dump after, clear the
// plan when the pass changed the module (unless it is the planner that
// wrote it), check a pass that claims no change against the module's
// fingerprint, verify, accumulate timings; then the reports. Errors from a pass
// or from the verifier are returned with the pass named, never printed here, so
// the tool prints each failure exactly once.
//
//===----------------------------------------------------------------------===//

#include "passes/PassManager.h"
#include "passes/PassRegistry.h"

#include "ir/Module.h"
#include "ir/Verifier.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>

using namespace gmopt;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

double cpuSecondsSince(std::clock_t start) {
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

llvm::Error prefixError(llvm::Error err, const llvm::Twine &prefix) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 prefix + llvm::toString(std::move(err)));
}

/// Serializes the fingerprinted parts of a module into one byte string.
class FingerprintWriter {
public:
  explicit FingerprintWriter(const Module &module) : module(module) {}

  std::string write() {
    const Graph &graph = module.getGraph();
    number(graph.getInputs().size());
    for (const auto &input : graph.getInputs())
      defineValue(input.get());
    number(graph.getInitializers().size());
    for (const auto &init : graph.getInitializers()) {
      defineValue(init.get());
      number(init->isLiteral());
      tensor(init->getData());
    }
    number(graph.getNumNodes());
    for (const Node &node : graph.getNodes()) {
      text(node.getDomain());
      text(node.getOpType());
      text(node.getName());
      writeNodeIdentity(node);
      number(node.getNumOperands());
      for (const Value *operand : node.getOperands())
        valueRef(operand);
      number(node.getAttrs().size());
      for (const NamedAttribute &attr : node.getAttrs()) {
        text(attr.name);
        attribute(attr.value);
      }
      number(node.getNumResults());
      for (const Value *result : node.getResults()) {
        number(result != nullptr);
        if (result)
          defineValue(result);
      }
    }
    number(graph.getNumOutputs());
    for (const Value *output : graph.getOutputs())
      valueRef(output);
    writeSignature();
    number(static_cast<uint64_t>(module.irVersion));
    for (const auto &[domain, version] : module.opsetImports) {
      text(domain);
      number(static_cast<uint64_t>(version));
    }
    for (const auto &[name, extent] : module.dimBindings) {
      text(name);
      number(static_cast<uint64_t>(extent));
    }
    return std::move(bytes);
  }

private:
  void number(uint64_t value) {
    bytes.append(reinterpret_cast<const char *>(&value), sizeof(value));
  }
  void text(llvm::StringRef value) {
    number(value.size());
    bytes.append(value.data(), value.size());
  }
  /// An initializer's or a tensor attribute's contents. An external tensor
  /// is its reference: hashing its bytes would read every weight file on
  /// each fingerprint (or fail without them, as for a Constant node whose
  /// value lives in an absent file).
  void tensor(const TensorData &data) {
    if (const ExternalDataRef *ref = data.getExternalRef()) {
      text(ref->location);
      number(ref->offset);
      number(reinterpret_cast<uintptr_t>(data.getExternalSource().get()));
      return;
    }
    number(llvm::xxh3_64bits(data.getBytes()));
  }
  void attribute(const Attribute &attr) {
    number(static_cast<uint64_t>(attr.getKind()));
    switch (attr.getKind()) {
    case Attribute::Kind::Float: {
      float value = attr.getFloat();
      uint32_t bits;
      std::memcpy(&bits, &value, sizeof(bits));
      number(bits);
      return;
    }
    case Attribute::Kind::Int:
      number(static_cast<uint64_t>(attr.getInt()));
      return;
    case Attribute::Kind::String:
      text(attr.getString());
      return;
    case Attribute::Kind::Tensor:
      text(attr.getTensor().getType().str());
      tensor(attr.getTensor());
      return;
    case Attribute::Kind::Floats:
      number(attr.getFloats().size());
      for (float value : attr.getFloats()) {
        uint32_t bits;
        std::memcpy(&bits, &value, sizeof(bits));
        number(bits);
      }
      return;
    case Attribute::Kind::Ints:
      number(attr.getInts().size());
      for (int64_t value : attr.getInts())
        number(static_cast<uint64_t>(value));
      return;
    case Attribute::Kind::Strings:
      number(attr.getStrings().size());
      for (const std::string &value : attr.getStrings())
        text(value);
      return;
    }
  }
  void defineValue(const Value *value) {
    ids.try_emplace(value, ids.size() + 1);
    text(value->getName());
    text(value->getType().str());
  }
  void valueRef(const Value *value) {
    // 0 for absent; values defined nowhere in the graph hash as ~0.
    if (!value) {
      number(0);
      return;
    }
    auto it = ids.find(value);
    number(it == ids.end() ? ~uint64_t(0) : it->second);
  }
  void nodeRef(const Node *node) {
    if (!node) {
      number(0);
      return;
    }
    uint64_t position = 1;
    for (const Node &candidate : module.getGraph().getNodes()) {
      if (&candidate == node)
        break;
      ++position;
    }
    number(position);
  }
  void writeNodeIdentity(const Node &node);
  void writeSignature() {
    const TrainingSignature &sig = module.getSignature();
    number(sig.getParams().size());
    for (const ParamInfo &param : sig.getParams()) {
      valueRef(param.param);
      number(param.trainable);
      valueRef(param.grad);
      valueRef(param.accumulator);
      nodeRef(param.accumulateNode);
      number(param.optimizerState.size());
      for (const Value *state : param.optimizerState)
        valueRef(state);
    }
    number(sig.getDataInputs().size());
    for (const Value *data : sig.getDataInputs())
      valueRef(data);
    valueRef(sig.getLoss());
    valueRef(sig.getLossGradSeed());
    valueRef(sig.getLazyResetGrad());
    for (unsigned i = 0; i != kNumStepSlots; ++i)
      valueRef(sig.getStepSlot(static_cast<StepSlot>(i)));
  }

  const Module &module;
  std::string bytes;
  llvm::DenseMap<const Value *, uint64_t> ids;
};

void FingerprintWriter::writeNodeIdentity(const Node &node) {
  number(static_cast<uint64_t>(node.getPhase()));
  std::optional<uint64_t> stream = node.getStreamId();
  number(stream.has_value());
  number(stream.value_or(0));
}

} // namespace

uint64_t gmopt::computeFingerprint(const Module &module) {
  std::string bytes = FingerprintWriter(module).write();
  return llvm::xxh3_64bits(llvm::arrayRefFromStringRef(bytes));
}

PassManager::PassManager(PassManagerOptions options)
    : options(std::move(options)), reportStream(&llvm::errs()) {}

PassManager::~PassManager() = default;

void PassManager::addPass(std::unique_ptr<Pass> pass) {
  assert(pass && "adding a null pass");
  passes.push_back(std::move(pass));
}

llvm::Error PassManager::addPipeline(llvm::StringRef pipelineText) {
  auto created = createPipeline(pipelineText);
  if (!created)
    return created.takeError();
  for (std::unique_ptr<Pass> &pass : *created)
    passes.push_back(std::move(pass));
  return llvm::Error::success();
}

std::string PassManager::getPipelineString() const {
  std::string text;
  for (const std::unique_ptr<Pass> &pass : passes) {
    if (!text.empty())
      text += ',';
    text += pass->getPipelineElement();
  }
  return text;
}

bool PassManager::shouldPrintBefore(const Pass &pass) const {
  return options.printBeforeAll ||
         llvm::is_contained(options.printBefore, pass.getName());
}

bool PassManager::shouldPrintAfter(const Pass &pass) const {
  return options.printAfterAll ||
         llvm::is_contained(options.printAfter, pass.getName());
}

void PassManager::dumpIR(const Module &module, llvm::StringRef when,
                         const Pass &pass) const {
  // The header of mlir's --mlir-print-ir-after, so tools that split dumps
  // on it keep working.
  *reportStream << "// -----// IR Dump " << when << ' ' << pass.getName()
                << " //----- //\n";
  printModule(module, *reportStream, options.dumpOptions);
  *reportStream << '\n';
  reportStream->flush();
}

llvm::Error PassManager::run(Module &module) {
  timings.clear();
  context.clearStatistics();
  lastRunChanged = false;
  double verifierSeconds = 0, verifierCpuSeconds = 0;
  for (const std::unique_ptr<Pass> &pass : passes) {
    if (shouldPrintBefore(*pass))
      dumpIR(module, "Before", *pass);

    std::optional<uint64_t> fingerprintBefore;
    if (options.checkUnchangedPasses)
      fingerprintBefore = computeFingerprint(module);
    auto start = std::chrono::steady_clock::now();
    std::clock_t cpuStart = std::clock();
    llvm::Expected<bool> changed = pass->run(module, context);
    timings.push_back({pass->getName().str(), secondsSince(start),
                       cpuSecondsSince(cpuStart)});
    if (!changed)
      return prefixError(changed.takeError(),
                         "pass '" + pass->getName() + "' failed: ");
    lastRunChanged |= *changed;
    // A changed module invalidates the plan, unless this pass is the
    // planner that just wrote it.
    if (*changed && !pass->writesPlan())
      module.plan.clear();
    // An internal invariant, not a user error: a pass that changes the
    // module but reports "unchanged" would leave a stale plan behind.
    if (!*changed && fingerprintBefore &&
        computeFingerprint(module) != *fingerprintBefore)
      llvm::report_fatal_error(llvm::Twine("pass '") + pass->getName() +
                               "' reported no change but changed the module");

    if (shouldPrintAfter(*pass))
      dumpIR(module, "After", *pass);

    // A planner writes module.plan (its own validate() checks it) and
    // leaves the graph and the signature, which the verifier checks, as
    // the last verification saw them.
    if (options.verifyEach && !pass->writesPlan()) {
      auto verifyStart = std::chrono::steady_clock::now();
      std::clock_t verifyCpuStart = std::clock();
      llvm::Error err = verifyModule(module);
      verifierSeconds += secondsSince(verifyStart);
      verifierCpuSeconds += cpuSecondsSince(verifyCpuStart);
      if (err)
        return prefixError(std::move(err), "verification failed after pass '" +
                                               pass->getName() + "': ");
    }
  }
  if (options.verifyEach && !passes.empty())
    timings.push_back({"(verifier)", verifierSeconds, verifierCpuSeconds});

  if (options.timePasses)
    printTimings(*reportStream);
  if (options.passStatistics)
    context.printStatistics(*reportStream);
  reportStream->flush();
  return llvm::Error::success();
}

void PassManager::printTimings(llvm::raw_ostream &os) const {
  double total = 0;
  for (const PassTiming &timing : timings)
    total += timing.seconds;
  os << "===" << std::string(73, '-') << "===\n"
     << "                      ... Pass execution timing report ...\n"
     << "===" << std::string(73, '-') << "===\n"
     << llvm::format("  Total Execution Time: %.4f seconds\n\n", total)
     << "  ----Wall Time----  ----Name----\n";
  for (const PassTiming &timing : timings)
    os << llvm::format("  %8.4f (%5.1f%%)  ", timing.seconds,
                       total > 0 ? 100.0 * timing.seconds / total : 0.0)
       << timing.name << '\n';
  os << llvm::format("  %8.4f (100.0%%)  Total\n", total);
}
