//===- Report.cpp - What kv-run prints about a run --------------*- C++ -*-===//

#include "driver/runner/Report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

using namespace kvir;
using namespace kvir::run;

namespace {

double ratio(double a, double b) { return b != 0 ? a / b : 0; }

/// printf into a std::string.
std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

/// A minimal JSON writer: objects, arrays, strings and numbers, indented by
/// two spaces.
class Json {
public:
  explicit Json(std::FILE *out) : out(out) {}

  void beginObject() { open('{'); }
  void endObject() { close('}'); }
  void beginArray() { open('['); }
  void endArray() { close(']'); }
  void key(const std::string &name) {
    separate();
    std::fprintf(out, "%s: ", quote(name).c_str());
    pendingKey = true;
  }
  void value(const std::string &text) { scalar(quote(text)); }
  void value(const char *text) { scalar(quote(text)); }
  void value(bool flag) { scalar(flag ? "true" : "false"); }
  void value(int64_t number) { scalar(std::to_string(number)); }
  void value(int32_t number) { scalar(std::to_string(number)); }
  void value(double number) {
    scalar(std::isfinite(number) ? format("%.17g", number) : "null");
  }
  template <typename T> void field(const std::string &name, T v) {
    key(name);
    value(v);
  }
  /// A member that opens an object or an array.
  void beginObject(const std::string &name) {
    key(name);
    beginObject();
  }
  void beginArray(const std::string &name) {
    key(name);
    beginArray();
  }
  /// A member that is an array of the numbers in `values`.
  template <typename Range>
  void numbers(const std::string &name, const Range &values) {
    beginArray(name);
    for (auto v : values)
      value(v);
    endArray();
  }
  void finish() { std::fputc('\n', out); }

private:
  static std::string quote(const std::string &text) {
    std::string s = "\"";
    for (unsigned char c : text) {
      if (c == '"' || c == '\\')
        s += std::string("\\") + char(c);
      else if (c < 0x20)
        s += format("\\u%04x", c);
      else
        s += char(c);
    }
    return s + "\"";
  }
  void separate() {
    if (pendingKey) {
      pendingKey = false;
      return;
    }
    if (depth > 0) {
      std::fputs(first ? "\n" : ",\n", out);
      std::fprintf(out, "%*s", 2 * depth, "");
    }
    first = false;
  }
  void scalar(const std::string &text) {
    separate();
    std::fputs(text.c_str(), out);
  }
  void open(char c) {
    separate();
    std::fputc(c, out);
    ++depth;
    first = true;
  }
  void close(char c) {
    --depth;
    if (!first) {
      std::fputc('\n', out);
      std::fprintf(out, "%*s", 2 * depth, "");
    }
    std::fputc(c, out);
    first = false;
  }

  std::FILE *out;
  int depth = 0;
  bool first = true, pendingKey = false;
};

/// The plan's figures over the full prefill's, as the report compares them.
struct Ratios {
  double tokens, flops, time, kvBytes;
};
Ratios ratiosOf(const Report &r) {
  return {ratio(double(r.plan.prefillTokens), double(r.full.prefillTokens)),
          ratio(double(r.plan.flops), double(r.full.flops)),
          ratio(r.plan.seconds, r.full.seconds),
          ratio(double(r.plan.kvBytesWritten), double(r.full.kvBytesWritten))};
}

const char *repairModeName(int32_t mode) {
  return mode == KVRT_EXEC_REPAIR_DEVIATION ? "deviation" : "fraction";
}

void writeRepair(Json &j, const kvrt_exec_repair &repair) {
  j.beginObject();
  j.field("mode", repairModeName(repair.mode));
  j.field("amount", repair.amount);
  j.field("candidates", repair.candidates);
  j.field("scanned", repair.scanned);
  j.field("chosen", repair.chosen);
  j.field("max_relative_deviation", repair.max_relative_deviation);
  j.field("mean_relative_deviation", repair.mean_relative_deviation);
  j.endObject();
}

} // namespace

std::string kvir::run::describeRepair(const kvrt_exec_repair &repair) {
  std::string line =
      format("selective recompute: %lld of %lld reused tokens recomputed (",
             (long long)repair.chosen, (long long)repair.candidates);
  if (repair.mode == KVRT_EXEC_REPAIR_DEVIATION)
    line += format("relative deviation > t = %g", repair.amount);
  else
    line += format("fraction f = %g of the most deviating", repair.amount);
  if (repair.scanned == 0)
    return line + "; none scanned)";
  return line + format("; %lld tokens scanned, relative deviation max %.4g "
                       "mean %.4g)",
                       (long long)repair.scanned, repair.max_relative_deviation,
                       repair.mean_relative_deviation);
}

