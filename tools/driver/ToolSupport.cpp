//===- ToolSupport.cpp - Shared plumbing of gmopt's command-line tools ----===//
//
// Loading and writing modules, --dim parsing and binding, and the
// one-line error convention. Messages about a file start with its name;
// the tool adds `TOOL: error: ` in front and nothing else. Every read and
// write goes through ir/serialization/FileIO.h (regular files only, bounded by
// their size; outputs committed together, never over a device or an input).
//
//===----------------------------------------------------------------------===//

#include "tools/driver/ToolSupport.h"

#include "ir/Module.h"
#include "ir/SizeLimits.h"
#include "ir/Verifier.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/TextIR.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <unistd.h>

#ifndef GMOPT_VERSION
#error "GMOPT_VERSION must be defined by the build (tools/CMakeLists.txt)"
#endif

using namespace gmopt;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Prefixes \p err with `PATH: ` unless the message already starts with it.
llvm::Error prefixWithFile(llvm::StringRef path, llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  if (llvm::StringRef(message).starts_with(path.str() + ":"))
    return makeError(message);
  return makeError(path + ": " + message);
}

/// Replaces bound symbolic dimensions of \p type.
TensorType bindType(const TensorType &type,
                    const std::map<std::string, int64_t> &bindings) {
  if (!type.hasRank())
    return type;
  llvm::SmallVector<Dim, 4> dims(type.getDims().begin(), type.getDims().end());
  bool changed = false;
  for (Dim &dim : dims) {
    if (!dim.isSymbolic())
      continue;
    auto it = bindings.find(dim.getSymbol().str());
    if (it == bindings.end())
      continue;
    dim = Dim::fixed(it->second);
    changed = true;
  }
  return changed ? TensorType(type.getDType(), dims) : type;
}

/// Redirects file descriptor 2 into a temporary file until finish().
class StderrCapture {
public:
  StderrCapture() {
    llvm::errs().flush();
    file = std::tmpfile();
    savedStderr = file ? dup(STDERR_FILENO) : -1;
    if (savedStderr < 0 || dup2(fileno(file), STDERR_FILENO) < 0) {
      // Capture is best effort: without it messages stay on stderr as is.
      if (savedStderr >= 0)
        close(savedStderr);
      savedStderr = -1;
    }
  }
  StderrCapture(const StderrCapture &) = delete;
  StderrCapture &operator=(const StderrCapture &) = delete;
  ~StderrCapture() { (void)finish(); }

