# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "KVIR"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
# test/fuzz/corpus holds seed inputs of the fuzzers (.mlir among them), not tests.
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs", "unit", "lib",
                   "corpus"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kvir_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%kvir_src_root", config.kvir_src_root))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP",
                                     "ASAN_OPTIONS", "UBSAN_OPTIONS",
                                     "LSAN_OPTIONS"])
llvm_config.use_default_substitutions()
# The tools' compile cache (docs/kv-run.md) lives in the build tree, never in
# the home directory of whoever runs the tests.
config.environment["KVIR_CACHE_DIR"] = os.path.join(config.kvir_obj_root, "test",
                                                    "compile-cache")

# The stories260K checkpoint: tests that need it say `REQUIRES: stories260k` and are
# reported as unsupported (skipped) where it is absent.
if os.path.exists(config.kvir_test_model):
    config.available_features.add("stories260k")
config.substitutions.append(("%stories260k", config.kvir_test_model))
config.substitutions.append(
    ("%models_dir", os.path.dirname(config.kvir_test_model)))

# A sanitizer build (KVIR_SANITIZE): `UNSUPPORTED: sanitized` for tests that
# load our instrumented code into an uninstrumented executable (mlir-opt-22
# with the plugin), which the sanitizer runtime refuses.
if config.kvir_sanitize:
    config.available_features.add("sanitized")

# The CUDA toolkit: `REQUIRES: cuda-toolkit` for tests that assemble PTX or
# link libdevice; %cuda_toolkit is its root.
if config.kvir_cuda_toolkit and os.path.exists(
        os.path.join(config.kvir_cuda_toolkit, "bin", "ptxas")):
    config.available_features.add("cuda-toolkit")
config.substitutions.append(("%cuda_toolkit", config.kvir_cuda_toolkit or "none"))

# A Redis server and client (Debian: redis-server, redis-tools): block store
# tests start a private server through tools/with-redis.sh; where either is
# absent they are reported as unsupported.
import shutil
if shutil.which("redis-server") and shutil.which("redis-cli"):
    config.available_features.add("redis-server")

# The host's CPU flags, for the features below.
try:
    with open("/proc/cpuinfo") as cpuinfo:
        cpu_flags = set(cpuinfo.read().split())
except OSError:
    cpu_flags = set()

# `REQUIRES: avx512vnni` for tests of the integer dot products of quantised
# weights (convert-kv-to-cpu's quant-dot=int8), `REQUIRES: avx2` for
# quant-dot=avx2 (the decode tiles of a host without VNNI): the pass refuses
# either on a host without it.
for flag, feature in (("avx512_vnni", "avx512vnni"), ("avx2", "avx2")):
    if flag in cpu_flags:
        config.available_features.add(feature)

# AMX int8 tiles the host grants: `REQUIRES: amx` for quant-dot=amx, which the
# pass refuses unless the CPU has them and Linux grants a process the tile
# state (arch_prctl ARCH_REQ_XCOMP_PERM; asked here as the pass asks).
if {"amx_tile", "amx_int8", "avx512_vnni"} <= cpu_flags:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA (x86-64).
        if libc.syscall(158, 0x1023, 18) == 0:
            config.available_features.add("amx")
    except (OSError, AttributeError):
        pass

tool_dirs = [config.kvir_tools_dir, config.llvm_tools_dir]
tools = [ToolSubst("kv-opt", unresolved="fatal"), ToolSubst("kv-run", unresolved="ignore"),
         ToolSubst("kv-convert", unresolved="ignore"),
         ToolSubst("kv-aot-run", unresolved="ignore"),
         ToolSubst("kv-bench", unresolved="ignore"),
         ToolSubst("kv-bench-kernels", unresolved="ignore"),
         ToolSubst("kv-bench-stories", unresolved="ignore")]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.kvir_tools_dir, append_path=True)
# `not` and FileCheck also at the start of a RUN line.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
