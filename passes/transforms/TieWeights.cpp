//===- TieWeights.cpp - One parameter where there were copies -------------===//

#include "passes/transforms/TieWeights.h"
#include "passes/PassManager.h"

#include "ir/Module.h"
#include "ir/OptimizerOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>

using namespace gmopt;

std::string TiePair::str() const {
  return (dropped ? dropped->getName().str() : std::string("?")) + " -> " +
         (kept ? kept->getName().str() : std::string("?")) +
         (transposed ? "^T" : "");
}

namespace {

llvm::Error tieError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "tie-weights: " + message);
}

std::string quoted(const Value *value) {
  return "'" + value->getName().str() + "'";
}

/// True if \p a's dims are \p b's reversed and both have rank 2.
bool isTransposeShape(const TensorType &a, const TensorType &b) {
  return a.getDType() == b.getDType() && a.hasStaticShape() &&
         b.hasStaticShape() && a.getRank() == 2 && b.getRank() == 2 &&
         a.getDims()[0] == b.getDims()[1] && a.getDims()[1] == b.getDims()[0];
}

/// The bytes of \p param's initial value, or an empty array.
llvm::ArrayRef<uint8_t> valueBytes(const Value *param,
                                   const ParameterValues &values) {
  const TensorData *data = values ? values(param->getName()) : nullptr;
  if (!data && param->hasData())
    data = &param->getData();
  if (!data || data->isNull())
    return {};
  llvm::ArrayRef<uint8_t> bytes = data->getBytes();
  const TensorType &type = param->getType();
  if (!type.hasStaticShape() || bytes.size() != type.getSizeInBytes())
    return {};
  return bytes;
}

bool isConstantFilled(llvm::ArrayRef<uint8_t> bytes, unsigned elementSize) {
  for (size_t at = elementSize; at + elementSize <= bytes.size();
       at += elementSize)
    if (std::memcmp(bytes.data(), bytes.data() + at, elementSize) != 0)
      return false;
  return true;
}

/// True if \p b (shape [n, m]) holds \p a (shape [m, n]) transposed.
bool isTransposeOf(llvm::ArrayRef<uint8_t> a, llvm::ArrayRef<uint8_t> b,
                   int64_t rows, int64_t cols, unsigned elementSize) {
  for (int64_t i = 0; i != rows; ++i)
    for (int64_t j = 0; j != cols; ++j)
      if (std::memcmp(a.data() + (i * cols + j) * elementSize,
                      b.data() + (j * rows + i) * elementSize,
                      elementSize) != 0)
        return false;
  return true;
}

/// Bytes of \p value's type (0 when not static).
uint64_t bytesOf(const Value *value) {
  return value && value->getType().hasStaticShape()
             ? value->getType().getSizeInBytes()
             : 0;
}

} // namespace

TieSearch gmopt::findTies(const Module &module, const ParameterValues &values) {
  TieSearch search;
  llvm::ArrayRef<ParamInfo> params = module.getSignature().getParams();
  // Parameters that could be copies of each other share a key: element
  // type, trainability and the sorted dims.
  std::map<std::string, std::vector<unsigned>> groups;
  for (unsigned i = 0; i != params.size(); ++i) {
    const TensorType &type = params[i].param->getType();
    if (!type.hasStaticShape() || type.getNumElements() == 0)
      continue;
    std::vector<int64_t> dims;
    for (const Dim &dim : type.getDims())
      dims.push_back(dim.getExtent());
    llvm::sort(dims);
    std::string key = std::to_string(static_cast<int>(type.getDType())) +
                      (params[i].trainable ? "t" : "f");
    for (int64_t dim : dims)
      key += "," + std::to_string(dim);
    groups[key].push_back(i);
  }
  std::vector<bool> dropped(params.size(), false);
  std::vector<bool> constant(params.size(), false);
  std::vector<llvm::ArrayRef<uint8_t>> bytes(params.size());
  for (const auto &[key, members] : groups) {
    if (members.size() < 2)
      continue;
    for (unsigned i : members) {
      bytes[i] = valueBytes(params[i].param, values);
      unsigned elementSize = dtypeSize(params[i].param->getType().getDType());
      if (!bytes[i].empty() && elementSize &&
          isConstantFilled(bytes[i], elementSize)) {
        constant[i] = true;
        search.constantFilled.push_back(params[i].param);
      }
    }
    for (size_t x = 0; x != members.size(); ++x) {
      unsigned i = members[x];
      if (dropped[i] || constant[i])
        continue;
      for (size_t y = x + 1; y != members.size(); ++y) {
        unsigned j = members[y];
        if (dropped[j] || constant[j])
          continue;
        const TensorType &a = params[i].param->getType();
        const TensorType &b = params[j].param->getType();
        bool same = a == b;
        bool transposable = isTransposeShape(a, b);
        if (!same && !transposable)
          continue;
        TiePair pair{params[i].param, params[j].param, !same};
        if (bytes[i].empty() || bytes[j].empty()) {
          search.undecided.push_back(pair);
          continue;
        }
        unsigned elementSize = dtypeSize(a.getDType());
        if (same && bytes[i] == bytes[j]) {
          search.ties.push_back(pair);
        } else if (transposable &&
                   isTransposeOf(bytes[i], bytes[j], a.getDims()[0].getExtent(),
                                 a.getDims()[1].getExtent(), elementSize)) {
          pair.transposed = true;
          search.ties.push_back(pair);
        } else {
          continue;
        }
        dropped[j] = true;
      }
    }
  }
  return search;
}