  /// Restores stderr and returns what was written to it meanwhile.
  std::string finish() {
    std::string captured;
    if (savedStderr >= 0) {
      llvm::errs().flush();
      dup2(savedStderr, STDERR_FILENO);
      close(savedStderr);
      savedStderr = -1;
      std::rewind(file);
      char buffer[4096];
      size_t count;
      while ((count = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
        captured.append(buffer, count);
    }
    if (file) {
      std::fclose(file);
      file = nullptr;
    }
    return captured;
  }

private:
  std::FILE *file = nullptr;
  int savedStderr = -1;
};

} // namespace

llvm::cl::OptionCategory &gmopt::getGmoptCategory() {
  static llvm::cl::OptionCategory category("gmopt options");
  return category;
}

std::string gmopt::getToolVersion(llvm::StringRef tool) {
  return (tool + " (gmopt) " + GMOPT_VERSION).str();
}

bool gmopt::parseToolCommandLine(int argc, char **argv, llvm::StringRef tool,
                                 llvm::StringRef overview) {
  // Every problem is reported as one line of ours, never a library's log.
  silenceProtobufLogging();
  std::string toolName = tool.str();
  llvm::cl::SetVersionPrinter([toolName](llvm::raw_ostream &os) {
    os << getToolVersion(toolName) << '\n';
  });
  llvm::cl::HideUnrelatedOptions(getGmoptCategory());

  std::string errors;
  llvm::raw_string_ostream errorStream(errors);
  bool parsed;
  {
    // llvm::cl reports a bad option *value* straight to stderr instead of
    // the stream it is given; capture stderr so it can be reworded too.
    StderrCapture capture;
    parsed =
        llvm::cl::ParseCommandLineOptions(argc, argv, overview, &errorStream);
    errors = capture.finish() + errors;
  }
  if (parsed) {
    // Nothing to reword; pass on anything llvm::cl printed (warnings).
    llvm::errs() << errors;
    return true;
  }
  // llvm::cl words its errors `PROGRAM: message`, sometimes over several
  // lines (a "did you mean" hint); fold them into our one-line form.
  std::string program = llvm::sys::path::filename(argv[0]).str() + ": ";
  llvm::SmallVector<llvm::StringRef, 4> lines;
  llvm::StringRef(errors).split(lines, '\n', -1, /*KeepEmpty=*/false);
  std::string message;
  for (llvm::StringRef line : lines) {
    line = line.trim();
    line.consume_front(program);
    if (line.empty())
      continue;
    message += (message.empty() ? "" : " ") + line.str();
  }
  if (message.empty())
    message = "invalid command line";
  llvm::errs() << tool << ": error: " << message << '\n';
  return false;
}

int gmopt::reportToolError(llvm::StringRef tool, llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  llvm::StringRef trimmed = llvm::StringRef(message).rtrim("\n");
  std::string oneLine;
  for (char c : trimmed) {
    if (c == '\n')
      oneLine += "; ";
    else
      oneLine += c;
  }
  llvm::errs() << tool << ": error: " << oneLine << '\n';
  return 1;
}

int gmopt::finishToolOutput(llvm::StringRef tool, int status) {
  llvm::raw_fd_ostream &out = llvm::outs();
  out.flush();
  if (!out.has_error())
    return status;
  std::error_code ec = out.error();
  out.clear_error();
  // A failed run has reported its error line already; one is enough.
  if (status != 0)
    return status;
  llvm::errs() << tool << ": error: <stdout>: cannot write: " << ec.message()
               << '\n';
  return 1;
}

llvm::Expected<std::map<std::string, int64_t>>
gmopt::parseDimBindings(llvm::ArrayRef<std::string> values) {
  std::map<std::string, int64_t> bindings;
  for (llvm::StringRef text : values) {
    auto [name, number] = text.split('=');
    auto invalid = [&] {
      return makeError("invalid --dim '" + text +
                       "': expected NAME=N with N a non-negative integer");
    };
    if (name.empty() || !text.contains('=') || number.empty() ||
        !llvm::all_of(number, llvm::isDigit))
      return invalid();
    int64_t extent;
    if (number.getAsInteger(10, extent))
      return invalid();
    if (static_cast<uint64_t>(extent) > kMaxTensorBytes)
      return makeError("--dim " + text + ": " + number +
                       " is larger than any tensor gmopt accepts (at most " +
                       kMaxTensorBytesText + ")");
    auto [it, inserted] = bindings.emplace(name.str(), extent);
    if (!inserted && it->second != extent)
      return makeError("--dim " + name +
                       " is given twice with different "
                       "values (" +
                       llvm::Twine(it->second) + " and " + llvm::Twine(extent) +
                       ")");
  }
  return bindings;
}

llvm::Error
gmopt::bindSymbolicDims(Module &module,
                        const std::map<std::string, int64_t> &bindings) {
  for (const auto &[name, extent] : bindings) {
    auto it = module.dimBindings.find(name);
    if (it != module.dimBindings.end() && it->second != extent)
      return makeError("dimension '" + name + "' is bound to " +
                       llvm::Twine(it->second) + " in the module; --dim " +
                       name + "=" + llvm::Twine(extent) + " contradicts it");
  }
  if (bindings.empty())
    return llvm::Error::success();
  // A bound type must still fit the size limit; the first that does not is
  // the error (the module is then discarded by the caller).
  auto rebind = [&](Value *value) {
    value->setType(bindType(value->getType(), bindings));
    return checkTensorSize(value->getType(),
                           "value '" + value->getName() + "'");
  };
  Graph &graph = module.getGraph();
  for (const auto &input : graph.getInputs())
    if (llvm::Error err = rebind(input.get()))
      return err;
  for (const auto &initializer : graph.getInitializers())
    if (llvm::Error err = rebind(initializer.get()))
      return err;
  for (Node &node : graph)
    for (Value *result : node.getResults())
      if (result)
        if (llvm::Error err = rebind(result))
          return err;
  for (const auto &[name, extent] : bindings)
    module.dimBindings[name] = extent;
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
gmopt::readInputFile(llvm::StringRef path) {
  ReadFileOptions options;
  options.allowStdin = true;
  // The text lexer may look one character past the end.
  options.requiresNullTerminator = true;
  return readFileBounded(path, options);
}

llvm::Expected<std::unique_ptr<Module>>
gmopt::loadTextModule(llvm::StringRef text, llvm::StringRef bufferName,
                      const std::map<std::string, int64_t> &dims) {
  auto parsed = parseModule(text, bufferName);
  if (!parsed)
    return prefixWithFile(bufferName, parsed.takeError());
  std::unique_ptr<Module> module = std::move(*parsed);
  if (llvm::Error err = bindSymbolicDims(*module, dims))
    return prefixWithFile(bufferName, std::move(err));
  if (llvm::Error err = verifyModule(*module))
    return prefixWithFile(bufferName, std::move(err));
  return module;
}

std::vector<std::string> gmopt::splitInputChunks(llvm::StringRef text) {
  std::vector<std::string> chunks(1);
  unsigned lineNumber = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    if (line.starts_with(kSplitMarker)) {
      // The marker line itself becomes a blank line of the next chunk.
      chunks.emplace_back(lineNumber + 1, '\n');
    } else {
      chunks.back() += line.str();
      chunks.back() += '\n';
    }
    ++lineNumber;
    text = rest;
  }
  return chunks;
}

llvm::Expected<std::unique_ptr<Module>>
gmopt::loadModuleBytes(llvm::StringRef bytes, llvm::StringRef path,
                       InputFormat format,
                       const std::map<std::string, int64_t> &dims) {
  std::string displayName = inputDisplayName(path);
  if (format == InputFormat::Auto)
    format = path.ends_with_insensitive(".onnx") ? InputFormat::Onnx
                                                 : InputFormat::Text;
  if (format == InputFormat::Text)
    return loadTextModule(bytes, displayName, dims);
  OnnxImportOptions options;
  options.dimBindings = dims;
  // External data is found next to the file (stdin: the current
  // directory). The importer runs the verifier itself (options.verify).
  auto imported = importOnnxBytes(bytes, displayName, options);
  if (!imported)
    return prefixWithFile(displayName, imported.takeError());
  return std::move(*imported);
}

llvm::Expected<std::unique_ptr<Module>>
gmopt::loadModule(llvm::StringRef path, InputFormat format,
                  const std::map<std::string, int64_t> &dims) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return buffer.takeError();
  return loadModuleBytes((*buffer)->getBuffer(), path, format, dims);
}

llvm::Error gmopt::writeTextFile(llvm::StringRef text, llvm::StringRef path) {
  return writeFileSafely(path, text);
}

std::string gmopt::printModuleText(const Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printModule(module, os);
  return text;
}

void gmopt::recordPipeline(Module &module, llvm::StringRef pipeline) {
  // An empty pipeline changes nothing, so there is nothing to replay.
  if (pipeline.empty())
    return;
  for (auto &[key, value] : module.metadata) {
    if (key != kPipelineMetadataKey)
      continue;
    value = value.empty() ? pipeline.str() : value + "," + pipeline.str();
    return;
  }
  module.metadata.emplace_back(kPipelineMetadataKey.str(), pipeline.str());
}
