//===- Options.h - A command line without LLVM ------------------*- C++ -*-===//
//
// The runners' command line: kv-aot-run builds where there is no LLVM, so
// llvm::cl is not at hand. Each option is declared once, with its spelling,
// what its value looks like, its help and where its value is stored; one
// parser reads argv into that storage and one printer lists the options for
// --help.
//
// Spellings, as llvm::cl takes them: `--name VALUE` and `--name=VALUE`, with
// one dash or two; a flag takes no value (`--name=true` or `=false` also
// work). `--` ends the options. Everything else that does not start with '-',
// and "-" alone, is a positional argument, in order.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_RUNNER_OPTIONS_H
#define KVIR_DRIVER_RUNNER_OPTIONS_H

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kvir::run {

/// The options of one tool, and their parser and help printer.
class OptionParser {
public:
  /// Stores one value of an option; false with `error` for a value it
  /// refuses.
  using Store =
      std::function<bool(const std::string &value, std::string &error)>;

  /// `tool` names the program in messages ("unknown argument '--x' (kv-run
  /// --help)").
  explicit OptionParser(std::string tool);

  /// Starts a group of options: --help lists the ones declared after it
  /// under `title`.
  void section(std::string title);

  /// A flag: `out` becomes true when it is given.
  void flag(const char *name, const char *help, bool &out);
  /// A string value; `given`, when not null, becomes true when it occurs
  /// (the value may be empty).
  void text(const char *name, const char *value, const char *help,
            std::string &out, bool *given = nullptr);
  /// A decimal integer value ("--NAME needs an integer, got 'x'").
  void integer(const char *name, const char *value, const char *help,
               int64_t &out, bool *given = nullptr);
  /// A non-negative decimal integer value.
  void unsignedInteger(const char *name, const char *value, const char *help,
                       uint64_t &out, bool *given = nullptr);
  /// A repeatable option: every value, in order.
  void list(const char *name, const char *value, const char *help,
            std::vector<std::string> &out);
  /// Any other storage: `store` takes each value; `repeatable` lets the
  /// option occur more than once.
  void custom(const char *name, const char *value, const char *help,
              Store store, bool repeatable = false);
  /// An option this tool refuses with `message` (one of another tool's),
  /// not listed by --help.
  void refuse(const char *name, const char *message);
  /// The same for an option a shared declaration (addRunOptions) already
  /// made that this tool does not take: it is refused with `message` and no
  /// longer listed.
  void withdraw(const char *name, const char *message);

  /// Parses `argv[first]` to `argv[argc - 1]`: options into their storage,
  /// the rest into `positionals`. False with `error` at the first problem:
  /// an unknown option, a missing or refused value, an option given twice
  /// that takes one value. `--help`, `-help` or `-h` stops the parse and
  /// sets helpRequested(); `--version` or `-version` stops it and sets
  /// versionRequested().
  bool parse(int argc, char **argv, int first,
             std::vector<std::string> &positionals, std::string &error);
  bool helpRequested() const { return help; }
  bool versionRequested() const { return version; }

  /// Prints `usage` (the synopsis and examples, as given), then every
  /// option under its section, its help wrapped to 80 columns.
  void printHelp(std::FILE *out, const std::string &usage) const;

private:
  struct Option {
    std::string name, value, help, section;
    Store store;
    bool takesValue = true, repeatable = false, hidden = false;
    int occurrences = 0;
  };
  void add(Option option);
  Option *find(const std::string &name);

  std::string tool, currentSection;
  std::vector<Option> options;
  bool help = false, version = false;
};

} // namespace kvir::run

#endif // KVIR_DRIVER_RUNNER_OPTIONS_H
