//===- TextLexer.h - Tokens and lexical rules of the text form --*- C++ -*-===//
//
// The lexer of gmopt's textual IR and the lexical conventions that the
// printer and the parser must agree on: which value names, identifiers and
// op names may be printed bare, how strings are escaped, and how float
// literals are converted to and from the exact bits of every floating-point
// element type. Keeping both directions here is what makes print followed by
// parse the identity. This header is internal to ir/.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_SERIALIZATION_TEXTLEXER_H
#define GMOPT_IR_SERIALIZATION_TEXTLEXER_H

#include "ir/Types.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {
namespace text {

/// The kinds of token of the text form.
enum class TokenKind {
  /// End of the buffer.
  Eof,
  /// A lexical error; Token::text holds the message.
  Error,
  /// A bare word: `[A-Za-z_][A-Za-z0-9_.]*` (keywords, dtypes, op names).
  Identifier,
  /// A value name: `%name`, `%"any name"`, `%17`, each with an optional
  /// `#N` disambiguation suffix.
  ValueName,
  /// A graph name: `@name` or `@"any name"`.
  GraphName,
  /// An unsigned integer literal: `123` or `0x1F`.
  Integer,
  /// An unsigned float literal: `1.5`, `2.`, `1e-3`, `6.02E+23`.
  Float,
  /// A string literal; Token::text holds the decoded contents.
  String,
  LParen,
  RParen,
  LBracket,
  RBracket,
  LBrace,
  RBrace,
  Less,
  Greater,
  Comma,
  Equal,
  Colon,
  Star,
  Question,
  Minus,
  Dot,
};

/// Describes \p kind for "expected ..." messages.
llvm::StringRef tokenKindName(TokenKind kind);

/// One token. Its spelling points into the parsed buffer.
struct Token {
  TokenKind kind = TokenKind::Eof;
  /// The source text of the whole token.
  llvm::StringRef spelling;
  /// Decoded contents: the string of a String token; the name of a
  /// ValueName or GraphName token (without `%`/`@`, quotes and suffix); the
  /// message of an Error token.
  std::string text;
  /// True for `%"..."` and `@"..."` names.
  bool quoted = false;
  /// The digits of a ValueName's `#N` suffix, or empty.
  llvm::StringRef suffix;

  bool is(TokenKind k) const { return kind == k; }
  /// True for the bare word \p keyword.
  bool isKeyword(llvm::StringRef keyword) const {
    return kind == TokenKind::Identifier && spelling == keyword;
  }
  /// Where the token starts in the buffer.
  const char *getLoc() const { return spelling.data(); }
};

/// Splits a buffer into tokens, skipping whitespace and `//` comments. It
/// never reads outside the buffer, which need not be NUL-terminated.
class Lexer {
public:
  explicit Lexer(llvm::StringRef buffer)
      : buffer(buffer), cur(buffer.begin()) {}

  /// Lexes and returns the next token (Eof forever at the end).
  Token lex();
  /// The whole buffer being lexed.
  llvm::StringRef getBuffer() const { return buffer; }

private:
  Token makeToken(TokenKind kind, const char *start) const;
  Token makeError(const char *loc, std::string message) const;
  void skipWhitespaceAndComments();
  Token lexIdentifier(const char *start);
  Token lexNumber(const char *start);
  Token lexValueName(const char *start);
  Token lexGraphName(const char *start);
  /// Lexes a string whose opening quote is at cur - 1 into \p out; returns
  /// an Error token on failure, or nullopt on success.
  std::optional<Token> lexStringBody(const char *start, std::string &out);

  llvm::StringRef buffer;
  const char *cur;
};

//===----------------------------------------------------------------------===//
// Lexical conventions shared by the printer and the parser.
//===----------------------------------------------------------------------===//

/// True for the characters of a bare value name: `[A-Za-z0-9_.:/-]`.
bool isValueNameChar(char c);
/// True if \p name can be printed as `%name`: it is made of value-name
/// characters, is not all digits (that spelling is an unnamed value), does
/// not end with ':' and contains no "//".
bool isBareValueName(llvm::StringRef name);
/// True if \p word lexes as one Identifier token.
bool isBareIdentifier(llvm::StringRef word);
/// True if (\p domain, \p type) can be printed as the bare op name
/// `domain.type` (or `type` for the standard domain) and parsed back.
bool isBareOpName(llvm::StringRef domain, llvm::StringRef type);

/// Prints \p s as a string literal with C escapes (`\"`, `\\`, `\n`, `\t`,
/// `\xHH` for every other non-printable byte).
void printQuoted(llvm::raw_ostream &os, llvm::StringRef s);
/// Prints \p word bare when isBareIdentifier, else quoted.
void printIdentifierOrString(llvm::raw_ostream &os, llvm::StringRef word);

/// The APFloat semantics of a floating-point element type, or null.
const llvm::fltSemantics *floatSemantics(DType type);
/// Converts the decimal literal \p literal (optionally with a leading '-')
/// to the nearest value of \p semantics. Fails on malformed text and on
/// overflow to infinity of a finite literal.
std::optional<llvm::APFloat>
convertDecimalLiteral(llvm::StringRef literal,
                      const llvm::fltSemantics &semantics);
/// Prints the float with bit pattern \p bits of \p semantics so that the
/// parser reads back exactly those bits: the shortest decimal literal that
/// round-trips (always with a '.' or an exponent), `inf`/`-inf`, or, for
/// NaNs, the raw bits in hex (`0x7FC00000`).
void printFloatBits(llvm::raw_ostream &os, const llvm::APInt &bits,
                    const llvm::fltSemantics &semantics);

} // namespace text
} // namespace gmopt

#endif // GMOPT_IR_SERIALIZATION_TEXTLEXER_H
