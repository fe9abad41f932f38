//===- TextPrinter.cpp - Printing modules in the text form ----------------===//
//
// Prints a Module in gmopt's textual IR (the grammar is documented at the top
// of TextParser.cpp). The printer first gives every value a textual id -- its
// ONNX name when that lexes as a bare name, a quoted name otherwise, a `#N`
// suffix for repeated names and a number for unnamed values -- and then
// prints module facts, graph inputs, initializers, nodes in schedule order,
// outputs and the training signature. Everything it prints is exact: floats
// use the shortest decimal that reads back to the same bits (NaNs as raw
// bits) and constants are element lists or hex blobs of their bytes, so
// parsing the output rebuilds an identical module. Only the optional
// elision of large constants produces text that does not parse.
//
//===----------------------------------------------------------------------===//

#include "ir/Module.h"
#include "ir/serialization/TextIR.h"
#include "ir/serialization/TextLexer.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <string>

using namespace gmopt;
using namespace gmopt::text;

namespace {

/// Inputs printed on one line when the line stays below this width.
constexpr size_t kMaxInlineInputsWidth = 100;

/// Reads the little-endian integer of \p width bytes at \p data.
uint64_t loadLittleEndian(const uint8_t *data, unsigned width) {
  uint64_t value = 0;
  for (unsigned i = 0; i != width; ++i)
    value |= static_cast<uint64_t>(data[i]) << (8 * i);
  return value;
}

/// True if every element of \p data can be printed as a readable literal
/// (and read back to the same bytes).
bool hasReadableElements(const TensorData &data) {
  const TensorType &type = data.getType();
  if (!type.hasStaticShape())
    return false;
  DType dtype = type.getDType();
  if (!floatSemantics(dtype) && !isInteger(dtype) && dtype != DType::Bool)
    return false;
  // Packed 4-bit types keep a padding nibble that a list cannot show.
  if (dtype == DType::U4 || dtype == DType::I4)
    return false;
  if (data.getBytes().size() != dtypeStorageBytes(dtype, type.getNumElements()))
    return false;
  if (dtype == DType::Bool)
    return llvm::all_of(data.getBytes(), [](uint8_t b) { return b <= 1; });
  return true;
}

bool isSignedInteger(DType dtype) {
  return dtype == DType::I8 || dtype == DType::I16 || dtype == DType::I32 ||
         dtype == DType::I64;
}

/// Prints the module; one instance per printModule call.
class ModulePrinter {
public:
  ModulePrinter(const Module &module, llvm::raw_ostream &os,
                PrintOptions options)
      : module(module), graph(module.getGraph()), os(os), options(options) {}

  void print() {
    assignValueIds();
    os << "module attributes ";
    printModuleAttributes();
    os << " {\n";
    printGraph();
    printSignature();
    os << "}\n";
  }

private:
  //===--------------------------------------------------------------------===//
  // Value ids
  //===--------------------------------------------------------------------===//

  void assignValueId(const Value *value) {
    std::string id;
    llvm::raw_string_ostream idOs(id);
    idOs << '%';
    llvm::StringRef name = value->getName();
    if (name.empty()) {
      idOs << nextUnnamedId++;
    } else {
      if (isBareValueName(name))
        idOs << name;
      else
        printQuoted(idOs, name);
      unsigned repeat = nameRepeats[name]++;
      if (repeat)
        idOs << '#' << repeat;
    }
    valueIds[value] = idOs.str();
  }

  void assignValueIds() {
    for (const auto &input : graph.getInputs())
      assignValueId(input.get());
    for (const auto &init : graph.getInitializers())
      assignValueId(init.get());
    unsigned index = 0;
    for (const Node &node : graph.getNodes()) {
      nodeIndex[&node] = index++;
      if (!node.getName().empty())
        ++nodeNameCounts[node.getName()];
      for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
        if (const Value *result = node.getResult(i))
          assignValueId(result);
    }
  }

  /// Prints a value reference; `_` for an absent value.
  void printValueRef(const Value *value) {
    if (!value)
      os << '_';
    else
      os << valueIdOf(value);
  }

  /// The id of \p value. A value outside the graph means a broken module;
  /// it is shown as such without being dereferenced.
  llvm::StringRef valueIdOf(const Value *value) const {
    auto it = valueIds.find(value);
    return it == valueIds.end() ? llvm::StringRef("%<unknown value>")
                                : llvm::StringRef(it->second);
  }

  //===--------------------------------------------------------------------===//
  // Module attributes
  //===--------------------------------------------------------------------===//

