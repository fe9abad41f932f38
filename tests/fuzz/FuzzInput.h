//===- FuzzInput.h - The input of the whole-pipeline fuzzers ---*- C++ -*-===//
//
// pipeline_fuzz and step_fuzz take one model per input, in either of the
// two forms a user can give gmopt, after a small header that fuzzing mutates
// like the rest:
//
//   byte 0      selector: bit 0 chooses the loader (0 = ONNX ModelProto,
//               1 = text IR); bits 4-7 are flags each target defines
//   bytes 1-8   extents of the unbound symbolic dimensions of the graph
//               inputs, in name order (a ninth and later symbol gets 1)
//   bytes 9-    the model
//
// Loading binds those dimensions (one the module already binds keeps its
// value), refines text-IR result types by inference as ONNX
// import does, and verifies, as gmopt-compile's loader does. External
// data is resolved against a directory that does not exist, and the text
// form names no files, so no input can read the filesystem.
// scripts/fuzz-corpus.sh writes seeds in this layout.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TESTS_FUZZ_FUZZINPUT_H
#define GMOPT_TESTS_FUZZ_FUZZINPUT_H

#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/Verifier.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"
#include "tools/driver/ToolSupport.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace gmopt::fuzz {

/// Where external data would be looked up: a directory that does not exist.
inline constexpr const char *kNoFilesDir = "/nonexistent/gmopt-fuzz";
/// Bytes before the model: the selector and eight dimension extents.
inline constexpr size_t kHeaderSize = 9;
/// Number of symbolic dimensions the header gives an extent.
inline constexpr size_t kHeaderExtents = 8;

/// Which loader reads the model bytes.
enum class ModelFormat { Onnx, Text };

/// One decoded fuzz input.
struct FuzzInput {
  /// The loader.
  ModelFormat format = ModelFormat::Onnx;
  /// Bits 4-7 of the selector byte.
  uint8_t flags = 0;
  /// Extents for the first kHeaderExtents unbound symbols, in name order.
  uint8_t extents[kHeaderExtents] = {};
  /// The model bytes.
  llvm::StringRef model;
};

/// Splits \p data into header and model; nullopt if it is too short.
inline std::optional<FuzzInput> decodeFuzzInput(const uint8_t *data,
                                                size_t size) {
  if (size < kHeaderSize)
    return std::nullopt;
  FuzzInput input;
  input.format = (data[0] & 1) ? ModelFormat::Text : ModelFormat::Onnx;
  input.flags = data[0] >> 4;
  for (size_t i = 0; i != kHeaderExtents; ++i)
    input.extents[i] = data[1 + i];
  input.model = llvm::StringRef(
      reinterpret_cast<const char *>(data) + kHeaderSize, size - kHeaderSize);
  return input;
}

/// Every symbolic dimension name in the types of the graph inputs and
/// initializers of \p module: what a user binds with --dim (inference
/// derives the rest, as for gmopt-compile).
inline std::set<std::string> collectInputSymbols(const Module &module) {
  std::set<std::string> symbols;
  auto add = [&](const Value *value) {
    if (!value || !value->getType().hasRank())
      return;
    for (const Dim &dim : value->getType().getDims())
      if (dim.isSymbolic())
        symbols.insert(dim.getSymbol().str());
  };
  const Graph &graph = module.getGraph();
  for (const auto &input : graph.getInputs())
    add(input.get());
  for (const auto &initializer : graph.getInitializers())
    add(initializer.get());
  return symbols;
}

/// A binding for every input symbol of \p module: the module's own binding if
/// it has one, else the next extent of \p input (1 once they run out).
inline std::map<std::string, int64_t> chooseBindings(const Module &module,
                                                     const FuzzInput &input) {
  std::map<std::string, int64_t> bindings;
  size_t next = 0;
  for (const std::string &symbol : collectInputSymbols(module)) {
    auto bound = module.dimBindings.find(symbol);
    if (bound != module.dimBindings.end()) {
      bindings[symbol] = bound->second;
      continue;
    }
    bindings[symbol] = next < kHeaderExtents ? input.extents[next] : 1;
    ++next;
  }
  return bindings;
}

/// Loads the model of \p input with every symbolic dimension bound and
/// verifies it. Errors are the loaders' own.
inline llvm::Expected<std::unique_ptr<Module>>
loadFuzzModule(const FuzzInput &input) {
  if (input.format == ModelFormat::Text) {
    auto parsed = parseModule(input.model, "fuzz.gmir");
    if (!parsed)
      return parsed.takeError();
    std::unique_ptr<Module> module = std::move(*parsed);
    if (llvm::Error err =
            bindSymbolicDims(*module, chooseBindings(*module, input)))
      return err;
    // Refine the declared result types by inference, as ONNX import does,
    // so that both loaders give equally precise types (the `.gm` file
    // stores ONNX, whose import infers them again).
    for (Node &node : module->getGraph())
      if (llvm::Error err = inferAndSetTypes(node))
        return err;
    if (llvm::Error err = verifyModule(*module))
      return err;
    return module;
  }
  OnnxImportOptions options;
  options.externalDataDir = kNoFilesDir;
  auto imported = importOnnxBytes(input.model, "fuzz.onnx", options);
  if (!imported)
    return imported.takeError();
  std::map<std::string, int64_t> bindings = chooseBindings(**imported, input);
  if (bindings.empty())
    return imported;
  // Binding at import lets shape inference see the extents, as --dim does.
  options.dimBindings = std::move(bindings);
  return importOnnxBytes(input.model, "fuzz.onnx", options);
}

} // namespace gmopt::fuzz

#endif // GMOPT_TESTS_FUZZ_FUZZINPUT_H
