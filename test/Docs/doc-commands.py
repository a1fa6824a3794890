#!/usr/bin/env python3
"""Runs the shell commands of README.md and docs/*.md, verbatim.

Every command of a ```sh block is either run here, from a copy of the project
root (its entries linked, `build` linked to the build under test, `../shared`
to the shared models), in the documents' order, or listed in NOT_RUN with the
reason it cannot run in the test suite. A command that is neither fails the
test, and so does a listed command no document shows any more: a new or
changed command must be classified here. A command that fails (non-zero exit
status) fails the test with its output.

A command in RUN may need something a machine can lack (the model files, the
CUDA toolkit, an uninstrumented build for Debian's mlir-opt-22): where it is
absent the command is reported as skipped, with the reason. A command of a
plain ``` block that looks like one to run (build/bin/..., cmake, ninja, ...)
fails the test too: commands belong in ```sh blocks, where this test sees them.

A ```c block is written to the .c file the next command compiles (the C API
example of docs/integration.md).

usage: doc-commands.py SOURCE_ROOT WORK_DIR
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

# What a command in RUN needs, and how to tell it is there.
MODEL = "model"  # ../shared/models/stories260K.bin and tok512.bin
TOOLKIT = "cuda-toolkit"  # the CUDA toolkit CMake found (ptxas, libdevice)
UNSANITIZED = "unsanitized"  # our code loaded into uninstrumented executables
HTTP = "http-client"  # curl and jq, the clients the kv-serve examples use
SERVE_PORT = 8080  # the port the kv-serve examples listen on

# The commands run here, each with what it needs. A command is written as the
# document shows it, its continuation lines joined and a trailing comment
# dropped.
RUN = {
    'build/bin/kv-opt --kv-optimize="emit-plan emit-statistics" examples/agent-edit.mlir': [],
    "build/bin/kv-run examples/agent-edit.mlir --model ../shared/models/stories260K.bin --synthesize-inputs --compare-full-prefill --backend cpu": [MODEL],
    "build/bin/kv-run examples/compose-skills.mlir --synthesize-inputs --compare-full-prefill": [],
    'build/bin/kv-run --model ../shared/models/stories260K.bin --tokens "1 2 3" --dump-logits out.f32': [MODEL],
    "build/bin/kv-run --model ../shared/models/stories260K.bin --tokens 1 --greedy 16": [MODEL],
    'build/bin/kv-run examples/story-edit.mlir --model ../shared/models/stories260K.bin --text opening="Once upon a time, there was a little" --bos opening --text hero="girl named Lily." --text new_hero="boy named Tim." --text notes="She loved to play outside in the park." --text answer="One day," --compare-full-prefill --attribute': [MODEL],
    "build/bin/kv-convert ../shared/models/stories260K.bin stories260K.q8_0.gguf --type q8_0 --tokenizer ../shared/models/tok512.bin": [MODEL],
    "build/bin/kv-run examples/agent-edit.mlir --model stories260K.q8_0.gguf --synthesize-inputs --compare-full-prefill": [MODEL],
    "build/bin/kv-opt examples/agent-edit.mlir --kv-optimize --kv-lower-to-cpu": [],
    "build/bin/kv-opt examples/agent-edit.mlir --kv-optimize --kv-lower-to-nvvm": [TOOLKIT],
    "build/bin/kv-aot examples/agent-edit.mlir --target cpu -o out": [],
    "build/bin/kv-aot-run out/libagent-edit.so --synthesize-inputs": [],
    "mlir-opt-22 --load-dialect-plugin=build/lib/KVPlugin.so --load-pass-plugin=build/lib/KVPlugin.so --pass-pipeline='builtin.module(kv-optimize)' examples/agent-edit.mlir": [UNSANITIZED],
    "mlir-opt-22 --load-dialect-plugin=build/lib/KVPlugin.so --pass-pipeline='builtin.module(kv-optimize{emit-plan emit-statistics}, kv-lower-to-cpu)' examples/agent-edit.mlir": [UNSANITIZED],
    "clang-22 -std=c11 -I capi -I build/capi -I /usr/lib/llvm-22/include plan.c -L build/lib -lKVCAPI -Wl,-rpath,$PWD/build/lib -o plan": [UNSANITIZED],
    "./plan examples/agent-edit.mlir": [UNSANITIZED],
    "kv-opt examples/agent-edit.mlir --kv-optimize --kv-lower-to-cpu": [],
    "build/bin/kv-convert synthetic:dim=1024,hidden=2816,layers=2,heads=16,kv_heads=4,vocab=512 q4k-2.gguf --type q4_k": [],
    'python3 -c "import random; print(*(random.randrange(3, 512) for _ in range(64)))" > p64.txt': [],
    "build/bin/kv-run --model q4k-2.gguf --tokens-file p64.txt --greedy 256 --threads 1 --no-tokenizer --json": [],
    "kv-opt test/Conversion/CPU/convert-kv-to-cpu.mlir --convert-kv-to-cpu --split-input-file": [],
    "mkdir -p models-local && cp ../shared/models/stories260K.bin models-local/": [MODEL],
    "build/bin/kv-run examples/agent-edit.mlir --synthesize-inputs --compare-full-prefill": [],
    "build/bin/kv-convert ../shared/models/stories260K.bin stories260K.gguf --tokenizer ../shared/models/tok512.bin": [MODEL],
    "build/bin/kv-convert stories260K.gguf stories260K.bin": [MODEL],
    'build/bin/kv-run --model stories260K.q8_0.gguf --text "Once upon a time" --bos prompt': [MODEL],
    'build/bin/kv-run examples/story-edit.mlir --model stories260K.q8_0.gguf --text opening="Once upon a time, there was a little" --bos opening --text hero="girl named Lily." --text new_hero="boy named Tim." --text notes="She loved to play outside in the park." --text answer="One day," --compare-full-prefill': [MODEL],
    # kv-serve (README, docs/serve.md): a server on port 8080, its clients,
    # then the server stopped; each command runs on its own, in this order.
    'build/bin/kv-serve --model ../shared/models/stories260K.bin --port 8080 > kv-serve.log 2>&1 & echo $! > kv-serve.pid': [MODEL, HTTP],
    'until curl -sf localhost:8080/health >/dev/null; do sleep 0.2; done': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts -H \'Content-Type: application/json\' -d \'{"segments": [{"name": "opening", "text": "Once upon a time, there was a little", "bos": true}, {"name": "hero", "kind": "fact", "text": "girl named Lily."}, {"name": "answer", "kind": "answer", "text": "One day,", "deps": ["hero"]}]}\' | jq -r .id > ctx.id': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/edit -H \'Content-Type: application/json\' -d \'{"segment": "hero", "text": "boy named Tim.", "strategy": "cot_slice"}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/generate -H \'Content-Type: application/json\' -d \'{"max_tokens": 16, "temperature": 0}\'': [MODEL, HTTP],
    'kill $(cat kv-serve.pid)': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts -H \'Content-Type: application/json\' -d \'{"segments": [{"name": "opening", "kind": "history", "text": "Once upon a time, there was a little", "bos": true}, {"name": "hero", "kind": "fact", "text": "girl named Lily."}, {"name": "notes", "kind": "history", "text": "She loved to play outside in the park."}, {"name": "answer", "kind": "answer", "text": "One day,", "deps": ["hero", "notes"]}]}\' | jq -r .id > ctx.id': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/segments -H \'Content-Type: application/json\' -d \'{"name": "turn1", "kind": "user", "text": "She saw a cat."}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/segments -H \'Content-Type: application/json\' -d \'{"name": "turn2", "kind": "user", "text": "It was black.", "prefill": true}\'': [MODEL, HTTP],
    'curl -sN localhost:8080/v1/contexts/$(cat ctx.id)/generate -H \'Content-Type: application/json\' -d \'{"max_tokens": 8, "temperature": 0.8, "seed": 7, "stream": true}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/edit -H \'Content-Type: application/json\' -d \'{"segment": "notes", "text": "He liked to run.", "repair": {"first_k": 2}}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/edit -H \'Content-Type: application/json\' -d \'{"segment": "hero", "text": "dog named Max.", "strategy": "erratum", "correction": {"text": "No: a dog named Max."}}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/blocks -H \'Content-Type: application/json\' -d \'{"name": "park", "text": "The park had a big slide and a pond."}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts/$(cat ctx.id)/compose -H \'Content-Type: application/json\' -d \'{"block": "park", "repair": {"first_k": 2}}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/blocks': [MODEL, HTTP],
    'curl -s "localhost:8080/v1/contexts/$(cat ctx.id)?tokens=1"': [MODEL, HTTP],
    'curl -s -X DELETE localhost:8080/v1/contexts/$(cat ctx.id)': [MODEL, HTTP],
    'curl -s -X DELETE localhost:8080/v1/blocks/park': [MODEL, HTTP],
    'curl -s localhost:8080/v1/models': [MODEL, HTTP],
    'curl -s localhost:8080/v1/completions -H \'Content-Type: application/json\' -d \'{"model": "stories260K.bin", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}\'': [MODEL, HTTP],
    'curl -s localhost:8080/v1/chat/completions -H \'Content-Type: application/json\' -d \'{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 16}\'': [MODEL, HTTP],
    'curl -sN localhost:8080/v1/chat/completions -H \'Content-Type: application/json\' -d \'{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8, "stream": true}\'': [MODEL, HTTP],
    "curl -s localhost:8080/metrics | grep -E '^kvserve_(hit_rate|pool_pages_used|plan_compiles_total) '": [MODEL, HTTP],
    'curl -s localhost:8080/health': [MODEL, HTTP],
    'curl -s localhost:8080/v1/contexts -H \'Content-Type: application/json\' -d \'{"segments": [{"name": "a", "text": "x", "colour": "red"}]}\'': [MODEL, HTTP],
    "build/bin/kv-convert synthetic:dim=256,hidden=768,layers=4,heads=4,kv_heads=2,vocab=512 d256.q4_k_m.gguf --type q4_k_m": [],
    "python3 test/golden/tokenizer/make-vocabs.py gguf vocabs": [],
    "build/bin/kv-convert synthetic:dim=64,hidden=128,layers=2,heads=4,kv_heads=2,vocab=1462,arch=qwen2,shared=1,seed=7 qwen2.gguf --tokenizer vocabs/qwen2.gguf": [],
    'build/bin/kv-run examples/story-edit.mlir --model qwen2.gguf --retarget-model --text opening="Once upon a time, there was a little" --text hero="girl named Lily." --text new_hero="boy named Tim." --text notes="She loved to play outside in the park." --text answer="One day," --compare-full-prefill': [],
}

BUILDS = "builds the project (the test suite runs inside a build)"
BENCH = "a benchmark: minutes of timing on an idle machine, not a test"
SUITE = "runs a test suite ctest already runs"
NOT_RUN = {
    "bench/peer/side-by-side.sh --shape dim=512,hidden=1376,layers=8,heads=8,kv_heads=4,vocab=32000 --prompt 512 --decode 64": "a benchmark against llama.cpp, fetched with npm (minutes, not a test)",
    "bench/peer/llama-agreement.sh": "fetches llama.cpp with npm (a peer to compare with, not a dependency) and runs for minutes",
    "bash tools/quickstart.sh": "installs Debian packages (as root) and builds",
    "cmake -G Ninja -S . -B build && cmake --build build && ctest --test-dir build -j$(nproc) --output-on-failure": BUILDS,
    "cmake -G Ninja -S . -B build-sanitize -DKVIR_SANITIZE=address,undefined -DKVIR_BUILD_FUZZERS=ON": BUILDS,
    "cmake --build build-sanitize && ctest --test-dir build-sanitize -j$(nproc) --output-on-failure": BUILDS,
    "test/fuzz/run-fuzzers.sh build-sanitize 60": "fuzzes each target for a minute in a sanitizer build (CI runs it after the suite)",
    "test/fuzz/run-fuzzers.sh build-sanitize 600 program": "fuzzes for ten minutes in a sanitizer build",
    "build-sanitize/bin/kv-fuzz-program FILE": "FILE stands for a fuzzer's input; needs a sanitizer build",
    "KVIR_FUZZ_VERBOSE=1 build-sanitize/bin/kv-fuzz-exec FILE": "FILE stands for a fuzzer's input; needs a sanitizer build",
    "cmake -G Ninja -S . -B build-tsan -DKVIR_SANITIZE=thread": BUILDS,
    "cmake --build build-tsan --target KVCpuTests KVRuntimeTests kv-run": BUILDS,
    "build-tsan/bin/KVCpuTests && build-tsan/bin/KVRuntimeTests --gtest_filter='Parallel*'": "needs the ThreadSanitizer build of the commands above",
    "kv-run agent.mlir --kv-store redis://:SECRET@10.0.0.5:6379/0 --kv-store-prefix fleet-a: ...": "a template: a password, another machine's Redis and '...' for the rest",
    "bash tools/with-redis.sh build/bin/kv-bench-store": BENCH,
    "ninja -C build kv-bench-stories": BUILDS,
    "build/bin/kv-bench-stories": "the fidelity suite: every strategy on ten stories (about 12 s on 2 cores, beyond this test's budget)",
    "build/bin/kv-bench-stories --details": "the fidelity suite with every story's continuations (as long)",
    "build/bin/kv-bench-stories --calibrate": "the fidelity suite's threshold sweep (longer)",
    "build/bin/kv-bench-stories --strategy 'cot_slice, first_k = 2' --strategy '!cot_slice'": "the fidelity suite on two strategies (seconds; test/Integration/CPU covers --strategy)",
    "cmake -G Ninja -S . -B build && ninja -C build kv-gpu-bundle": BUILDS,
    "sh build/gpu-bundle/run-on-gpu.sh build/gpu-bundle models-local/stories260K.bin": "runs on a machine with an NVIDIA GPU",
    "sh build/gpu-bundle/profile-on-gpu.sh build/gpu-bundle gpu-profile": "runs on a machine with an NVIDIA GPU (stub-profile-on-gpu.test runs it against the stub driver)",
    "build/bin/kv-bench-kernels --benchmark_filter='Decode|ReadBandwidth' --benchmark_repetitions=3": BENCH,
    "build/bin/kv-bench-kernels --benchmark_filter='Q8TileModel|ReadBandwidth' --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true": BENCH,
    "build/bin/kv-bench-kernels --benchmark_filter='Q8TileModel|Q8Rows16Model|Q8Repack|ReadBandwidth' --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true": BENCH,
    "build/bin/kv-bench-kernels --benchmark_filter='Q4KRows16|ReadBandwidth' --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true": BENCH,
    "cmake -G Ninja -S . -B build && ninja -C build KVCpuTests kv-opt": BUILDS,
    "build/bin/KVCpuTests": SUITE,
    "/usr/lib/llvm-22/bin/lit -sv build/test/Conversion/CPU": SUITE,
    "ninja -C build kv-bench-kernels": BUILDS,
    "build/bin/kv-bench-kernels --benchmark_repetitions=3 --benchmark_report_aggregates_only=true": BENCH,
    "ninja -C build kv-bench": BUILDS,
    "build/bin/kv-bench --hw": BENCH,
    "build/bin/kv-convert synthetic:dim=1024,hidden=2816,layers=16,heads=16,kv_heads=4,vocab=512 q4k-16.gguf --type q4_k": "the memory-bound half of a measurement (102 MB: half a minute to quantise; the 2-layer commands beside it run)",
    "build/bin/kv-run --model q4k-16.gguf --tokens-file p64.txt --greedy 256 --threads 1 --no-tokenizer --json": BENCH,
    "ninja -C build kv-run KVRuntimeTests KVProgramTests KVSessionTests": BUILDS,
    "/usr/lib/llvm-22/bin/lit -sv build/test/Integration": SUITE,
    "build/bin/KVProgramTests && build/bin/KVRuntimeTests && build/bin/KVSessionTests": SUITE,
    "build/bin/kv-bench --backend cpu": BENCH,
    "build/bin/kv-bench --history 6000 --blocks 8 --block 1024 --stories ''": BENCH,
    "cmake -G Ninja -S . -B build && ninja -C build KVRuntimeTests KVReferenceTests KVToolTests kv-run": BUILDS,
    "ctest --test-dir build -R 'Test\\.'": SUITE,
    "ninja -C build kv-bench-attention": BUILDS,
    "build/bin/kv-bench-attention --benchmark_repetitions=3 --benchmark_report_aggregates_only=true": BENCH,
}

# A plain ``` block line that looks like a command to run.
COMMAND_LIKE = re.compile(
    r"^(build/bin/|build-\w+/bin/|cmake |ninja |ctest |bash |sh build/|"
    r"mlir-opt-22 |test/fuzz/|clang-22 |kv-opt |/usr/lib/llvm-22/bin/lit )")

# Each command may take this long; a slower one fails.
TIMEOUT_S = 120


def strip_comment(line):
    """`line` without a trailing `# comment` (a `#` after whitespace, outside
    quotes), and without trailing whitespace."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def read_blocks(path):
    """The fenced blocks of `path`: (language, first line number, lines)."""
    blocks, lines = [], open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        blocks.append((m.group(1), start + 1, body))
        i += 1
    return blocks


