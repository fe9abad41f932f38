//===- Onnx.h - ONNX ModelProto import and export ---------------*- C++ -*-===//
//
// Converts between ONNX ModelProto (opsets 13-21, ir_version <= 10, external
// data) and gmopt's IR. Import resolves names to SSA values, orders nodes
// topologically (reporting cycles), binds symbolic dimensions, infers result
// types with gmopt's registry, and recognises the training signature.
// Export writes a valid ModelProto; import -> export -> import is
// isomorphic with bitwise-equal tensors.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_ONNX_H
#define GMOPT_IR_SERIALIZATION_ONNX_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace gmopt {

class Module;

/// The ai.onnx opsets gmopt's registry covers; import refuses others, and
/// so does the text parser, so that every module exports to a model that
/// imports again.
constexpr int64_t kMinOnnxOpset = 13;
constexpr int64_t kMaxOnnxOpset = 23;
/// The ONNX IR versions gmopt reads (3 introduced opset imports).
constexpr int64_t kMinIrVersion = 3;
constexpr int64_t kMaxIrVersion = 10;
class OutputFileSet;

/// The metadata_props key under which export lists the literal initializers
/// (Value::isLiteral: a Constant node's value) as a JSON array of names, so
/// an ONNX round trip keeps them out of autodiff's parameters. Import marks
/// them and drops the entry (the module's metadata never holds it).
constexpr llvm::StringLiteral kLiteralInitializersKey =
    "gmopt.literal_initializers";

/// Options for ONNX import.
struct OnnxImportOptions {
  /// Symbolic dimension bindings applied during import (--dim NAME=N).
  std::map<std::string, int64_t> dimBindings;
  /// Directory that external-data locations are relative to (defaults to
  /// the model file's directory).
  std::string externalDataDir;
  /// Leave initializers and Constant nodes' values stored as external
  /// data unread until their bytes are wanted (a missing file is then no
  /// import error); false maps and checks every file at import.
  bool lazyExternalData = true;
  /// Run type inference and the verifier after import.
  bool verify = true;
};

/// Imports a serialized ModelProto from \p bytes. \p fileName is used in
/// messages only.
llvm::Expected<std::unique_ptr<Module>>
importOnnxBytes(llvm::StringRef bytes, llvm::StringRef fileName,
                const OnnxImportOptions &options = {});
/// Imports the model at \p path (external data resolved next to it).
llvm::Expected<std::unique_ptr<Module>>
importOnnxFile(llvm::StringRef path, OnnxImportOptions options = {});
/// Imports an already parsed ModelProto.
llvm::Expected<std::unique_ptr<Module>>
importOnnxModel(const onnx::ModelProto &model, llvm::StringRef fileName,
                const OnnxImportOptions &options = {});

/// Options for ONNX export.
struct OnnxExportOptions {
  /// Write initializers with more than this many bytes to an external-data
  /// file next to the model, named after it with a `.data` suffix
  /// (0 = always inline). Only exportOnnxFile has a file to write to;
  /// exportOnnxModel keeps every tensor inline.
  uint64_t externalDataThreshold = 0;
  /// Write each external initializer whose source directory is this one
  /// as a reference to where it already lives (its location and offset)
  /// instead of its bytes, which are then not read; the caller records the
  /// directory (the `.gm` writer). Empty: every external initializer is
  /// loaded (an error when its file is missing) and written as bytes.
  std::string keepExternalReferencesFrom;
  /// Write the stream id of each random node whose stream another node
  /// shares (a Dropout and its recompute clones) as the node's `seed`
  /// attribute, which the importer reads back as the stream id: the nodes
  /// then draw the same numbers in ONNX Runtime too (each of its kernels
  /// with a seed owns a generator, advanced once per run), as they do in
  /// gmopt. Random nodes with a stream of their own too where the importer
  /// would derive another (a rewrite moved them); the others as they are.
  /// The `.gm` writer, which stores stream ids itself, turns it off.
  bool seedSharedRandomStreams = true;
};

/// Exports \p module as a ModelProto.
llvm::Expected<onnx::ModelProto>
exportOnnxModel(const Module &module, const OnnxExportOptions &options = {});
/// Exports and serializes \p module to \p path (`-` is stdout) with its
/// external-data file, if any, both committed together or not at all
/// (ir/serialization/FileIO.h: atomic, through symbolic links, never over a
/// device).
llvm::Error exportOnnxFile(const Module &module, llvm::StringRef path,
                           const OnnxExportOptions &options = {});
/// Exports \p module and writes it to \p path, and its external-data file
/// if any, as outputs of \p outputs; the caller commits them with its other
/// outputs.
llvm::Error exportOnnxFile(const Module &module, llvm::StringRef path,
                           OutputFileSet &outputs,
                           const OnnxExportOptions &options = {});

/// Checks that every symbolic dimension of every value (inputs,
/// initializers, node results) is bound in module.dimBindings. The error
/// names the first unbound one without a file name, e.g. `symbolic dimension
/// 'batch' of value 'x' is not bound; pass --dim batch=N`; tools prefix the
/// file.
llvm::Error checkDimsBound(const Module &module);

} // namespace gmopt

#endif // GMOPT_IR_SERIALIZATION_ONNX_H
