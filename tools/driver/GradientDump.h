//===- GradientDump.h - gmopt-run --dump-gradients --------------*- C++ -*-===//
//
// gmopt-run --dump-gradients DIR writes the gradient of every trainable
// parameter after the run's one step (the accumulated gradient the
// optimizer reads, before any update) to DIR, in a form that a script reads
// with NumPy alone: one NumPy `.npy` file (format 1.0: little-endian, C
// order) per parameter and a `manifest.json` naming them. NumPy's own
// format was chosen over gmopt's TensorProto sequence (`.pbseq`, what
// --save-weights writes) because reading that needs a protobuf parser;
// `numpy.load` reads a `.npy` file as it is, dtype and shape included.
//
// The manifest (`"format": "gmopt-gradients"`, `"version": 1`) gives the
// model, backend, pipeline, micro-steps and the step's loss, and for each
// trainable parameter in signature order its `name`, its `file` (the name
// with every byte outside [A-Za-z0-9._-] and a leading '.' replaced by '_',
// cut to 200 bytes and made unique with `-N`, then `.npy`), its `dtype`
// (float32, float16, float64 or bfloat16) and `shape`. NumPy has no
// bfloat16: such a gradient is widened to float32 in its file (exactly).
// The files are outputs of the run's OutputFileSet: written all together
// at the end of the run or not at all. An existing directory is written
// into: files of the same names are replaced, other files left alone, and
// manifest.json lists what this run wrote.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_GRADIENTDUMP_H
#define GMOPT_TOOLS_DRIVER_GRADIENTDUMP_H

#include "ir/Attribute.h"
#include "ir/Module.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <utility>
#include <vector>

namespace gmopt {

class OutputFileSet;

/// The `.npy` bytes (NumPy format 1.0) of \p tensor: float32, float64 and
/// float16 as they are, bfloat16 widened to float32; any other dtype (or a
/// tensor whose bytes are not loaded) is an error naming \p name.
llvm::Expected<std::string> encodeNpy(const TensorData &tensor,
                                      llvm::StringRef name);

/// The file names of the gradients of parameters \p names (see the top of
/// this file): one per name, distinct, each ending in `.npy`.
std::vector<std::string> gradientFileNames(llvm::ArrayRef<std::string> names);

/// What the manifest says about the run besides the gradients.
struct GradientDumpRun {
  /// The model file, the backend that ran it (`cpu`, `cuda`) and the
  /// pipeline that made the module.
  std::string model;
  std::string backend;
  std::string pipeline;
  /// Micro-steps of the step (the gradient is their mean).
  unsigned microSteps = 1;
  /// The step's loss (the mean over its micro-steps).
  double loss = 0;
};

/// The files of one --dump-gradients directory, reserved before the run.
class GradientDump {
public:
  /// Makes \p directory ready: an existing directory must be writable; a
  /// missing one is created (its parent must exist). Called before the
  /// model loads, so a bad path fails first. Errors start with the path.
  static llvm::Expected<GradientDump> open(llvm::StringRef directory);

  /// Fails unless \p module has gradients to dump: it has a trainable
  /// parameter, and keeps whole reduced gradients (no ZeRO stage).
  static llvm::Error checkDumpable(const Module &module);

  /// Reserves in \p outputs a file for the gradient of every trainable
  /// parameter of \p module (checkDumpable first), and the manifest.
  llvm::Error reserve(const Module &module, OutputFileSet &outputs);

  /// Writes the first step's gradients of \p gradients (name, value; every
  /// reserved parameter must be there) and the manifest into \p outputs.
  llvm::Error
  write(llvm::ArrayRef<std::pair<std::string, TensorData>> gradients,
        const GradientDumpRun &run, OutputFileSet &outputs) const;

  /// Removes the directory if open() created it and it is empty (after a
  /// failed run, whose temporary files are gone).
  void removeIfCreatedAndEmpty() const;

  /// The directory.
  llvm::StringRef getDirectory() const { return directory; }
  /// The number of gradient files reserved.
  size_t size() const { return files.size(); }

private:
  explicit GradientDump(std::string directory, bool created)
      : directory(std::move(directory)), created(created) {}

  /// The file path of \p fileName in the directory.
  std::string pathOf(llvm::StringRef fileName) const;

  std::string directory;
  /// Whether open() created the directory.
  bool created = false;
  /// (parameter name, file name), in signature order.
  std::vector<std::pair<std::string, std::string>> files;
};

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_GRADIENTDUMP_H
