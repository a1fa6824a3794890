//===- kv-aot.cpp - kv programs compiled ahead of time ----------*- C++ -*-===//
//
// Compiles a kv program the way kv-run does (kv-optimize, then
// kv-lower-to-nvvm or kv-lower-to-cpu: one module with the host code and the
// forward of every model it uses) and writes it for a machine without
// LLVM/MLIR (docs/gpu-backend.md):
//
//   OUT/NAME.o            host code (PIC; for the GPU the cubin embedded and
//                         loaded by a constructor), each entry's signature
//                         embedded as `_kvrt_manifest_<entry>`
//   OUT/libNAME.so        NAME.o as a shared library (with --link, the
//                         default where a linker was found at configure
//                         time); kv-aot-run loads it
//   OUT/NAME.manifest     the entries' signatures, as text
//   OUT/NAME.cubin/.ptx   the GPU kernels (GPU target; for inspection)
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Compiler.h"
#include "driver/compiler/VersionOption.h"

#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("kv-aot options");

cl::opt<std::string> programPath(cl::Positional, cl::desc("PROGRAM.mlir"),
                                 cl::cat(category));
cl::opt<std::string> forwardKey(
    "forward",
    cl::desc("instead of a program: the CPU forward of one model alone, "
             "named by its forward key (the config, K/V type and weight "
             "formats, as kv-run --cache-stats and docs/kv-run.md spell it); "
             "kv-run's token-list form asks for it and keeps the library in "
             "its compile cache"),
    cl::value_desc("key"), cl::cat(category));
cl::list<std::string> entryNames(
    "entry",
    cl::desc("public function to compile as an entry (repeatable; default: "
             "every public function a runner can bind and report)"),
    cl::value_desc("name"), cl::cat(category));
cl::opt<std::string> targetName(
    "target",
    cl::desc("where the generated code runs: gpu (NVIDIA, the default) or "
             "cpu"),
    cl::value_desc("gpu|cpu"), cl::init("gpu"), cl::cat(category));
cl::opt<std::string> outDir("o",
                            cl::desc("output folder (created if absent; "
                                     "required)"),
                            cl::value_desc("dir"), cl::cat(category));
cl::opt<std::string> name("name",
                          cl::desc("name of the outputs (default: the "
                                   "program file's stem)"),
                          cl::value_desc("name"), cl::cat(category));
cl::opt<std::string>
    modelPath("model",
              cl::desc("model file (a llama2.c checkpoint or a GGUF v3 llama "
                       "file) whose forward to include even if the program "
                       "does not use its config (runners compare against a "
                       "full prefill with it)"),
              cl::value_desc("file"), cl::cat(category));
cl::opt<std::string> weightFormats(
    "weight-formats",
    cl::desc("formats of the weights the forwards are built for "
             "(docs/models.md: e.g. 'wq:q8_0;wk:q8_0;...' or 'f32'; default: "
             "--model's, else f32); kv-aot-run refuses a model of other "
             "formats"),
    cl::value_desc("spec"), cl::cat(category));
cl::opt<std::string>
    chip("chip",
         cl::desc("GPU architecture, as kv-lower-to-nvvm's chip (kv-opt "
                  "--help lists them; sm_90: H200)"),
         cl::value_desc("sm_XX"), cl::init("sm_90"), cl::cat(category));
cl::opt<std::string>
    features("features",
             cl::desc("PTX version (default: the lowest the chip needs, at "
                      "least +ptx80)"),
             cl::value_desc("+ptxNN"), cl::cat(category));
cl::opt<std::string>
    cpu("cpu",
        cl::desc("host CPU to generate code for: native (this machine's) or "
                 "an LLVM CPU name (default: native for --target cpu; "
                 "x86-64-v3, any x86-64 with AVX2, for --target gpu, whose "
                 "host code runs on the GPU machine)"),
        cl::value_desc("name"), cl::cat(category));
cl::opt<std::string> quantDot(
    "quant-dot",
    cl::desc("how the CPU code multiplies quantised weights, as kv-run's "
             "--quant-dot: f32 (widened exactly), int8 (integer dot products, "
             "AVX-512 VNNI), amx (int8 with AMX tiles in a prefill), avx2 "
             "(int8's decode steps by AVX2's instructions) or auto (default: "
             "the best the --cpu has: int8 with VNNI, else avx2 with AVX2, "
             "else f32); an error where the --cpu lacks the instructions"),
    cl::value_desc("auto|f32|int8|amx|avx2"), cl::init("auto"),
    cl::cat(category));
cl::opt<bool> link("link",
                   cl::desc("link NAME.o into libNAME.so (default: on where "
                            "a linker was found at configure time)"),
                   cl::init(KVIR_AOT_LINKER[0] != '\0'), cl::cat(category));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kv-aot") << message << "\n";
  return 1;
}

bool writeFile(const std::string &path, llvm::StringRef data) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (!ec) {
    os << data;
    os.close();
    if (!os.has_error())
      return true;
    ec = os.error();
    os.clear_error();
  }
  llvm::WithColor::error(llvm::errs(), "kv-aot")
      << "cannot write " << path << ": " << ec.message() << "\n";
  return false;
}

