//===- TestDataSet.h - ONNX test-data directories ---------------*- C++ -*-===//
//
// Reading the ONNX test-data layout that ONNX Runtime's tooling and the
// files under testdata/ use: a directory `test_data_set_N/` holding
// `input_K.pb` and `output_K.pb`, each one serialized onnx.TensorProto whose
// name says which graph input or output (or `<param>_grad` gradient) it is.
// gmopt-run reads inputs and references from such a directory; names match
// files to graph values, the number K is only the fallback for unnamed
// tensors. Also the helpers shared by every weight/tensor file reader.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_RUNTIME_TESTDATASET_H
#define GMOPT_TOOLS_RUNTIME_TESTDATASET_H

#include "ir/Attribute.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace gmopt {

/// One tensor read from a file, with its name and where it came from.
struct NamedTensor {
  /// The TensorProto's name (may be empty).
  std::string name;
  /// The file (and, for containers, the entry) it was read from, for
  /// messages.
  std::string source;
  /// The number K of `input_K.pb`/`output_K.pb`, or -1.
  int64_t index = -1;
  /// The contents.
  TensorData data;
};

/// The tensors of one `test_data_set_N` directory, each list ordered by K.
class TestDataSet {
public:
  /// The directory the set was read from.
  std::string directory;
  /// `input_K.pb` files.
  std::vector<NamedTensor> inputs;
  /// `output_K.pb` files.
  std::vector<NamedTensor> outputs;

  /// The input named \p name, or null.
  const NamedTensor *findInput(llvm::StringRef name) const;
  /// The output named \p name, or null.
  const NamedTensor *findOutput(llvm::StringRef name) const;
  /// The input with number \p index, or null.
  const NamedTensor *findInputByIndex(int64_t index) const;
  /// The output with number \p index, or null.
  const NamedTensor *findOutputByIndex(int64_t index) const;
};

/// Reads every `input_K.pb` and `output_K.pb` of \p directory (other files
/// are ignored). Fails if the directory does not exist, holds no such file,
/// a file is not a valid TensorProto, or two inputs (or two outputs) have
/// the same number K or hold tensors of the same name; messages start with
/// the path.
llvm::Expected<TestDataSet> readTestDataSet(llvm::StringRef directory);

/// Reads \p directory as one test-data set, or, when it holds no
/// `input_K.pb`/`output_K.pb` files but `test_data_set_N` subdirectories, as
/// every such set in order of N (gmopt-run feeds them round-robin, one per
/// micro-step). Fails if it is neither, or any set fails to read.
llvm::Expected<std::vector<TestDataSet>>
readTestDataSets(llvm::StringRef directory);

/// Reads one serialized onnx.TensorProto from \p path. External data is
/// resolved next to the file.
llvm::Expected<NamedTensor> readTensorFile(llvm::StringRef path);

/// \p set's inputs split along axis 0 into \p parts micro-batches, for a
/// module compiled at the micro-batch (gmopt-compile --memory-limit's
/// gradient accumulation): each input named in \p microShapes whose first
/// extent is \p parts times the micro-batch's is split, in order; inputs
/// already of their micro-batch shape are repeated. Returns nothing when no
/// input needs splitting; an error when an input fits neither shape.
llvm::Expected<std::vector<TestDataSet>> splitTestDataSet(
    const TestDataSet &set, unsigned parts,
    llvm::function_ref<
        std::optional<llvm::SmallVector<int64_t, 4>>(llvm::StringRef)>
        microShapes);

} // namespace gmopt

#endif // GMOPT_TOOLS_RUNTIME_TESTDATASET_H