llvm::Expected<std::vector<TiePair>>
gmopt::parseTiePairs(const Module &module, llvm::StringRef text) {
  auto lookup = [&](llvm::StringRef name) -> llvm::Expected<Value *> {
    for (const ParamInfo &info : module.getSignature().getParams())
      if (info.param->getName() == name)
        return info.param;
    return tieError("'" + name +
                    "' is not a parameter of the training "
                    "signature");
  };
  std::vector<TiePair> pairs;
  llvm::SmallVector<llvm::StringRef, 8> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    item = item.trim();
    auto [left, right] = item.split('=');
    left = left.trim();
    right = right.trim();
    if (left.empty() || right.empty())
      return tieError("pair '" + item + "' is not KEPT=COPY or KEPT=COPY^T");
    TiePair pair;
    pair.transposed = right.consume_back("^T");
    auto kept = lookup(left);
    if (!kept)
      return kept.takeError();
    auto copy = lookup(right.trim());
    if (!copy)
      return copy.takeError();
    pair.kept = *kept;
    pair.dropped = *copy;
    pairs.push_back(pair);
  }
  if (pairs.empty())
    return tieError("mode=explicit needs pairs=\"KEPT=COPY,...\"");
  return pairs;
}

llvm::Expected<TieSavings> gmopt::tieParameters(Module &module,
                                                const TiePair &pair) {
  const ParamInfo *kept = module.getSignature().lookup(pair.kept);
  const ParamInfo *copy = module.getSignature().lookup(pair.dropped);
  if (!kept || !copy)
    return tieError("cannot tie " + pair.str() + ": both must be parameters");
  if (kept == copy)
    return tieError("cannot tie " + quoted(pair.kept) + " to itself");
  if (kept->trainable != copy->trainable)
    return tieError("cannot tie " + pair.str() +
                    ": one is trainable and the other frozen");
  const TensorType &keptType = pair.kept->getType();
  const TensorType &copyType = pair.dropped->getType();
  if (pair.transposed ? !isTransposeShape(keptType, copyType)
                      : keptType != copyType)
    return tieError(
        "cannot tie " + pair.str() + ": " + quoted(pair.dropped) + " is " +
        copyType.str() + " but " + quoted(pair.kept) +
        (pair.transposed ? " transposed" : "") + " is " +
        (pair.transposed && keptType.getRank() == 2
             ? TensorType(keptType.getDType(),
                          {keptType.getDims()[1], keptType.getDims()[0]})
                   .str()
             : keptType.str()));
  if (pair.dropped->isGraphOutput())
    return tieError("cannot tie " + pair.str() + ": " + quoted(pair.dropped) +
                    " is a graph output");

  TieSavings savings;
  savings.parameters = bytesOf(pair.dropped);
  savings.gradients = bytesOf(copy->accumulator);
  for (const Value *state : copy->optimizerState)
    savings.optimizerState += bytesOf(state);

  if (pair.transposed) {
    // The copy's readers read the kept parameter transposed, and the
    // copy's gradient is transposed back before the merge adds it.
    Graph &graph = module.getGraph();
    Node *firstUser = nullptr;
    for (Node &node : graph.getNodes())
      if (llvm::is_contained(node.getOperands(), pair.dropped)) {
        firstUser = &node;
        break;
      }
    Builder builder(graph);
    if (firstUser)
      builder.setInsertionPoint(firstUser);
    else
      builder.setInsertionPointToStart();
    builder.setPhase(Phase::Forward);
    Node *transpose =
        builder.create(OpName{kOnnxDomain.str(), "Transpose"}, {pair.kept},
                       {copyType}, {{"perm", Attribute::getInts({1, 0})}});
    transpose->getResult(0)->setName(pair.kept->getName().str() + "_T");
    llvm::SmallVector<OpOperand *, 8> uses;
    for (OpOperand &use : pair.dropped->getUses())
      if (!use.isGraphOutput() && use.getOwner() != copy->accumulateNode &&
          !OptimizerOperands::kindOf(*use.getOwner()))
        uses.push_back(&use);
    for (OpOperand *use : uses)
      use->set(transpose->getResult(0));
    if (Value *grad = copy->grad) {
      if (Node *def = grad->getDefiningNode())
        builder.setInsertionPointAfter(def);
      else
        builder.setInsertionPointToStart();
      builder.setPhase(Phase::Backward);
      Node *back =
          builder.create(OpName{kOnnxDomain.str(), "Transpose"}, {grad},
                         {keptType}, {{"perm", Attribute::getInts({1, 0})}});
      back->getResult(0)->setName(grad->getName().str() + "_T");
      module.getSignature().setGrad(pair.dropped, back->getResult(0));
    }
    // Nothing but the copy's own accumulation and update reads it now, and
    // the merge removes those: it may take the kept type.
    pair.dropped->setType(keptType);
  }
  if (llvm::Error err = module.mergeParameter(pair.kept, pair.dropped))
    return tieError(llvm::toString(std::move(err)));
  return savings;
}