/// The bytes of the (single) object of the module's gpu.binary.
std::optional<std::string> binaryOf(ModuleOp module) {
  std::optional<std::string> out;
  module.walk([&](gpu::BinaryOp binary) {
    for (Attribute attr : binary.getObjects())
      if (auto object = dyn_cast<gpu::ObjectAttr>(attr))
        out = object.getObject().getValue().str();
  });
  return out;
}

/// Links `stem`.o into OUT/lib`base`.so (a shared library whose kvrt_exec_*
/// and mgpu* references the runner that loads it provides); the exit status.
int linkLibrary(const std::string &stem, const std::string &base) {
  std::string linker = KVIR_AOT_LINKER;
  if (linker.empty())
    return fail("no linker was found at configure time: link " + stem +
                ".o yourself, or pass --link=false");
  std::string library = outDir + "/lib" + base + ".so";
  std::string object = stem + ".o";
  llvm::SmallVector<llvm::StringRef> command = {linker, "-shared", "-o",
                                                library, object};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(linker, command, std::nullopt, {}, 0,
                                         0, &message);
  if (status != 0)
    return fail("linking " + library + " failed" +
                (message.empty() ? "" : ": " + message));
  llvm::outs() << "kv-aot: wrote " << library << " (run it with kv-aot-run "
               << library << ")\n";
  return 0;
}