std::string kvir::run::findCorrection(const kvrt_view *view) {
  for (int64_t i = 0, e = kvrt_view_num_runs(view); i < e; ++i) {
    kvrt_run run;
    if (kvrt_view_get_run(view, i, &run) != KVRT_OK || !run.label)
      continue;
    std::string label = run.label;
    const std::string suffix = ".erratum";
    if (label.size() > suffix.size() &&
        label.compare(label.size() - suffix.size(), suffix.size(), suffix) == 0)
      return label;
  }
  return "";
}

bool kvir::run::needsExactReference(const exec::RunOutcome &outcome) {
  for (const exec::Value &value : outcome.results)
    if (value.kind == exec::ValueKind::Logits && value.logits->rows > 0)
      return !findCorrection(value.logits->context.get()).empty();
  return false;
}

bool kvir::run::referenceContext(const exec::RunOutcome &reference,
                                 int64_t answerResult,
                                 const exec::Logits &answer,
                                 std::vector<int32_t> &out,
                                 std::string &error) {
  if (answerResult < 0 || size_t(answerResult) >= reference.results.size() ||
      reference.results[answerResult].kind != exec::ValueKind::Logits) {
    error = "the exact reference returns no logits as result " +
            std::to_string(answerResult);
    return false;
  }
  const exec::Logits &exact = *reference.results[answerResult].logits;
  if (exact.rows != answer.rows || exact.tokens != answer.tokens) {
    error = "the exact reference's answer (result " +
            std::to_string(answerResult) + ", " + std::to_string(exact.rows) +
            " rows) is not computed from the plan's answer tokens";
    return false;
  }
  out = exec::viewTokens(exact.context.get());
  out.insert(out.end(), exact.tokens.begin(), exact.tokens.end());
  return true;
}

std::string kvir::run::describeConfig(const kvrt_model_config &c) {
  return "dim " + std::to_string(c.dim) + ", hidden " +
         std::to_string(c.hidden_dim) + ", layers " +
         std::to_string(c.n_layers) + ", heads " + std::to_string(c.n_heads) +
         "/" + std::to_string(c.n_kv_heads) + ", vocab " +
         std::to_string(c.vocab_size);
}

bool kvir::run::writeFloats(const std::vector<float> &values,
                            const std::string &path, std::string &error) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "floats are written in host order");
  if (path.empty()) {
    error = "an empty output file name";
    return false;
  }
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file) {
    error = "cannot create '" + path + "': " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(values.data(), sizeof(float), values.size(), file) ==
            values.size();
  int savedErrno = errno;
  ok = (std::fclose(file) == 0) && ok;
  if (!ok)
    error = "cannot write '" + path +
            "': " + std::strerror(savedErrno ? savedErrno : errno);
  return ok;
}

