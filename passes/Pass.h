//===- Pass.h - The pass interface, pass options and statistics -*- C++ -*-===//
//
// A Pass rewrites a Module and says whether it changed anything, or fails
// with an llvm::Error (the contract of XLA's hlo_pass_interface.h). Each pass
// keeps its tunables in a documented `Options` struct and binds every field
// to a textual key with declareOption(), so the same struct is filled from a
// pipeline string (`recompute{mode=selective}`), printed back with every
// option explicit, and listed by --list-passes. Statistics are declared the
// same way, with declareStatistic() in the pass's constructor (as MLIR's
// Passes.td declares them with the pass), so --list-passes shows them; a
// pass reports only declared statistics into the PassContext, which the
// PassManager owns and prints.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_PASS_H
#define GMOPT_PASSES_PASS_H

#include "ir/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;

/// One named counter reported by a pass (MLIR's Pass::Statistic).
struct PassStatistic {
  /// Name of the pass that reported it.
  std::string pass;
  /// Short kebab-case name, e.g. `nodes-erased`.
  std::string name;
  /// One-line explanation shown in the statistics table.
  std::string description;
  /// Accumulated value over every run of the pass in the pipeline.
  uint64_t value = 0;
};

/// A statistic a pass declares: what --list-passes shows and what its
/// reports carry.
struct PassStatisticInfo {
  /// Short kebab-case name, e.g. `nodes-erased`.
  std::string name;
  /// One-line explanation shown by --list-passes and the statistics table.
  std::string description;
};

/// State shared by the passes of one pipeline run; owned by the PassManager.
class PassContext {
public:
  /// Adds \p value to statistic \p name of \p pass, creating it at zero on
  /// first use (so a pass can report a statistic that stayed zero).
  void addStatistic(llvm::StringRef pass, llvm::StringRef name, uint64_t value,
                    llvm::StringRef description = "");
  /// The value of a statistic, or 0 if it was never reported.
  uint64_t getStatistic(llvm::StringRef pass, llvm::StringRef name) const;
  /// All statistics in the order they were first reported.
  llvm::ArrayRef<PassStatistic> getStatistics() const { return statistics; }
  /// Prints the statistics as a table grouped by pass (MLIR's layout).
  void printStatistics(llvm::raw_ostream &os) const;
  /// Forgets every statistic.
  void clearStatistics() { statistics.clear(); }

  /// The target backend's kernel workspace model: planning passes reserve
  /// an arena slice of its size at each node's step. Unset: no workspace is
  /// planned (a backend's kernels then allocate scratch outside the plan).
  /// \p name is what plans record (ExecutionPlan::workspaceModel) so a
  /// backend can refuse a plan made for other kernels.
  void setWorkspaceModel(WorkspaceModel model, std::string name) {
    workspaceModel = std::move(model);
    workspaceModelName =
        workspaceModel ? std::move(name) : kNoWorkspaceModelName.str();
  }
  const WorkspaceModel &getWorkspaceModel() const { return workspaceModel; }
  /// The workspace model's name; kNoWorkspaceModelName when unset.
  llvm::StringRef getWorkspaceModelName() const { return workspaceModelName; }

private:
  std::vector<PassStatistic> statistics;
  WorkspaceModel workspaceModel;
  std::string workspaceModelName = kNoWorkspaceModelName.str();
};

/// A pass option bound to a field of a pass's Options struct.
class PassOption {
public:
  /// Parses a value; returns an error message, or nullopt on success.
  using ParseFn = std::function<std::optional<std::string>(llvm::StringRef)>;
  /// Renders the current value so that ParseFn reads it back unchanged.
  using PrintFn = std::function<std::string()>;

  PassOption(std::string key, std::string description, std::string valueKind,
             ParseFn parse, PrintFn print)
      : key(std::move(key)), description(std::move(description)),
        valueKind(std::move(valueKind)), parseFn(std::move(parse)),
        printFn(std::move(print)), defaultValue(printFn()) {}

  /// The key used in pipeline strings (kebab-case).
  llvm::StringRef getKey() const { return key; }
  /// One-line description for --list-passes.
  llvm::StringRef getDescription() const { return description; }
  /// What values are accepted: `bool`, `int`, `uint`, `float`, `string` or
  /// `a|b|c` for enumerations.
  llvm::StringRef getValueKind() const { return valueKind; }
  /// The value when the option was declared (the struct's default).
  llvm::StringRef getDefault() const { return defaultValue; }
  /// Sets the bound field from \p text; returns a message on bad input.
  std::optional<std::string> parse(llvm::StringRef text) const {
    return parseFn(text);
  }
  /// The current value of the bound field as text.
  std::string getValue() const { return printFn(); }

private:
  std::string key;
  std::string description;
  std::string valueKind;
  ParseFn parseFn;
  PrintFn printFn;
  std::string defaultValue;
};