/// --forward: the forward named by `key` alone, as OUT/NAME.o and
/// libNAME.so; the exit status.
int writeForward(const std::string &key) {
  if (!programPath.empty())
    return fail("--forward takes no program (got '" + programPath + "')");
  if (targetName.getNumOccurrences() && targetName != "cpu")
    return fail("--forward builds CPU code (--target cpu, its default)");
  if (!modelPath.empty() || !weightFormats.empty() || !entryNames.empty() ||
      (!cpu.empty() && cpu != "native"))
    return fail("--forward names the model, its formats and its K/V type "
                "itself, for this machine's CPU: no --model, "
                "--weight-formats, --entry or --cpu");
  kvrt_model_config config;
  kvrt_kv_dtype dtype;
  kvir::WeightFormats formats;
  std::string error;
  if (!kvir::parseForwardKey(key, config, dtype, formats, error))
    return fail("bad --forward: " + error);
  if (std::string refusal = kvir::compiler::quantDotRefusal("native", quantDot);
      !refusal.empty())
    return fail("--" + refusal);
  DialectRegistry registry;
  kvir::compiler::registerDialects(registry);
  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  if (std::error_code ec = llvm::sys::fs::create_directories(outDir))
    return fail("cannot create " + outDir + ": " + ec.message());
  std::string base = name.empty() ? std::string("forward") : name.getValue();
  std::string stem = outDir + "/" + base;
  if (failed(kvir::compiler::emitForwardObject(
          context, config, dtype, formats,
          kvir::compiler::quantDotFor("native", quantDot), stem + ".o")))
    return 1;
  llvm::outs() << "kv-aot: wrote " << stem << ".o (the forward "
               << kvir::forwardPrefix(config, dtype, formats) << ")\n";
  return link ? linkLibrary(stem, base) : 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  kvir::compiler::parseToolOptions(
      argc, argv, "kv-aot", category,
      "kv-aot: a kv program compiled ahead of time for a machine without "
      "LLVM\n\n"
      "  kv-aot examples/agent-edit.mlir --target gpu -o bundle/lib\n"
      "  kv-aot-run bundle/lib/libagent-edit.so --backend cuda "
      "--synthesize-inputs\n");
  if (outDir.empty())
    return fail("no output folder: give -o DIR (kv-aot writes NAME.o, "
                "libNAME.so and NAME.manifest there)");
  if (targetName != "gpu" && targetName != "cpu")
    return fail("unknown --target '" + targetName + "' (available: gpu, cpu)");
  if (forwardKey.getNumOccurrences())
    return writeForward(forwardKey);
  if (programPath.empty())
    return fail("no program given (kv-aot PROGRAM.mlir -o DIR, or --forward "
                "KEY for a forward alone)");
  bool gpu = targetName == "gpu";
  std::string base = name.empty() ? llvm::sys::path::stem(programPath).str()
                                  : std::string(name);

  std::optional<kvrt_model_config> exportModel;
  kvir::WeightFormats formats;
  if (!modelPath.empty()) {
    kvrt_model *model = nullptr;
    if (kvrt_model_load(modelPath.c_str(), &model) != KVRT_OK)
      return fail(llvm::Twine("cannot load the model: ") + kvrt_last_error());
    kvrt_model_config config;
    kvrt_model_get_config(model, &config);
    formats = kvir::modelWeightFormats(model);
    kvrt_model_release(model);
    exportModel = config;
  }

  DialectRegistry registry;
  kvir::compiler::registerDialects(registry);
  MLIRContext context(registry);
  // A diagnostic names its location; the whole module after it is noise.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> planned =
      kvir::compiler::loadProgram(context, sourceMgr, programPath);
  if (!planned)
    return 1;
  std::vector<kvir::exec::EntryManifest> manifests;
  if (!entryNames.empty()) {
    for (const std::string &entryName : entryNames) {
      FailureOr<func::FuncOp> entry =
          kvir::compiler::lookupEntry(*planned, entryName);
      if (failed(entry))
        return 1;
      FailureOr<kvir::exec::EntryManifest> manifest =
          kvir::compiler::describeEntry(*entry);
      if (failed(manifest))
        return 1;
      manifests.push_back(std::move(*manifest));
    }
  } else {
    // Every public function a runner can bind; the others are compiled but
    // get no manifest (their diagnostics are not errors here).
    for (auto func : planned->getOps<func::FuncOp>()) {
      if (func.isExternal() || !func.isPublic())
        continue;
      ScopedDiagnosticHandler quiet(&context,
                                    [](Diagnostic &) { return success(); });
      FailureOr<kvir::exec::EntryManifest> manifest =
          kvir::compiler::describeEntry(func);
      if (succeeded(manifest))
        manifests.push_back(std::move(*manifest));
    }
    if (manifests.empty())
      return fail("no public function of " + programPath +
                  " can be run (see kv-aot --entry)");
  }

  if (!weightFormats.empty()) {
    // The formats apply to --model's config, else to the one the program's
    // entries take.
    if (!exportModel)
      for (const kvir::exec::EntryManifest &manifest : manifests)
        for (const kvir::exec::ArgSpec &arg : manifest.args)
          if (arg.kind == kvir::exec::ValueKind::Model && !exportModel)
            exportModel = arg.model;
    if (!exportModel)
      return fail("--weight-formats needs a model: give --model, or an "
                  "entry that takes a !kv.model");
    std::string error;
    std::optional<kvir::WeightFormats> parsed =
        kvir::WeightFormats::parse(weightFormats, exportModel->n_layers, error);
    if (!parsed)
      return fail("bad --weight-formats: " + error);
    formats = *parsed;
  }
  // A GPU program's host code is built here and runs on the GPU machine:
  // not this machine's CPU (AVX-512 here), a portable one.
  std::string hostCpu = !cpu.empty() ? cpu.getValue()
                        : gpu        ? "x86-64-v3"
                                     : "native";
  kvir::compiler::LowerOptions options;
  options.target =
      gpu ? kvir::compiler::Target::Gpu : kvir::compiler::Target::Cpu;
  // The int8 dot path only where the CPU the object is for has it.
  if (std::string refusal = kvir::compiler::quantDotRefusal(hostCpu, quantDot);
      !refusal.empty())
    return fail("--" + refusal);
  options.cpuQuantDot = kvir::compiler::quantDotFor(hostCpu, quantDot);
  // Checked above for the CPU named: the object may be for a machine with
  // instructions this one lacks (AMX, VNNI).
  options.cpuCheckHost = hostCpu == "native";
  options.exportModel = exportModel;
  options.exportFormats = formats;
  options.chip = chip;
  options.features = features;
  std::vector<Location> sites;
  OwningOpRef<ModuleOp> lowered =
      kvir::compiler::lowerProgram(*planned, options, sites);
  if (!lowered)
    return 1;
  for (kvir::exec::EntryManifest &manifest : manifests) {
    manifest.target = targetName;
    manifest.weightFormats = formats.spec();
    for (Location site : sites)
      manifest.sites.push_back(kvir::compiler::siteText(site));
  }

  if (std::error_code ec = llvm::sys::fs::create_directories(outDir))
    return fail("cannot create " + outDir + ": " + ec.message());
  std::string stem = outDir + "/" + base;
  if (gpu) {
    std::optional<std::string> cubin = binaryOf(*lowered);
    std::vector<Location> ignored;
    options.format = "isa";
    OwningOpRef<ModuleOp> isa =
        kvir::compiler::lowerProgram(*planned, options, ignored);
    std::optional<std::string> ptx = isa ? binaryOf(*isa) : std::nullopt;
    if (!cubin || !ptx)
      return fail("internal error: no gpu.binary after kv-lower-to-nvvm");
    if (!writeFile(stem + ".cubin", *cubin) || !writeFile(stem + ".ptx", *ptx))
      return 1;
  }
  std::string text;
  for (const kvir::exec::EntryManifest &manifest : manifests)
    text += manifest.serialize();
  if (!writeFile(stem + ".manifest", text))
    return 1;
  if (failed(kvir::compiler::emitObject(*lowered, manifests, stem + ".o",
                                        hostCpu)))
    return 1;
  // What was written, for the user and the runner's command line.
  std::string entries;
  for (const kvir::exec::EntryManifest &manifest : manifests)
    entries += (entries.empty() ? "@" : ", @") + manifest.entry;
  llvm::outs() << "kv-aot: wrote " << stem << ".o, " << stem << ".manifest"
               << (gpu ? ", " + stem + ".cubin, " + stem + ".ptx" : "")
               << " (entries " << entries << ", target " << targetName << ")\n";
  return link ? linkLibrary(stem, base) : 0;
}