bool kvir::run::completeReport(Report &r, const exec::RunOutcome &outcome,
                               bool hasPlanOps, ComputeBackend &backend,
                               const Forward &forward, const kvrt_model *model,
                               kvrt_pool *pool, const MeasureOptions &options,
                               std::string &error) {
  r.results = outcome.results;
  r.plan = outcome.plan;
  r.setup = outcome.setup;
  r.hasPlanOps = hasPlanOps;
  r.repairs = outcome.repairs;
  r.greedy = options.greedy;
  const exec::Logits *answer = nullptr;
  for (size_t i = 0; i < r.results.size() && !answer; ++i)
    if (r.results[i].kind == exec::ValueKind::Logits &&
        r.results[i].logits->rows > 0) {
      answer = r.results[i].logits.get();
      r.answerResult = int64_t(i);
    }
  if (!options.dumpLogits.empty()) {
    // The answer's logits, else the first returned tensor (kv.attention).
    const std::vector<float> *dump = answer ? &answer->data : nullptr;
    for (size_t i = 0; i < r.results.size() && !dump; ++i)
      if (r.results[i].kind == exec::ValueKind::Tensor)
        dump = &r.results[i].tensor->data;
    if (!dump) {
      error = "--dump-logits: the entry returns no logits or tensor";
      return false;
    }
    if (!writeFloats(*dump, options.dumpLogits, error))
      return false;
  }
  if (answer && r.greedy > 0 && options.maxContext > 0) {
    int64_t end = answer->position + int64_t(answer->tokens.size());
    if (end + r.greedy > options.maxContext) {
      error = "--greedy " + std::to_string(r.greedy) + " from position " +
              std::to_string(end) + " would go beyond the context limit of " +
              std::to_string(options.maxContext) + " (--max-context)";
      return false;
    }
  }
  if (answer && r.greedy > 0 &&
      !exec::greedyContinue(backend, forward, model, *answer, answer->result,
                            r.greedy, r.greedyPlan, error))
    return false;
  // A continuation follows the answer's last token.
  int32_t prev = answer && !answer->tokens.empty() ? answer->tokens.back() : -1;
  r.decoded = options.tokenizer && !r.greedyPlan.empty();
  if (r.decoded && !exec::decodeTokens(options.tokenizer, prev, r.greedyPlan,
                                       r.greedyText, error))
    return false;
  if (!options.compareFull)
    return true;
  if (!answer) {
    r.compareNote = "the entry returns no logits with rows: nothing to compare";
    return true;
  }
  std::vector<int32_t> final = exec::viewTokens(answer->context.get());
  final.insert(final.end(), answer->tokens.begin(), answer->tokens.end());
  std::string correction = findCorrection(answer->context.get());
  if (options.reference && !correction.empty()) {
    r.planContextTokens = int64_t(final.size());
    r.referenceName = "edited context";
    if (!referenceContext(*options.reference, r.answerResult, *answer, final,
                          error))
      return false;
  } else if (!correction.empty()) {
    r.compareNote = "the answer's context holds the erratum correction @" +
                    correction +
                    ": its reference is the edited context, which only a run "
                    "of the program with the erratum planned exact gives "
                    "(kv-run makes one); nothing compared";
    return true;
  }
  r.finalTokens = int64_t(final.size());
  r.contiguous =
      exec::hasContiguousPositions(answer->context.get()) &&
      answer->position == kvrt_view_num_tokens(answer->context.get());
  exec::Logits full;
  if (!exec::fullPrefill(backend, forward, model, pool, final, answer->rows,
                         full, r.full, error))
    return false;
  r.fidelity = exec::compareLogits(answer->data.data(), full.data.data(),
                                   answer->rows, answer->vocab);
  if (r.greedy > 0) {
    if (!exec::greedyContinue(backend, forward, model, full, full.result,
                              r.greedy, r.greedyFull, error))
      return false;
    while (r.greedyAgree < r.greedy &&
           r.greedyPlan[r.greedyAgree] == r.greedyFull[r.greedyAgree])
      ++r.greedyAgree;
    if (r.decoded && !exec::decodeTokens(options.tokenizer, prev, r.greedyFull,
                                         r.fullGreedyText, error))
      return false;
  }
  r.compared = true;
  return true;
}

namespace {

/// One line per argument bound from text.
void printInputTexts(std::FILE *os, const Report &r) {
  for (const exec::BoundInput &in : r.inputs)
    if (in.fromText)
      std::fprintf(os, "text %s (%lld token%s%s): %s\n", in.name.c_str(),
                   (long long)in.size, in.size == 1 ? "" : "s",
                   in.bos ? ", BOS first" : "",
                   exec::quoteText(in.text).c_str());
}

/// The attribution table (docs/kv-run.md, "Attribution").
void printAttributionText(std::FILE *os, const Report &r) {
  if (!r.attributed)
    return;
  const exec::Attribution &a = r.attribution;
  std::fprintf(os,
               "\n== attribution by KV patching: edit of @%s (%lld -> %lld "
               "tokens), answer @%s (result %lld, %lld rows)\n",
               a.edited.c_str(), (long long)a.oldTokens, (long long)a.newTokens,
               a.answer.c_str(), (long long)r.answerResult,
               (long long)a.answerRows);
  std::fprintf(os,
               "recovered(S) = 1 - |z_S - z_new| / |z_old - z_new|; "
               "|z_old - z_new| = %.4g, |z_new| = %.4g\n",
               a.oldDistance, a.newNorm);
  std::fprintf(os, "  %-16s %-11s %8s %11s\n", "segment", "kind", "tokens",
               "recovered");
  for (const exec::SegmentAttribution &s : a.segments)
    std::fprintf(os, "  %-16s %-11s %8lld %11.4f%s\n", s.segment.c_str(),
                 s.kind.empty() ? "-" : s.kind.c_str(), (long long)s.tokens,
                 s.recovered, s.edited ? "  (edited)" : "");
  std::fprintf(os,
               "attribution work: %lld prefills, %lld tokens, %.3f ms (a full "
               "prefill of %lld tokens, then the answer once per patch)\n",
               (long long)a.work.prefillCalls, (long long)a.work.prefillTokens,
               a.work.seconds * 1e3, (long long)a.contextTokens);
}

} // namespace

