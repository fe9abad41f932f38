//===- TextParser.h - The text-form parser, shared by its files -*- C++ -*-===//
//
// Internal to ir/serialization: the recursive-descent Parser of gmopt's
// text form (TextIR.h's parseModule), split by what it parses:
// TextLiteralParser.cpp reads numbers, strings, types, dense constants and
// attributes; TextParser.cpp reads values, the module, its graph, nodes
// and signature, and holds the grammar. The token and error helpers both
// use are defined here.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_TEXTPARSER_H
#define GMOPT_IR_SERIALIZATION_TEXTPARSER_H

#include "ir/Module.h"
#include "ir/serialization/TextLexer.h"

#include "llvm/ADT/APInt.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace gmopt {
namespace text {

/// A numeric literal as written, converted once its target type is known.
struct NumberLiteral {
  enum class Kind { Decimal, Hex, Float, Inf, NaN };
  Kind kind = Kind::Decimal;
  bool negative = false;
  /// The digits (without "0x" for Hex), or the float literal.
  llvm::StringRef digits;
  /// Where the literal (including its sign) starts.
  const char *loc = nullptr;

  bool isInteger() const { return kind == Kind::Decimal || kind == Kind::Hex; }
};

/// An attribute list element before the list's kind is known.
struct ListElement {
  bool isString = false;
  std::string string;
  NumberLiteral number;
};

/// The textual identity of a value: (numbered, name-or-digits, suffix).
using ValueKey = std::tuple<bool, std::string, std::string>;

/// Parses one module; see the grammar in TextParser.cpp.
class Parser {
public:
  Parser(llvm::StringRef buffer, llvm::StringRef bufferName)
      : lexer(buffer), bufferName(bufferName),
        module(std::make_unique<Module>()), graph(module->getGraph()) {
    consume();
  }

  llvm::Expected<std::unique_ptr<Module>> run() {
    if (parseModule())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     errorMessage);
    assignMissingStreamIds(module->getGraph());
    return std::move(module);
  }

private:
  //===--------------------------------------------------------------------===//
  // Tokens and errors
  //===--------------------------------------------------------------------===//

  void consume() { tok = lexer.lex(); }

  bool consumeIf(TokenKind kind) {
    if (!tok.is(kind))
      return false;
    consume();
    return true;
  }

  bool consumeKeywordIf(llvm::StringRef keyword) {
    if (!tok.isKeyword(keyword))
      return false;
    consume();
    return true;
  }

  /// Records the first error at \p loc; always returns true (failure).
  [[nodiscard]] bool error(const char *loc, const llvm::Twine &message) {
    if (failed)
      return true;
    failed = true;
    llvm::StringRef buffer = lexer.getBuffer();
    size_t offset = loc ? loc - buffer.begin() : buffer.size();
    llvm::StringRef before = buffer.take_front(offset);
    size_t line = before.count('\n') + 1;
    size_t lineStart = before.rfind('\n');
    size_t column =
        lineStart == llvm::StringRef::npos ? offset + 1 : offset - lineStart;
    errorMessage = (bufferName + ":" + llvm::Twine(line) + ":" +
                    llvm::Twine(column) + ": " + message)
                       .str();
    return true;
  }

  /// An error at the current token; a lexical error takes precedence.
  [[nodiscard]] bool errorHere(const llvm::Twine &message) {
    if (tok.is(TokenKind::Error))
      return error(tok.getLoc(), tok.text);
    return error(tok.getLoc(), message);
  }

  [[nodiscard]] bool expect(TokenKind kind, const llvm::Twine &context) {
    if (consumeIf(kind))
      return false;
    return errorHere("expected " + tokenKindName(kind) + " " + context);
  }

  [[nodiscard]] bool expectKeyword(llvm::StringRef keyword,
                                   const llvm::Twine &context) {
    if (consumeKeywordIf(keyword))
      return false;
    return errorHere("expected '" + keyword + "' " + context);
  }

  /// Parses `open item (',' item)* close` or `open close`.
  template <typename ParseItem>
  [[nodiscard]] bool parseCommaList(TokenKind close, llvm::StringRef context,
                                    ParseItem parseItem) {
    if (consumeIf(close))
      return false;
    while (true) {
      if (parseItem())
        return true;
      if (consumeIf(close))
        return false;
      if (!tok.is(TokenKind::Comma))
        return errorHere("expected ',' or " + tokenKindName(close) + " " +
                         context);
      consume();
    }
  }

  //===--------------------------------------------------------------------===//
  // Literals
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseString(std::string &out, const llvm::Twine &what);

  /// key ::= identifier | string
  [[nodiscard]] bool parseKey(std::string &out, const llvm::Twine &what);

  [[nodiscard]] bool parseNumber(NumberLiteral &lit, const llvm::Twine &what);

  [[nodiscard]] bool parseInteger(int64_t &out, const llvm::Twine &what);

  /// The magnitude of an integer literal.
  [[nodiscard]] bool magnitudeOf(const NumberLiteral &lit, uint64_t &out);

