//===- ToolSupport.h - Shared plumbing of gmopt's tools ---------*- C++ -*-===//
//
// What gmopt-opt and gmopt-compile have in common: strict command-line
// parsing that reports errors as one `TOOL: error: MESSAGE` line, the
// version string, `--dim NAME=N` parsing, loading a module from ONNX or
// text (with dimension binding and verification), writing it back out, and
// recording the pipeline that ran in the module's metadata.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_TOOLSUPPORT_H
#define GMOPT_TOOLS_DRIVER_TOOLSUPPORT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class MemoryBuffer;
class raw_ostream;
namespace cl {
class OptionCategory;
} // namespace cl
} // namespace llvm

namespace gmopt {

class Module;

/// The option category of every gmopt option; --help shows only it.
llvm::cl::OptionCategory &getGmoptCategory();

/// The version string printed by --version: `TOOL (gmopt) VERSION`.
std::string getToolVersion(llvm::StringRef tool);

/// Parses the command line with llvm::cl, hiding LLVM's own options from
/// --help and installing the --version printer. Returns false after
/// printing one `TOOL: error: ...` line if the command line is invalid.
/// (--help and --version print and exit the process, as llvm::cl does.)
bool parseToolCommandLine(int argc, char **argv, llvm::StringRef tool,
                          llvm::StringRef overview);

/// Prints \p err as one line `TOOL: error: MESSAGE` to stderr (embedded
/// newlines become "; ") and returns the exit status 1.
int reportToolError(llvm::StringRef tool, llvm::Error err);

/// Flushes stdout; if writing to it failed (a full disk), returns 1 after
/// printing one line `TOOL: error: <stdout>: cannot write: ...` (unless
/// \p status already says the run failed, and so printed its line) -
/// instead of LLVM's fatal "IO failure" at exit. Otherwise returns
/// \p status.
int finishToolOutput(llvm::StringRef tool, int status);

/// Parses `--dim` values (`NAME=N`, N a non-negative decimal integer of at
/// most kMaxTensorBytes).
/// Errors name the offending text; a name bound twice to different values
/// is an error.
llvm::Expected<std::map<std::string, int64_t>>
parseDimBindings(llvm::ArrayRef<std::string> values);

/// Replaces every symbolic dimension of \p module bound in \p bindings with
/// its extent (inputs, initializers and node results) and records the
/// bindings in module.dimBindings. A binding that contradicts one already
/// recorded in the module is an error, and so is a bound type beyond the
/// tensor size limit (checkTensorSize).
llvm::Error bindSymbolicDims(Module &module,
                             const std::map<std::string, int64_t> &bindings);

/// How an input file is read.
enum class InputFormat { Auto, Text, Onnx };

/// Loads \p path (`-` is stdin): ONNX when \p format says so or the name
/// ends in `.onnx`, the text form otherwise. Binds \p dims and verifies.
/// Every error starts with the file name.
llvm::Expected<std::unique_ptr<Module>>
loadModule(llvm::StringRef path, InputFormat format,
           const std::map<std::string, int64_t> &dims);

/// Loads a module from \p bytes, the content of \p path (`-` for stdin),
/// as loadModule does; for a tool that needs the input twice but may read
/// it only once (stdin).
llvm::Expected<std::unique_ptr<Module>>
loadModuleBytes(llvm::StringRef bytes, llvm::StringRef path, InputFormat format,
                const std::map<std::string, int64_t> &dims);

/// Reads \p path (`-` is stdin, at most kMaxStreamBytes); only a regular
/// file, bounded by its size (ir/serialization/FileIO.h). Errors start with the
/// file name.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readInputFile(llvm::StringRef path);

/// Parses \p text in the text form (named \p bufferName in messages), binds
/// \p dims and verifies.
llvm::Expected<std::unique_ptr<Module>>
loadTextModule(llvm::StringRef text, llvm::StringRef bufferName,
               const std::map<std::string, int64_t> &dims);

/// The separator of --split-input-file, as in mlir-opt.
constexpr llvm::StringLiteral kSplitMarker = "// -----";
/// Splits \p text at lines that start with `// -----`. Each chunk is
/// prefixed with as many newlines as lines precede it, so that parse errors
/// report the line numbers of the whole file.
std::vector<std::string> splitInputChunks(llvm::StringRef text);

/// Writes \p text to \p path (`-` is stdout) with writeFileSafely.
llvm::Error writeTextFile(llvm::StringRef text, llvm::StringRef path);
/// \p module in the text form.
std::string printModuleText(const Module &module);

/// The metadata key holding the pipelines run on a module, comma-joined in
/// order, so the whole history can be replayed from the original input.
constexpr llvm::StringLiteral kPipelineMetadataKey = "gmopt.pipeline";
/// Appends \p pipeline to the module's `gmopt.pipeline` metadata (an
/// empty pipeline is not recorded).
void recordPipeline(Module &module, llvm::StringRef pipeline);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_TOOLSUPPORT_H