/// A row of --profile: the runtime calls of one op at one location (the
/// sites an op expands to share its location), in the order they first ran.
struct ProfileRow {
  std::string site, call;
  int64_t calls = 0;
  double seconds = 0;
};

/// --profile's rows, longest first ("(no site)" for calls not tied to an
/// op, "?" for a site the manifest lacks).
static std::vector<ProfileRow> profileRows(const Report &r) {
  std::vector<ProfileRow> rows;
  for (const exec::SiteTime &t : r.siteTimes) {
    std::string site = t.site == KVRT_EXEC_NO_SITE ? "(no site)"
                       : t.site >= 0 && size_t(t.site) < r.sites.size()
                           ? r.sites[size_t(t.site)]
                           : "?";
    auto same = [&](const ProfileRow &row) {
      return row.site == site && row.call == t.op;
    };
    auto it = std::find_if(rows.begin(), rows.end(), same);
    if (it == rows.end())
      it = rows.insert(rows.end(), ProfileRow{site, t.op, 0, 0});
    it->calls += t.calls;
    it->seconds += t.seconds;
  }
  // Longest first; equal times keep the order they first ran in.
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rows[a].seconds != rows[b].seconds
               ? rows[a].seconds > rows[b].seconds
               : a < b;
  });
  std::vector<ProfileRow> sorted;
  for (size_t i : order)
    sorted.push_back(rows[i]);
  return sorted;
}

static void printProfileText(std::FILE *os, const Report &r) {
  if (!r.profiled)
    return;
  std::vector<ProfileRow> rows = profileRows(r);
  double total = 0;
  int64_t calls = 0;
  for (const ProfileRow &row : rows) {
    total += row.seconds;
    calls += row.calls;
  }
  std::fprintf(os,
               "profile: %lld runtime calls, %.3f ms (wall time by op and "
               "location, longest first)\n",
               (long long)calls, total * 1e3);
  std::fprintf(os, "  %10s %7s %6s  %-20s %s\n", "ms", "share", "calls", "call",
               "site");
  for (const ProfileRow &row : rows)
    std::fprintf(os, "  %10.3f %6.1f%% %6lld  %-20s %s\n", row.seconds * 1e3,
                 100 * ratio(row.seconds, total), (long long)row.calls,
                 row.call.c_str(), row.site.c_str());
}