/// Base class of every pass.
class Pass {
public:
  Pass() = default;
  Pass(const Pass &) = delete;
  Pass &operator=(const Pass &) = delete;
  virtual ~Pass();

  /// The pipeline name of the pass, e.g. `canonicalize`.
  virtual llvm::StringRef getName() const = 0;
  /// Runs the pass on \p module. Returns whether the module changed, or an
  /// error (bad input the pass cannot handle); the module must still verify
  /// after a successful run.
  virtual llvm::Expected<bool> run(Module &module, PassContext &context) = 0;
  /// True for a pass that writes module.plan (a planner) and nothing else:
  /// the pass manager keeps the plan such a pass leaves and does not
  /// verify the unchanged graph again after it. After any other pass that
  /// reports a change, the pass manager clears the plan, which no longer
  /// matches.
  virtual bool writesPlan() const { return false; }

  /// The declared options in declaration order.
  llvm::ArrayRef<PassOption> getOptions() const { return options; }
  /// The option with key \p key, or null.
  const PassOption *lookupOption(llvm::StringRef key) const;
  /// Sets option \p key from \p value. Errors name the pass and the key.
  llvm::Error setOption(llvm::StringRef key, llvm::StringRef value);
  /// This pass as a pipeline element with every option explicit:
  /// `name` or `name{key=value,...}`; it reparses to an identical pass.
  std::string getPipelineElement() const;

  /// The declared statistics in declaration order.
  llvm::ArrayRef<PassStatisticInfo> getDeclaredStatistics() const {
    return statistics;
  }
  /// The declared statistic \p name, or null.
  const PassStatisticInfo *lookupStatistic(llvm::StringRef name) const;
  /// Adds \p value to this pass's statistic \p name in \p context, with
  /// its declared description. \p name must be declared (a programming
  /// error otherwise: asserted, and PassStatisticsTest checks that every
  /// statistic a pipeline reports is declared). Public so that a pass's
  /// helpers can report for it.
  void addStatistic(PassContext &context, llvm::StringRef name,
                    uint64_t value) const;

protected:
  /// Binds a boolean field (`true`/`false`/`1`/`0`).
  void declareOption(llvm::StringRef key, bool &field,
                     llvm::StringRef description);
  /// Binds a signed integer field, accepted within [min, max].
  void declareOption(llvm::StringRef key, int64_t &field,
                     llvm::StringRef description,
                     int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = std::numeric_limits<int64_t>::max());
  /// Binds an unsigned integer field, accepted within [min, max].
  void declareOption(llvm::StringRef key, uint64_t &field,
                     llvm::StringRef description, uint64_t min = 0,
                     uint64_t max = std::numeric_limits<uint64_t>::max());
  /// Binds a floating-point field.
  void declareOption(llvm::StringRef key, double &field,
                     llvm::StringRef description);
  /// Binds a string field (any text; quote it in pipelines if it holds
  /// `,{}="'` or spaces).
  void declareOption(llvm::StringRef key, std::string &field,
                     llvm::StringRef description);
  /// Binds an enumeration field to the spellings in \p values.
  template <typename EnumT>
  void
  declareEnumOption(llvm::StringRef key, EnumT &field,
                    llvm::ArrayRef<std::pair<llvm::StringRef, EnumT>> values,
                    llvm::StringRef description) {
    std::vector<std::pair<std::string, EnumT>> table;
    for (const auto &entry : values)
      table.emplace_back(entry.first.str(), entry.second);
    std::string kind;
    for (const auto &entry : table)
      kind += (kind.empty() ? "" : "|") + entry.first;
    addOption(PassOption(
        key.str(), description.str(), kind,
        [&field, table,
         kind](llvm::StringRef text) -> std::optional<std::string> {
          for (const auto &entry : table)
            if (entry.first == text) {
              field = entry.second;
              return std::nullopt;
            }
          return "expected one of " + kind;
        },
        [&field, table]() -> std::string {
          for (const auto &entry : table)
            if (entry.second == field)
              return entry.first;
          return "<invalid>";
        }));
  }

  /// Declares statistic \p name (kebab-case) of this pass, explained by
  /// \p description; call it in the constructor, with the options.
  void declareStatistic(llvm::StringRef name, llvm::StringRef description);

  /// Reports statistic \p name of this pass with \p description, declared
  /// or not: for passes outside gmopt whose statistic names are known only
  /// at run time. gmopt's own passes declare theirs and use the
  /// three-argument form.
  void addStatistic(PassContext &context, llvm::StringRef name, uint64_t value,
                    llvm::StringRef description) const {
    context.addStatistic(getName(), name, value, description);
  }

private:
  void addOption(PassOption option);

  std::vector<PassOption> options;
  std::vector<PassStatisticInfo> statistics;
};

} // namespace gmopt

#endif // GMOPT_PASSES_PASS_H