def commands_of(body):
    """The commands of a ```sh block: (text as written, key), where the key
    joins continuation lines and drops comments."""
    commands, text, key = [], [], []
    for line in body:
        if not text and (not line.strip() or line.lstrip().startswith("#")):
            continue
        text.append(line)
        stripped = strip_comment(line)
        if stripped.endswith("\\"):
            key.append(stripped[:-1].strip())
            continue
        key.append(stripped.strip())
        commands.append(("\n".join(text), " ".join(k for k in key if k)))
        text, key = [], []
    if text:
        commands.append(("\n".join(text), " ".join(key)))
    return commands


def cmake_cache(build):
    values = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", line.rstrip("\n"))
                if m:
                    values[m.group(1)] = m.group(2)
    except OSError:
        pass
    return values


def port_taken(port):
    """Whether something already listens on localhost:`port`: the kv-serve
    examples would talk to it instead of the server they start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_servers(root):
    """Stops the server the last kv-serve example started (its pid is in
    kv-serve.pid), so that no server outlives the test."""
    try:
        with open(os.path.join(root, "kv-serve.pid"), encoding="utf-8") as f:
            os.kill(int(f.read().strip()), signal.SIGTERM)
    except (OSError, ValueError):
        pass


def missing(need, src, build, cache, port_busy=False):
    """Why `need` is not met here, or None."""
    if need == MODEL:
        models = os.path.join(src, "..", "shared", "models")
        for name in ("stories260K.bin", "tok512.bin"):
            if not os.path.exists(os.path.join(models, name)):
                return "no " + os.path.join("../shared/models", name)
    elif need == TOOLKIT:
        toolkit = cache.get("KVIR_CUDA_TOOLKIT", "")
        if not toolkit or not os.path.exists(os.path.join(toolkit, "bin", "ptxas")):
            return "no CUDA toolkit"
    elif need == HTTP:
        for tool in ("curl", "jq"):
            if not shutil.which(tool):
                return "no " + tool + " on PATH"
        if port_busy:
            return (f"port {SERVE_PORT} was taken by another process when the "
                    f"test began")
    elif need == UNSANITIZED:
        if cache.get("KVIR_SANITIZE", ""):
            return "a sanitizer build (uninstrumented executables cannot load it)"
    return None


def make_root(src, build, work):
    """A copy of the project root under `work`: its entries linked, `build`
    linked to `build`, and `../shared` to the shared folder beside it."""
    parent = os.path.join(work, "checkout")
    root = os.path.join(parent, os.path.basename(os.path.abspath(src)))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(root)
    for entry in os.listdir(src):
        if entry in ("build", ".git"):
            continue
        os.symlink(os.path.join(os.path.abspath(src), entry),
                   os.path.join(root, entry))
    os.symlink(os.path.abspath(build), os.path.join(root, "build"))
    shared = os.path.join(os.path.abspath(src), "..", "shared")
    if os.path.isdir(shared):
        os.symlink(os.path.realpath(shared), os.path.join(parent, "shared"))
    return root


def run_docs(docs, src, build, cache, root, env, port_busy, problems, seen):
    """Runs or classifies every command of `docs` in document order, adding
    what went wrong to `problems` and each command's key to `seen`; returns
    how many commands ran and how many were skipped."""
    ran, skipped = 0, 0
    for doc in docs:
        last_c = None
        for language, line, body in read_blocks(os.path.join(src, doc)):
            if language == "c":
                last_c = "\n".join(body) + "\n"
                continue
            if language != "sh":
                for offset, text in enumerate(body):
                    if COMMAND_LIKE.match(text):
                        problems.append(
                            f"{doc}:{line + offset}: a command outside a ```sh "
                            f"block (this test does not see it): {text}")
                continue
            for text, key in commands_of(body):
                seen.add(key)
                where = f"{doc}:{line}"
                if key in NOT_RUN:
                    print(f"not run   {where}: {key}\n          ({NOT_RUN[key]})")
                    continue
                if key not in RUN:
                    problems.append(
                        f"{where}: a command neither run nor listed in NOT_RUN "
                        f"(test/Docs/doc-commands.py): {key}")
                    continue
                why = [m for m in (missing(n, src, build, cache, port_busy)
                                   for n in RUN[key]) if m]
                if why:
                    skipped += 1
                    print(f"skipped   {where}: {key}\n          ({'; '.join(why)})")
                    continue
                for name in re.findall(r"\b([\w-]+\.c)\b", key):
                    if last_c is not None:
                        with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                            f.write(last_c)
                t0 = time.monotonic()
                try:
                    result = subprocess.run(
                        ["bash", "-o", "pipefail", "-c", text], cwd=root, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        timeout=TIMEOUT_S)
                    status, output = result.returncode, result.stdout
                except subprocess.TimeoutExpired as e:
                    status, output = f"timeout after {TIMEOUT_S} s", e.stdout or b""
                ran += 1
                print(f"ran       {where} ({time.monotonic() - t0:.1f} s, "
                      f"exit {status}): {key}")
                if status != 0:
                    tail = output.decode("utf-8", "replace")[-3000:]
                    problems.append(f"{where}: exit {status}: {key}\n{tail}")
    return ran, skipped


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, work = sys.argv[1], sys.argv[2]
    kv_opt = shutil.which("kv-opt")
    if not kv_opt:
        sys.exit("doc-commands: kv-opt is not on PATH (the build's bin folder)")
    bindir = os.path.dirname(os.path.realpath(kv_opt))
    build = os.path.dirname(bindir)
    cache = cmake_cache(build)
    root = make_root(src, build, work)
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")

    docs = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(src, "docs"))
        if f.endswith(".md"))
    problems, seen = [], set()
    started = time.monotonic()
    port_busy = port_taken(SERVE_PORT)
    try:
        ran, skipped = run_docs(docs, src, build, cache, root, env, port_busy,
                                problems, seen)
    finally:
        stop_servers(root)
    for key in sorted(set(RUN) | set(NOT_RUN)):
        if key not in seen:
            problems.append(f"listed in doc-commands.py but in no document: {key}")
    print(f"{ran} commands run, {skipped} skipped, "
          f"{len([k for k in seen if k in NOT_RUN])} not run (listed) in "
          f"{time.monotonic() - started:.1f} s")
    for problem in problems:
        print("error: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