unsigned gmopt::mergeDuplicateAccumulations(Module &module) {
  Graph &graph = module.getGraph();
  TrainingSignature &signature = module.getSignature();
  // The accumulation nodes writing each buffer, in schedule order (one
  // walk over the graph).
  llvm::DenseMap<const Value *, llvm::SmallVector<Node *, 2>> writersOf;
  for (Node &node : graph.getNodes())
    if ((node.isa(kMsDomain, "InPlaceAccumulatorV2") ||
         node.isa(kMsDomain, "InPlaceAccumulator")) &&
        node.getNumOperands() >= 2 && node.getOperand(0) && node.getOperand(1))
      writersOf[node.getOperand(0)].push_back(&node);
  unsigned repaired = 0;
  for (const ParamInfo &info : llvm::to_vector(signature.getParams())) {
    if (!info.accumulator || !info.grad)
      continue;
    auto found = writersOf.find(info.accumulator);
    if (found == writersOf.end() || found->second.size() < 2)
      continue;
    llvm::SmallVector<Node *, 2> writers = found->second;
    Node *last = writers.back();
    llvm::SmallVector<Value *, 4> grads;
    for (Node *writer : writers)
      if (!llvm::is_contained(grads, writer->getOperand(1)))
        grads.push_back(writer->getOperand(1));
    Builder builder(graph);
    builder.setInsertionPoint(last);
    builder.setPhase(Phase::Backward);
    Node *sum = builder.create(OpName{kOnnxDomain.str(), "Sum"}, grads,
                               {info.grad->getType()});
    Value *total = sum->getResult(0);
    std::string name = info.param->getName().str() + "_grad";
    for (Value *grad : grads)
      if (grad->getName() == name)
        grad->setName(name + ".part");
    total->setName(name);
    last->setOperand(1, total);
    signature.setGrad(info.param, total);
    signature.setAccumulation(info.param, info.accumulator, last);
    for (Node *writer : writers) {
      if (writer == last)
        continue;
      for (Value *result : writer->getResults()) {
        if (!result)
          continue;
        for (unsigned i = graph.getNumOutputs(); i-- != 0;)
          if (graph.getOutput(i) == result)
            graph.removeOutput(i);
        // Anything else reading the dropped node's flag reads the kept one.
        result->replaceAllUsesWith(last->getResult(result->getResultIndex()));
      }
      for (unsigned i = 0, e = writer->getNumOperands(); i != e; ++i)
        writer->setOperand(i, nullptr);
      graph.eraseNode(writer);
    }
    ++repaired;
  }
  return repaired;
}

TieWeightsPass::TieWeightsPass() : TieWeightsPass(Options()) {}

