//===- PipelineParser.h - Parsing textual pass pipelines --------*- C++ -*-===//
//
// The textual pipeline syntax of mlir/lib/Pass/PassRegistry.cpp, flattened
// to one level: a comma-separated list of pass names, each optionally
// followed by `{key=value,...}`:
//
//   pipeline := element (',' element)*        (or nothing: the empty pipeline)
//   element  := name ('{' (option (',' option)*)? '}')?
//   option   := key '=' value
//   name/key := [A-Za-z0-9_.-]+
//   value    := "quoted" | 'quoted' | bare text up to ',' or '}' (balanced
//               braces are kept as part of the value)
//
// Whitespace around names, keys, values and separators is ignored. The
// parser is purely syntactic; PassRegistry turns elements into passes. Every
// error carries the 1-based column it was found at.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PIPELINEPARSER_H
#define GMOPT_PASSES_PIPELINEPARSER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace gmopt {

/// One `key=value` of a pipeline element.
struct PipelineOption {
  std::string key;
  /// The value with quotes removed and escapes resolved.
  std::string value;
  /// 1-based column of the key in the pipeline text.
  unsigned keyColumn = 0;
  /// 1-based column of the value in the pipeline text.
  unsigned valueColumn = 0;
};

/// One pass of a textual pipeline.
struct PipelineElement {
  std::string name;
  /// 1-based column of the name in the pipeline text.
  unsigned column = 0;
  std::vector<PipelineOption> options;
};

/// Parses \p text into its elements. The empty (or all-blank) text is the
/// empty pipeline. Errors read "invalid pass pipeline 'TEXT' at column N:
/// what".
llvm::Expected<std::vector<PipelineElement>>
parsePipeline(llvm::StringRef text);

/// Makes an error about \p pipelineText at 1-based \p column, worded like
/// the parser's own errors (for checks done after parsing).
llvm::Error makePipelineError(llvm::StringRef pipelineText, unsigned column,
                              const llvm::Twine &message);

/// Renders \p value so parsePipeline reads it back unchanged: bare when it
/// is non-empty and holds none of `,{}="'\` or whitespace, else in double
/// quotes with `"` and `\` escaped.
std::string quotePipelineValue(llvm::StringRef value);

/// Renders parsed elements back into pipeline text.
std::string printPipeline(const std::vector<PipelineElement> &elements);

} // namespace gmopt

#endif // GMOPT_PASSES_PIPELINEPARSER_H
