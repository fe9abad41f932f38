//===- Pass.cpp - The pass interface, pass options and statistics ---------===//
//
// Option parsing (strict: the whole text must be a value of the option's
// kind), the pipeline-element rendering that makes a run replayable, the
// declared statistics of a pass, and the statistics table of PassContext.
//
//===----------------------------------------------------------------------===//

#include "passes/Pass.h"
#include "passes/PipelineParser.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace gmopt;

//===----------------------------------------------------------------------===//
// PassContext
//===----------------------------------------------------------------------===//

void PassContext::addStatistic(llvm::StringRef pass, llvm::StringRef name,
                               uint64_t value, llvm::StringRef description) {
  for (PassStatistic &stat : statistics) {
    if (stat.pass == pass && stat.name == name) {
      stat.value += value;
      if (stat.description.empty())
        stat.description = description.str();
      return;
    }
  }
  statistics.push_back({pass.str(), name.str(), description.str(), value});
}

uint64_t PassContext::getStatistic(llvm::StringRef pass,
                                   llvm::StringRef name) const {
  for (const PassStatistic &stat : statistics)
    if (stat.pass == pass && stat.name == name)
      return stat.value;
  return 0;
}

void PassContext::printStatistics(llvm::raw_ostream &os) const {
  os << "===" << std::string(73, '-') << "===\n"
     << "                         ... Pass statistics report ...\n"
     << "===" << std::string(73, '-') << "===\n";
  // Group by pass in order of first appearance; align values and names.
  std::vector<std::string> passOrder;
  size_t valueWidth = 1, nameWidth = 1;
  for (const PassStatistic &stat : statistics) {
    if (!llvm::is_contained(passOrder, stat.pass))
      passOrder.push_back(stat.pass);
    valueWidth = std::max(valueWidth, std::to_string(stat.value).size());
    nameWidth = std::max(nameWidth, stat.name.size());
  }
  for (const std::string &pass : passOrder) {
    os << pass << '\n';
    for (const PassStatistic &stat : statistics) {
      if (stat.pass != pass)
        continue;
      std::string value = std::to_string(stat.value);
      os << "  (S) " << std::string(valueWidth - value.size(), ' ') << value
         << ' ' << stat.name;
      if (!stat.description.empty())
        os << std::string(nameWidth - stat.name.size(), ' ') << " - "
           << stat.description;
      os << '\n';
    }
  }
}

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

Pass::~Pass() = default;

const PassOption *Pass::lookupOption(llvm::StringRef key) const {
  for (const PassOption &option : options)
    if (option.getKey() == key)
      return &option;
  return nullptr;
}

llvm::Error Pass::setOption(llvm::StringRef key, llvm::StringRef value) {
  const PassOption *option = lookupOption(key);
  if (!option) {
    std::string known;
    for (const PassOption &candidate : options)
      known += (known.empty() ? "" : ", ") + candidate.getKey().str();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "pass '" + getName() + "' has no option '" + key + "' (" +
            (known.empty() ? std::string("it takes no options")
                           : "options: " + known) +
            ")");
  }
  if (std::optional<std::string> message = option->parse(value))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "pass '" + getName() + "': option '" + key +
                                       "': invalid value '" + value +
                                       "': " + *message);
  return llvm::Error::success();
}

std::string Pass::getPipelineElement() const {
  std::string text = getName().str();
  if (options.empty())
    return text;
  text += '{';
  for (size_t i = 0, e = options.size(); i != e; ++i) {
    if (i)
      text += ',';
    text += options[i].getKey().str() + "=" +
            quotePipelineValue(options[i].getValue());
  }
  text += '}';
  return text;
}

const PassStatisticInfo *Pass::lookupStatistic(llvm::StringRef name) const {
  for (const PassStatisticInfo &statistic : statistics)
    if (statistic.name == name)
      return &statistic;
  return nullptr;
}

void Pass::declareStatistic(llvm::StringRef name, llvm::StringRef description) {
  assert(!lookupStatistic(name) && "pass statistic declared twice");
  assert(!name.empty() && !description.empty() &&
         "a statistic needs a name and a description");
  statistics.push_back({name.str(), description.str()});
}

void Pass::addStatistic(PassContext &context, llvm::StringRef name,
                        uint64_t value) const {
  const PassStatisticInfo *statistic = lookupStatistic(name);
  assert(statistic && "statistic not declared by its pass (declareStatistic)");
  context.addStatistic(getName(), name, value,
                       statistic ? llvm::StringRef(statistic->description)
                                 : llvm::StringRef());
}

void Pass::addOption(PassOption option) {
  assert(!lookupOption(option.getKey()) && "pass option declared twice");
  options.push_back(std::move(option));
}

void Pass::declareOption(llvm::StringRef key, bool &field,
                         llvm::StringRef description) {
  addOption(PassOption(
      key.str(), description.str(), "bool",
      [&field](llvm::StringRef text) -> std::optional<std::string> {
        if (text == "true" || text == "1") {
          field = true;
          return std::nullopt;
        }
        if (text == "false" || text == "0") {
          field = false;
          return std::nullopt;
        }
        return std::string("expected true or false");
      },
      [&field] { return std::string(field ? "true" : "false"); }));
}

void Pass::declareOption(llvm::StringRef key, int64_t &field,
                         llvm::StringRef description, int64_t min,
                         int64_t max) {
  addOption(PassOption(
      key.str(), description.str(), "int",
      [&field, min, max](llvm::StringRef text) -> std::optional<std::string> {
        int64_t value;
        if (text.getAsInteger(10, value))
          return std::string("expected an integer");
        if (value < min || value > max)
          return "expected an integer in [" + std::to_string(min) + ", " +
                 std::to_string(max) + "]";
        field = value;
        return std::nullopt;
      },
      [&field] { return std::to_string(field); }));
}

void Pass::declareOption(llvm::StringRef key, uint64_t &field,
                         llvm::StringRef description, uint64_t min,
                         uint64_t max) {
  addOption(PassOption(
      key.str(), description.str(), "uint",
      [&field, min, max](llvm::StringRef text) -> std::optional<std::string> {
        uint64_t value;
        if (text.getAsInteger(10, value))
          return std::string("expected a non-negative integer");
        if (value < min || value > max)
          return "expected an integer in [" + std::to_string(min) + ", " +
                 std::to_string(max) + "]";
        field = value;
        return std::nullopt;
      },
      [&field] { return std::to_string(field); }));
}

void Pass::declareOption(llvm::StringRef key, double &field,
                         llvm::StringRef description) {
  addOption(PassOption(
      key.str(), description.str(), "float",
      [&field](llvm::StringRef text) -> std::optional<std::string> {
        double value;
        if (text.getAsDouble(value) || !std::isfinite(value))
          return std::string("expected a finite number");
        field = value;
        return std::nullopt;
      },
      [&field] {
        // %.17g round-trips every double exactly.
        char buffer[32];
        snprintf(buffer, sizeof(buffer), "%.17g", field);
        return std::string(buffer);
      }));
}

void Pass::declareOption(llvm::StringRef key, std::string &field,
                         llvm::StringRef description) {
  addOption(PassOption(
      key.str(), description.str(), "string",
      [&field](llvm::StringRef text) -> std::optional<std::string> {
        field = text.str();
        return std::nullopt;
      },
      [&field] { return field; }));
}
