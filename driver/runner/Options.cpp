//===- Options.cpp - A command line without LLVM ----------------*- C++ -*-===//

#include "driver/runner/Options.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

using namespace kvir::run;

namespace {

/// Where the help of an option starts, and the width it is wrapped to.
constexpr size_t kHelpColumn = 26, kWidth = 80;

/// `text` as lines of at most `width` characters, broken at spaces (a word
/// longer than that stands alone).
std::vector<std::string> wrap(const std::string &text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos)
      end = text.size();
    std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty())
      continue;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty())
    lines.push_back(line);
  return lines;
}

} // namespace

OptionParser::OptionParser(std::string tool) : tool(std::move(tool)) {}

void OptionParser::section(std::string title) {
  currentSection = std::move(title);
}

void OptionParser::add(Option option) {
  option.section = currentSection;
  options.push_back(std::move(option));
}

OptionParser::Option *OptionParser::find(const std::string &name) {
  for (Option &option : options)
    if (option.name == name)
      return &option;
  return nullptr;
}

void OptionParser::flag(const char *name, const char *help, bool &out) {
  Option option;
  option.name = name;
  option.help = help;
  option.takesValue = false;
  option.store = [&out](const std::string &value, std::string &) {
    out = value == "true";
    return true;
  };
  add(std::move(option));
}

void OptionParser::text(const char *name, const char *value, const char *help,
                        std::string &out, bool *given) {
  custom(name, value, help, [&out, given](const std::string &v, std::string &) {
    out = v;
    if (given)
      *given = true;
    return true;
  });
}

void OptionParser::integer(const char *name, const char *value,
                           const char *help, int64_t &out, bool *given) {
  std::string spelling = std::string("--") + name;
  custom(name, value, help,
         [&out, given, spelling](const std::string &v, std::string &error) {
           char *end = nullptr;
           errno = 0;
           long long n = std::strtoll(v.c_str(), &end, 10);
           if (v.empty() || *end || errno) {
             error = spelling + " needs an integer, got '" + v + "'";
             return false;
           }
           out = n;
           if (given)
             *given = true;
           return true;
         });
}

void OptionParser::unsignedInteger(const char *name, const char *value,
                                   const char *help, uint64_t &out,
                                   bool *given) {
  std::string spelling = std::string("--") + name;
  custom(name, value, help,
         [&out, given, spelling](const std::string &v, std::string &error) {
           char *end = nullptr;
           errno = 0;
           unsigned long long n = std::strtoull(v.c_str(), &end, 10);
           if (v.empty() || v[0] == '-' || *end || errno) {
             error =
                 spelling + " needs a non-negative integer, got '" + v + "'";
             return false;
           }
           out = n;
           if (given)
             *given = true;
           return true;
         });
}

void OptionParser::list(const char *name, const char *value, const char *help,
                        std::vector<std::string> &out) {
  custom(
      name, value, help,
      [&out](const std::string &v, std::string &) {
        out.push_back(v);
        return true;
      },
      /*repeatable=*/true);
}

void OptionParser::custom(const char *name, const char *value, const char *help,
                          Store store, bool repeatable) {
  Option option;
  option.name = name;
  option.value = value;
  option.help = help;
  option.store = std::move(store);
  option.repeatable = repeatable;
  add(std::move(option));
}

void OptionParser::refuse(const char *name, const char *message) {
  Option option;
  option.name = name;
  option.takesValue = false;
  option.hidden = true;
  std::string text = message;
  option.store = [text](const std::string &, std::string &error) {
    error = text;
    return false;
  };
  add(std::move(option));
}

void OptionParser::withdraw(const char *name, const char *message) {
  Option *option = find(name);
  if (!option)
    return refuse(name, message);
  option->hidden = true;
  option->takesValue = false;
  std::string text = message;
  option->store = [text](const std::string &, std::string &error) {
    error = text;
    return false;
  };
}

bool OptionParser::parse(int argc, char **argv, int first,
                         std::vector<std::string> &positionals,
                         std::string &error) {
  bool optionsEnded = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (optionsEnded || arg.size() < 2 || arg[0] != '-') {
      positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      optionsEnded = true;
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    if (body == "help" || arg == "-h") {
      help = true;
      return true;
    }
    if (body == "version") {
      version = true;
      return true;
    }
    size_t eq = body.find('=');
    std::string name = body.substr(0, eq);
    Option *option = find(name);
    if (!option) {
      error = "unknown argument '" + arg + "' (" + tool + " --help)";
      return false;
    }
    std::string spelling = "--" + name, value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
      if (!option->takesValue && value != "true" && value != "false" &&
          !option->hidden) {
        error = spelling + " is a flag: it takes true or false, got '" + value +
                "'";
        return false;
      }
    } else if (!option->takesValue) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      error = spelling + " needs a value";
      return false;
    }
    if (option->occurrences++ > 0 && !option->repeatable && !option->hidden) {
      error = spelling + " is given twice";
      return false;
    }
    if (!option->store(value, error))
      return false;
  }
  return true;
}

void OptionParser::printHelp(std::FILE *out, const std::string &usage) const {
  std::fputs(usage.c_str(), out);
  std::vector<std::string> sections;
  for (const Option &option : options) {
    bool listed = false;
    for (const std::string &s : sections)
      listed = listed || s == option.section;
    if (!listed && !option.hidden)
      sections.push_back(option.section);
  }
  for (const std::string &section : sections) {
    std::fprintf(out, "\n%s:\n", section.empty() ? "options" : section.c_str());
    for (const Option &option : options) {
      if (option.section != section || option.hidden)
        continue;
      std::string left = "  --" + option.name;
      if (!option.value.empty())
        left += " " + option.value;
      std::vector<std::string> lines = wrap(option.help, kWidth - kHelpColumn);
      size_t first = 0;
      if (left.size() + 2 <= kHelpColumn && !lines.empty()) {
        std::fprintf(out, "%-*s%s\n", int(kHelpColumn), left.c_str(),
                     lines[0].c_str());
        first = 1;
      } else {
        std::fprintf(out, "%s\n", left.c_str());
      }
      for (size_t i = first; i < lines.size(); ++i)
        std::fprintf(out, "%*s%s\n", int(kHelpColumn), "", lines[i].c_str());
    }
  }
  std::fprintf(out, "\nthe tool:\n%-*s%s\n%-*s%s\n", int(kHelpColumn),
               "  --help", "this text", int(kHelpColumn), "  --version",
               "KVIR's version and the LLVM/MLIR it was built with");
}