  void printModuleAttributes() {
    os << "{ir_version = " << module.irVersion;
    if (!module.opsetImports.empty()) {
      os << ", opsets = {";
      bool first = true;
      for (const auto &[domain, version] : module.opsetImports) {
        os << (first ? "" : ", ");
        first = false;
        printQuoted(os, domain);
        os << " = " << version;
      }
      os << '}';
    }
    printStringFact("producer", module.producerName);
    printStringFact("producer_version", module.producerVersion);
    printStringFact("domain", module.modelDomain);
    if (module.modelVersion != 0)
      os << ", model_version = " << module.modelVersion;
    printStringFact("doc", module.docString);
    if (!module.metadata.empty()) {
      os << ", metadata = {";
      for (size_t i = 0, e = module.metadata.size(); i != e; ++i) {
        os << (i ? ", " : "");
        printQuoted(os, module.metadata[i].first);
        os << " = ";
        printQuoted(os, module.metadata[i].second);
      }
      os << '}';
    }
    if (!module.dimBindings.empty()) {
      os << ", dims = {";
      bool first = true;
      for (const auto &[symbol, extent] : module.dimBindings) {
        os << (first ? "" : ", ");
        first = false;
        printIdentifierOrString(os, symbol);
        os << " = " << extent;
      }
      os << '}';
    }
    os << '}';
  }

  void printStringFact(llvm::StringRef key, llvm::StringRef value) {
    if (value.empty())
      return;
    os << ", " << key << " = ";
    printQuoted(os, value);
  }

  //===--------------------------------------------------------------------===//
  // Constants
  //===--------------------------------------------------------------------===//

  void printElement(const TensorData &data, uint64_t i) {
    DType dtype = data.getType().getDType();
    unsigned width = dtypeSize(dtype);
    const uint8_t *element = data.getBytes().data() + i * width;
    uint64_t raw = loadLittleEndian(element, width);
    if (const llvm::fltSemantics *semantics = floatSemantics(dtype)) {
      printFloatBits(os, llvm::APInt(width * 8, raw), *semantics);
      return;
    }
    if (dtype == DType::Bool) {
      os << (raw ? "true" : "false");
      return;
    }
    if (isSignedInteger(dtype)) {
      os << llvm::APInt(width * 8, raw).getSExtValue();
      return;
    }
    os << raw;
  }

  void printHexBlob(llvm::ArrayRef<uint8_t> bytes) {
    static const char digits[] = "0123456789ABCDEF";
    os << "\"0x";
    char chunk[512];
    size_t used = 0;
    for (uint8_t byte : bytes) {
      chunk[used++] = digits[byte >> 4];
      chunk[used++] = digits[byte & 15];
      if (used == sizeof(chunk)) {
        os.write(chunk, used);
        used = 0;
      }
    }
    os.write(chunk, used);
    os << '"';
  }

  /// Prints `dense<...>` (or the elision marker) for \p data.
  void printTensorContents(const TensorData &data) {
    const TensorType &type = data.getType();
    uint64_t numElements =
        type.hasStaticShape() ? type.getNumElements() : data.getSizeInBytes();
    if (numElements > options.largeConstantElements &&
        options.elideLargeConstants) {
      os << "<elided " << data.getSizeInBytes() << " bytes>";
      return;
    }
    // External data that cannot be read is shown as its reference (for
    // humans, like an elided constant; the parser refuses it).
    if (data.isExternal()) {
      if (llvm::Error err = data.load()) {
        llvm::consumeError(std::move(err));
        const ExternalDataRef &ref = *data.getExternalRef();
        os << "<external ";
        llvm::printEscapedString(ref.location, os << '"');
        os << "\" offset " << ref.offset << ", " << data.getSizeInBytes()
           << " bytes not available>";
        return;
      }
    }
    os << "dense<";
    if (numElements <= options.largeConstantElements &&
        hasReadableElements(data)) {
      // A scalar reads best as itself: `f32[] dense<1.0>`.
      if (type.getRank() == 0) {
        printElement(data, 0);
        os << '>';
        return;
      }
      os << '[';
      for (uint64_t i = 0; i != numElements; ++i) {
        if (i)
          os << ", ";
        printElement(data, i);
      }
      os << ']';
    } else {
      printHexBlob(data.getBytes());
    }
    os << '>';
  }

  /// Prints `TYPE dense<...>`.
  void printTensorLiteral(const TensorData &data) {
    data.getType().print(os);
    os << ' ';
    printTensorContents(data);
  }

  //===--------------------------------------------------------------------===//
  // Attributes
  //===--------------------------------------------------------------------===//

  void printFloat(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    printFloatBits(os, llvm::APInt(32, bits), llvm::APFloat::IEEEsingle());
  }