TieWeightsPass::TieWeightsPass(Options opts) : options(std::move(opts)) {
  declareEnumOption<TieMode>(
      "mode", options.mode,
      {{"auto", TieMode::Auto},
       {"suggest", TieMode::Suggest},
       {"explicit", TieMode::Explicit}},
      "auto: tie parameters with bitwise-identical (or transposed) initial "
      "values; suggest: only report them; explicit: tie the named pairs");
  declareOption("pairs", options.pairs,
                "explicit mode: KEPT=COPY or KEPT=COPY^T (COPY is KEPT "
                "transposed), comma-separated");
  declareOption("print-plan", options.printPlan,
                "print the pairs found and tied to stderr");
  declareStatistic("accumulations-merged",
                   "Parameters whose several accumulation nodes became one");
  declareStatistic("pairs-found", "Parameter pairs that are copies");
  declareStatistic("pairs-tied", "Parameters merged away");
  declareStatistic("pairs-undecided",
                   "Pairs of matching types without initial values");
  declareStatistic("parameter-bytes-removed",
                   "Bytes of the parameters merged away");
  declareStatistic("gradient-bytes-removed",
                   "Bytes of their gradient accumulation buffers");
  declareStatistic("optimizer-state-bytes-removed",
                   "Bytes of their optimizer state");
  declareStatistic("persistent-bytes-removed",
                   "Persistent bytes removed (the three above)");
}

llvm::Expected<bool> TieWeightsPass::run(Module &module, PassContext &context) {
  unsigned repaired = 0;
  if (options.mode != TieMode::Suggest)
    repaired = mergeDuplicateAccumulations(module);
  std::vector<TiePair> pairs;
  TieSearch search;
  if (options.mode == TieMode::Explicit) {
    auto parsed = parseTiePairs(module, options.pairs);
    if (!parsed)
      return parsed.takeError();
    pairs = std::move(*parsed);
  } else {
    if (!options.pairs.empty())
      return tieError("pairs is for mode=explicit");
    search = findTies(module, values);
    pairs = search.ties;
    bool report = options.printPlan || options.mode == TieMode::Suggest;
    if (report)
      for (const TiePair &pair : pairs)
        llvm::errs() << "tie-weights: " << pair.str()
                     << " (bitwise-identical initial values)\n";
    if (!search.undecided.empty() && options.reportUndecided) {
      llvm::errs() << "tie-weights: " << search.undecided.size()
                   << " parameter pair(s) of matching types not compared "
                      "(no initial values; compile with --weights FILE)";
      size_t shown = std::min<size_t>(search.undecided.size(), 4);
      for (size_t i = 0; i != shown; ++i)
        llvm::errs() << (i ? ", " : ": ") << search.undecided[i].str();
      llvm::errs() << (shown < search.undecided.size() ? ", ...\n" : "\n");
    }
    if (report)
      for (const Value *value : search.constantFilled)
        llvm::errs() << "tie-weights: " << quoted(value)
                     << " is constant-filled: never tied by value\n";
  }

  TieSavings total;
  uint64_t tied = 0;
  if (options.mode != TieMode::Suggest) {
    for (const TiePair &pair : pairs) {
      // The copy is gone after the tie: name it first.
      std::string what = pair.str();
      auto savings = tieParameters(module, pair);
      if (!savings)
        return savings.takeError();
      if (options.printPlan)
        llvm::errs() << "tie-weights: tied " << what << "\n";
      total.parameters += savings->parameters;
      total.gradients += savings->gradients;
      total.optimizerState += savings->optimizerState;
      ++tied;
    }
  }
  addStatistic(context, "accumulations-merged", repaired);
  addStatistic(context, "pairs-found", pairs.size());
  addStatistic(context, "pairs-tied", tied);
  addStatistic(context, "pairs-undecided", search.undecided.size());
  addStatistic(context, "parameter-bytes-removed", total.parameters);
  addStatistic(context, "gradient-bytes-removed", total.gradients);
  addStatistic(context, "optimizer-state-bytes-removed", total.optimizerState);
  addStatistic(context, "persistent-bytes-removed",
               total.parameters + total.gradients + total.optimizerState);
  return tied != 0 || repaired != 0;
}

unsigned gmopt::installParameterValues(PassManager &passManager,
                                       const ParameterValues &values) {
  unsigned installed = 0;
  for (const std::unique_ptr<Pass> &pass : passManager.getPasses())
    if (pass->getName() == "tie-weights") {
      static_cast<TieWeightsPass &>(*pass).setParameterValues(values);
      ++installed;
    }
  return installed;
}
