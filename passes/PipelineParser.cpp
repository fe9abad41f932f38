//===- PipelineParser.cpp - Parsing textual pass pipelines ----------------===//
//
// A small recursive-descent parser over the pipeline grammar documented in
// PipelineParser.h. It never looks passes up: it only checks the syntax and
// records where each name, key and value starts so that later checks
// (unknown pass, unknown option, bad value) can point at the right column.
//
//===----------------------------------------------------------------------===//

#include "passes/PipelineParser.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;

namespace {

bool isNameChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '-' || c == '.';
}

bool isBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class Parser {
public:
  explicit Parser(llvm::StringRef text) : text(text) {}

  llvm::Expected<std::vector<PipelineElement>> parse() {
    std::vector<PipelineElement> elements;
    skipBlanks();
    if (atEnd())
      return elements;
    while (true) {
      skipBlanks();
      PipelineElement element;
      if (auto err = parseElement(element))
        return err;
      elements.push_back(std::move(element));
      skipBlanks();
      if (atEnd())
        return elements;
      if (peek() == ',') {
        ++pos;
        continue;
      }
      if (peek() == '}')
        return error(pos, "unbalanced '}'");
      return error(pos,
                   "expected ',' after pass '" + elements.back().name + "'");
    }
  }

private:
  bool atEnd() const { return pos >= text.size(); }
  char peek() const { return text[pos]; }
  void skipBlanks() {
    while (!atEnd() && isBlank(peek()))
      ++pos;
  }
  llvm::Error error(size_t at, const llvm::Twine &message) const {
    return makePipelineError(text, at + 1, message);
  }

  /// Reads [A-Za-z0-9_.-]+ at the cursor; empty if none.
  llvm::StringRef parseName() {
    size_t start = pos;
    while (!atEnd() && isNameChar(peek()))
      ++pos;
    return text.slice(start, pos);
  }

  llvm::Error parseElement(PipelineElement &element) {
    size_t start = pos;
    if (atEnd() || peek() == ',')
      return error(start, "empty pipeline element");
    llvm::StringRef name = parseName();
    if (name.empty()) {
      if (peek() == '{')
        return error(start, "expected a pass name before '{'");
      if (peek() == '}')
        return error(start, "unbalanced '}'");
      return error(start, "unexpected character '" + std::string(1, peek()) +
                              "' where a pass name was expected");
    }
    element.name = name.str();
    element.column = start + 1;
    skipBlanks();
    if (atEnd() || peek() != '{')
      return llvm::Error::success();
    return parseOptions(element);
  }

  llvm::Error parseOptions(PipelineElement &element) {
    size_t open = pos++;
    llvm::StringSet<> seenKeys;
    skipBlanks();
    if (!atEnd() && peek() == '}') {
      ++pos;
      return llvm::Error::success();
    }
    while (true) {
      skipBlanks();
      if (atEnd())
        return error(open, "unbalanced '{': missing '}'");
      size_t keyStart = pos;
      llvm::StringRef key = parseName();
      if (key.empty())
        return error(keyStart,
                     "expected an option key of pass '" + element.name + "'");
      skipBlanks();
      if (atEnd())
        return error(open, "unbalanced '{': missing '}'");
      if (peek() != '=')
        return error(pos, "expected '=' after option key '" + key + "'");
      ++pos;
      skipBlanks();
      PipelineOption option;
      option.key = key.str();
      option.keyColumn = keyStart + 1;
      option.valueColumn = pos + 1;
      if (auto err = parseValue(open, option.value))
        return err;
      if (!seenKeys.insert(key).second)
        return error(keyStart, "option '" + key + "' of pass '" + element.name +
                                   "' is given twice");
      element.options.push_back(std::move(option));
      skipBlanks();
      if (atEnd())
        return error(open, "unbalanced '{': missing '}'");
      if (peek() == '}') {
        ++pos;
        return llvm::Error::success();
      }
      if (peek() != ',')
        return error(pos, "unexpected character '" + std::string(1, peek()) +
                              "' after the value of option '" + key + "'");
      ++pos;
    }
  }

  /// Reads a quoted or bare value. \p open is the element's '{' for errors.
  llvm::Error parseValue(size_t open, std::string &value) {
    if (atEnd())
      return error(open, "unbalanced '{': missing '}'");
    char quote = peek();
    if (quote == '"' || quote == '\'') {
      size_t start = pos++;
      while (!atEnd() && peek() != quote) {
        if (peek() == '\\' && pos + 1 < text.size())
          ++pos;
        value += text[pos++];
      }
      if (atEnd())
        return error(start, "unterminated quoted value");
      ++pos;
      return llvm::Error::success();
    }
    size_t start = pos;
    unsigned depth = 0;
    while (!atEnd()) {
      char c = peek();
      if (depth == 0 && (c == ',' || c == '}'))
        break;
      if (c == '{')
        ++depth;
      else if (c == '}')
        --depth;
      ++pos;
    }
    if (depth != 0)
      return error(open, "unbalanced '{': missing '}'");
    value = text.slice(start, pos).rtrim(" \t\r\n").str();
    return llvm::Error::success();
  }

  llvm::StringRef text;
  size_t pos = 0;
};

} // namespace

llvm::Error gmopt::makePipelineError(llvm::StringRef pipelineText,
                                     unsigned column,
                                     const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "invalid pass pipeline '" + pipelineText +
                                     "' at column " + llvm::Twine(column) +
                                     ": " + message);
}

llvm::Expected<std::vector<PipelineElement>>
gmopt::parsePipeline(llvm::StringRef text) {
  return Parser(text).parse();
}

std::string gmopt::quotePipelineValue(llvm::StringRef value) {
  bool needsQuotes = value.empty();
  for (char c : value)
    if (isBlank(c) || llvm::StringRef(",{}=\"'\\").contains(c))
      needsQuotes = true;
  if (!needsQuotes)
    return value.str();
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\')
      quoted += '\\';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

std::string gmopt::printPipeline(const std::vector<PipelineElement> &elements) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (size_t i = 0, e = elements.size(); i != e; ++i) {
    if (i)
      os << ',';
    os << elements[i].name;
    if (elements[i].options.empty())
      continue;
    os << '{';
    for (size_t j = 0, f = elements[i].options.size(); j != f; ++j) {
      if (j)
        os << ',';
      os << elements[i].options[j].key << '='
         << quotePipelineValue(elements[i].options[j].value);
    }
    os << '}';
  }
  return text;
}
