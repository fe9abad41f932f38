//===- GmFile.h - The `.gm` compiled-model container ------------*- C++ -*-===//
//
// A `.gm` file is what gmopt-compile writes and gmopt-run executes: the
// rewritten model and the original one (for --baseline), each as a
// serialized ONNX ModelProto with its training signature and, when planned,
// its buffer plan; the pipeline that was run; the dimension bindings; and
// the producer's version. Layout:
//
//   offset  size  field
//        0     8  magic `GMOPT\0GM`
//        8     4  format version, little-endian u32 (kGmFormatVersion)
//       12     8  payload length, little-endian u64
//       20     4  CRC-32 of the payload (llvm::crc32), little-endian u32
//       24     -  payload: a serialized gmopt.gm.GmFile message (gm.proto)
//
// Signature and plan refer to values and nodes by ONNX name; the writer
// first makes every name unique (ir/Naming.h), so every Value maps to
// exactly one name of the stored model. Loading checks everything - header,
// length, CRC, protobuf, the embedded ONNX models, every name reference,
// the schedule and the plan's validity - and reports the first problem as
// an llvm::Error that starts with the file name. Files are written through
// ir/serialization/FileIO.h: atomically, through symbolic links, never over a
// device.
//
// Names are protobuf `bytes`, not `string`: ONNX allows any bytes in a
// name, and proto3 `string` fields would refuse a name that is not UTF-8.
// Format version 2 made that change; it is wire-compatible, so version 1
// files still load, while a gmopt that knows only version 1 refuses a
// version-2 file by its version rather than failing on a name.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_GMFILE_H
#define GMOPT_IR_SERIALIZATION_GMFILE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gmopt {

class Module;

/// The first eight bytes of every `.gm` file (with an embedded NUL, so not a
/// StringLiteral).
inline constexpr char kGmMagic[8] = {'G', 'M', 'O', 'P', 'T', '\0', 'G', 'M'};
/// The format version this gmopt writes and the newest it reads. Version 2
/// stores names as `bytes` (version 1: `string`, which must be UTF-8).
constexpr uint32_t kGmFormatVersion = 2;
/// Bytes before the payload: magic, version, payload length, CRC-32.
constexpr size_t kGmHeaderSize = 24;
/// The metadata key that holds the pipelines run on a module (the same key
/// the tools record with recordPipeline).
constexpr llvm::StringLiteral kGmPipelineMetadataKey = "gmopt.pipeline";

/// gmopt's version (the project version, e.g. "0.1.0"), written into every
/// `.gm` file as its producer version.
llvm::StringRef getGmoptVersion();

/// A loaded `.gm` file.
struct CompiledModule {
  /// The rewritten model, with its signature, plan (empty if none was
  /// stored), dimension bindings and a `gmopt.pipeline` metadata entry.
  std::unique_ptr<Module> module;
  /// The model as it was imported, before any pass ran.
  std::unique_ptr<Module> original;
  /// The pass pipeline that turned the original into the rewritten model.
  std::string pipeline;
  /// The gmopt version that wrote the file.
  std::string producerVersion;
};

/// Serializes \p rewritten and \p original (each with its signature and,
/// when non-empty, its plan) and \p pipeline into the bytes of a `.gm`
/// file, header included.
///
/// Both modules are modified in one harmless way: duplicate and unnamed
/// values and nodes are renamed (uniquifyValueNames, uniquifyNodeNames) so
/// that the stored names identify them. Fails if a signature refers to a
/// value or node outside its graph, if a non-empty plan does not validate,
/// or if a model cannot be exported.
llvm::Expected<std::string> writeGmBytes(Module &rewritten, Module &original,
                                         llvm::StringRef pipeline);

/// writeGmBytes, then writes the bytes to \p path with writeFileSafely
/// (ir/serialization/FileIO.h): a temporary file renamed over the target,
/// removed on failure. Errors start with \p path. A tool writing several
/// outputs stages writeGmBytes' result in its own OutputFileSet instead.
llvm::Error writeGmFile(llvm::StringRef path, Module &rewritten,
                        Module &original, llvm::StringRef pipeline);

/// Prepends a `.gm` header (magic, \p formatVersion, length, CRC-32) to
/// \p payload, a serialized gmopt.gm.GmFile message.
std::string wrapGmPayload(llvm::StringRef payload,
                          uint32_t formatVersion = kGmFormatVersion);

/// Loads the `.gm` file held in \p bytes; \p name (the file name) starts
/// every error message. Initializers the compiled model kept in
/// external-data files stay unread (lazy TensorData): their locations are
/// resolved against \p externalDataDir when given, else the directory the
/// file recorded, else the .gm file's own directory, and are checked as the
/// ONNX importer checks them (relative, inside that directory).
llvm::Expected<CompiledModule>
readGmBytes(llvm::StringRef bytes, llvm::StringRef name,
            llvm::StringRef externalDataDir = {});

/// Reads and loads the `.gm` file at \p path (see readGmBytes).
llvm::Expected<CompiledModule> readGmFile(llvm::StringRef path,
                                          llvm::StringRef externalDataDir = {});

} // namespace gmopt

#endif // GMOPT_IR_SERIALIZATION_GMFILE_H