void kvir::run::printText(const Report &r) {
  std::FILE *os = stdout;
  std::fprintf(os, "program: %s (entry @%s, planned by kv-optimize)\n",
               r.program.c_str(), r.entry.c_str());
  std::fprintf(os, "model: %s (%s)\n", r.model.c_str(), r.config.c_str());
  if (!r.tokenizer.empty())
    std::fprintf(os, "tokenizer: %s\n", r.tokenizer.c_str());
  std::fprintf(os, "backend: %s\ninputs:", r.backend.c_str());
  for (const exec::BoundInput &in : r.inputs)
    if (in.size >= 0)
      std::fprintf(os, " %s=%lld%s", in.name.c_str(), (long long)in.size,
                   in.synthesized ? "(synth)" : "");
  std::fprintf(os, "\n");
  printInputTexts(os, r);
  for (size_t i = 0; i < r.results.size(); ++i) {
    const exec::Value &v = r.results[i];
    std::fprintf(os, "result %zu: %s", i, exec::valueKindName(v.kind));
    if (v.kind == exec::ValueKind::Logits) {
      const exec::Logits &l = *v.logits;
      std::fprintf(os, " %lld x %lld", (long long)l.rows, (long long)l.vocab);
      if (l.rows > 0) {
        const float *last = l.data.data() + (l.rows - 1) * l.vocab;
        std::vector<int32_t> top = exec::topK(last, l.vocab, 5);
        std::fprintf(os, ", last row argmax %d (logit %.4f), top-5", top[0],
                     last[top[0]]);
        for (int32_t t : top)
          std::fprintf(os, " %d:%.3f", t, last[t]);
      }
    } else if (v.kind == exec::ValueKind::Cache) {
      std::fprintf(os, " %lld tokens in %lld runs",
                   (long long)kvrt_view_num_tokens(v.cache.get()),
                   (long long)kvrt_view_num_runs(v.cache.get()));
    } else if (v.kind == exec::ValueKind::Index) {
      std::fprintf(os, " %lld", (long long)v.index);
    } else if (v.kind == exec::ValueKind::Tokens) {
      std::fprintf(os, " %zu", v.tokens.size());
    } else if (v.kind == exec::ValueKind::Tensor) {
      const exec::Tensor &t = *v.tensor;
      double norm = 0;
      for (float x : t.data)
        norm += double(x) * x;
      std::fprintf(os, " %lld x %lld x %lld, L2 norm %.6f",
                   (long long)t.dims[0], (long long)t.dims[1],
                   (long long)t.dims[2], std::sqrt(norm));
    }
    std::fprintf(os, "\n");
  }
  if (!r.greedyPlan.empty()) {
    std::fprintf(os, "greedy continuation (%zu):", r.greedyPlan.size());
    for (int32_t t : r.greedyPlan)
      std::fprintf(os, " %d", t);
    std::fprintf(os, "\n");
    // With the comparison, the text goes beside the full prefill's.
    if (r.decoded && !r.compared)
      std::fprintf(os, "greedy text: %s\n",
                   exec::quoteText(r.greedyText).c_str());
  }
  std::fprintf(os,
               "work: plan %lld prefill tokens, %.4g FLOPs, %.3f ms; setup "
               "%lld prefill tokens, %.3f ms%s\n",
               (long long)r.plan.prefillTokens, double(r.plan.flops),
               r.plan.seconds * 1e3, (long long)r.setup.prefillTokens,
               r.setup.seconds * 1e3,
               r.hasPlanOps ? "" : " (no edit/compose/logits: all is plan)");
  for (const kvrt_exec_repair &repair : r.repairs)
    std::fprintf(os, "%s\n", describeRepair(repair).c_str());
  if (!r.blockStore.empty()) {
    std::fprintf(os, "block store: %s, policy %s\n", r.blockStore.c_str(),
                 exec::storePolicyName(r.storePolicy));
    for (const exec::BlockEvent &e : r.blockEvents)
      std::fprintf(os, "  %s\n", exec::describeBlockEvent(e).c_str());
    std::fprintf(os, "  store counters: %s\n",
                 exec::describeStoreStats(r.storeStats).c_str());
  }
  printProfileText(os, r);
  if (!r.compared) {
    if (!r.compareNote.empty())
      std::fprintf(os, "compare: %s\n", r.compareNote.c_str());
    printAttributionText(os, r);
    return;
  }
  const exec::Fidelity &f = r.fidelity;
  std::fprintf(os,
               "\n== plan vs full prefill of the %s (%lld tokens; "
               "answer = result %lld, %lld rows)\n",
               r.referenceName.c_str(), (long long)r.finalTokens,
               (long long)r.answerResult, (long long)f.rows);
  if (r.planContextTokens >= 0)
    std::fprintf(os,
                 "reference: the program run with every erratum edit planned "
                 "exact; the plan's own context has %lld tokens\n",
                 (long long)r.planContextTokens);
  if (!r.contiguous)
    std::fprintf(os, "note: the plan's positions are not 0..n-1; full prefill "
                     "places the same tokens at 0..n-1\n");
  std::fprintf(os, "  %-22s %14s %14s %10s\n", "", "plan", "full prefill",
               "plan/full");
  // Each figure of the plan and the full prefill in `spec`'s format.
  auto row = [&](const char *label, const char *spec, auto plan, auto full,
                 double planFull) {
    std::fprintf(os, "  %-22s %14s %14s %10.4f\n", label,
                 format(spec, plan).c_str(), format(spec, full).c_str(),
                 planFull);
  };
  Ratios q = ratiosOf(r);
  row("prefill tokens", "%lld", (long long)r.plan.prefillTokens,
      (long long)r.full.prefillTokens, q.tokens);
  row("model FLOPs", "%.4g", double(r.plan.flops), double(r.full.flops),
      q.flops);
  row("wall time (ms)", "%.3f", r.plan.seconds * 1e3, r.full.seconds * 1e3,
      q.time);
  row("K/V bytes written", "%.4g", double(r.plan.kvBytesWritten),
      double(r.full.kvBytesWritten), q.kvBytes);
  std::fprintf(os, "fidelity at the answer positions:\n");
  std::fprintf(os, "  logit cosine           min %.6f  mean %.6f\n",
               f.cosineMin, f.cosineMean);
  std::fprintf(os, "  KL(full || plan)       mean %.3e  max %.3e\n", f.klMean,
               f.klMax);
  std::fprintf(os, "  top-1 agreement        %lld/%lld\n",
               (long long)f.top1Agree, (long long)f.rows);
  std::fprintf(os, "  max |logit diff|       %.3e\n", f.maxAbsDiff);
  std::fprintf(os,
               "  greedy agreement       %lld/%lld tokens before the first "
               "divergence\n",
               (long long)r.greedyAgree, (long long)r.greedy);
  if (r.decoded) {
    std::fprintf(os, "  greedy text (plan)     %s\n",
                 exec::quoteText(r.greedyText).c_str());
    std::fprintf(os, "  greedy text (full)     %s\n",
                 exec::quoteText(r.fullGreedyText).c_str());
  }
  printAttributionText(os, r);
}