  void printAttributeValue(const Attribute &attr) {
    switch (attr.getKind()) {
    case Attribute::Kind::Int:
      os << attr.getInt();
      return;
    case Attribute::Kind::Float:
      printFloat(attr.getFloat());
      // A NaN prints as raw hex bits, which alone would read as an int.
      if (std::isnan(attr.getFloat()))
        os << " : f32";
      return;
    case Attribute::Kind::String:
      printQuoted(os, attr.getString());
      return;
    case Attribute::Kind::Tensor:
      printTensorLiteral(attr.getTensor());
      return;
    case Attribute::Kind::Ints: {
      const std::vector<int64_t> &values = attr.getInts();
      os << '[';
      for (size_t i = 0, e = values.size(); i != e; ++i)
        os << (i ? ", " : "") << values[i];
      os << ']';
      if (values.empty())
        os << " : ints";
      return;
    }
    case Attribute::Kind::Floats: {
      const std::vector<float> &values = attr.getFloats();
      os << '[';
      bool anyDecimal = false;
      for (size_t i = 0, e = values.size(); i != e; ++i) {
        os << (i ? ", " : "");
        printFloat(values[i]);
        anyDecimal |= !std::isnan(values[i]);
      }
      os << ']';
      // Without a decimal element the list would read as ints.
      if (!anyDecimal)
        os << " : floats";
      return;
    }
    case Attribute::Kind::Strings: {
      const std::vector<std::string> &values = attr.getStrings();
      os << '[';
      for (size_t i = 0, e = values.size(); i != e; ++i) {
        os << (i ? ", " : "");
        printQuoted(os, values[i]);
      }
      os << ']';
      if (values.empty())
        os << " : strings";
      return;
    }
    }
  }

  //===--------------------------------------------------------------------===//
  // Graph
  //===--------------------------------------------------------------------===//

  void printInput(const Value &input) {
    printValueRef(&input);
    os << ": ";
    input.getType().print(os);
    if (!input.hasData())
      return;
    os << " = ";
    // The default's type is implied by the input's unless they differ.
    if (input.getData().getType() == input.getType())
      printTensorContents(input.getData());
    else
      printTensorLiteral(input.getData());
  }

  void printGraphHeader() {
    os << "  graph @";
    if (isBareIdentifier(graph.getName()))
      os << graph.getName();
    else
      printQuoted(os, graph.getName());
    os << '(';
    auto inputs = graph.getInputs();
    // Short signatures stay on one line; long ones (or ones with default
    // values) get one input per line.
    std::string oneLine;
    llvm::raw_string_ostream oneLineOs(oneLine);
    bool fitsOnOneLine = true;
    for (size_t i = 0, e = inputs.size(); i != e && fitsOnOneLine; ++i) {
      oneLineOs << (i ? ", " : "") << valueIdOf(inputs[i].get()) << ": ";
      inputs[i]->getType().print(oneLineOs);
      fitsOnOneLine =
          !inputs[i]->hasData() && oneLine.size() <= kMaxInlineInputsWidth;
    }
    if (fitsOnOneLine) {
      os << oneLine << ") {\n";
      return;
    }
    os << '\n';
    for (size_t i = 0, e = inputs.size(); i != e; ++i) {
      os << "      ";
      printInput(*inputs[i]);
      os << (i + 1 != e ? ",\n" : "\n");
    }
    os << "  ) {\n";
  }

  void printInitializer(const Value &init) {
    os << "    ";
    printValueRef(&init);
    os << " = constant ";
    if (init.isLiteral())
      os << "literal ";
    if (!init.hasData()) {
      // Not parseable, and rejected by the verifier; shown for debugging.
      os << "<no data> : ";
      init.getType().print(os);
      os << '\n';
      return;
    }
    printTensorLiteral(init.getData());
    if (init.getType() != init.getData().getType()) {
      os << " : ";
      init.getType().print(os);
    }
    os << '\n';
  }

  void printOpName(const OpName &op) {
    if (isBareOpName(op.domain, op.type)) {
      os << op.str();
      return;
    }
    printQuoted(os, op.domain);
    os << '.';
    printQuoted(os, op.type);
  }

