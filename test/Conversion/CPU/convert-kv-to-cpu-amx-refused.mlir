// UNSUPPORTED: amx
// RUN: not kv-opt %s --convert-kv-to-cpu=quant-dot=amx 2>&1 | FileCheck %s
// RUN: not kv-opt %s --kv-lower-to-cpu=quant-dot=amx 2>&1 | FileCheck %s
// RUN: kv-opt %s --convert-kv-to-cpu="quant-dot=amx check-host=false" | FileCheck %s --check-prefix=TARGET
// RUN: kv-opt %s --kv-lower-to-cpu="quant-dot=amx check-host=false" | FileCheck %s --check-prefix=LOWERED

// quant-dot=amx on a host without AMX int8 tiles, or whose Linux refuses
// this process the tile state, is an error, not a silent fallback.
// CHECK: error: convert-kv-to-cpu: quant-dot=amx needs AMX int8 tiles (amx-tile, amx-int8, with AVX-512 VNNI) granted to this process by Linux (arch_prctl ARCH_REQ_XCOMP_PERM), which this host lacks

// check-host=false (kv-aot --cpu: the caller checked the CPU the code is
// for): the AMX tiles are built on this host too, and lower to LLVM.
// TARGET: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_amx_tile_task(
// TARGET:   amx.tile_muli
// LOWERED: llvm.func internal @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_amx_tile_task(
// LOWERED:   llvm.call_intrinsic "llvm.x86.tdpbssd.internal"
!m = !kv.model<dim = 256, hidden = 512, layers = 1, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q8_0;wk:q8_0;wv:q8_0;wo:q8_0;w1:q8_0;w2:q8_0;w3:q8_0;wcls:q8_0"]]} {
}