void kvir::run::printJson(const Report &r) {
  Json j(stdout);
  auto work = [&](const std::string &name, const exec::WorkStats &w) {
    j.beginObject(name);
    j.field("prefill_calls", w.prefillCalls);
    j.field("prefill_tokens", w.prefillTokens);
    j.field("logits_rows", w.logitsRows);
    j.field("scan_tokens", w.scanTokens);
    j.field("flops", w.flops);
    j.field("kv_bytes_written", w.kvBytesWritten);
    j.field("wall_ms", w.seconds * 1e3);
    j.endObject();
  };
  j.beginObject();
  j.field("program", r.program);
  j.field("entry", r.entry);
  j.field("model", r.model);
  j.field("model_config", r.config);
  j.field("backend", r.backend);
  if (!r.tokenizer.empty())
    j.field("tokenizer", r.tokenizer);
  j.beginArray("inputs");
  for (const exec::BoundInput &in : r.inputs)
    if (in.size >= 0) {
      j.beginObject();
      j.field("name", in.name);
      j.field("size", in.size);
      j.field("synthesized", in.synthesized);
      if (in.fromText) {
        j.field("text", exec::validUtf8(in.text));
        j.field("bos", in.bos);
      }
      j.endObject();
    }
  j.endArray();
  j.beginArray("results");
  for (const exec::Value &v : r.results) {
    j.beginObject();
    j.field("kind", exec::valueKindName(v.kind));
    if (v.kind == exec::ValueKind::Logits) {
      const exec::Logits &l = *v.logits;
      j.field("rows", l.rows);
      j.field("vocab", l.vocab);
      if (l.rows > 0) {
        const float *last = l.data.data() + (l.rows - 1) * l.vocab;
        std::vector<int32_t> top = exec::topK(last, l.vocab, 5);
        j.field("argmax_last", top[0]);
        j.beginArray("top5");
        for (int32_t t : top) {
          j.beginObject();
          j.field("token", t);
          j.field("logit", double(last[t]));
          j.endObject();
        }
        j.endArray();
      }
    } else if (v.kind == exec::ValueKind::Cache) {
      j.field("tokens", kvrt_view_num_tokens(v.cache.get()));
      j.field("runs", kvrt_view_num_runs(v.cache.get()));
    } else if (v.kind == exec::ValueKind::Index) {
      j.field("value", v.index);
    } else if (v.kind == exec::ValueKind::Tokens) {
      j.field("tokens", int64_t(v.tokens.size()));
    } else if (v.kind == exec::ValueKind::Tensor) {
      j.numbers("shape", v.tensor->dims);
    }
    j.endObject();
  }
  j.endArray();
  j.numbers("greedy_plan", r.greedyPlan);
  if (r.decoded)
    j.field("greedy_text", exec::validUtf8(r.greedyText));
  work("plan", r.plan);
  work("setup", r.setup);
  j.beginArray("selective_recompute");
  for (const kvrt_exec_repair &repair : r.repairs)
    writeRepair(j, repair);
  j.endArray();
  if (!r.blockStore.empty()) {
    j.beginObject("block_store");
    j.field("store", r.blockStore);
    j.field("policy", std::string(exec::storePolicyName(r.storePolicy)));
    j.beginArray("events");
    for (const exec::BlockEvent &e : r.blockEvents) {
      static const char *const outcomes[] = {"hit",   "miss",    "stored",
                                             "fault", "skipped", "no_store"};
      const kvrt_exec_block_event &v = e.event;
      j.beginObject();
      j.field("op", std::string(v.op == KVRT_EXEC_BLOCK_LOAD ? "load_block"
                                                             : "store_block"));
      j.field("outcome", std::string(outcomes[v.outcome]));
      j.field("fault", std::string(kvrt_block_fault_name(v.fault)));
      j.field("fell_back", bool(v.fell_back));
      j.field("tokens", v.tokens);
      j.field("base", v.base);
      j.field("bytes", v.bytes);
      j.field("store_ms", v.seconds * 1e3);
      j.field("key", e.key);
      j.field("message", e.message);
      j.endObject();
    }
    j.endArray();
    const kvrt_block_store_stats &st = r.storeStats;
    j.beginObject("counters");
    j.field("lookups", st.lookups);
    j.field("hits", st.hits);
    j.field("misses", st.misses);
    j.field("stores", st.stores);
    j.field("bytes_fetched", st.bytes_fetched);
    j.field("bytes_stored", st.bytes_stored);
    j.field("rejected", st.rejected);
    for (int f = 1; f < KVRT_BLOCK_NUM_FAULTS; ++f)
      j.field(kvrt_block_fault_name(kvrt_block_fault(f)), st.faults[f]);
    j.endObject();
    j.endObject();
  }
  if (!r.compared) {
    if (!r.compareNote.empty())
      j.field("compare_note", r.compareNote);
  } else {
    j.beginObject("compare");
    j.field("answer_result", r.answerResult);
    j.field("final_tokens", r.finalTokens);
    j.field("contiguous_positions", r.contiguous);
    j.field("reference", r.referenceName);
    if (r.planContextTokens >= 0)
      j.field("plan_context_tokens", r.planContextTokens);
    work("full", r.full);
    Ratios q = ratiosOf(r);
    j.field("tokens_ratio", q.tokens);
    j.field("flops_ratio", q.flops);
    j.field("time_ratio", q.time);
    const exec::Fidelity &f = r.fidelity;
    j.beginObject("fidelity");
    j.field("rows", f.rows);
    j.field("cosine_min", f.cosineMin);
    j.field("cosine_mean", f.cosineMean);
    j.field("kl_mean", f.klMean);
    j.field("kl_max", f.klMax);
    j.field("top1_agree", f.top1Agree);
    j.field("max_abs_diff", f.maxAbsDiff);
    j.field("greedy_tokens", r.greedy);
    j.field("greedy_agree", r.greedyAgree);
    j.numbers("greedy_full", r.greedyFull);
    if (r.decoded)
      j.field("full_greedy_text", exec::validUtf8(r.fullGreedyText));
    j.endObject();
    j.endObject();
  }
  if (r.attributed) {
    const exec::Attribution &a = r.attribution;
    j.beginArray("attribution");
    for (const exec::SegmentAttribution &s : a.segments) {
      j.beginObject();
      j.field("segment", s.segment);
      j.field("kind", s.kind);
      j.field("tokens", s.tokens);
      j.field("edited", s.edited);
      j.field("distance", s.distance);
      j.field("recovered", s.recovered);
      j.endObject();
    }
    j.endArray();
    j.beginObject("attribution_edit");
    j.field("segment", a.edited);
    j.field("answer", a.answer);
    j.field("answer_result", r.answerResult);
    j.field("answer_rows", a.answerRows);
    j.field("old_tokens", a.oldTokens);
    j.field("new_tokens", a.newTokens);
    j.field("context_tokens", a.contextTokens);
    j.field("old_distance", a.oldDistance);
    j.field("new_norm", a.newNorm);
    work("work", a.work);
    j.endObject();
  }
  if (r.profiled) {
    j.beginArray("profile");
    for (const ProfileRow &row : profileRows(r)) {
      j.beginObject();
      j.field("site", row.site);
      j.field("call", row.call);
      j.field("calls", row.calls);
      j.field("wall_ms", row.seconds * 1e3);
      j.endObject();
    }
    j.endArray();
  }
  j.endObject();
  j.finish();
}

