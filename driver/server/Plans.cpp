//===- Plans.cpp - The kv programs kv-serve compiles ------------*- C++ -*-===//

#include "driver/server/Plans.h"

#include <cstdio>
#include <map>

using namespace kvir;
using namespace kvir::serve;

std::vector<bool>
kvir::serve::dependencySlice(const std::vector<SegmentShape> &segments,
                             size_t edited) {
  std::vector<bool> inSlice(segments.size(), false);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < segments.size(); ++i)
    index[segments[i].name] = i;
  if (edited >= segments.size())
    return inSlice;
  inSlice[edited] = true;
  for (size_t i = edited + 1; i < segments.size(); ++i)
    for (const std::string &dep : segments[i].deps) {
      auto it = index.find(dep);
      if (it != index.end() && it->second < i && inSlice[it->second]) {
        inSlice[i] = true;
        break;
      }
    }
  return inSlice;
}

bool kvir::serve::canonicalEdit(const std::vector<SegmentShape> &segments,
                                size_t edited, const std::string &strategy,
                                bool perSegmentRepair, EditShape &out,
                                std::string &error) {
  out = EditShape();
  size_t n = segments.size();
  if (edited >= n) {
    error = "no such segment";
    return false;
  }
  out.groupOf.assign(n, 0);
  auto open = [&](std::string label, std::string kind,
                  std::vector<std::string> deps) {
    out.groups.push_back({std::move(label), std::move(kind), std::move(deps)});
  };
  auto put = [&](size_t segment) {
    out.groupOf[segment] = out.groups.size() - 1;
    out.groups.back().tokens += segments[segment].tokens;
  };
  if (edited > 0) {
    open("pre", "history", {});
    for (size_t i = 0; i < edited; ++i)
      put(i);
  }
  open("s", segments[edited].kind, {});
  put(edited);
  out.edited = "s";
  auto label = [&] { return "g" + std::to_string(out.groups.size()); };

  if (strategy == "erratum") {
    // The answer the correction goes before: the first answer after the
    // edited segment, else the last segment (getErratumAnswer).
    size_t answer = n;
    for (size_t i = edited + 1; i < n && answer == n; ++i)
      if (segments[i].kind == "answer")
        answer = i;
    if (answer == n && edited + 1 < n)
      answer = n - 1;
    if (answer == n) {
      error = "an erratum of the last segment leaves no answer to recompute "
              "after the correction (use exact or cot_slice)";
      return false;
    }
    out.answer = answer;
    if (edited + 1 < answer) {
      open(label(), "other", {});
      for (size_t i = edited + 1; i < answer; ++i)
        put(i);
    }
    open(label(), "answer", {});
    for (size_t i = answer; i < n; ++i)
      put(i);
    return true;
  }

  std::vector<bool> inSlice = strategy == "exact"
                                  ? std::vector<bool>(n, true)
                                  : dependencySlice(segments, edited);
  bool lastRecompute = false;
  for (size_t i = edited + 1; i < n; ++i) {
    bool recompute = inSlice[i];
    bool first = i == edited + 1;
    // Recomputed segments merge (one prefill over the new prefix is the
    // same math as several); reused ones merge unless a repair budget is
    // spent on each.
    if (first || recompute != lastRecompute || (!recompute && perSegmentRepair))
      open(label(), "other",
           recompute ? std::vector<std::string>{"s"}
                     : std::vector<std::string>{});
    put(i);
    lastRecompute = recompute;
  }
  return true;
}

std::string kvir::serve::repairText(const Repair &repair) {
  char amount[64];
  switch (repair.kind) {
  case Repair::Kind::None:
    return "";
  case Repair::Kind::FirstK:
    return "<first_k = " + std::to_string(repair.firstK) + ">";
  case Repair::Kind::Fraction:
    std::snprintf(amount, sizeof(amount), "%.17g", repair.amount);
    return std::string("<fraction = ") + amount + ">";
  case Repair::Kind::Deviation:
    std::snprintf(amount, sizeof(amount), "%.17g", repair.amount);
    return std::string("<deviation = ") + amount + ">";
  }
  return "";
}

std::string kvir::serve::strategyText(const std::string &strategy,
                                      const Repair &repair) {
  std::string text = repairText(repair);
  if (text.empty())
    return "<" + strategy + ">";
  // "<first_k = 4>" -> "<cot_slice, first_k = 4>".
  return "<" + strategy + ", " + text.substr(1);
}

namespace {

std::string header(const std::string &model, const std::string &cache,
                   const std::string &context) {
  return "!model = " + model + "\n!cache = " + cache +
         (context.empty() ? "" : ", @" + context) + ">\n";
}

} // namespace

std::string kvir::serve::editProgram(const std::string &model,
                                     const std::string &cache,
                                     const EditShape &shape,
                                     const std::string &strategy,
                                     bool correction) {
  std::string text = header(model, cache, "ctx") + "kv.context @ctx {\n";
  for (const SegmentShape &g : shape.groups) {
    text += "  kv.segment @" + g.name + " kind(" + g.kind + ") tokens(?)";
    if (!g.deps.empty()) {
      text += " deps(";
      for (size_t i = 0; i < g.deps.size(); ++i)
        text += (i ? ", @" : "@") + g.deps[i];
      text += ")";
    }
    text += "\n";
  }
  text += "}\n"
          "func.func @main(%m: !model, %c: !cache, %t: tensor<?xi32>" +
          std::string(correction ? ", %fix: tensor<?xi32>" : "") +
          ") -> !cache {\n"
          "  %e = kv.edit %m, %c[@" +
          shape.edited + "] = %t strategy " + strategy +
          (correction ? " correction(%fix)" : "") +
          "\n      : !model, !cache, tensor<?xi32>" +
          (correction ? ", tensor<?xi32>" : "") + "\n  return %e : !cache\n}\n";
  return text;
}

std::string kvir::serve::composeProgram(const std::string &model,
                                        const std::string &cache,
                                        const std::string &repair) {
  std::string op = repair.empty()
                       ? "  %r = kv.compose %c, %b : !cache, !cache\n"
                       : "  %r = kv.compose %c, %b repair " + repair +
                             " using %m : !cache, !cache, !model\n";
  return header(model, cache, "") +
         "func.func @main(%m: !model, %c: !cache, %b: !cache) -> !cache {\n" +
         op + "  return %r : !cache\n}\n";
}

std::string kvir::serve::blockProgram(const std::string &model,
                                      const std::string &cache) {
  return header(model, cache, "") +
         "func.func @main(%m: !model, %t: tensor<?xi32>) -> !cache {\n"
         "  %b = kv.load_block %m, %t : !model, tensor<?xi32> -> !cache\n"
         "  return %b : !cache\n}\n";
}