  void printNode(const Node &node) {
    os << "    ";
    unsigned numResults = node.getNumResults();
    for (unsigned i = 0; i != numResults; ++i) {
      os << (i ? ", " : "");
      printValueRef(node.getResult(i));
    }
    if (numResults)
      os << " = ";
    printOpName(node.getOp());
    os << '(';
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      os << (i ? ", " : "");
      printValueRef(node.getOperand(i));
    }
    os << ')';
    if (!node.getAttrs().empty()) {
      os << " {";
      bool first = true;
      for (const NamedAttribute &attr : node.getAttrs()) {
        os << (first ? "" : ", ");
        first = false;
        printIdentifierOrString(os, attr.name);
        os << " = ";
        printAttributeValue(attr.value);
      }
      os << '}';
    }
    llvm::SmallVector<const Value *, 2> present;
    for (unsigned i = 0; i != numResults; ++i)
      if (const Value *result = node.getResult(i))
        present.push_back(result);
    if (present.size() == 1) {
      os << " : ";
      present.front()->getType().print(os);
    } else if (present.size() > 1) {
      os << " : (";
      for (size_t i = 0, e = present.size(); i != e; ++i) {
        os << (i ? ", " : "");
        present[i]->getType().print(os);
      }
      os << ')';
    }
    if (!node.getName().empty()) {
      os << " name ";
      printQuoted(os, node.getName());
    }
    if (node.getPhase() != Phase::Forward)
      os << " phase " << phaseName(node.getPhase());
    if (std::optional<uint64_t> stream = node.getStreamId())
      os << " stream " << *stream;
    os << '\n';
  }

  void printGraph() {
    printGraphHeader();
    for (const auto &init : graph.getInitializers())
      printInitializer(*init);
    for (const Node &node : graph.getNodes())
      printNode(node);
    os << "    return";
    for (unsigned i = 0, e = graph.getNumOutputs(); i != e; ++i) {
      os << (i ? ", " : " ");
      printValueRef(graph.getOutput(i));
    }
    os << "\n  }\n";
  }

  //===--------------------------------------------------------------------===//
  // Signature
  //===--------------------------------------------------------------------===//

  /// Prints how `via` names a node: its name when unique, else one of its
  /// results, else its position in the schedule.
  void printNodeRef(const Node *node) {
    auto it = nodeIndex.find(node);
    if (it == nodeIndex.end()) {
      os << "<unknown node>";
      return;
    }
    if (!node->getName().empty() && nodeNameCounts[node->getName()] == 1) {
      printQuoted(os, node->getName());
      return;
    }
    for (unsigned i = 0, e = node->getNumResults(); i != e; ++i) {
      if (const Value *result = node->getResult(i)) {
        printValueRef(result);
        return;
      }
    }
    os << it->second;
  }

  void printSignature() {
    const TrainingSignature &sig = module.getSignature();
    if (sig.empty())
      return;
    os << "  signature {\n";
    for (const ParamInfo &param : sig.getParams()) {
      os << "    param ";
      printValueRef(param.param);
      os << (param.trainable ? " trainable" : " frozen");
      if (param.grad) {
        os << " grad ";
        printValueRef(param.grad);
      }
      if (param.accumulator) {
        os << " accumulator ";
        printValueRef(param.accumulator);
      }
      if (param.accumulateNode) {
        os << " via ";
        printNodeRef(param.accumulateNode);
      }
      if (!param.optimizerState.empty()) {
        os << " state ";
        printValueList(param.optimizerState);
      }
      os << '\n';
    }
    if (!sig.getDataInputs().empty()) {
      os << "    data ";
      printValueList(sig.getDataInputs());
      os << '\n';
    }
    printSignatureValue("loss", sig.getLoss());
    printSignatureValue("loss_grad_seed", sig.getLossGradSeed());
    printSignatureValue("lazy_reset_grad", sig.getLazyResetGrad());
    for (unsigned i = 0; i != kNumStepSlots; ++i) {
      StepSlot slot = static_cast<StepSlot>(i);
      printSignatureValue(stepSlotName(slot), sig.getStepSlot(slot));
    }
    os << "  }\n";
  }

  void printValueList(llvm::ArrayRef<Value *> values) {
    for (size_t i = 0, e = values.size(); i != e; ++i) {
      os << (i ? ", " : "");
      printValueRef(values[i]);
    }
  }

  void printSignatureValue(llvm::StringRef keyword, const Value *value) {
    if (!value)
      return;
    os << "    " << keyword << ' ';
    printValueRef(value);
    os << '\n';
  }

  const Module &module;
  const Graph &graph;
  llvm::raw_ostream &os;
  PrintOptions options;
  llvm::DenseMap<const Value *, std::string> valueIds;
  llvm::StringMap<unsigned> nameRepeats;
  unsigned nextUnnamedId = 0;
  llvm::DenseMap<const Node *, unsigned> nodeIndex;
  llvm::StringMap<unsigned> nodeNameCounts;
};

} // namespace

void gmopt::printModule(const Module &module, llvm::raw_ostream &os,
                        PrintOptions options) {
  ModulePrinter(module, os, options).print();
}