namespace {

/// Decode steps of a token-list run (one per generated token after the
/// first), and their time per step.
int64_t decodeSteps(const TokenListReport &r) {
  return std::max<int64_t>(int64_t(r.generated.size()) - 1, 0);
}
double perStep(const TokenListReport &r) {
  return decodeSteps(r) > 0 ? r.decodeSeconds / double(decodeSteps(r)) : 0;
}

void printTokenListText(const TokenListReport &r) {
  size_t n = r.tokens.size();
  std::printf("model: %s (%s)\nbackend: %s\n", r.model.c_str(),
              r.config.c_str(), r.backend.c_str());
  if (!r.tokenizer.empty())
    std::printf("tokenizer: %s\n", r.tokenizer.c_str());
  std::printf("weights: %llu bytes resident",
              (unsigned long long)r.weightBytes);
  if (r.packedWeightBytes)
    std::printf(", %llu of them packed by the runtime (f32 panels, rows "
                "repacked for decode)",
                (unsigned long long)r.packedWeightBytes);
  std::printf(", %llu on 2 MiB pages",
              (unsigned long long)r.weightHugePageBytes);
  if (r.repackSeconds > 0)
    std::printf("; rows repacked for decode in %.1f ms", r.repackSeconds * 1e3);
  std::printf("\n");
  std::printf("tokens: %zu (positions 0..%zu)\n", n, n - 1);
  if (r.fromText) {
    std::printf("text (%s): %s\n", r.bos ? "BOS first" : "no BOS",
                exec::quoteText(r.text).c_str());
    std::printf("token ids:");
    for (int32_t t : r.tokens)
      std::printf(" %d", t);
    std::printf("\ndecoded: %s\n", exec::quoteText(r.decoded).c_str());
  }
  std::printf("argmax at last position: %lld (logit %.6f)\n",
              (long long)r.argmax, r.argmaxLogit);
  if (!r.tokenizer.empty())
    std::printf("argmax text: %s\n", exec::quoteText(r.argmaxText).c_str());
  if (!r.generated.empty()) {
    std::printf("greedy continuation (%zu):", r.generated.size());
    for (int32_t t : r.generated)
      std::printf(" %d", t);
    std::printf("\n");
    if (!r.tokenizer.empty())
      std::printf("greedy text: %s\n",
                  exec::quoteText(r.generatedText).c_str());
  }
  std::printf("prefill: %zu tokens, %.3f ms (%.1f tokens/s)\n", n,
              r.prefillSeconds * 1e3, double(n) / r.prefillSeconds);
  if (decodeSteps(r) > 0)
    std::printf("decode: %lld steps, %.3f ms per token (%.1f tokens/s; each "
                "reads %.1f MB of weights and K/V: %.2f GB/s)\n",
                (long long)decodeSteps(r), perStep(r) * 1e3, 1 / perStep(r),
                r.decodeStepBytes * 1e-6,
                r.decodeStepBytes / perStep(r) * 1e-9);
  if (!r.logitsFile.empty())
    std::printf("logits: %lld x %lld float32 -> %s\n", (long long)r.logitsRows,
                (long long)r.vocab, r.logitsFile.c_str());
}

void printTokenListJson(const TokenListReport &r) {
  Json j(stdout);
  j.beginObject();
  j.field("model", r.model);
  j.field("config", r.config);
  j.field("backend", r.backend);
  if (!r.tokenizer.empty())
    j.field("tokenizer", r.tokenizer);
  j.field("weight_bytes", int64_t(r.weightBytes));
  j.field("packed_weight_bytes", int64_t(r.packedWeightBytes));
  j.field("repack_ms", r.repackSeconds * 1e3);
  j.field("weight_huge_page_bytes", int64_t(r.weightHugePageBytes));
  j.numbers("tokens", r.tokens);
  if (r.fromText) {
    j.field("text", r.text);
    j.field("bos", r.bos);
    j.field("decoded", r.decoded);
  }
  j.field("argmax", r.argmax);
  j.field("argmax_logit", double(r.argmaxLogit));
  if (!r.tokenizer.empty())
    j.field("argmax_text", r.argmaxText);
  j.numbers("greedy", r.generated);
  if (!r.tokenizer.empty() && !r.generated.empty())
    j.field("greedy_text", r.generatedText);
  j.field("prefill_ms", r.prefillSeconds * 1e3);
  j.field("prefill_tokens_per_s", double(r.tokens.size()) / r.prefillSeconds);
  j.field("decode_steps", decodeSteps(r));
  if (decodeSteps(r) > 0) {
    j.field("decode_ms_per_token", perStep(r) * 1e3);
    j.field("decode_tokens_per_s", 1 / perStep(r));
    j.field("decode_bytes_per_token", r.decodeStepBytes);
    j.field("decode_gb_per_s", r.decodeStepBytes / perStep(r) * 1e-9);
  }
  if (!r.logitsFile.empty()) {
    j.field("logits_file", r.logitsFile);
    j.field("logits_rows", r.logitsRows);
  }
  j.endObject();
  j.finish();
}

} // namespace

void kvir::run::printTokenListReport(const TokenListReport &report, bool json) {
  if (json)
    printTokenListJson(report);
  else
    printTokenListText(report);
}

void kvir::run::printReport(const Report &report, bool json) {
  if (json)
    printJson(report);
  else
    printText(report);
}

void kvir::run::addBlockStore(Report &report, const kvrt_block_store *store,
                              int32_t policy, const exec::RunOutcome &outcome) {
  if (!store)
    return;
  report.blockStore = kvrt_block_store_describe(store);
  report.storePolicy = policy;
  report.blockEvents = outcome.blockEvents;
  kvrt_block_store_get_stats(store, &report.storeStats);
}