  [[nodiscard]] bool toSignedInt(const NumberLiteral &lit, unsigned bits,
                                 int64_t &out);

  [[nodiscard]] bool toUnsignedInt(const NumberLiteral &lit, unsigned bits,
                                   uint64_t &out);

  /// Converts \p lit to the bits of a float of \p dtype.
  [[nodiscard]] bool toFloatBits(const NumberLiteral &lit, DType dtype,
                                 llvm::APInt &out);

  //===--------------------------------------------------------------------===//
  // Types and constants
  //===--------------------------------------------------------------------===//

  /// type ::= dtype '[' dims ']'
  [[nodiscard]] bool parseType(TensorType &out);

  [[nodiscard]] bool parseDim(llvm::SmallVectorImpl<Dim> &dims);

  /// Element count and byte size of a constant of \p type, or an error at
  /// \p loc when the type cannot hold constant data.
  [[nodiscard]] bool constantSize(const TensorType &type, const char *loc,
                                  uint64_t &numElements, uint64_t &numBytes);

  /// dense ::= 'dense' '<' contents '>' for a constant of \p type.
  [[nodiscard]] bool parseDense(const TensorType &type, const char *typeLoc,
                                TensorData &out);

  [[nodiscard]] bool parseHexBlob(const TensorType &type, uint64_t numBytes,
                                  std::vector<uint8_t> &bytes);

  [[nodiscard]] bool parseElements(const TensorType &type, uint64_t numElements,
                                   std::vector<uint8_t> &bytes);

  [[nodiscard]] bool parseElement(DType dtype, std::vector<uint8_t> &bytes);

  /// tensor-literal ::= type dense
  [[nodiscard]] bool parseTensorLiteral(TensorData &out);

  //===--------------------------------------------------------------------===//
  // Attributes
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseAttributeValue(Attribute &out);

  [[nodiscard]] bool toFloat(const NumberLiteral &lit, float &out);

  [[nodiscard]] bool parseAttributeList(Attribute &out);

  /// attr-dict ::= '{' [key '=' attr-value (',' ...)*] '}'
  [[nodiscard]] bool parseAttributeDict(Node *node);

  //===--------------------------------------------------------------------===//
  // Values
  //===--------------------------------------------------------------------===//

  static bool isNumbered(const Token &token);

  static ValueKey keyOf(const Token &token);

  /// Checks that the ValueName token \p token may define a new value and
  /// reserves its id (so later uses before the definition completes are
  /// still "undefined"). Returns the ONNX name in \p name.
  [[nodiscard]] bool declareValue(const Token &token, std::string &name);

  void defineValue(const Token &token, Value *value);

  /// operand ::= value-name | '_'
  [[nodiscard]] bool parseOperand(Value *&out);

  //===--------------------------------------------------------------------===//
  // Module
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseModule();

  [[nodiscard]] bool parseModuleAttributes();

  /// '{' [key '=' int (',' ...)*] '}' with unique keys.
  [[nodiscard]] bool parseIntMap(std::map<std::string, int64_t> &out,
                                 llvm::StringRef what);

  /// '{' [domain '=' int (',' ...)*] '}' under ONNX import's rules: the
  /// standard domain (also spelled "ai.onnx", stored as "") at an opset
  /// gmopt supports, every version at least 1, each domain once.
  [[nodiscard]] bool parseOpsets();

  [[nodiscard]] bool parseMetadata();

  //===--------------------------------------------------------------------===//
  // Graph
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseGraph();

  /// input ::= value-name ':' type ['=' (dense | tensor-literal)]
  [[nodiscard]] bool parseInput();

  /// statement ::= initializer | node
  [[nodiscard]] bool parseStatement();

  /// initializer ::= value-name '=' 'constant' ['literal'] tensor-literal
  ///                   [':' type]
  [[nodiscard]] bool parseInitializer(const Token &nameToken,
                                      const std::string &name);

  /// op-name ::= identifier | string '.' string
  [[nodiscard]] bool parseOpName(OpName &op);

  [[nodiscard]] bool parseNode(llvm::ArrayRef<Token> results,
                               llvm::ArrayRef<std::string> names);

  //===--------------------------------------------------------------------===//
  // Signature
  //===--------------------------------------------------------------------===//

  [[nodiscard]] bool parseSignature();

  /// operand (',' operand)*
  [[nodiscard]] bool parseValueList(llvm::SmallVectorImpl<Value *> &out);

  /// 'param' operand ('trainable' | 'frozen') ['grad' operand]
  /// ['accumulator' operand] ['via' node-ref] ['state' operand-list]
  [[nodiscard]] bool parseParam();

  /// node-ref ::= value-name | string | int
  [[nodiscard]] bool parseNodeRef(Node *&out);

  Lexer lexer;
  Token tok;
  llvm::StringRef bufferName;
  std::unique_ptr<Module> module;
  Graph &graph;
  std::map<ValueKey, Value *> values;
  bool failed = false;
  std::string errorMessage;
};

} // namespace text
} // namespace gmopt

#endif // GMOPT_IR_SERIALIZATION_TEXTPARSER_H
